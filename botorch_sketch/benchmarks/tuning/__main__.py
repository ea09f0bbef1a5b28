r"""``python -m botorch_sketch.benchmarks.tuning`` (see :mod:`.cli`)."""

import sys

from botorch_sketch.benchmarks.tuning.cli import main

if __name__ == "__main__":
    sys.exit(main())
