r"""S-GP-TS as Ax calls acquisition functions.

Ax maximizes ``w f(x) + c`` for the scalarization ``(w, c)`` of its objective
(``w = -1`` when minimizing) and builds an ``n``-arm batch with
``optimize_acqf(..., sequential=True)``: one point at a time, the points chosen so far
passed to ``set_X_pending``.
:class:`~botorch_sketch.acquisition.thompson.ScaledPathThompsonSampling` follows both
conventions (it applies the scalarization to its paths and draws fresh paths whenever
the pending points change), so a batch is ``n`` independent scaled Thompson samples,
the S-GP-TS batch. :class:`AxScaledPathThompsonSampling` is that class with one path:
the name ``sgpts_generation_strategy`` and the experiments saved with it store.
"""

from __future__ import annotations

try:
    import ax  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ax installed
    from botorch_sketch.integrations.ax_guard import AX_INSTALL_HINT

    raise ImportError(AX_INSTALL_HINT) from error

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from torch import Tensor

from botorch_sketch.acquisition.thompson import ScaledPathThompsonSampling


class AxScaledPathThompsonSampling(ScaledPathThompsonSampling):
    r"""Scaled pathwise Thompson sampling with one path, redrawn for every sequential
    candidate: ``ScaledPathThompsonSampling(model, num_paths=1, ...)``.

    The value at ``x`` (``batch x 1 x d``) is ``w f~(x) + c`` for the path
    ``f~ = mu + alpha (f - mu)`` and the scalarization ``(w, c)`` of
    ``posterior_transform``; :meth:`set_X_pending` stores the pending points and draws
    a fresh path.

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
                :func:`~botorch_sketch.sampling.draw_scaled_paths`.
            posterior_transform: None or a single-weight
                ``ScalarizedPosteriorTransform``.
            num_features: Random Fourier features of the path.
            alpha: Exploration scale ``>= 0``.
            generator: Random number generator of the paths (None: the global one).
            paths_per_basis: See ``draw_scaled_paths``.
            X_pending: ``p x d`` pending points (stored; the path is drawn once).
        """
        super().__init__(
            model,
            posterior_transform=posterior_transform,
            num_paths=1,
            num_features=num_features,
            alpha=alpha,
            generator=generator,
            paths_per_basis=paths_per_basis,
            X_pending=X_pending,
        )
