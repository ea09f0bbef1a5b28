r"""Candidate generators (adaptive batches, Thompson sampling, domain shrinking) and
the ask/tell loops built on them.

``BBKB``, ``SGPTS`` and ``GPThreDS`` are the loops; ``gen_bbkb_batch`` and
``gen_thompson_candidates`` generate one batch from a model. ``CachedSparseThompson``
and ``IncrementalExactThompson`` are the samplers behind ``SGPTS`` over a finite arm
set.
"""

from botorch_sketch.generation.bbkb import (
    BBKBBatch,
    gen_bbkb_batch,
    gen_bbkb_batch_continuous,
    gen_uncertainty_warmup,
)
from botorch_sketch.generation.bbkb_loop import (
    BBKB,
    WorkerRatioThreshold,
    asynchronous_options,
)
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.generation.thompson import (
    ThompsonCandidates,
    gen_thompson_candidates,
)
from botorch_sketch.generation.thompson_arms import (
    ArmThompsonSampler,
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.generation.threds import GPThreDS

__all__ = [
    "BBKB",
    "SGPTS",
    "ArmThompsonSampler",
    "BBKBBatch",
    "CachedSparseThompson",
    "GPThreDS",
    "IncrementalExactThompson",
    "ThompsonCandidates",
    "WorkerRatioThreshold",
    "asynchronous_options",
    "gen_bbkb_batch",
    "gen_bbkb_batch_continuous",
    "gen_thompson_candidates",
    "gen_uncertainty_warmup",
]
