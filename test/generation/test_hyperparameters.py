r"""Learned hyperparameters: the fit on the collapsed bound against BoTorch's exact
GP fit (the dictionary holds every point), the reward statistics, the unit cube and
the refit schedule."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.utils.gpytorch_modules import (
    get_gaussian_likelihood_with_lognormal_prior,
)
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.generation.hyperparameters import (
    INITIAL_LEARNED_NOISE,
    TARGET_GRID,
    RefitSchedule,
    fit_dtc_hyperparameters,
    learnable_covar_module,
    restart_due,
    reward_statistics,
    unit_cube,
    units_free,
)
from botorch_sketch.models.inducing import select_inducing_indices

DTYPE = torch.float64


def test_full_dictionary_fit_equals_the_exact_gp_map_fit():
    # with every point in the dictionary the collapsed bound is the exact marginal
    # likelihood: the MAP hyperparameters are SingleTaskGP's with the same priors
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=generator, dtype=DTYPE)
    y = torch.sin(5 * X[:, 0]) + X[:, 1] ** 2
    y = y + 0.05 * torch.randn(40, generator=generator, dtype=DTYPE)
    y = (y - y.mean()) / y.std()
    start = learnable_covar_module(3).to(DTYPE)
    kernel, noise = fit_dtc_hyperparameters(start, INITIAL_LEARNED_NOISE, X, y, X)
    likelihood = get_gaussian_likelihood_with_lognormal_prior().to(DTYPE)
    likelihood.noise = INITIAL_LEARNED_NOISE
    exact = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        covar_module=learnable_covar_module(3).to(DTYPE),
        likelihood=likelihood,
        outcome_transform=None,
    )
    mll = ExactMarginalLogLikelihood(exact.likelihood, exact)
    fit_gpytorch_mll(mll)

    def exact_objective() -> float:  # MAP objective of SingleTaskGP, per point
        exact.train()
        with torch.no_grad():
            return float(mll(exact(X), y))

    optimum = exact_objective()
    exact.covar_module.load_state_dict(kernel.state_dict())
    exact.likelihood.noise = noise
    # the same optimum of the same objective, to the optimizers' tolerances (2e-5
    # per observation here; the flattest lengthscale differs by about 1%)
    assert exact_objective() == pytest.approx(optimum, abs=1e-4)
    # the start is untouched and the fitted kernel holds no gradient
    assert float(start.outputscale) == pytest.approx(1.0)
    assert not any(p.requires_grad for p in kernel.parameters())


def test_an_iteration_cap_stops_the_fit_short_of_the_exact_optimum():
    # the exact GP's MAP objective (every point inducing) is at most the converged
    # fit's after a capped fit, which still moves from the start
    generator = torch.Generator().manual_seed(3)
    X = torch.rand(40, 3, generator=generator, dtype=DTYPE)
    y = torch.sin(5 * X[:, 0]) + X[:, 1] ** 2
    y = (y - y.mean()) / y.std()
    start = learnable_covar_module(3).to(DTYPE)
    exact = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        covar_module=learnable_covar_module(3).to(DTYPE),
        likelihood=get_gaussian_likelihood_with_lognormal_prior().to(DTYPE),
        outcome_transform=None,
    )
    mll = ExactMarginalLogLikelihood(exact.likelihood, exact)

    def objective(fitted) -> float:
        kernel, noise = fitted
        exact.covar_module.load_state_dict(kernel.state_dict())
        exact.likelihood.noise = max(noise, 1e-4)  # BoTorch's floor
        exact.train()
        with torch.no_grad():
            return float(mll(exact(X), y))

    converged = fit_dtc_hyperparameters(start, INITIAL_LEARNED_NOISE, X, y, X)
    capped = fit_dtc_hyperparameters(
        start, INITIAL_LEARNED_NOISE, X, y, X, max_iterations=2
    )
    moved = capped[0].base_kernel.lengthscale != start.base_kernel.lengthscale
    assert bool(moved.any())
    assert objective(capped) < objective(converged) - 1e-3
    for bad, error in ((0, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="max_iterations"):
            fit_dtc_hyperparameters(start, 0.1, X, y, X, max_iterations=bad)


@pytest.mark.parametrize("closed_form", [True, False])
def test_a_restart_keeps_the_fit_with_the_larger_exact_map_objective(closed_form):
    # a warm start in the flat basin (long lengthscales, large lambda) stays
    # there in a capped fit; the restart at the default start leaves it. The
    # oracle: SingleTaskGP's MAP objective (the dictionary holds every point)
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=generator, dtype=DTYPE)
    y = torch.sin(6 * X[:, 0]) + 0.05 * torch.randn(
        40, generator=generator, dtype=DTYPE
    )
    y = (y - y.mean()) / y.std()

    def make_kernel():
        if closed_form:
            return learnable_covar_module(3).to(DTYPE)
        return ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=3)).to(DTYPE)

    def exact_objective(fit):
        likelihood = get_gaussian_likelihood_with_lognormal_prior().to(DTYPE)
        likelihood.noise = fit[1]
        model = SingleTaskGP(
            X,
            y.unsqueeze(-1),
            covar_module=fit[0],
            likelihood=likelihood,
            outcome_transform=None,
        )
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        model.train()
        with torch.no_grad():
            return float(mll(model(X), y))

    flat, default = make_kernel(), make_kernel()
    flat.base_kernel.lengthscale = 20.0
    starts = {"flat": (flat, 0.5), "default": (default, INITIAL_LEARNED_NOISE)}
    alone = {
        name: fit_dtc_hyperparameters(*start, X, y, X, max_iterations=5)
        for name, start in starts.items()
    }
    assert exact_objective(alone["default"]) > exact_objective(alone["flat"]) + 1.0
    for first, second in (("flat", "default"), ("default", "flat")):
        kernel, noise = fit_dtc_hyperparameters(
            *starts[first], X, y, X, max_iterations=5, restart=starts[second]
        )
        assert noise == alone["default"][1]
        for name, value in kernel.state_dict().items():
            assert torch.equal(value, alone["default"][0].state_dict()[name])


def test_a_restart_is_due_once_the_observations_pass_a_power_of_two():
    powers = [2**k for k in range(12)]
    assert not restart_due(None, 10)  # the first fit starts at the default anyway
    for last in range(2, 300):
        for n in range(last + 1, 700, 7):
            passed = any(last < p <= n for p in powers)
            assert restart_due(last, n) == passed


def test_fixed_noise_stays_fixed():
    X = torch.rand(20, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    y = torch.cos(4 * X).sum(-1)
    kernel, noise = fit_dtc_hyperparameters(
        learnable_covar_module(2).to(DTYPE),
        0.3,
        X,
        (y - y.mean()) / y.std(),
        X[:8],
        learn_noise=False,
    )
    assert noise == pytest.approx(0.3)
    assert float(kernel.outputscale) != 1.0


def test_a_large_dictionary_is_cut_to_its_greedy_pivots():
    # past max_inducing points the fit is the fit on the dictionary's greedy
    # conditional-variance pivots under the starting kernel, computed directly
    generator = torch.Generator().manual_seed(2)
    X = torch.rand(60, 2, generator=generator, dtype=DTYPE)
    y = torch.sin(6 * X[:, 0]) * X[:, 1]
    y = (y - y.mean()) / y.std()
    start = learnable_covar_module(2).to(DTYPE)
    pivots = X[select_inducing_indices(X, start, 12)]
    assert len(pivots) == 12
    cut = fit_dtc_hyperparameters(start, 0.1, X, y, X, max_inducing=12)
    direct = fit_dtc_hyperparameters(start, 0.1, X, y, pivots, max_inducing=None)
    whole = fit_dtc_hyperparameters(start, 0.1, X, y, X, max_inducing=None)
    assert cut[1] == direct[1] != whole[1]
    assert torch.equal(cut[0].outputscale, direct[0].outputscale)
    assert torch.equal(
        cut[0].base_kernel.lengthscale, direct[0].base_kernel.lengthscale
    )
    for bad, error in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="max_inducing"):
            fit_dtc_hyperparameters(start, 0.1, X, y, X, max_inducing=bad)


def test_reward_statistics():
    rewards = torch.tensor([1.0, 3.0, 8.0], dtype=DTYPE)
    assert reward_statistics(rewards) == pytest.approx(
        (float(rewards.mean()), float(rewards.std()))
    )
    assert reward_statistics(rewards[:1]) == (1.0, 1.0)
    assert reward_statistics(rewards[:0]) == (0.0, 1.0)
    assert reward_statistics(torch.full((4,), 7.0, dtype=DTYPE)) == (7.0, 1.0)


def test_unit_cube():
    points = torch.tensor([[1.0, 5.0, 2.0], [3.0, 5.0, -2.0], [2.0, 5.0, 0.0]])
    cube = unit_cube(points)
    assert torch.equal(cube[:, 0], torch.tensor([0.0, 1.0, 0.5]))
    assert torch.equal(cube[:, 1], torch.zeros(3))
    assert torch.equal(cube[:, 2], torch.tensor([1.0, 0.0, 0.5]))


def _fits(schedule: RefitSchedule, last: int = 60) -> list[int]:
    fits = []
    for n in range(1, last):
        if schedule.due(n):
            schedule.done(n)
            fits.append(n)
    return fits


def test_refit_schedule_is_geometric():
    assert _fits(RefitSchedule(first=10, growth=1.5, early_until=0)) == [
        10,
        15,
        23,
        35,
        53,
    ]
    with pytest.raises(ValueError, match="growth"):
        RefitSchedule(first=10, growth=1.0)
    with pytest.raises(ValueError, match="first"):
        RefitSchedule(first=1, growth=2.0)
    with pytest.raises(ValueError, match="early_growth"):
        RefitSchedule(first=10, growth=1.5, early_growth=1.0)
    with pytest.raises(TypeError, match="early_until"):
        RefitSchedule(first=10, growth=1.5, early_until=2.5)


def test_refit_schedule_refits_sooner_while_observations_are_few():
    # each gap is ceil(g * last) - last, g = min(growth, early_growth) below
    # early_until observations at the last fit, then growth
    fits = _fits(RefitSchedule(10, 1.5, early_growth=1.2, early_until=20))
    expected, last = [10], 10
    while True:
        growth = min(1.5, 1.2) if last < 20 else 1.5
        last = math.ceil(growth * last)
        if last >= 60:
            break
        expected.append(last)
    assert fits == expected == [10, 12, 15, 18, 22, 33, 50]
    # a smaller growth than early_growth is kept in the early phase
    assert _fits(RefitSchedule(10, 1.05, early_growth=1.2, early_until=20), 16) == [
        10,
        11,
        12,
        13,
        14,
        15,
    ]


def _affine_fits(scales_and_offsets):
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(20, 3, generator=gen, dtype=torch.float64)
    rewards = torch.sin(6 * X).sum(-1)
    fits = []
    for scale, offset in scales_and_offsets:
        center, spread = reward_statistics(scale * rewards + offset)
        y = (scale * rewards + offset - center) / spread
        kernel = learnable_covar_module(3).to(torch.float64)
        fits.append(fit_dtc_hyperparameters(kernel, 0.01, X, y, X))
    return fits


def test_fits_in_other_units_are_bit_identical():
    # without the rounding a 1e-16 change of y moves the lengthscales by ~1e-3
    (kernel, noise), *others = _affine_fits([(1.0, 0.0), (1e3, 300.0), (1e-3, -5.0)])
    for other_kernel, other_noise in others:
        assert other_noise == noise
        assert torch.equal(
            other_kernel.base_kernel.lengthscale, kernel.base_kernel.lengthscale
        )
        assert torch.equal(other_kernel.outputscale, kernel.outputscale)


def test_units_free_rounds_to_the_grid():
    y = torch.tensor([0.1, -1.7, 2.0**-30, 3.0], dtype=torch.float64)
    rounded = units_free(y)
    assert torch.equal(units_free(rounded), rounded)
    assert (rounded - y).abs().max() <= TARGET_GRID / 2
    assert torch.equal(rounded / TARGET_GRID, torch.round(rounded / TARGET_GRID))
    assert rounded[2] == 0.0 and rounded[3] == 3.0
