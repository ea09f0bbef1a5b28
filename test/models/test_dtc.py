r"""The DTC core against dense recomputations of the DTC / Titsias formulas."""

import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.models.dtc import (
    DTCState,
    collapsed_log_likelihood,
    dictionary_cholesky,
    distinct_rows,
    titsias_q_from_statistics,
)


def test_state_matches_dense_formulas_and_incremental_update():
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(40, generator=gen, dtype=torch.float64)
    S = X[:12]
    kernel = ScaleKernel(RBFKernel()).double()
    noise = torch.tensor(0.2, dtype=torch.float64)
    with torch.no_grad():
        state = DTCState.build(kernel, S, X[:30], y[:30], noise).updated(
            kernel, X[30:], y[30:]
        )
        # dense DTC: Q = K_XS K_SS^{-1} K_SX
        K_SS = kernel(S).to_dense()
        Z = kernel(X, S).to_dense() @ torch.linalg.cholesky(K_SS).inverse().mT
        V = Z.mT @ Z + noise * torch.eye(12, dtype=torch.float64)
        T = torch.rand(7, 3, generator=gen, dtype=torch.float64)
        z = kernel(T, S).to_dense() @ torch.linalg.cholesky(K_SS).inverse().mT
        mean = z @ torch.linalg.solve(V, Z.mT @ y)
        cov = kernel(T).to_dense() - z @ z.mT + noise * z @ torch.linalg.solve(V, z.mT)
        got_mean, got_cov = state.mean_and_covariance(kernel, T)
        torch.testing.assert_close(got_mean, mean, atol=1e-6, rtol=0)
        torch.testing.assert_close(got_cov, cov, atol=1e-6, rtol=0)
        for rows_per_chunk in (3, 7, 2048):  # uneven, exact and single chunks
            m2, v2 = state.mean_and_variance(kernel, T, rows_per_chunk=rows_per_chunk)
            torch.testing.assert_close(m2, mean, atol=1e-6, rtol=0)
            torch.testing.assert_close(v2, cov.diagonal(), atol=1e-6, rtol=0)


def test_distinct_rows_counts_and_sums():
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.tensor([1.0, 2.0, 4.0])
    U, counts, sums = distinct_rows(X, y)
    assert U.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert counts.tolist() == [1.0, 2.0]
    assert sums.tolist() == [2.0, 5.0]


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


def test_collapsed_bound_with_repeated_rows_matches_the_dense_formula():
    gen = torch.Generator().manual_seed(2)
    U = torch.rand(25, 2, generator=gen, dtype=torch.float64)
    X = torch.cat([U, U[:10], U[:3]])  # repeated rows are merged with their counts
    y = torch.randn(38, generator=gen, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel()).double()
    kernel.base_kernel.lengthscale = 0.4
    noise = torch.tensor(0.05, dtype=torch.float64)
    with torch.no_grad():
        bound = collapsed_log_likelihood(kernel, U[:8], X, y, noise)
    expected = _titsias_bound_by_hand(kernel, U[:8], X, y, noise)
    torch.testing.assert_close(bound, expected, rtol=0, atol=1e-10)
    # float32 data with a float64 factor: computed in float64, returned in float32
    kernel32 = ScaleKernel(RBFKernel())
    kernel32.base_kernel.lengthscale = 0.4
    X32, y32 = X.float(), y.float()
    with torch.no_grad():
        chol = dictionary_cholesky(kernel32, X32[:8], dtype=torch.float64)
        bound32 = collapsed_log_likelihood(
            kernel32, X32[:8], X32, y32, noise.float(), chol_dictionary=chol
        )
    assert bound32.dtype == torch.float32
    expected32 = _titsias_bound_by_hand(
        kernel, X32[:8].double(), X32.double(), y32.double(), noise
    )
    torch.testing.assert_close(bound32.double(), expected32, rtol=0, atol=1e-5)


def test_whitened_q_is_the_titsias_optimum_from_state_or_statistics():
    # q(v) = N(w, lambda V^{-1}): the lower factor C_w, and the same q(v) from the
    # sufficient statistics Z^T Z and Z^T y alone
    gen = torch.Generator().manual_seed(3)
    X = torch.rand(30, 2, generator=gen, dtype=torch.float64)
    y = torch.randn(30, generator=gen, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel()).double()
    noise = torch.tensor(0.1, dtype=torch.float64)
    with torch.no_grad():
        state = DTCState.build(kernel, X[:7], X, y, noise)
        Z = state.embed(kernel, X)
    mean_w, chol_w = state.whitened_q()
    V = Z.mT @ Z + noise * torch.eye(7, dtype=torch.float64)
    torch.testing.assert_close(mean_w, torch.linalg.solve(V, Z.mT @ y))
    torch.testing.assert_close(chol_w @ chol_w.mT, noise * torch.linalg.inv(V))
    assert torch.equal(chol_w, chol_w.tril())
    mean_s, chol_s = titsias_q_from_statistics(Z.mT @ Z, Z.mT @ y, noise)
    torch.testing.assert_close(mean_s, mean_w)
    torch.testing.assert_close(chol_s, chol_w)
