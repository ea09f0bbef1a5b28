r"""botorch-sketch: scalable no-regret Gaussian-process bandits for BoTorch.

The entry points: the models and their marginal likelihoods, the acquisition
functions, the batch generators, the ask/tell loops and :func:`run_parallel`. The
engines behind them (``CandidateState``, ``ArmFeatureCache``,
``CachedSparseThompson``, ...) are exported by their subpackages
(``botorch_sketch.models``, ``.sampling``, ``.generation``); the integrations with
Ax, Ray Tune and Optuna by ``botorch_sketch.integrations``.
"""

from botorch_sketch.acquisition import (
    AlphaSchedule,
    BKBUpperConfidenceBound,
    ScaledPathThompsonSampling,
    TheoryRadius,
)
from botorch_sketch.generation import (
    BBKB,
    SGPTS,
    BBKBOptions,
    GPThreDS,
    GPThreDSOptions,
    SGPTSOptions,
    asynchronous_options,
    gen_bbkb_batch,
    gen_bbkb_batch_continuous,
    gen_thompson_candidates,
    gen_uncertainty_warmup,
)
from botorch_sketch.models import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
    NystromGP,
    NystromMarginalLogLikelihood,
)
from botorch_sketch.parallel import run_parallel
from botorch_sketch.sampling import draw_scaled_paths

__version__ = "0.1.0"

__all__ = [
    "BBKB",
    "SGPTS",
    "AlphaSchedule",
    "BBKBOptions",
    "BKBUpperConfidenceBound",
    "CollapsedTitsiasBound",
    "DecomposedSamplingSVGP",
    "GPThreDS",
    "GPThreDSOptions",
    "NystromGP",
    "NystromMarginalLogLikelihood",
    "SGPTSOptions",
    "ScaledPathThompsonSampling",
    "TheoryRadius",
    "asynchronous_options",
    "draw_scaled_paths",
    "gen_bbkb_batch",
    "gen_bbkb_batch_continuous",
    "gen_thompson_candidates",
    "gen_uncertainty_warmup",
    "run_parallel",
]
