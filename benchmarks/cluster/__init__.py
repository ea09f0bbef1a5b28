r"""Ask/tell bandits on a simulated cluster of ``W`` workers with log-normal
evaluation times (docs/benchmarks.md, "Asynchronous batches on a simulated cluster").

Modules: :mod:`~.methods` (the methods), :mod:`~.simulation` (one run on the simulated
clock), :mod:`~.report` (figures of merit, the table and the PNGs), :mod:`~.cli`
(presets, ``python -m benchmarks.cluster``).
"""

from benchmarks.cluster.cli import PRESETS, main
from benchmarks.cluster.methods import METHODS
from benchmarks.cluster.simulation import simulate

__all__ = ["METHODS", "PRESETS", "main", "simulate"]
