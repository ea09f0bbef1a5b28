r"""S-GP-TS as Ax calls acquisition functions.

Ax maximizes ``w f(x) + c`` for the scalarization ``(w, c)`` of its objective
(``w = -1`` when minimizing) and builds an ``n``-arm batch with
``optimize_acqf(..., sequential=True)``: one point at a time, the points chosen so far
passed to ``set_X_pending``. :class:`AxScaledPathThompsonSampling` follows both
conventions: it applies the scalarization to its path and draws a fresh path whenever
the pending points change, so a batch is ``n`` independent scaled Thompson samples (the
S-GP-TS batch) instead of ``n`` copies of one path's maximizer.
"""

from __future__ import annotations

try:
    import ax  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ax installed
    from botorch_sketch.integrations.ax_guard import AX_INSTALL_HINT

    raise ImportError(AX_INSTALL_HINT) from error

import torch
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.models.model import Model
from torch import Tensor

from botorch_sketch.acquisition.thompson import ScaledPathThompsonSampling


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


class AxScaledPathThompsonSampling(ScaledPathThompsonSampling):
    r"""Scaled pathwise Thompson sampling with a fresh path per sequential candidate.

    The value at ``x`` (``batch x 1 x d``) is ``w f~(x) + c`` for one scaled path
    ``f~ = mu + alpha (f - mu)`` and the scalarization ``(w, c)`` of
    ``posterior_transform``. :meth:`set_X_pending` stores the pending points and
    redraws the path (paths are independent given the data, so the pending points do
    not enter the new path). Everything else is
    :class:`~botorch_sketch.acquisition.thompson.ScaledPathThompsonSampling`.

    Example:
        >>> acqf = AxScaledPathThompsonSampling(model, alpha=1.0)
        >>> x, _ = optimize_acqf(acqf, bounds, q=4, num_restarts=4, raw_samples=256,
        ...                      sequential=True)  # 4 independent samples
    """

    def __init__(
        self,
        model: Model,
        posterior_transform: PosteriorTransform | None = None,
        *,
        num_features: int = 1024,
        alpha: float = 1.0,
        generator: torch.Generator | None = None,
        paths_per_basis: int | None = None,
        X_pending: Tensor | None = None,
    ) -> None:
        r"""
        Args:
            model: A model supported by
                :func:`~botorch_sketch.acquisition.thompson.draw_scaled_paths`.
            posterior_transform: None or a single-weight
                ``ScalarizedPosteriorTransform``.
            num_features: Random Fourier features of the path.
            alpha: Exploration scale ``>= 0``.
            generator: Random number generator of the paths (None: the global one).
            paths_per_basis: See ``draw_scaled_paths``.
            X_pending: ``p x d`` pending points (stored; the path is drawn once).
        """
        weight, offset = scalarization_of(posterior_transform)
        super().__init__(
            model,
            num_paths=1,
            num_features=num_features,
            alpha=alpha,
            generator=generator,
            paths_per_basis=paths_per_basis,
        )
        self.posterior_transform = posterior_transform
        self.weight = weight
        self.offset = offset
        self.X_pending = None if X_pending is None else X_pending.detach()

    def set_X_pending(self, X_pending: Tensor | None = None) -> None:
        r"""Store ``p x d`` pending points and draw a fresh path."""
        super().set_X_pending(X_pending)
        self.redraw()

    def forward(self, X: Tensor) -> Tensor:
        r"""``batch x 1 x d`` -> ``batch``: ``w f~(x) + c``."""
        return self.weight * super().forward(X) + self.offset
