r"""Scaled Thompson sampling as a BoTorch acquisition function (S-GP-TS; Vakili et
al., NeurIPS 2021).

:class:`ScaledPathThompsonSampling` wraps scaled posterior sample paths
(:func:`~botorch_sketch.sampling.pathwise.draw_scaled_paths`) as an
``AcquisitionFunction`` for ``optimize_acqf``; :class:`AlphaSchedule` gives the paper's
exploration scale ``alpha_t``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from botorch_sketch.sampling.pathwise import ScaledSamplePaths, draw_scaled_paths
from botorch_sketch.utils.validation import (
    check_at_least,
    check_int,
    check_matrix,
    check_positive,
    check_tensor,
)


@dataclass(frozen=True)
class AlphaSchedule:
    r"""The S-GP-TS exploration scale ``alpha_t`` as a function of the step ``t``.

        alpha_t = 1 + a (B + R sqrt(2 log(t^2) / tau) + c),

    the form of Vakili et al. (NeurIPS 2021), eq. (10): ``B`` (``rkhs_bound``) bounds
    the RKHS norm of the objective, ``R`` (``noise_std``) is the sub-Gaussian noise
    scale, ``tau`` (``noise``) the regularization (GP noise variance) parameter, and
    ``a`` (``scale``), ``c`` (``offset``) collect the approximation-quality constants.
    The paper's experiments use the constant ``alpha = 1`` (pass a float where a
    schedule is accepted).

    Example:
        >>> schedule = AlphaSchedule(scale=0.1, rkhs_bound=1.0, noise_std=0.5)
        >>> schedule(1), schedule(1000)
    """

    scale: float = 1.0
    rkhs_bound: float = 1.0
    noise_std: float = 1.0
    noise: float = 1.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        check_at_least(self.scale, "scale", 0.0)
        check_at_least(self.rkhs_bound, "rkhs_bound", 0.0)
        check_at_least(self.noise_std, "noise_std", 0.0)
        check_positive(self.noise, "noise")
        check_at_least(self.offset, "offset", 0.0)
        # alpha_t grows with t: finite at the largest int t means finite for all.
        if not math.isfinite(self._value(2**63 - 1)):
            raise ValueError(
                "The constants `scale`, `rkhs_bound`, `noise_std`, `noise` and "
                "`offset` give a non-finite alpha_t."
            )

    def __call__(self, t: int) -> float:
        r"""Return ``alpha_t`` for the step ``t >= 1``."""
        return self._value(check_int(t, "t", 1))

    def _value(self, t: int) -> float:
        try:
            width = self.noise_std * math.sqrt(2.0 * math.log(t**2) / self.noise)
            return 1.0 + self.scale * (self.rkhs_bound + width + self.offset)
        except OverflowError:
            return math.inf


def resolve_alpha(alpha: float | Callable[[int], float], t: int) -> float:
    r"""Return ``alpha`` (a constant) or ``alpha(t)`` (a schedule), checked ``>= 0``."""
    value = alpha(t) if callable(alpha) else alpha
    return check_at_least(value, "alpha", 0.0)


def scalarization_of(
    posterior_transform: PosteriorTransform | None,
) -> tuple[float, float]:
    r"""The ``(weight, offset)`` of a single-output scalarization (``(1, 0)`` for
    None).

    Args:
        posterior_transform: None or a ``ScalarizedPosteriorTransform`` with one
            weight.

    Returns:
        ``(w, c)`` such that the transformed objective is ``w f + c``.

    Example:
        >>> scalarization_of(ScalarizedPosteriorTransform(torch.tensor([-1.0])))
        (-1.0, 0.0)
    """
    if posterior_transform is None:
        return 1.0, 0.0
    if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
        raise TypeError(
            "`posterior_transform` must be None or a ScalarizedPosteriorTransform, "
            f"got {type(posterior_transform).__name__}."
        )
    if posterior_transform.weights.numel() != 1:
        raise ValueError(
            "`posterior_transform` must scalarize a single outcome; sample-path "
            "Thompson sampling models one objective without outcome constraints, "
            f"got {posterior_transform.weights.numel()} weights."
        )
    return float(posterior_transform.weights), float(posterior_transform.offset)


class ScaledPathThompsonSampling(AcquisitionFunction):
    r"""Thompson sampling on scaled sample paths ``f~ = mu + alpha (f - mu)``, for
    ``optimize_acqf``.

    For ``X`` of shape ``batch x q x d`` with ``q`` equal to the number of paths, the
    value is ``sum_j (w f~_j(X[..., j, :]) + c)`` for the scalarization ``(w, c)`` of
    ``posterior_transform`` (``(1, 0)`` without one; ``w = -1`` minimizes): separable,
    so maximizing it jointly puts the ``j``-th candidate at a maximizer of path ``j``.
    :meth:`set_X_pending` draws fresh paths, so ``optimize_acqf(..., q=n,
    sequential=True)`` with one path (how Ax builds batches) gives ``n`` independent
    Thompson samples, the S-GP-TS batch, instead of ``n`` copies of one maximizer;
    the pending points do not enter the new paths (paths are independent given the
    data). Unlike BoTorch's ``PathwiseThompsonSampling`` it exposes the number of
    features, the exploration scale and the generator; the paths are drawn at
    construction and by :meth:`redraw`.

    Example:
        >>> acqf = ScaledPathThompsonSampling(model, num_paths=1, alpha=1.0)
        >>> x, value = optimize_acqf(acqf, bounds, q=1, num_restarts=8, raw_samples=512)
        >>> batch, _ = optimize_acqf(acqf, bounds, q=4, num_restarts=4,
        ...                          raw_samples=256, sequential=True)  # 4 samples
    """

    def __init__(
        self,
        model: Model,
        paths: ScaledSamplePaths | None = None,
        *,
        posterior_transform: PosteriorTransform | None = None,
        num_paths: int = 1,
        num_features: int = 1024,
        alpha: float = 1.0,
        generator: torch.Generator | None = None,
        paths_per_basis: int | None = None,
        X_pending: Tensor | None = None,
    ) -> None:
        r"""
        Args:
            model: The model the paths come from.
            paths: Paths to use; None draws ``num_paths`` with the settings below.
            posterior_transform: None or a single-weight
                ``ScalarizedPosteriorTransform``.
            num_paths: Number of paths (the ``q`` this acquisition accepts).
            num_features: Random Fourier features per path.
            alpha: Exploration scale.
            generator: Random number generator.
            paths_per_basis: See :func:`draw_scaled_paths`.
            X_pending: ``p x d`` pending points, stored (the paths are drawn once).
        """
        weight, offset = scalarization_of(posterior_transform)
        super().__init__(model=model)
        self._settings = {
            "num_features": num_features,
            "alpha": alpha,
            "generator": generator,
            "paths_per_basis": paths_per_basis,
        }
        if paths is None:
            paths = draw_scaled_paths(model, num_paths, **self._settings)
        elif not isinstance(paths, ScaledSamplePaths):
            raise TypeError(f"`paths` must be ScaledSamplePaths, got {type(paths)}.")
        self.paths = paths
        self.posterior_transform = posterior_transform
        self.weight, self.offset = weight, offset
        if X_pending is not None:
            X_pending = self._pending(X_pending).detach()
        self.X_pending = X_pending

    def redraw(self) -> None:
        r"""Replace the paths by a fresh draw with the same settings."""
        self.paths = draw_scaled_paths(
            self.model, self.paths.num_paths, **self._settings
        )

    def set_X_pending(self, X_pending: Tensor | None = None) -> None:
        r"""Store ``p x d`` pending points and draw fresh paths."""
        super().set_X_pending(None if X_pending is None else self._pending(X_pending))
        self.redraw()

    def _pending(self, X_pending: object) -> Tensor:
        r"""Return ``X_pending`` if it holds finite ``p x d`` points."""
        return check_matrix(
            X_pending, "X_pending", num_cols=self.paths.dim, allow_empty=True
        )

    def forward(self, X: Tensor) -> Tensor:
        r"""``batch x q x d`` (or ``q x d``) -> ``batch``: ``sum_j (w f~_j(x_j) + c)``;
        ``X`` is checked by :meth:`ScaledSamplePaths.paired`."""
        check_tensor(X, "X")
        return self._paired_sum(X)

    @t_batch_mode_transform()
    def _paired_sum(self, X: Tensor) -> Tensor:
        return (self.weight * self.paths.paired(X) + self.offset).sum(dim=-1)
