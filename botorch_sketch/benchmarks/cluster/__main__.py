r"""``python -m botorch_sketch.benchmarks.cluster``."""

import sys

from botorch_sketch.benchmarks.cluster.cli import main

sys.exit(main())
