r"""CMA-ES on the unit cube: its update against an independent implementation
(the ``cmaes`` package, Optuna's), convergence on a rotated ill-conditioned
quadratic of known optimum, the cube, the stopping rule, resuming, bad input."""

import math

import numpy as np
import pytest
import torch

from botorch_sketch.generation.evolution_strategy import EvolutionStrategy

DTYPE = torch.float64


def rotated_ellipsoid(points: torch.Tensor, optimum: torch.Tensor) -> torch.Tensor:
    r"""``-sum_i 10^{4 i / (d - 1)} (R (x - x*))_i^2`` (maximum 0 at ``x*``)."""
    dim = points.shape[-1]
    rotation = torch.linalg.qr(
        torch.randn(dim, dim, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    )[0]
    scales = 10.0 ** (4 * torch.arange(dim, dtype=DTYPE) / (dim - 1))
    return -((points - optimum) @ rotation.T).square() @ scales


@pytest.mark.parametrize("dim, population", [(3, None), (6, None), (4, 20)])
def test_each_update_is_the_one_of_an_independent_implementation(dim, population):
    cmaes = pytest.importorskip("cmaes")
    generator = torch.Generator().manual_seed(dim)
    mean = torch.full((dim,), 0.4, dtype=DTYPE)
    covariance = torch.diag(torch.linspace(0.5, 2.0, dim, dtype=DTYPE))
    ours = EvolutionStrategy(mean, 0.1, covariance, population)
    reference = cmaes.CMA(
        mean=mean.numpy(),
        sigma=0.1,
        cov=covariance.numpy(),
        population_size=population,
        bounds=np.array([[0.0, 1.0]] * dim),
    )
    assert ours.population == reference.population_size
    optimum = torch.full((dim,), 0.6, dtype=DTYPE)
    # to 1e-7: the reference adds 1e-8 to |C^{-1/2} y|^2 in the negative weights
    for _ in range(6):
        points = ours.ask(ours.population, generator)
        rewards = rotated_ellipsoid(points, optimum)
        ours.tell(points, rewards)
        reference.tell(
            [(x, -float(r)) for x, r in zip(points.numpy(), rewards, strict=True)]
        )
        np.testing.assert_allclose(ours.mean.numpy(), reference._mean, rtol=1e-7)
        assert ours.sigma == pytest.approx(reference._sigma, rel=1e-7)
        np.testing.assert_allclose(
            ours.covariance.numpy(), reference._C, rtol=1e-7, atol=1e-9
        )


def test_it_converges_on_a_rotated_ill_conditioned_quadratic():
    generator = torch.Generator().manual_seed(0)
    optimum = torch.tensor([0.3, 0.8, 0.55, 0.1], dtype=DTYPE)
    strategy = EvolutionStrategy(torch.full((4,), 0.5, dtype=DTYPE), 0.2)
    best = -math.inf
    for _ in range(400):
        points = strategy.ask(strategy.population, generator)
        rewards = rotated_ellipsoid(points, optimum)
        best = max(best, float(rewards.max()))
        strategy.tell(points, rewards)
        if strategy.stopped:
            break
    assert best > -1e-10  # the known optimum, 0
    assert torch.allclose(strategy.mean, optimum, atol=1e-5)
    # C learned the quadratic's shape: its condition number is the Hessian's
    eigenvalues = torch.linalg.eigvalsh(strategy.covariance)
    assert 1e3 < float(eigenvalues.max() / eigenvalues.min()) < 1e5


def test_points_stay_in_the_cube_and_draws_follow_the_generator():
    strategy = EvolutionStrategy(torch.tensor([0.0, 1.0], dtype=DTYPE), 0.5)
    points = strategy.ask(500, torch.Generator().manual_seed(1))
    assert points.shape == (500, 2) and points.dtype == DTYPE
    assert bool(((points >= 0) & (points <= 1)).all())
    again = strategy.ask(500, torch.Generator().manual_seed(1))
    assert torch.equal(points, again)


def test_it_stops_once_its_step_is_negligible_or_global():
    strategy = EvolutionStrategy(torch.full((3,), 0.5, dtype=DTYPE), 0.1)
    assert not strategy.stopped
    strategy.sigma = 1e-13
    assert strategy.stopped
    ill = EvolutionStrategy(
        torch.full((2,), 0.5, dtype=DTYPE),
        0.1,
        torch.diag(torch.tensor([1.0, 1e-15], dtype=DTYPE)),
    )
    assert ill.stopped  # condition number above 1e14
    wide = EvolutionStrategy(torch.full((4,), 0.5, dtype=DTYPE), 1.9)
    assert not wide.stopped
    wide.sigma = 2.01  # a step longer than the cube's diagonal, 2
    assert wide.stopped


def test_steps_across_a_nearly_singular_covariance_grow_sigma_by_at_most_e():
    # points clipped onto a face of the cube, where C has all but collapsed, are
    # no draws of N(m, sigma^2 C): their whitened steps reach 1e6 (bbob f5 in
    # 10-D, whose optimum is a corner, overflowed exp in the update of sigma)
    covariance = torch.diag(torch.tensor([1e-12, 1.0, 1.0], dtype=DTYPE))
    strategy = EvolutionStrategy(torch.full((3,), 0.5, dtype=DTYPE), 0.1, covariance)
    assert not strategy.stopped  # condition number 1e12, below 1e14
    lam = strategy.population
    offsets = torch.zeros(lam, 3, dtype=DTYPE)
    offsets[:, 0] = torch.linspace(0.2, 0.0, lam, dtype=DTYPE)  # best first
    rewards = torch.linspace(1.0, 0.0, lam, dtype=DTYPE)
    strategy.tell(strategy.mean + offsets, rewards)
    # the uncapped exponent, from the path: beyond exp's range
    exponent = (
        strategy._c_sigma
        / strategy._d_sigma
        * (float(strategy._path_sigma.norm()) / strategy._chi - 1)
    )
    assert exponent > 709.8
    assert strategy.sigma == pytest.approx(0.1 * math.e, rel=1e-12)
    generator = torch.Generator().manual_seed(4)
    for _ in range(200):  # it goes on, then stops as a global search
        if strategy.stopped:
            break
        points = strategy.ask(lam, generator)
        strategy.tell(points, points.sum(-1))
    assert strategy.stopped and math.isfinite(strategy.sigma)


@pytest.mark.parametrize("scale", [1.0, 1e7])
def test_it_stops_once_its_recent_rewards_are_flat(scale):
    # the tutorial's TolFun, relative: 10 + ceil(30 d / lambda) generations whose
    # rewards span at most 1e-12 of their magnitude (in any units)
    generator = torch.Generator().manual_seed(3)
    strategy = EvolutionStrategy(torch.full((3,), 0.5, dtype=DTYPE), 0.1)
    window = strategy.history_length
    assert window == 10 + math.ceil(30 * 3 / strategy.population)

    def tell(rewards):
        strategy.tell(strategy.ask(strategy.population, generator), rewards)

    varied = scale * torch.linspace(-1.0, 1.0, strategy.population, dtype=DTYPE)
    flat = torch.full((strategy.population,), -3.0 * scale, dtype=DTYPE)
    tell(varied)
    for _ in range(window - 1):
        tell(
            flat + 1e-13 * scale * torch.rand(strategy.population, generator=generator)
        )
        assert not strategy.stopped  # the varied generation is still in the window
    tell(flat)
    assert strategy.stopped and len(strategy.history) == window
    tell(flat + 1e-9 * scale)  # a change of 3e-10 of the rewards' magnitude
    assert not strategy.stopped


def test_a_resumed_strategy_makes_the_same_updates():
    generator = torch.Generator().manual_seed(2)
    optimum = torch.tensor([0.2, 0.7, 0.4], dtype=DTYPE)
    strategy = EvolutionStrategy(torch.full((3,), 0.5, dtype=DTYPE), 0.2)
    for _ in range(3):
        points = strategy.ask(strategy.population, generator)
        strategy.tell(points, rotated_ellipsoid(points, optimum))
    resumed = EvolutionStrategy.from_state_dict(strategy.state_dict())
    state = generator.get_state()
    for copy in (strategy, resumed):
        generator.set_state(state)
        for _ in range(3):
            points = copy.ask(copy.population, generator)
            copy.tell(points, rotated_ellipsoid(points, optimum))
    assert torch.equal(strategy.mean, resumed.mean)
    assert torch.equal(strategy.covariance, resumed.covariance)
    assert strategy.sigma == resumed.sigma and resumed.generation == 6
    assert strategy.history == resumed.history and len(resumed.history) == 6


def test_bad_input_is_refused_naming_the_argument():
    mean = torch.full((2,), 0.5, dtype=DTYPE)
    with pytest.raises(ValueError, match="mean"):
        EvolutionStrategy(torch.tensor([0.5, 1.5], dtype=DTYPE), 0.1)
    with pytest.raises(ValueError, match="mean"):
        EvolutionStrategy(torch.tensor([0.5, math.nan], dtype=DTYPE), 0.1)
    with pytest.raises(ValueError, match="sigma"):
        EvolutionStrategy(mean, 0.0)
    with pytest.raises(ValueError, match="covariance"):
        EvolutionStrategy(mean, 0.1, torch.diag(torch.tensor([1.0, -1.0])))
    with pytest.raises(ValueError, match="covariance"):
        EvolutionStrategy(mean, 0.1, torch.eye(3))
    with pytest.raises(ValueError, match="population"):
        EvolutionStrategy(mean, 0.1, population=1)
    strategy = EvolutionStrategy(mean, 0.1)
    points = strategy.ask(strategy.population, torch.Generator())
    before = strategy.state_dict()
    with pytest.raises(ValueError, match="points"):
        strategy.tell(points[:-1], torch.zeros(strategy.population - 1))
    with pytest.raises(ValueError, match="rewards"):
        strategy.tell(points, torch.zeros(strategy.population + 1))
    with pytest.raises(ValueError, match="rewards"):
        strategy.tell(points, torch.full((strategy.population,), math.nan))
    with pytest.raises(ValueError, match="count"):
        strategy.ask(0, torch.Generator())
    assert torch.equal(strategy.mean, before["mean"]) and strategy.generation == 0
