r"""``python -m benchmarks.cluster``."""

import sys

from benchmarks.cluster.cli import main

sys.exit(main())
