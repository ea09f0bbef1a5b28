r"""Candidate generators (adaptive batches, Thompson sampling, domain shrinking) and
the ask/tell loops built on them.

``BBKB``, ``SGPTS``, ``ExactGPTS`` and ``GPThreDS`` are the loops; the first three,
on a finite arm set, share ``ArmLoop`` and follow the ``AskTellOptimizer`` contract.
``BBKBOptions``, ``SGPTSOptions`` and ``GPThreDSOptions`` hold their settings.
``gen_bbkb_batch`` and ``gen_thompson_candidates`` generate one batch from a model.
``CachedSparseThompson`` and ``IncrementalExactThompson`` are the samplers behind
``SGPTS`` and ``ExactGPTS``.
"""

from botorch_sketch.generation.ask_tell import ArmLoop, AskTellOptimizer, BestArm
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
from botorch_sketch.generation.options import (
    BBKBOptions,
    GPThreDSOptions,
    SGPTSOptions,
)
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS
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
    "ArmLoop",
    "ArmThompsonSampler",
    "AskTellOptimizer",
    "BestArm",
    "BBKBBatch",
    "BBKBOptions",
    "CachedSparseThompson",
    "ExactGPTS",
    "GPThreDS",
    "GPThreDSOptions",
    "IncrementalExactThompson",
    "SGPTSOptions",
    "ThompsonCandidates",
    "WorkerRatioThreshold",
    "asynchronous_options",
    "gen_bbkb_batch",
    "gen_bbkb_batch_continuous",
    "gen_thompson_candidates",
    "gen_uncertainty_warmup",
]
