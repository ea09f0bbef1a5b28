r"""Sampling: scaled posterior sample paths and the cached work of paths over a
finite arm set (the layer between models and acquisition functions)."""

from botorch_sketch.sampling.arm_features import ArmFeatureCache, PriorPathBank
from botorch_sketch.sampling.pathwise import ScaledSamplePaths, draw_scaled_paths

__all__ = ["ArmFeatureCache", "PriorPathBank", "ScaledSamplePaths", "draw_scaled_paths"]
