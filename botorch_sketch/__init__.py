r"""botorch-sketch: scalable no-regret Gaussian-process bandits for BoTorch."""

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound, TheoryRadius
from botorch_sketch.acquisition.thompson import (
    AlphaSchedule,
    ScaledPathThompsonSampling,
)
from botorch_sketch.generation.bbkb import (
    BBKBBatch,
    gen_bbkb_batch,
    gen_bbkb_batch_continuous,
    gen_uncertainty_warmup,
)
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.generation.thompson import gen_thompson_candidates
from botorch_sketch.generation.thompson_arms import (
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.generation.threds import GPThreDS
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)
from botorch_sketch.parallel import run_parallel
from botorch_sketch.sampling.arm_features import ArmFeatureCache
from botorch_sketch.sampling.pathwise import ScaledSamplePaths, draw_scaled_paths

__version__ = "0.1.0"

__all__ = [
    "AlphaSchedule",
    "CollapsedTitsiasBound",
    "DecomposedSamplingSVGP",
    "ScaledPathThompsonSampling",
    "draw_scaled_paths",
    "gen_thompson_candidates",
    "ArmFeatureCache",
    "CachedSparseThompson",
    "IncrementalExactThompson",
    "BBKB",
    "BBKBBatch",
    "BKBUpperConfidenceBound",
    "CandidateState",
    "GPThreDS",
    "NystromGP",
    "NystromMarginalLogLikelihood",
    "SGPTS",
    "ScaledSamplePaths",
    "TheoryRadius",
    "asynchronous_options",
    "gen_bbkb_batch",
    "gen_bbkb_batch_continuous",
    "gen_uncertainty_warmup",
    "run_parallel",
]
