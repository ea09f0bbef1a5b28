r"""Sketched Gaussian-process models.

``NystromGP`` (BKB/BBKB) and ``DecomposedSamplingSVGP`` (S-GP-TS) are BoTorch models,
each with its marginal likelihood; ``CandidateState`` is the incremental form of the
DTC posterior over a fixed candidate set (the engine of the ``BBKB`` loop),
``DTCState`` the DTC posterior itself and ``IncrementalExactGP`` the exact posterior
updated one observation at a time.
"""

from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.dtc import DTCState
from botorch_sketch.models.incremental_exact import IncrementalExactGP
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

__all__ = [
    "CandidateState",
    "CollapsedTitsiasBound",
    "DTCState",
    "DecomposedSamplingSVGP",
    "IncrementalExactGP",
    "NystromGP",
    "NystromMarginalLogLikelihood",
]
