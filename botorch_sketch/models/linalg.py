r"""Cholesky factorizations shared by the models: a guarded factorization, a
triangular solve for very wide right-hand sides, the one-pivot step of a Cholesky
factor kept in feature form, and a factor grown by rows.
"""

from __future__ import annotations

import torch
from gpytorch import settings
from linear_operator.utils.errors import NanError, NotPSDError
from torch import Tensor

from botorch_sketch.utils.atomic import Restorable


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


#: Right-hand-side columns per CUDA triangular solve. From 524,281 columns PyTorch
#: sends CUDA solves down a slow path that works around a cuBLAS failure
#: (pytorch/pytorch#79191); BBKB on 10^6 arms spent seconds per step there.
CUDA_SOLVE_COLUMNS = 2**18


def solve_lower(lower: Tensor, rhs: Tensor, max_columns: int | None = None) -> Tensor:
    r"""``L^{-1} B`` for a lower-triangular ``L`` (``... x n x n``) and ``B``
    (``... x n x q``), as ``torch.linalg.solve_triangular``.

    On CUDA the columns of ``B`` are solved in blocks of at most
    :data:`CUDA_SOLVE_COLUMNS` (elsewhere in one call; ``max_columns`` overrides
    both). Each column's solution depends on that column alone, so the blocks give
    the same result.
    """
    if max_columns is None:
        max_columns = CUDA_SOLVE_COLUMNS if rhs.is_cuda else rhs.shape[-1]
    if rhs.shape[-1] <= max_columns:
        return torch.linalg.solve_triangular(lower, rhs, upper=False)
    blocks = rhs.split(max_columns, dim=-1)
    return torch.cat(
        [torch.linalg.solve_triangular(lower, block, upper=False) for block in blocks],
        dim=-1,
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


class GrowingCholesky(Restorable):
    r"""Lower Cholesky factor ``L`` of a growing SPD matrix, grown by rows.

    ``L`` lives in the top-left corner of a square buffer grown by >= 25% when full
    (new rows are written past the used corner: restorable by reference,
    :class:`~botorch_sketch.utils.atomic.Restorable`).
    Solves run by row blocks of ``block`` rows: matrix products on strided views plus
    triangular solves with contiguous copies of the diagonal blocks, since torch's
    triangular solvers copy a strided ``t x t`` view (measured 30x slower).
    """

    def __init__(self, like: Tensor, block: int = 256) -> None:
        r"""
        Args:
            like: A tensor whose dtype and device the factor takes.
            block: Rows per block of the solves.
        """
        self._buffer = like.new_zeros(0, 0)
        self.size = 0
        self.block = block

    @property
    def factor(self) -> Tensor:
        r"""``L`` (``t x t``, a view of the storage)."""
        return self._buffer[: self.size, : self.size]

    @property
    def storage(self) -> Tensor:
        r"""The buffer holding ``L`` (its size is the memory held)."""
        return self._buffer

    def _blocks(self) -> list[tuple[int, int]]:
        return [
            (s, min(s + self.block, self.size)) for s in range(0, self.size, self.block)
        ]

    def forward(self, R: Tensor) -> Tensor:
        r"""``L^{-1} R`` for ``R`` of shape ``t x q``, ``O(t^2 q)``."""
        L, out = self._buffer, torch.empty_like(R)
        for s, e in self._blocks():
            rhs = R[s:e] - L[s:e, :s] @ out[:s] if s else R[s:e]
            out[s:e] = torch.linalg.solve_triangular(
                L[s:e, s:e].contiguous(), rhs, upper=False
            )
        return out

    def solve(self, R: Tensor) -> Tensor:
        r"""``(L L^T)^{-1} R`` for ``R`` of shape ``t x q``, ``O(t^2 q)``."""
        L, out = self._buffer, self.forward(R)
        for s, e in reversed(self._blocks()):
            out[s:e] = torch.linalg.solve_triangular(
                L[s:e, s:e].contiguous().mT, out[s:e], upper=True
            )
            if s:
                out[:s] -= L[s:e, :s].mT @ out[s:e]
        return out

    def append(self, cross: Tensor, corner: Tensor) -> None:
        r"""Grow the factored matrix ``K`` to ``[[K, cross], [cross^T, corner]]``.

        Args:
            cross: ``t x b`` new off-diagonal block.
            corner: ``b x b`` new diagonal block.
        """
        t, b = self.size, corner.shape[0]
        below = self.forward(cross).mT if t else cross.mT
        if t:
            corner = corner - below @ below.mT
        diagonal = torch.linalg.cholesky(corner)
        if t + b > self._buffer.shape[0]:
            capacity = max(t + b, self._buffer.shape[0] * 5 // 4)
            grown = self._buffer.new_zeros(capacity, capacity)
            grown[:t, :t] = self._buffer[:t, :t]
            self._buffer = grown
        self._buffer[t : t + b, :t] = below
        self._buffer[t : t + b, t : t + b] = diagonal
        self.size = t + b
