r"""``python -m botorch_sketch.benchmarks.thompson_steps``."""

from botorch_sketch.benchmarks.thompson_steps.cli import main

main()
