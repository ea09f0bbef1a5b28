import numpy as np
import pytest
import scipy.stats
import torch

from botorch_sketch.generation.hyperparameters import units_free
from botorch_sketch.generation.reward_warping import (
    POWERS,
    fit_power,
    warped_rewards,
    warped_values,
    yeo_johnson,
)

DTYPE = torch.float64


def _rewards(n, seed, heavy=False):
    values = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    return -torch.exp(2.0 * values) if heavy else values


def _standardized(rewards):
    return units_free((rewards - rewards.mean()) / rewards.std())


@pytest.mark.parametrize("power", [-2.0, -0.7, 0.0, 0.5, 1.0, 1.3, 2.0, 3.5])
def test_yeo_johnson_equals_scipy(power):
    z = torch.linspace(-4.0, 6.0, 41, dtype=DTYPE)
    expected = scipy.stats.yeojohnson(z.numpy(), power)
    torch.testing.assert_close(yeo_johnson(z, power), torch.from_numpy(expected))
    # increasing in z, for every power
    assert bool((yeo_johnson(z, power).diff() > 0).all())


def test_yeo_johnson_takes_many_powers_at_once():
    z = _rewards(30, seed=1)
    powers = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=DTYPE)
    many = yeo_johnson(z, powers)
    assert many.shape == (4, 30)
    for row, power in zip(many, powers.tolist(), strict=True):
        torch.testing.assert_close(row, yeo_johnson(z, power))
    torch.testing.assert_close(many[2], z)  # the identity at 1


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("heavy", [False, True])
def test_fit_power_maximizes_scipys_log_likelihood_over_the_grid(seed, heavy):
    rewards = _rewards(60, seed, heavy)
    z = _standardized(rewards).numpy()
    likelihoods = np.array([scipy.stats.yeojohnson_llf(p, z) for p in POWERS])
    power = fit_power(rewards)
    assert likelihoods[POWERS.index(power)] == pytest.approx(likelihoods.max())
    # scipy's continuous maximizer, where it lies inside the grid
    best = scipy.stats.yeojohnson_normmax(z)
    if POWERS[0] < best < POWERS[-1]:
        assert abs(power - best) <= 0.05


def test_fit_power_spreads_a_long_lower_tail_and_keeps_gaussian_rewards():
    assert abs(fit_power(_rewards(500, seed=3)) - 1.0) <= 0.2
    # a loss spanning orders of magnitude, maximized as its negative
    assert fit_power(_rewards(500, seed=3, heavy=True)) > 2.0
    # an upper tail (a few rewards far above the rest) is never compressed
    assert fit_power(-_rewards(500, seed=3, heavy=True)) == 1.0
    for few in (_rewards(2, seed=0), torch.ones(10, dtype=DTYPE)):
        assert fit_power(few) == 1.0


@pytest.mark.parametrize("power", [1.0, 2.5, -0.5])
def test_warped_rewards_are_bit_identical_in_any_units(power):
    rewards = _rewards(80, seed=5, heavy=True)
    targets = warped_rewards(rewards, power)
    for scale, offset in ((1000.0, 300.0), (1e-3, -5.0), (1e6, 7000.0)):
        other = warped_rewards(scale * rewards + offset, power)
        assert torch.equal(other, targets)
    assert fit_power(1000.0 * rewards + 300.0) == fit_power(rewards)
    # standardized, and in the rewards' order
    assert float(targets.mean()) == pytest.approx(0.0, abs=1e-8)  # rounded
    assert float(targets.std()) == pytest.approx(1.0, abs=1e-8)
    assert torch.equal(targets.argsort(), rewards.argsort())


def test_warped_rewards_at_power_one_are_the_standardized_rewards():
    rewards = _rewards(40, seed=2)
    torch.testing.assert_close(
        warped_rewards(rewards, 1.0), (rewards - rewards.mean()) / rewards.std()
    )
    assert warped_rewards(rewards[:1], 1.7).tolist() == [0.0]


@pytest.mark.parametrize("power", [1.0, 2.35])
def test_warped_values_map_levels_as_the_rewards_are_mapped(power):
    # the rewards themselves land on their targets (up to units_free's grid);
    # levels between two rewards land between their targets (the map increases)
    rewards = _rewards(40, seed=3, heavy=True)
    targets = warped_rewards(rewards, power)
    torch.testing.assert_close(
        warped_values(rewards, power, rewards), targets, rtol=0.0, atol=1e-7
    )
    low, high = rewards.sort().values[[10, 11]]
    level = warped_values(rewards, power, ((low + high) / 2).reshape(1))
    below, above = targets[rewards == low], targets[rewards == high]
    assert below.max() < level.item() < above.min()


def test_bad_rewards_and_powers_are_named():
    for bad, error in (
        (torch.tensor([1.0, float("nan")], dtype=DTYPE), ValueError),
        (torch.ones(3, 2, dtype=DTYPE), ValueError),
        (torch.ones(3, dtype=torch.long), TypeError),
    ):
        with pytest.raises(error, match="rewards"):
            fit_power(bad)
        with pytest.raises(error, match="rewards"):
            warped_rewards(bad, 1.0)
    with pytest.raises((TypeError, ValueError), match="power"):
        warped_rewards(torch.ones(3, dtype=DTYPE), float("inf"))
