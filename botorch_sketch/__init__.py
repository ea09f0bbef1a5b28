r"""botorch-sketch: scalable no-regret Gaussian-process bandits for BoTorch."""

__version__ = "0.1.0"

__all__: list[str] = []
