r"""Sampling: scaled posterior sample paths (the layer between models and
acquisition functions)."""

from botorch_sketch.sampling.pathwise import ScaledSamplePaths, draw_scaled_paths

__all__ = ["ScaledSamplePaths", "draw_scaled_paths"]
