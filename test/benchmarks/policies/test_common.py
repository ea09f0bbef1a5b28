import math

import pytest
import torch

from benchmarks.policies.common import (
    BENCHMARK_BAYES_RADIUS,
    IncrementalExactPosterior,
    KernelHyperparameters,
    make_radius_schedule,
)
from benchmarks.problems import Problem

from ...gp_helpers import zero_mean_gp_posterior


def _problem(**hyperparameters):
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    return Problem(
        name="p",
        bounds=bounds,
        objective=lambda X: X.sum(-1),
        noise_std=0.1,
        optimum=2.0,
        hyperparameters=hyperparameters,
    )


def _exact(arms, hp, indices, rewards):
    r"""Mean and variance of all arms from a SingleTaskGP built from scratch."""
    kernel = hp.kernel(dtype=arms.dtype)
    return zero_mean_gp_posterior(arms[indices], rewards, hp.noise, kernel, arms)


@pytest.fixture
def setup():
    generator = torch.Generator().manual_seed(0)
    arms = torch.rand(60, 3, generator=generator, dtype=torch.float64)
    hp = KernelHyperparameters(lengthscale=0.4, outputscale=1.7, noise=1e-3)
    indices = torch.randint(60, (25,), generator=generator)
    indices[5] = indices[3]  # a repeated arm
    rewards = torch.randn(25, generator=generator, dtype=torch.float64)
    return arms, hp, indices, rewards


def test_hyperparameters_from_problem_precedence():
    problem = _problem(lengthscale=0.3, outputscale=2.0)
    hp = KernelHyperparameters.from_problem(problem)
    assert hp == KernelHyperparameters(0.3, 2.0, 0.1**2)
    hp = KernelHyperparameters.from_problem(problem, lengthscale=0.5, noise=1.0)
    assert hp == KernelHyperparameters(0.5, 2.0, 1.0)
    problem = _problem(lengthscale=0.3, noise=0.02)
    assert KernelHyperparameters.from_problem(problem).noise == 0.02
    assert KernelHyperparameters.from_problem(problem).outputscale == 1.0


def test_hyperparameters_errors():
    with pytest.raises(ValueError, match="lengthscale"):
        KernelHyperparameters.from_problem(_problem())
    with pytest.raises(ValueError, match="noise"):
        KernelHyperparameters(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="outputscale"):
        KernelHyperparameters(1.0, -1.0, 1.0)


def test_kernel_is_fixed_rbf():
    hp = KernelHyperparameters(lengthscale=0.5, outputscale=2.0, noise=0.1)
    kernel = hp.kernel(dtype=torch.float64)
    x = torch.tensor([[0.0, 0.0], [0.3, 0.4]], dtype=torch.float64)
    value = kernel(x[:1], x[1:]).to_dense().item()
    assert value == pytest.approx(2.0 * math.exp(-0.25 / (2 * 0.25)), rel=1e-12)
    assert not any(p.requires_grad for p in kernel.parameters())


def test_radius_schedules():
    assert BENCHMARK_BAYES_RADIUS > 0
    constant = make_radius_schedule(2.5)
    assert constant(1) == constant(1000) == 2.5
    theory = make_radius_schedule("srinivas", num_arms=100, delta=0.1)
    expected = math.sqrt(2 * math.log(100 * 49 * math.pi**2 / (6 * 0.1)))
    assert theory(7) == pytest.approx(expected, rel=1e-12)
    assert theory(8) > theory(7)
    with pytest.raises(ValueError, match="bayes_radius"):
        make_radius_schedule(-1.0)
    with pytest.raises(ValueError, match="bayes_radius"):
        make_radius_schedule("theory")
    with pytest.raises(ValueError, match="num_arms"):
        make_radius_schedule("srinivas")
    with pytest.raises(ValueError, match="delta"):
        make_radius_schedule("srinivas", num_arms=3, delta=1.5)


def test_kernel_column_matches_gpytorch(setup):
    arms, hp, _, _ = setup
    post = IncrementalExactPosterior(arms, hp, capacity=4)
    expected = hp.kernel(dtype=arms.dtype)(arms, arms[7:8]).to_dense().squeeze(-1)
    torch.testing.assert_close(post.kernel_column(7), expected, rtol=1e-10, atol=1e-12)


def test_matches_single_task_gp_step_by_step(setup):
    arms, hp, indices, rewards = setup
    post = IncrementalExactPosterior(arms, hp, capacity=25)
    torch.testing.assert_close(post.variance, torch.full((60,), 1.7, dtype=arms.dtype))
    for t in (1, 2, 6, 25):
        while post.num_observations < t:
            s = post.num_observations
            before = post.append(int(indices[s]))
            post.set_rewards(rewards[s : s + 1])
        mean, variance = _exact(arms, hp, indices[:t], rewards[:t])
        torch.testing.assert_close(post.mean, mean, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(post.variance, variance, rtol=1e-7, atol=1e-9)
    # append() reports the variance before conditioning.
    _, variance = _exact(arms, hp, indices[:24], rewards[:24])
    assert before == pytest.approx(float(variance[indices[24]]), rel=1e-7, abs=1e-10)


def test_hallucinated_batch_and_discard(setup):
    arms, hp, indices, rewards = setup
    post = IncrementalExactPosterior(arms, hp, capacity=25)
    for s in range(10):
        post.append(int(indices[s]))
    post.set_rewards(rewards[:6])
    assert post.num_pending == 4
    mean_6, _ = _exact(arms, hp, indices[:6], rewards[:6])
    _, variance_10 = _exact(arms, hp, indices[:10], rewards[:10])
    torch.testing.assert_close(post.mean, mean_6, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(post.variance, variance_10, rtol=1e-7, atol=1e-9)
    post.set_rewards(rewards[6:8])
    post.discard_pending()
    assert post.num_observations == post.num_rewarded == 8
    mean_8, variance_8 = _exact(arms, hp, indices[:8], rewards[:8])
    torch.testing.assert_close(post.mean, mean_8, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(post.variance, variance_8, rtol=1e-7, atol=1e-9)
    # Later observations reuse the freed slots correctly.
    post.append(int(indices[8]))
    post.set_rewards(rewards[8:9])
    mean_9, variance_9 = _exact(arms, hp, indices[:9], rewards[:9])
    torch.testing.assert_close(post.mean, mean_9, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(post.variance, variance_9, rtol=1e-7, atol=1e-9)


def test_errors_leave_state_unchanged(setup):
    arms, hp, _, _ = setup
    post = IncrementalExactPosterior(arms, hp, capacity=2)
    post.append(3)
    with pytest.raises(ValueError, match="rewards"):
        post.set_rewards(torch.ones(2, dtype=arms.dtype))
    with pytest.raises(ValueError, match="rewards"):
        post.set_rewards(torch.tensor([math.nan], dtype=arms.dtype))
    with pytest.raises(ValueError, match="index"):
        post.append(60)
    assert post.num_observations == 1 and post.num_pending == 1
    post.set_rewards(torch.ones(1, dtype=arms.dtype))
    post.append(4)
    with pytest.raises(ValueError, match="capacity"):
        post.append(5)
    assert post.num_observations == 2
    with pytest.raises(ValueError, match="capacity"):
        IncrementalExactPosterior(arms, hp, capacity=0)
    with pytest.raises(TypeError, match="hyperparameters"):
        IncrementalExactPosterior(arms, {"lengthscale": 1.0}, capacity=3)
    with pytest.raises(ValueError, match="arms"):
        IncrementalExactPosterior(arms[:, 0], hp, capacity=3)


def test_float32_runs_and_agrees(setup):
    arms, hp, indices, rewards = setup
    post = IncrementalExactPosterior(arms.float(), hp, capacity=25)
    for s in range(25):
        post.append(int(indices[s]))
    post.set_rewards(rewards.float())
    assert post.mean.dtype == torch.float32
    mean, variance = _exact(arms, hp, indices, rewards)
    assert torch.isfinite(post.mean).all() and (post.variance >= 0).all()
    torch.testing.assert_close(post.mean.double(), mean, rtol=0, atol=5e-2)
    torch.testing.assert_close(post.variance.double(), variance, rtol=0, atol=5e-3)
