r"""``python -m botorch_sketch.benchmarks`` and the ``botorch-sketch-bench`` script.

Without a subcommand it runs the benchmark suite (:mod:`~.cli`; its ``--help`` lists
the flags). The first argument may instead name a subcommand, with its own ``--help``:

- ``scoring``: Nystrom scoring against an exact GP (:mod:`~.scoring`);
- ``thompson_steps``: S-GP-TS step time against exact GP-TS (:mod:`~.thompson_steps`);
- ``cluster``: bandits on a simulated cluster of workers (:mod:`~.cluster`).

When the ``bench`` extra (matplotlib, tqdm) is missing, it says so in one line and
exits with status 2.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

PROG = "botorch-sketch-bench"

#: Subcommand -> the module of this package whose ``main(argv, prog)`` runs it.
SUBCOMMANDS = {
    "scoring": "scoring",
    "thompson_steps": "thompson_steps",
    "cluster": "cluster",
}

#: What each command imports from the ``bench`` extra (None: the default command).
NEEDS = {
    None: ("matplotlib", "tqdm"),
    "scoring": (),
    "thompson_steps": ("matplotlib", "tqdm"),
    "cluster": ("matplotlib",),
}

INSTALL_BENCH = 'pip install "botorch-sketch[bench]"'


def missing_module(names: Sequence[str]) -> str | None:
    r"""The first of ``names`` that cannot be imported, or None."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def main(argv: Sequence[str] | None = None) -> int:
    r"""Entry point of the console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    missing = missing_module(NEEDS[command])
    if missing is not None:
        print(
            f"{PROG}: error: {missing} is missing; install the benchmark extra: "
            f"{INSTALL_BENCH}",
            file=sys.stderr,
        )
        return 2
    if command is None:
        from botorch_sketch.benchmarks.cli import main as run_suite

        return run_suite(argv)
    module = importlib.import_module(f"botorch_sketch.benchmarks.{command}")
    status = module.main(argv[1:], prog=f"{PROG} {command}")
    return 0 if status is None else status


if __name__ == "__main__":
    sys.exit(main())
