import math
from functools import partial

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.means import ZeroMean

from benchmarks.methods import METHODS
from benchmarks.policies.threds import (
    PAPER_SETTINGS,
    IncrementalIGPUCBGrid,
    build_gp_threds,
    exact_posterior,
    resolve_settings,
)
from benchmarks.problems import Problem
from botorch_sketch.generation.threds import GPThreDS, default_threds_kernel
from botorch_sketch.generation.threds_local import first_argmax, threds_radius

DTYPE = torch.float64


def rosenbrock(X):
    z = 0.8 + 0.3 * X
    return 10 - 100 * (z[..., 1] - z[..., 0] ** 2) ** 2 - (1 - z[..., 0]) ** 2


def make_problem(name="threds_rosenbrock", bounds=None, hyperparameters=None):
    if bounds is None:
        bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    return Problem(
        name=name,
        bounds=bounds,
        objective=rosenbrock,
        noise_std=0.1,
        optimum=10.0,
        hyperparameters=hyperparameters
        or {"lengthscale": 0.2, "outputscale": 1.0, "noise": 0.01},
    )


def drive(build, problem, steps, seed=0):
    r"""Run ``build(problem, steps, generator)``; the points and the built object."""
    noise = torch.Generator().manual_seed(seed)
    policy = build(problem, steps, torch.Generator().manual_seed(seed))
    X = []
    for _ in range(steps):
        x = policy.ask(steps - len(X))
        assert x.shape == (1, problem.dim)
        y = problem.objective(x) + 0.1 * torch.randn(1, generator=noise, dtype=DTYPE)
        policy.tell(x, y)
        X.append(x)
    return torch.cat(X), policy


def test_settings_precedence():
    settings = resolve_settings(make_problem(), rkhs_bound=3.0, grid_points=None)
    assert settings["rkhs_bound"] == 3.0  # given beats the paper's 2.0
    assert settings["grid_points"] == 21 and settings["f_range"] == (3.0, 12.0)
    assert settings["noise_std"] == 0.1  # the problem's noise_std
    assert "f_range" not in resolve_settings(make_problem(name="other"))


def test_kernel_hyperparameters_come_from_the_problem():
    problem = make_problem(hyperparameters={"lengthscale": 0.3})
    threds = build_gp_threds(problem, 10, torch.Generator(), outputscale=2.0)
    kernel = threds.covar_module
    assert float(kernel.base_kernel.lengthscale) == pytest.approx(0.3)
    assert float(kernel.outputscale) == pytest.approx(2.0)
    assert threds.options.noise == pytest.approx(0.01)  # noise_std ** 2
    igp = IncrementalIGPUCBGrid(problem, 10, torch.Generator(), noise=0.02)
    assert igp.noise == 0.02
    assert float(igp.covar_module.base_kernel.lengthscale) == pytest.approx(0.3)


def test_gp_threds_policy_matches_the_generator():
    problem = make_problem()
    X, policy = drive(METHODS["gp-threds"], problem, 60)
    # Same queries as the generator with the paper's Rosenbrock settings.
    noise = torch.Generator().manual_seed(0)
    gen = GPThreDS(problem.bounds, f_range=(3.0, 12.0), rkhs_bound=2.0, grid_points=21)

    def f(x):
        return rosenbrock(x) + 0.1 * torch.randn(1, generator=noise, dtype=DTYPE)

    X_ref, _ = gen.run(f, 60)
    assert torch.equal(X, X_ref)
    assert METHODS["gp-threds"].box and not METHODS["gp-threds"].finite
    diagnostics = policy.diagnostics()
    assert (
        diagnostics["epoch"] == gen.epoch and diagnostics["threshold"] == gen.threshold
    )


def test_gp_threds_policy_options_and_errors():
    build = partial(
        build_gp_threds,
        mode="rwt",
        f_range=(0.0, 20.0),
        cap=10,
        max_depth=2,
        reuse_observations=True,
    )
    threds = build(make_problem(name="other"), 20, torch.Generator())
    options = threds.options
    assert options.mode == "rwt" and options.reuse_observations
    assert options.cap == 10 and options.max_depth == 2
    assert threds.interval == (0.0, 20.0) and options.rkhs_bound == 0.5
    _, threds = drive(build, make_problem(name="other"), 20)
    assert threds.num_queries == 20
    with pytest.raises(ValueError, match="f_range"):
        build_gp_threds(make_problem(name="other"), 10, torch.Generator())
    with pytest.raises(ValueError, match="mode"):
        build_gp_threds(make_problem(), 10, torch.Generator(), mode="tree")
    finite = make_problem()
    finite.arms = torch.rand(5, 2, dtype=DTYPE)
    with pytest.raises(ValueError, match="finite"):
        build_gp_threds(finite, 10, torch.Generator())


def test_exact_posterior_matches_single_task_gp():
    gen = torch.Generator().manual_seed(1)
    X = torch.rand(30, 2, generator=gen, dtype=DTYPE)
    y = torch.randn(30, generator=gen, dtype=DTYPE)
    grid = torch.rand(50, 2, generator=gen, dtype=DTYPE)
    kernel = default_threds_kernel(0.2, 1.5)
    mean, variance = exact_posterior(X, y, grid, kernel, 0.01)
    model = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        train_Yvar=torch.full((30, 1), 0.01, dtype=DTYPE),
        covar_module=kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    )
    with torch.no_grad():
        posterior = model.posterior(grid)
    torch.testing.assert_close(mean, posterior.mean.squeeze(-1), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(
        variance, posterior.variance.squeeze(-1), rtol=1e-6, atol=1e-8
    )


def test_igp_ucb_grid_steps_by_brute_force():
    bounds = torch.tensor([[-1.0, 0.0], [1.0, 3.0]], dtype=DTYPE)
    problem = make_problem(name="other", bounds=bounds)
    # the grid stops growing at t = 2: later steps use the incremental posterior
    build = partial(IncrementalIGPUCBGrid, grid_start=4, grid_max=6, rkhs_bound=0.5)
    X, policy = drive(build, problem, 5, seed=3)
    unit = (X - bounds[0]) / (bounds[1] - bounds[0])
    # The first query lies on the 4 x 4 grid, drawn with the runner's generator.
    first = torch.randint(4, (2,), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(unit[0], first.to(DTYPE) / 3)
    # Later queries: argmax of the UCB over the min(4 + t, 6)^2 grid, by brute force.
    kernel = default_threds_kernel()
    noise = torch.Generator().manual_seed(3)
    Y = problem.objective(X) + 0.1 * torch.randn(5, generator=noise, dtype=DTYPE)
    for t in range(1, 5):
        n = min(4 + t, 6)
        axis = torch.linspace(0, 1, n, dtype=DTYPE)
        grid = torch.cartesian_prod(axis, axis)
        radius = threds_radius(t, 0.5, 0.1, 1e-3)
        best, best_ucb = None, -math.inf
        for point in grid:  # one exact posterior per point, from scratch
            mean, variance = exact_posterior(
                unit[:t], Y[:t], point.unsqueeze(0), kernel, 0.01
            )
            ucb = float(mean + radius * variance.sqrt())
            if ucb > best_ucb:
                best, best_ucb = point, ucb
        torch.testing.assert_close(unit[t], best)
    assert policy.diagnostics() == {"grid_points": 36}


def test_igp_ucb_grid_paper_settings_and_seed():
    problem = make_problem()
    first, policy = drive(IncrementalIGPUCBGrid, problem, 3, seed=7)
    assert policy.grid_max == PAPER_SETTINGS["threds_rosenbrock"]["grid_max"]
    assert policy.rkhs_bound == 2.0 and policy.diagnostics() == {"grid_points": 22**2}
    assert torch.equal(first, drive(IncrementalIGPUCBGrid, problem, 3, seed=7)[0])
    with pytest.raises(ValueError, match="delta"):
        IncrementalIGPUCBGrid(problem, 3, torch.Generator(), delta=0.0)
    with pytest.raises(ValueError, match="grid_start"):
        IncrementalIGPUCBGrid(problem, 3, torch.Generator(), grid_start=1)


def test_incremental_igp_ucb_equals_the_refitted_one():
    # The paper's Rosenbrock settings: the grid grows from 20 to 50 points per
    # dimension over the first 30 steps, then the incremental posterior takes over.
    bounds = torch.tensor([[-1.0, 0.0], [1.0, 3.0]], dtype=DTYPE)
    problem = make_problem(bounds=bounds)
    X, incremental = drive(METHODS["igp-ucb-incremental"], problem, 45, seed=5)
    assert isinstance(incremental, IncrementalIGPUCBGrid)
    assert incremental.diagnostics() == {"grid_points": 50**2}
    unit = (X - bounds[0]) / (bounds[1] - bounds[0])
    noise = torch.Generator().manual_seed(5)
    draws = [torch.randn(1, generator=noise, dtype=DTYPE) for _ in range(45)]
    Y = problem.objective(X) + 0.1 * torch.cat(draws)
    # Every query is the one of the paper's loop, refitted from scratch each step.
    kernel = incremental.covar_module
    for t in range(1, 45):
        axis = torch.linspace(0, 1, min(20 + t, 50), dtype=DTYPE)
        grid = torch.cartesian_prod(axis, axis)
        mean, variance = exact_posterior(unit[:t], Y[:t], grid, kernel, 0.01)
        radius = threds_radius(t, 2.0, 0.1, 1e-3)
        torch.testing.assert_close(
            unit[t], grid[first_argmax(mean + radius * variance.sqrt())]
        )
    # Its posterior on the final grid is the exact one, from scratch.
    mean, variance = exact_posterior(unit, Y, grid, incremental.covar_module, 0.01)
    torch.testing.assert_close(incremental._gp.mean[:2500], mean, rtol=0, atol=1e-9)
    torch.testing.assert_close(
        incremental._gp.variance[:2500], variance, rtol=0, atol=1e-9
    )


def test_incremental_igp_ucb_rejects_another_point():
    problem = make_problem()
    policy = IncrementalIGPUCBGrid(
        problem, 10, torch.Generator().manual_seed(0), grid_start=4, grid_max=5
    )
    for _ in range(3):
        x = policy.ask()
        policy.tell(x, problem.objective(x))
    x = policy.ask()
    with pytest.raises(ValueError, match="chosen"):
        policy.tell(x + 0.01, problem.objective(x))
    policy.tell(x, problem.objective(x))  # the rejected call changed nothing
    assert policy.num_observations == policy._gp.num_observations == 4
