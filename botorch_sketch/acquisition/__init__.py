r"""Acquisition functions for sketched GP bandits."""

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound, TheoryRadius
from botorch_sketch.acquisition.thompson import (
    AlphaSchedule,
    ScaledPathThompsonSampling,
)

__all__ = [
    "AlphaSchedule",
    "BKBUpperConfidenceBound",
    "ScaledPathThompsonSampling",
    "TheoryRadius",
]
