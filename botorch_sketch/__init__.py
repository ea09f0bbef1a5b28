r"""botorch-sketch: scalable no-regret Gaussian-process bandits for BoTorch."""

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound, TheoryRadius
from botorch_sketch.generation.bbkb import (
    BBKBBatch,
    gen_bbkb_batch,
    gen_bbkb_batch_continuous,
    gen_uncertainty_warmup,
    update_bbkb_model,
)
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.threds import GPThreDS
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood

__version__ = "0.1.0"

__all__ = [
    "BBKB",
    "BBKBBatch",
    "BKBUpperConfidenceBound",
    "GPThreDS",
    "NystromGP",
    "NystromMarginalLogLikelihood",
    "TheoryRadius",
    "gen_bbkb_batch",
    "gen_bbkb_batch_continuous",
    "gen_uncertainty_warmup",
    "update_bbkb_model",
]
