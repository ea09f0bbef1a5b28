r"""``python -m benchmarks.tuning`` (see :mod:`.cli`)."""

import sys

from benchmarks.tuning.cli import main

if __name__ == "__main__":
    sys.exit(main())
