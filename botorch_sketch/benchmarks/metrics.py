r"""Former home of the benchmark results, writers and measurement.

They now live in :mod:`~botorch_sketch.benchmarks.results`,
:mod:`~botorch_sketch.benchmarks.writers` and
:mod:`~botorch_sketch.benchmarks.measurement`; this module keeps the two names that
:mod:`~botorch_sketch.benchmarks.cluster` still imports from here.
"""

from botorch_sketch.benchmarks.results import expected_uniform_regret
from botorch_sketch.benchmarks.writers import checkpoints

__all__ = ["checkpoints", "expected_uniform_regret"]
