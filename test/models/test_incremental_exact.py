r"""IncrementalExactGP against BoTorch's SingleTaskGP and a dense solve (both in
float64) for float32 and float64 on every device."""

import math
from unittest import mock

import pytest
import torch
from gpytorch.kernels import MaternKernel, ScaleKernel

from botorch_sketch.models import incremental_exact
from botorch_sketch.models.incremental_exact import IncrementalExactGP

from ..gp_helpers import assert_close, zero_mean_gp_posterior

NOISE = 0.01


def _kernel(dtype=torch.float64, device=None):
    kernel = ScaleKernel(MaternKernel(nu=2.5))
    kernel.base_kernel.lengthscale = 0.2
    kernel.outputscale = 1.3
    return kernel.to(dtype=dtype, device=device).requires_grad_(False)


def _exact(points, indices, y):
    r"""Exact posterior of every point (float64 on the CPU)."""
    points, indices, y = points.cpu().double(), indices.cpu(), y.cpu().double()
    return zero_mean_gp_posterior(points[indices], y, NOISE, _kernel(), points)


def _draw(dtype=torch.float64, device=None):
    r"""60 points, 40 observed indices (one repeat) and their rewards, drawn on the
    CPU in float64 and moved to ``dtype`` and ``device``."""
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(60, 2, generator=gen, dtype=torch.float64)
    indices = torch.randint(60, (40,), generator=gen)
    indices[5] = indices[4]  # a repeated observation
    y = torch.randn(40, generator=gen, dtype=torch.float64)
    return (
        points.to(dtype=dtype, device=device),
        indices,
        y.to(dtype=dtype, device=device),
    )


@pytest.fixture
def data(tkwargs):
    return _draw(**tkwargs)


@pytest.mark.parametrize("precompute", [True, False])
def test_observe_matches_single_task_gp(data, precompute, monkeypatch):
    if not precompute:
        monkeypatch.setattr(incremental_exact, "MAX_PRECOMPUTED_ENTRIES", 0)
    points, indices, y = data
    kernel = _kernel(points.dtype, points.device)
    gp = IncrementalExactGP.from_kernel(points, kernel, NOISE)
    assert_close(gp.variance, torch.full((60,), 1.3))
    assert torch.equal(gp.mean, torch.zeros_like(points[:, 0]))
    kernel_calls = 0
    # 40 observations: the buffer starts at 16 rows and doubles twice.
    for n, (index, value) in enumerate(
        zip(indices.tolist(), y.tolist(), strict=True), start=1
    ):
        with mock.patch.object(kernel, "forward", wraps=kernel.forward) as forward:
            gp.observe(index, value)
        kernel_calls += forward.call_count
        if n in (1, 2, 17, 40):
            mean, variance = _exact(points, indices[:n], y[:n])
            assert_close(gp.mean, mean)
            assert_close(gp.variance, variance)
    # Small sets look kernel columns up; otherwise each observation evaluates one.
    assert kernel_calls == (0 if precompute else 40)
    assert gp.num_observations == gp.num_rewarded == 40 and gp.capacity == 64


def test_hallucinated_batch_and_discard(data):
    points, indices, y = data
    kernel = _kernel(points.dtype, points.device)
    gp = IncrementalExactGP.from_kernel(points, kernel, NOISE, capacity=12)
    for s in range(10):
        before = gp.append(int(indices[s]))
    _, variance_9 = _exact(points, indices[:9], y[:9])
    assert_close(torch.tensor(before, dtype=points.dtype), variance_9[indices[9]])
    gp.set_rewards(y[:6])
    assert gp.num_pending == 4
    mean_6, _ = _exact(points, indices[:6], y[:6])
    _, variance_10 = _exact(points, indices[:10], y[:10])
    assert_close(gp.mean, mean_6)
    assert_close(gp.variance, variance_10)
    gp.set_rewards(y[6:8])
    gp.discard_pending()
    assert gp.num_observations == gp.num_rewarded == 8 and gp.num_pending == 0
    mean_8, variance_8 = _exact(points, indices[:8], y[:8])
    assert_close(gp.mean, mean_8)
    assert_close(gp.variance, variance_8)
    # The freed rows are reused.
    gp.observe(int(indices[8]), float(y[8]))
    mean_9, variance_9 = _exact(points, indices[:9], y[:9])
    assert_close(gp.mean, mean_9)
    assert_close(gp.variance, variance_9)


def test_callable_kernel_column_matches_dense_solve(tkwargs):
    r"""The constructor path: a closed-form kernel column, checked by a dense
    float64 solve."""
    gen = torch.Generator().manual_seed(1)
    points = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    K = torch.exp(-0.5 * torch.cdist(points, points).square())
    K_ = K.to(**tkwargs)
    gp = IncrementalExactGP(K_.diagonal().clone(), K_.__getitem__, NOISE, capacity=5)
    indices, y = [3, 17, 3, 29, 0], torch.randn(5, generator=gen, dtype=torch.float64)
    for index, value in zip(indices, y.tolist(), strict=True):
        gp.observe(index, value)
    K_xn = K[:, indices]
    eye = torch.eye(5, dtype=torch.float64)
    solve = torch.linalg.solve(K[indices][:, indices] + NOISE * eye, K_xn.T)
    assert gp.mean.dtype == tkwargs["dtype"] and gp.mean.device == K_.device
    assert_close(gp.mean, solve.T @ y)
    assert_close(gp.variance, K.diagonal() - (K_xn * solve.T).sum(-1))


def test_errors_leave_state_unchanged():
    points, _, _ = _draw()
    gp = IncrementalExactGP.from_kernel(points, _kernel(), NOISE, capacity=2)
    gp.append(3)
    mean, variance = gp.mean.clone(), gp.variance.clone()
    with pytest.raises(ValueError, match="rewards"):
        gp.set_rewards(torch.ones(2, dtype=points.dtype))
    with pytest.raises(ValueError, match="rewards"):
        gp.set_rewards(torch.tensor([math.nan], dtype=points.dtype))
    with pytest.raises(ValueError, match="pending"):
        gp.observe(4, 1.0)
    with pytest.raises(ValueError, match="index"):
        gp.append(60)
    assert gp.num_observations == 1 and gp.num_pending == 1
    assert torch.equal(gp.mean, mean) and torch.equal(gp.variance, variance)
    gp.set_rewards(torch.ones(1, dtype=points.dtype))
    with pytest.raises(ValueError, match="`y`"):
        gp.observe(4, math.inf)
    gp.observe(4, 0.5)
    with pytest.raises(ValueError, match="capacity"):
        gp.append(5)
    assert gp.num_observations == 2
    prior = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="capacity"):
        IncrementalExactGP(prior, prior.new_ones(3).expand, NOISE, capacity=0)
    with pytest.raises(ValueError, match="noise"):
        IncrementalExactGP(prior, prior.new_ones(3).expand, 0.0)
    with pytest.raises(TypeError, match="kernel_column"):
        IncrementalExactGP(prior, None, NOISE)
    with pytest.raises(ValueError, match="prior_variance"):
        IncrementalExactGP(prior.reshape(3, 1), prior.new_ones(3).expand, NOISE)
    with pytest.raises(ValueError, match="points"):
        IncrementalExactGP.from_kernel(points[:, 0], _kernel(), NOISE)
    with pytest.raises(TypeError, match="kernel"):
        IncrementalExactGP.from_kernel(points, lambda a, b: a @ b.T, NOISE)


def test_indices_rewards_and_noise_are_checked():
    # Issue 14 item 9: float or bool indices, non-number rewards, a noise too small
    # to factorize a repeated observation and bad kernel columns raise, naming them.
    points, _, _ = _draw()
    gp = IncrementalExactGP.from_kernel(points, _kernel(), NOISE)
    gp.observe(2, 0.5)
    mean, variance = gp.mean.clone(), gp.variance.clone()
    for index, error in ((1.5, TypeError), (True, TypeError), ("3", TypeError)):
        with pytest.raises(error, match="`index`"):
            gp.append(index)
    with pytest.raises(TypeError, match="`y`"):
        gp.observe(3, "1.0")
    with pytest.raises(TypeError, match="`rewards`"):
        gp.set_rewards(torch.ones(1, dtype=torch.long))
    assert gp.num_observations == 1
    assert torch.equal(gp.mean, mean) and torch.equal(gp.variance, variance)
    gp.observe(torch.tensor(3), torch.tensor(0.25, dtype=points.dtype))
    assert gp.num_observations == 2
    prior = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="`noise`"):
        IncrementalExactGP(prior, prior.new_ones(3).expand, 1e-300)
    with pytest.raises(ValueError, match="`prior_variance`"):
        IncrementalExactGP(-prior, prior.new_ones(3).expand, NOISE)
    wrong = IncrementalExactGP(prior, lambda j: prior.new_ones(4), NOISE)
    with pytest.raises(ValueError, match="`kernel_column`"):
        wrong.append(0)
    assert wrong.num_observations == 0


def test_half_precision_points_are_named():
    points, _, _ = _draw()
    with pytest.raises(TypeError, match="`points`"):
        IncrementalExactGP.from_kernel(points.half(), _kernel(), NOISE)
