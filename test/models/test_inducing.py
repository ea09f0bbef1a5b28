r"""Conditional-variance selection against dense float64 recomputations of the
conditional variances and the exact pivot distribution; float32 and float64 on every
device."""

import itertools

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.models import inducing
from botorch_sketch.models.inducing import select_inducing_indices

from ..gp_helpers import DTYPE, ShapeRecordingRBF, rbf_kernel, seeded


def _kernel(lengthscale=0.3, dtype=DTYPE, device=None):
    return rbf_kernel(lengthscale, 2.0, dtype, device)


def _dense_greedy(X, kernel, m, quality=None):
    r"""Reference: recompute every conditional variance from the dense kernel matrix."""
    with torch.no_grad():
        K = kernel(X).to_dense()
    chosen = []
    for _ in range(m):
        if chosen:
            K_s = K[chosen][:, chosen]
            K_xs = K[:, chosen]
            residual = (
                K.diagonal() - (K_xs @ torch.linalg.solve(K_s, K_xs.T)).diagonal()
            )
        else:
            residual = K.diagonal().clone()
        score = residual if quality is None else residual * quality**2
        score[chosen] = -1.0
        chosen.append(int(score.argmax()))
    return chosen


def test_greedy_matches_dense_recomputation(tkwargs):
    X = torch.rand(60, 3, dtype=DTYPE, generator=seeded(0))
    index = select_inducing_indices(X.to(**tkwargs), _kernel(**tkwargs), 12)
    assert index.dtype == torch.long and index.device.type == tkwargs["device"].type
    assert index.tolist() == _dense_greedy(X, _kernel(), 12)


def test_quality_weighted_greedy_matches_dense_recomputation(tkwargs):
    g = seeded(10)
    X = torch.rand(60, 3, dtype=DTYPE, generator=g)
    quality = torch.rand(60, dtype=DTYPE, generator=g)
    quality[:20] = 0.0  # never eligible
    X_, quality_, kernel = X.to(**tkwargs), quality.to(**tkwargs), _kernel(**tkwargs)
    index = select_inducing_indices(X_, kernel, 12, quality=quality_)
    assert index.tolist() == _dense_greedy(X, _kernel(), 12, quality)
    assert index.min() >= 20
    # All positive-quality points spanned or chosen: at most 40 pivots.
    assert len(select_inducing_indices(X_, kernel, 60, quality=quality_)) == 40


def test_fewer_distinct_points_than_m_returns_each_once(tkwargs):
    g = seeded(1)
    distinct = torch.rand(15, 2, dtype=DTYPE, generator=g)
    X = torch.cat([distinct, distinct[:10], distinct[3:8]])
    X = X[torch.randperm(X.shape[0], generator=g)].to(**tkwargs)
    for randomized in (False, True):
        index = select_inducing_indices(
            X, _kernel(0.2, **tkwargs), 25, randomized=randomized, generator=g
        )
        assert len(index) == 15
        assert len(torch.unique(X[index], dim=0)) == 15


def test_selection_returns_distinct_points_when_many_available(tkwargs):
    X = torch.rand(200, 2, dtype=DTYPE, generator=seeded(2)).to(**tkwargs)
    for randomized in (False, True):
        index = select_inducing_indices(
            X, _kernel(**tkwargs), 30, randomized=randomized, generator=seeded(3)
        )
        assert len(index) == 30
        assert len(set(index.tolist())) == 30


def test_builds_an_n_by_n_kernel_block_only_for_few_points(monkeypatch):
    monkeypatch.setattr(inducing, "FULL_KERNEL_ROWS", 100)
    X = torch.rand(500, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(3))
    selections = []
    for n in (500, 100):  # past the limit, then at it
        base = ShapeRecordingRBF()
        kernel = ScaleKernel(base).to(DTYPE)
        selections.append(select_inducing_indices(X[:n], kernel, 20))
        largest = max(rows * cols for rows, cols in base.blocks)
        if n == 500:  # one column (or the diagonal) at a time
            assert largest == n and len(base.blocks) == 21
        else:  # the diagonal, then the whole matrix once
            assert largest == n * n and len(base.blocks) == 2
    # the same pivots either way, where the first 100 points decide
    monkeypatch.setattr(inducing, "FULL_KERNEL_ROWS", 0)
    kernel = ScaleKernel(ShapeRecordingRBF()).to(DTYPE)
    by_columns = select_inducing_indices(X[:100], kernel, 20)
    assert torch.equal(by_columns, selections[1])


def test_randomized_pivot_distribution_is_residual_proportional():
    # With m = 2: P(i, j) = k_ii / tr(K) * r_j(i) / sum_l r_l(i), r(i) = residual
    # variances after pivot i. Compare with 2000 seeded draws.
    X = torch.tensor([[0.0], [0.1], [0.5], [0.55], [1.0]], dtype=DTYPE)
    kernel = _kernel(0.3)
    with torch.no_grad():
        K = kernel(X).to_dense()
    expected = {}
    for i, j in itertools.permutations(range(5), 2):
        residual = K.diagonal() - K[:, i] ** 2 / K[i, i]
        residual[i] = 0.0
        expected[(i, j)] = float(
            K[i, i] / K.diagonal().sum() * residual[j] / residual.sum()
        )
    g = torch.Generator().manual_seed(4)
    draws = 2000
    counts = dict.fromkeys(expected, 0)
    for _ in range(draws):
        i, j = select_inducing_indices(
            X, kernel, 2, randomized=True, generator=g
        ).tolist()
        counts[(i, j)] += 1
    for pair, probability in expected.items():
        sd = (probability * (1 - probability) / draws) ** 0.5
        assert abs(counts[pair] / draws - probability) < 4 * sd + 1e-3, pair


def test_randomized_selection_is_reproducible_with_a_cpu_generator(tkwargs):
    # the draws come from the (CPU) generator whatever the data's device
    X = torch.rand(100, 2, dtype=DTYPE, generator=seeded(5))
    runs = [
        select_inducing_indices(
            X_, _kernel(**kw), 10, randomized=True, generator=seeded(s)
        ).cpu()
        for X_, kw, s in (
            (X.to(**tkwargs), tkwargs, 7),
            (X.to(**tkwargs), tkwargs, 7),
            (X.to(**tkwargs), tkwargs, 8),
            (X.to(tkwargs["dtype"]), {"dtype": tkwargs["dtype"]}, 7),
        )
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[3])
    assert not torch.equal(runs[0], runs[2])


def test_bad_inputs_raise():
    X = torch.rand(10, 2, dtype=DTYPE)
    kernel = _kernel()
    bad_X = X.clone()
    bad_X[0, 0] = float("nan")
    with pytest.raises(ValueError, match="X"):
        select_inducing_indices(bad_X, kernel, 3)
    with pytest.raises(ValueError, match="X"):
        select_inducing_indices(X[0], kernel, 3)
    with pytest.raises(ValueError, match="X"):
        select_inducing_indices(X[:0], kernel, 3)
    with pytest.raises(ValueError, match="num_inducing"):
        select_inducing_indices(X, kernel, 0)
    with pytest.raises(TypeError, match="num_inducing"):
        select_inducing_indices(X, kernel, 2.0)
    with pytest.raises(TypeError, match="kernel"):
        select_inducing_indices(X, lambda a: a, 2)
    with pytest.raises(ValueError, match="batch"):
        select_inducing_indices(X, RBFKernel(batch_shape=torch.Size([2])).to(DTYPE), 2)
    with pytest.raises(ValueError, match="rel_tol"):
        select_inducing_indices(X, kernel, 2, rel_tol=1.5)
    with pytest.raises(TypeError, match="generator"):
        select_inducing_indices(X, kernel, 2, randomized=True, generator=3)
    with pytest.raises(ValueError, match="quality"):
        select_inducing_indices(X, kernel, 2, quality=-torch.ones(10, dtype=DTYPE))
    with pytest.raises(ValueError, match="quality"):
        select_inducing_indices(X, kernel, 2, quality=torch.ones(9, dtype=DTYPE))


def test_flags_and_tolerances_are_checked():
    # Issue 14 items 9 and 11: truthy non-bools and non-numbers raise, naming them.
    X = torch.rand(10, 2, dtype=DTYPE)
    with pytest.raises(TypeError, match="`randomized`"):
        select_inducing_indices(X, _kernel(), 3, randomized="yes")
    with pytest.raises(TypeError, match="`rel_tol`"):
        select_inducing_indices(X, _kernel(), 3, rel_tol="small")
    with pytest.raises(TypeError, match="`X`"):
        select_inducing_indices(X.half(), _kernel(), 3)
    far = X.clone()
    far[0] = 1e300
    with pytest.raises(ValueError, match="`X`"):
        select_inducing_indices(far, _kernel(), 3)


def test_quality_that_overflows_is_rejected():
    X = torch.rand(10, 2, dtype=DTYPE)
    quality = torch.ones(10, dtype=DTYPE)
    quality[3] = 1e300  # its square overflows the draw probabilities
    with pytest.raises(ValueError, match="`quality`"):
        select_inducing_indices(X, _kernel(), 3, randomized=True, quality=quality)
