r"""Inducing points chosen from the data by conditional variance (approximate k-DPP).

Greedy conditional-variance selection is a pivoted Cholesky factorization of the kernel
matrix ``K_XX`` that stops after ``m`` pivots: the next pivot is the point with the
largest variance conditioned on the pivots chosen so far (Burt, Rasmussen, van der Wilk,
ICML 2019 / JMLR 2020; Chen, Zhang, Zhou, NeurIPS 2018). The randomized variant draws
the next pivot with probability proportional to that residual variance, a cheap
approximate k-DPP sample. Optional per-point quality weights ``q_i`` turn the rule into
the quality-diversity DPP of Moss, Ober, Picheny (AISTATS 2023) that BoTorch's
``GreedyImprovementReduction`` uses: score ``q_i^2 r_i`` instead of ``r_i``.

Only one kernel column ``k(X, x_p)`` is evaluated per pivot and the factor is kept as
``m x n`` rows, so time is ``O(n m^2)`` and memory ``O(n m)``: past
:data:`FULL_KERNEL_ROWS` points the ``n x n`` kernel matrix is never formed (up to
there it is, in one kernel call instead of ``m``: their fixed overhead, about 0.3 ms
each, costs more than the whole matrix). BoTorch's ``GreedyVarianceReduction``
implements the same greedy rule but evaluates the full ``n x n`` kernel matrix first,
returns points rather than indices and has no randomized variant, hence this module.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from gpytorch import settings
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.linalg import append_pivot
from botorch_sketch.utils.validation import (
    check_bool,
    check_finite,
    check_generator,
    check_int,
    check_kernel,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_number,
)

#: Up to this many points the selection forms the kernel matrix in one call.
FULL_KERNEL_ROWS = 1024


class ConditionalVarianceFactor(NamedTuple):
    r"""Pivots of conditional-variance selection and their partial Cholesky factor.

    Attributes:
        indices: ``m_t`` distinct row indices of ``X`` in selection order.
        factor: ``m_t x n`` rows ``L_S^{-1} K_SX`` (``L_S`` the Cholesky factor of
            ``K_SS`` in pivot order, so ``factor[:, indices] = L_S^T``).
        pivot_variances: ``m_t`` residual variances of the pivots when chosen.
        threshold: The eligibility threshold ``rel_tol * max_i k(x_i, x_i)``.
    """

    indices: Tensor
    factor: Tensor
    pivot_variances: Tensor
    threshold: float


def select_inducing_indices(
    X: Tensor,
    kernel: Kernel,
    num_inducing: int,
    *,
    randomized: bool = False,
    generator: torch.Generator | None = None,
    rel_tol: float | None = None,
    quality: Tensor | None = None,
) -> Tensor:
    r"""Pick up to ``num_inducing`` rows of ``X`` by conditional variance.

    Let ``r_i`` be the prior variance ``k(x_i, x_i)`` conditioned on the pivots chosen
    so far (``r = diag(K_XX - K_XS K_SS^{-1} K_SX)``). Greedy selection takes
    ``argmax_i s_i``; randomized selection draws ``i`` with probability
    ``s_i / sum_j s_j``, where the score is ``s_i = r_i`` or, with quality weights,
    ``s_i = q_i^2 r_i``. Only points with ``r_i > rel_tol * max_j k(x_j, x_j)`` are
    eligible and selection stops when none with a positive score is left: the others
    are (numerically) spanned by the pivots, so with fewer distinct points than
    ``num_inducing`` all distinct points are returned and repeats never are.

    Args:
        X: ``n x d`` candidate points (e.g. the transformed training inputs).
        kernel: A GPyTorch kernel without batch shape.
        num_inducing: Maximal number ``m >= 1`` of pivots.
        randomized: Draw pivots proportionally to their residual variance instead of
            taking the largest.
        generator: Random number generator of the randomized variant.
        rel_tol: Relative variance threshold; default GPyTorch's variational Cholesky
            jitter for the dtype (1e-6 for float64, 1e-4 for float32), the level below
            which the variational strategy cannot resolve a pivot anyway.
        quality: Optional ``n`` non-negative quality weights ``q``.

    Returns:
        A LongTensor of ``m_t <= min(m, n)`` distinct row indices in selection order.

    Example:
        >>> kernel = ScaleKernel(RBFKernel())
        >>> idx = select_inducing_indices(torch.rand(1000, 3), kernel, 50)
        >>> Z = X[idx]
    """
    return conditional_variance_factor(
        X,
        kernel,
        num_inducing,
        randomized=randomized,
        generator=generator,
        rel_tol=rel_tol,
        quality=quality,
    ).indices


def conditional_variance_factor(
    X: Tensor,
    kernel: Kernel,
    num_inducing: int,
    *,
    randomized: bool = False,
    generator: torch.Generator | None = None,
    rel_tol: float | None = None,
    quality: Tensor | None = None,
) -> ConditionalVarianceFactor:
    r""":func:`select_inducing_indices` with the factor it builds on the way.

    The arguments are those of :func:`select_inducing_indices`. The factor lets a
    caller check in ``O(m^2)`` per new point whether greedy selection on the data
    plus that point would pick the same pivots (see
    :class:`~botorch_sketch.generation.thompson_arms.CachedSparseThompson`).

    Returns:
        A :class:`ConditionalVarianceFactor`.
    """
    check_model_dtype(X, "X")
    check_matrix(X, "X")
    check_magnitude(X, "X")
    check_int(num_inducing, "num_inducing", 1)
    check_kernel(kernel, "kernel")
    check_bool(randomized, "randomized")
    check_generator(generator)
    if rel_tol is None:
        rel_tol = settings.variational_cholesky_jitter.value(dtype=X.dtype)
    if not 0.0 <= check_number(rel_tol, "rel_tol") < 1.0:
        raise ValueError(f"`rel_tol` must lie in [0, 1), got {rel_tol}.")
    if quality is not None:
        check_finite(quality, "quality")
        check_magnitude(quality, "quality")
        if quality.shape != X.shape[:1] or bool((quality < 0).any()):
            raise ValueError(
                f"`quality` must hold {X.shape[0]} non-negative weights (one per row "
                "of `X`)."
            )

    n = X.shape[0]
    max_pivots = min(num_inducing, n)
    # Eager kernel evaluation halves the per-pivot overhead of GPyTorch's lazy tensors.
    with torch.no_grad(), settings.lazily_evaluate_kernels(False):
        residual = kernel(X, diag=True).to(X).clone()
        if not float(residual.max()) > 0.0:
            raise ValueError("`kernel` has zero prior variance at every point of `X`.")
        threshold = rel_tol * float(residual.max())
        factor = X.new_empty(max_pivots, n)  # rows of L_S^{-1} K_SX
        gram = kernel(X, X).to_dense() if n <= FULL_KERNEL_ROWS else None
        pivots: list[int] = []
        for j in range(max_pivots):
            pivot = _next_pivot(residual, threshold, quality, randomized, generator)
            if pivot is None:
                break
            if gram is None:
                column = kernel(X, X[pivot : pivot + 1]).to_dense().squeeze(-1)
            else:
                column = gram[:, pivot]
            variance = float(residual[pivot])
            append_pivot(factor[:j], column, pivot, variance, residual, out=factor[j])
            residual[pivot] = -math.inf  # spanned exactly; never eligible again
            pivots.append(pivot)
    index = torch.tensor(pivots, dtype=torch.long, device=X.device)
    count = len(pivots)
    variances = factor[torch.arange(count, device=X.device), index].square()
    return ConditionalVarianceFactor(index, factor[:count], variances, threshold)


def _next_pivot(
    residual: Tensor,
    threshold: float,
    quality: Tensor | None,
    randomized: bool,
    generator: torch.Generator | None,
) -> int | None:
    r"""Index of the next pivot, or None when no eligible point has a positive score."""
    if quality is None and not randomized:
        pivot = int(residual.argmax())
        return pivot if float(residual[pivot]) > threshold else None
    scores = torch.where(residual > threshold, residual, 0.0)
    if quality is not None:
        scores = scores * quality.square()
    if not float(scores.max()) > 0.0:
        return None
    if not randomized:
        return int(scores.argmax())
    device = generator.device if generator is not None else scores.device
    draw = torch.multinomial(scores.to(device), 1, generator=generator)
    return int(draw)
