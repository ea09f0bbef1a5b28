import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.means import ZeroMean

from botorch_sketch.generation import threds_gp
from botorch_sketch.generation.threds import default_threds_kernel
from botorch_sketch.generation.threds_gp import IncrementalGridGP

NOISE = 0.01


def reference_posterior(grid, indices, y, kernel):
    train_X = grid[indices]
    train_Y = y.unsqueeze(-1)
    model = SingleTaskGP(
        train_X,
        train_Y,
        train_Yvar=torch.full_like(train_Y, NOISE),
        covar_module=kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    )
    with torch.no_grad():
        posterior = model.posterior(grid)
    return posterior.mean.squeeze(-1), posterior.variance.squeeze(-1)


@pytest.mark.parametrize("precompute", [True, False])
def test_incremental_posterior_matches_single_task_gp(precompute, monkeypatch):
    if not precompute:
        monkeypatch.setattr(threds_gp, "MAX_PRECOMPUTED_ENTRIES", 0)
    gen = torch.Generator().manual_seed(0)
    grid = torch.rand(60, 2, generator=gen, dtype=torch.float64)
    kernel = default_threds_kernel(0.2, 1.3)
    # 40 observations (the buffer starts at 16 rows and grows), with repeats.
    indices = torch.randint(60, (40,), generator=gen)
    indices[5] = indices[4]
    y = torch.randn(40, generator=gen, dtype=torch.float64)
    gp = IncrementalGridGP(grid, kernel, NOISE)
    assert (gp._gram is not None) == precompute
    for n, (index, value) in enumerate(
        zip(indices.tolist(), y.tolist(), strict=True), start=1
    ):
        gp.observe(index, value)
        if n in (1, 2, 17, 40):
            mean, variance = gp.posterior()
            ref_mean, ref_variance = reference_posterior(
                grid, indices[:n], y[:n], kernel
            )
            torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-8)
            torch.testing.assert_close(variance, ref_variance, rtol=1e-6, atol=1e-8)
    assert gp.num_observations == 40


def test_prior_before_any_observation():
    grid = torch.rand(10, 3, dtype=torch.float64)
    gp = IncrementalGridGP(grid, default_threds_kernel(0.2, 2.0), NOISE)
    mean, variance = gp.posterior()
    assert torch.equal(mean, torch.zeros(10, dtype=torch.float64))
    torch.testing.assert_close(variance, torch.full((10,), 2.0, dtype=torch.float64))


def test_float32_runs():
    grid = torch.rand(50, 2)
    gp = IncrementalGridGP(grid, default_threds_kernel(dtype=torch.float32), NOISE)
    for index in range(30):
        gp.observe(index % 7, 0.5)
    mean, variance = gp.posterior()
    assert mean.dtype == torch.float32 and torch.isfinite(mean).all()
    assert (variance >= 0).all()
