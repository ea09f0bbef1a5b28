r"""The shared Cholesky helpers against dense float64 factorizations, for float32 and
float64 on every device."""

import gpytorch
import pytest
import torch
from linear_operator.utils.errors import NanError, NotPSDError

from botorch_sketch.models.linalg import (
    GrowingCholesky,
    append_pivot,
    safe_cholesky,
    solve_lower,
)

from ..gp_helpers import assert_close

DTYPE = torch.float64


def _kernel_matrix(points: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * torch.cdist(points, points).square() / 0.3**2)


def test_safe_cholesky_is_plain_when_it_can_be(tkwargs):
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(6, 6, generator=gen, dtype=DTYPE)
    M = (A @ A.mT + torch.eye(6, dtype=DTYPE)).to(**tkwargs)
    M = (M + M.mT) / 2  # exactly symmetric
    L = safe_cholesky(M)
    assert L.dtype == M.dtype and L.device == M.device
    assert torch.equal(L, torch.linalg.cholesky(M))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_safe_cholesky_jitter_is_gpytorchs_relative_to_the_diagonal(scale, tkwargs):
    # two identical points, less a tenth of the jitter on the diagonal: K is
    # indefinite on every device (a merely singular K passes CUDA's float32
    # Cholesky); the first retry adds cholesky_jitter * mean diagonal, so the factor
    # scales as sqrt(scale)
    points = torch.tensor([[0.1], [0.1], [0.7]], dtype=DTYPE)
    eye = torch.eye(3, dtype=DTYPE)
    for jitter in (1e-4, 1e-2) if tkwargs["dtype"] == torch.float32 else (1e-8, 1e-4):
        K = scale * (_kernel_matrix(points) - 0.1 * jitter * eye)
        with gpytorch.settings.cholesky_jitter(float_value=jitter, double_value=jitter):
            L = safe_cholesky(K.to(**tkwargs))
        expected = torch.linalg.cholesky(K + jitter * K.diagonal().mean() * eye)
        assert L.dtype == tkwargs["dtype"] and L.device.type == tkwargs["device"].type
        assert_close(L / scale**0.5, expected / scale**0.5)


def test_safe_cholesky_rejects_nan_and_indefinite_matrices():
    with pytest.raises(NanError):
        safe_cholesky(torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]))
    with pytest.raises(NotPSDError):
        safe_cholesky(-torch.eye(3, dtype=DTYPE))


@pytest.mark.parametrize("diagonal", [0.0, 0.05])
def test_append_pivot_builds_the_cholesky_factor_in_feature_form(diagonal, tkwargs):
    # pivots one by one: rows = L^{-1} K_PX and residual = diag(K - K_XP M^{-1} K_PX)
    # with M = K_PP + diagonal I = L L^T, against a dense float64 factorization
    gen = torch.Generator().manual_seed(1)
    X = torch.rand(12, 2, generator=gen, dtype=DTYPE)
    K = _kernel_matrix(X)
    pivots = [4, 0, 9, 7]
    K_ = K.to(**tkwargs)
    rows = torch.empty(len(pivots), 12, **tkwargs)
    residual = K_.diagonal().clone()
    for j, pivot in enumerate(pivots):
        variance = float(residual[pivot]) + diagonal
        new = append_pivot(rows[:j], K_[:, pivot], pivot, variance, residual, rows[j])
        assert new.data_ptr() == rows[j].data_ptr()
    M = K[pivots][:, pivots] + diagonal * torch.eye(4, dtype=DTYPE)
    L = torch.linalg.cholesky(M)
    expected_rows = torch.linalg.solve_triangular(L, K[pivots], upper=False)
    assert_close(rows, expected_rows)
    assert_close(residual, K.diagonal() - expected_rows.square().sum(0))
    if diagonal == 0.0:  # the rows hold L^T at the pivots
        assert_close(rows[:, pivots], L.mT)


def test_growing_cholesky_equals_the_dense_factor_at_every_size(tkwargs):
    # blocks of 2 rows for the solves, rows appended 3, 1, 5, 2 at a time: every
    # size's factor and solves equal dense ones of the matrix so far
    points = torch.rand(11, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    K = _kernel_matrix(points) + 0.1 * torch.eye(11, dtype=DTYPE)
    R = torch.randn(11, 3, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    growing = GrowingCholesky(K.to(**tkwargs), block=2)
    t = 0
    for b in (3, 1, 5, 2):
        cross, corner = K[:t, t : t + b], K[t : t + b, t : t + b]
        growing.append(cross.to(**tkwargs), corner.to(**tkwargs))
        t += b
        L = torch.linalg.cholesky(K[:t, :t])
        assert growing.size == t and growing.storage.shape[0] >= t
        assert_close(growing.factor, L.to(**tkwargs))
        rhs = R[:t].to(**tkwargs)
        forward = torch.linalg.solve_triangular(L, R[:t], upper=False)
        assert_close(growing.forward(rhs), forward.to(**tkwargs))
        assert_close(
            growing.solve(rhs), torch.linalg.solve(K[:t, :t], R[:t]).to(**tkwargs)
        )


def test_solve_lower_in_column_blocks_equals_one_solve(tkwargs):
    gen = torch.Generator().manual_seed(1)
    A = torch.randn(2, 5, 5, generator=gen, dtype=DTYPE)
    L = torch.linalg.cholesky(A @ A.mT + 5 * torch.eye(5, dtype=DTYPE)).to(**tkwargs)
    B = torch.randn(2, 5, 23, generator=gen, dtype=DTYPE).to(**tkwargs)
    whole = solve_lower(L, B)
    assert torch.equal(whole, torch.linalg.solve_triangular(L, B, upper=False))
    for max_columns in (1, 7, 23):
        blocks = solve_lower(L, B, max_columns=max_columns)
        assert blocks.shape == B.shape and blocks.device == B.device
        assert_close(blocks, whole)
    assert_close(L @ solve_lower(L, B, max_columns=7), B)  # the oracle: L X = B
    strided = B[0].mT.contiguous().mT  # column-major, as the callers' ``M.mT``
    assert_close(solve_lower(L[0], strided, max_columns=4), whole[0])
