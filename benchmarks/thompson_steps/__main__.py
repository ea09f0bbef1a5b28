r"""``python -m benchmarks.thompson_steps``."""

from benchmarks.thompson_steps.cli import main

main()
