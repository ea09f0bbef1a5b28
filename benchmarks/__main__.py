r"""``python -m benchmarks``, run from the repository root (the harness is not
installed with the package).

Without a subcommand it runs the benchmark suite (:mod:`~.cli`); a first argument
naming a subcommand (a module of this package with ``main(argv, prog)``) runs it
instead. Without the ``bench`` extra a command that needs it says so in one line and
exits with status 2.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from botorch_sketch.utils.extras import install_command

PROG = "python -m benchmarks"

#: Command (None: the default) -> what it imports from the ``bench`` extra.
NEEDS = {
    None: ("matplotlib", "tqdm"),
    "scoring": (),
    "thompson_steps": ("matplotlib", "tqdm"),
    "cluster": ("matplotlib",),
}


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the command named by ``argv``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in NEEDS else None
    for name in NEEDS[command]:
        try:
            importlib.import_module(name)
        except ImportError:
            print(
                f"{PROG}: error: {name} is missing; install the benchmark extra: "
                f"{install_command('bench')} (from the repository root)",
                file=sys.stderr,
            )
            return 2
    if command is None:
        from benchmarks.cli import main as run_suite

        return run_suite(argv)
    module = importlib.import_module(f"benchmarks.{command}")
    status = module.main(argv[1:], prog=f"{PROG} {command}")
    return 0 if status is None else status


if __name__ == "__main__":
    sys.exit(main())
