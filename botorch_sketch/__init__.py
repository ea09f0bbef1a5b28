r"""botorch-sketch: scalable no-regret Gaussian-process bandits for BoTorch."""

from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood

__version__ = "0.1.0"

__all__ = ["NystromGP", "NystromMarginalLogLikelihood"]
