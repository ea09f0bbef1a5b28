r"""``python -m botorch_sketch.benchmarks`` and the ``botorch-sketch-bench`` script."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from botorch_sketch.benchmarks.cli import main as _cli_main


def main(argv: Sequence[str] | None = None) -> int:
    r"""Entry point of the console script; returns the exit status."""
    return _cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
