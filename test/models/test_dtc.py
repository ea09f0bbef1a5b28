r"""The DTC core against dense float64 recomputations of the DTC / Titsias formulas,
for float32 and float64 on every device."""

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.models.dtc import (
    DTCState,
    collapsed_log_likelihood,
    dictionary_cholesky,
    distinct_rows,
    titsias_q_from_statistics,
)

from ..gp_helpers import assert_close


def _dense_dtc(kernel, S, X, y, noise, T):
    r"""Dense float64 DTC mean ``batch x q`` and covariance ``batch x q x q`` at
    ``batch x q x d`` points ``T`` (``Q = K_XS K_SS^{-1} K_SX``)."""
    with torch.no_grad():
        K_SS = kernel(S).to_dense()
        inverse = torch.linalg.cholesky(K_SS).inverse().mT
        Z = kernel(X, S).to_dense() @ inverse
        V = Z.mT @ Z + noise * torch.eye(S.shape[0], dtype=torch.float64)
        z = kernel(T, S).to_dense() @ inverse
        mean = z @ torch.linalg.solve(V, Z.mT @ y)
        cov = kernel(T).to_dense() - z @ z.mT + noise * z @ torch.linalg.solve(V, z.mT)
    return mean, cov


@pytest.mark.parametrize("batch_shape", [(), (2,), (2, 3)])
def test_state_matches_dense_formulas_and_incremental_update(tkwargs, batch_shape):
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(40, generator=gen, dtype=torch.float64)
    T = torch.rand(*batch_shape, 7, 3, generator=gen, dtype=torch.float64)
    S = X[:12]
    kernel = ScaleKernel(RBFKernel()).double()
    kernel.base_kernel.lengthscale = 0.4  # cond(K_SS) ~ 5e3: float32 keeps 4 digits
    noise = torch.tensor(0.2, dtype=torch.float64)
    mean, cov = _dense_dtc(kernel, S, X, y, noise, T)
    X_, y_, T_, noise_ = (t.to(**tkwargs) for t in (X, y, T, noise))
    kernel_ = kernel.to(**tkwargs)
    with torch.no_grad():
        state = DTCState.build(kernel_, X_[:12], X_[:30], y_[:30], noise_).updated(
            kernel_, X_[30:], y_[30:]
        )
        got_mean, got_cov = state.mean_and_covariance(kernel_, T_)
        assert got_mean.shape == (*batch_shape, 7) and got_mean.device == T_.device
        assert_close(got_mean, mean)
        assert_close(got_cov, cov)
        flat_T = T_.reshape(-1, 3)
        for chunk_size in (3, 7, 2048):  # uneven, exact and single chunks
            m2, v2 = state.mean_and_variance(kernel_, flat_T, chunk_size=chunk_size)
            assert_close(m2, mean.reshape(-1))
            assert_close(v2, cov.diagonal(dim1=-2, dim2=-1).reshape(-1))


def test_distinct_rows_counts_and_sums(tkwargs):
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], **tkwargs)
    y = torch.tensor([1.0, 2.0, 4.0], **tkwargs)
    U, counts, sums = distinct_rows(X, y)
    assert U.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert counts.tolist() == [1.0, 2.0] and counts.dtype == X.dtype
    assert sums.tolist() == [2.0, 5.0] and sums.device == X.device


def _titsias_bound_by_hand(kernel, S, X, y, noise):
    r"""Dense Titsias bound per observation: log N(y | 0, Q + lambda I) -
    tr(K - Q) / (2 lambda), Q = K_XS K_SS^{-1} K_SX, on every row of X."""
    with torch.no_grad():
        K_SX, K_XX = kernel(S, X).to_dense(), kernel(X).to_dense()
        Q = K_SX.mT @ torch.linalg.solve(kernel(S).to_dense(), K_SX)
    n = X.shape[0]
    eye = torch.eye(n, dtype=X.dtype)
    gaussian = torch.distributions.MultivariateNormal(
        torch.zeros_like(y), Q + noise * eye
    )
    return (gaussian.log_prob(y) - (K_XX - Q).trace() / (2 * noise)) / n


def test_collapsed_bound_with_repeated_rows_matches_the_dense_formula(tkwargs):
    gen = torch.Generator().manual_seed(2)
    U = torch.rand(25, 2, generator=gen, dtype=torch.float64)
    X = torch.cat([U, U[:10], U[:3]])  # repeated rows are merged with their counts
    y = torch.randn(38, generator=gen, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel()).double()
    kernel.base_kernel.lengthscale = 0.4
    noise = torch.tensor(0.05, dtype=torch.float64)
    expected = _titsias_bound_by_hand(kernel, U[:8], X, y, noise)
    X_, y_, noise_ = X.to(**tkwargs), y.to(**tkwargs), noise.to(**tkwargs)
    kernel_ = kernel.to(**tkwargs)
    with torch.no_grad():
        bound = collapsed_log_likelihood(kernel_, X_[:8], X_, y_, noise_)
        # a float64 factor: computed in float64, returned in the data's dtype
        chol = dictionary_cholesky(kernel_, X_[:8], dtype=torch.float64)
        bound64 = collapsed_log_likelihood(
            kernel_, X_[:8], X_, y_, noise_, chol_dictionary=chol
        )
    assert bound.dtype == bound64.dtype == X_.dtype
    assert bound.device == X_.device
    assert_close(bound, expected)
    assert_close(bound64, expected)


def test_whitened_q_is_the_titsias_optimum_from_state_or_statistics(tkwargs):
    # q(v) = N(w, lambda V^{-1}): the lower factor C_w, and the same q(v) from the
    # sufficient statistics Z^T Z and Z^T y alone; references in float64
    gen = torch.Generator().manual_seed(3)
    X = torch.rand(30, 2, generator=gen, dtype=torch.float64)
    y = torch.randn(30, generator=gen, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel()).double()
    kernel.base_kernel.lengthscale = 0.4
    noise = torch.tensor(0.1, dtype=torch.float64)
    with torch.no_grad():
        Z = DTCState.build(kernel, X[:7], X, y, noise).embed(kernel, X)
    V = Z.mT @ Z + noise * torch.eye(7, dtype=torch.float64)
    X_, y_, noise_ = X.to(**tkwargs), y.to(**tkwargs), noise.to(**tkwargs)
    kernel_ = kernel.to(**tkwargs)
    with torch.no_grad():
        state = DTCState.build(kernel_, X_[:7], X_, y_, noise_)
        Z_ = state.embed(kernel_, X_)
    mean_w, chol_w = state.whitened_q()
    assert_close(mean_w, torch.linalg.solve(V, Z.mT @ y))
    assert_close(chol_w @ chol_w.mT, noise * torch.linalg.inv(V))
    assert torch.equal(chol_w, chol_w.tril())
    mean_s, chol_s = titsias_q_from_statistics(Z_.mT @ Z_, Z_.mT @ y_, noise_)
    assert_close(mean_s, mean_w)
    assert_close(chol_s, chol_w)
