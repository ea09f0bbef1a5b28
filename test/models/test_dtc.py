r"""DTCState against a dense recomputation of the DTC formulas."""

import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.models.dtc import DTCState, distinct_rows


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
