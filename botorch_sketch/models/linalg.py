r"""Cholesky factorizations shared by the models: a guarded factorization and the
one-pivot step of a Cholesky factor kept in feature form.
"""

from __future__ import annotations

import torch
from gpytorch import settings
from linear_operator.utils.errors import NanError, NotPSDError
from torch import Tensor


def safe_cholesky(matrix: Tensor) -> Tensor:
    r"""Lower Cholesky factor of a symmetric ``... x m x m`` matrix that is positive
    definite up to rounding.

    GPyTorch's policy (``psd_safe_cholesky``): the plain factorization first and,
    only if it fails, a diagonal jitter of GPyTorch's ``cholesky_jitter`` for the
    dtype, ten times larger at each of at most ``cholesky_max_tries`` retries. The
    jitter is relative to the mean absolute diagonal, so the factor of ``c M`` is
    ``sqrt(c)`` times that of ``M`` (a kernel of small output scale is not
    perturbed more than a large one). Differentiable; the symmetric part of
    ``matrix`` is factorized.

    Raises:
        NanError: ``matrix`` holds NaN.
        NotPSDError: No jitter made it positive definite.
    """
    if torch.isnan(matrix).any():
        raise NanError("The matrix to factorize holds NaN.")
    matrix = (matrix + matrix.mT) / 2
    factor, info = torch.linalg.cholesky_ex(matrix)
    if not info.any():
        return factor
    diagonal = matrix.detach().diagonal(dim1=-2, dim2=-1).abs()
    jitter = settings.cholesky_jitter.value(matrix.dtype) * diagonal.mean(-1)
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    for _ in range(settings.cholesky_max_tries.value()):
        factor, info = torch.linalg.cholesky_ex(matrix + jitter[..., None, None] * eye)
        if not info.any():
            return factor
        jitter = 10 * jitter
    raise NotPSDError(
        f"The matrix is not positive definite, even with a jitter of {jitter / 10}."
    )


def append_pivot(
    rows: Tensor,
    column: Tensor,
    pivot: int,
    pivot_variance: float,
    residual: Tensor,
    out: Tensor | None = None,
) -> Tensor:
    r"""One step of an incremental (pivoted) Cholesky factorization in feature form.

    With ``n`` pivots ``P`` and ``L L^T = K_PP`` (plus any diagonal added to it),
    ``rows`` holds ``W = L^{-1} K_PX`` (``n x A``). Adding pivot ``p`` with kernel
    column ``column = K_Xp`` and Schur complement ``d^2 = pivot_variance`` adds the
    row ``w = (K_pX - W[:, p]^T W) / d`` (the new row of ``L`` is
    ``[W[:, p]^T, d]``, no triangular solve) and the conditional variances drop by
    ``w^2``. ``O(A n)``.

    Args:
        rows: ``n x A`` rows ``W`` (``n`` may be 0).
        column: ``A`` kernel column of the pivot.
        pivot: The pivot's index in ``[0, A)``.
        pivot_variance: ``d^2 > 0``.
        residual: ``A`` conditional variances, decreased in place.
        out: Optional ``A`` buffer for the new row.

    Returns:
        The new row ``w`` (``out`` when given).
    """
    if rows.shape[0] > 0:
        column = column - rows[:, pivot] @ rows
    row = torch.div(column, pivot_variance**0.5, out=out)
    residual.sub_(row.square())
    return row
