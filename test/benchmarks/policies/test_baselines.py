import math
from functools import partial

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.means import ZeroMean

from benchmarks.policies.baselines import (
    EpsilonGreedy,
    ExactBUCB,
    ExactUCB,
    Uniform,
)
from benchmarks.policies.common import KernelHyperparameters
from benchmarks.problems import make_synthetic_problem


@pytest.fixture(autouse=True)
def single_thread():
    r"""Brute-force oracles do many tiny solves; on a shared, oversubscribed machine
    two OpenMP threads make each ~100x slower. Results do not depend on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def problem():
    return make_synthetic_problem("ackley", dim=3, num_arms=150, noise_std=0.05, seed=3)


@pytest.fixture(scope="module")
def box():
    return make_synthetic_problem("branin")


def _generator(seed=0):
    return torch.Generator().manual_seed(seed)


def _drive(problem, build, horizon, seed=0):
    r"""Minimal ask/tell loop of ``build(problem, horizon, generator)``; returns the
    list of batches (arm index lists)."""
    policy = build(problem, horizon, _generator(seed))
    noise = _generator(seed + 100)
    batches, count = [], 0
    while count < horizon:
        chosen = policy.ask(horizon - count)[: horizon - count]
        rewards = problem.arm_values[chosen] + problem.noise_std * torch.randn(
            len(chosen), generator=noise, dtype=torch.float64
        )
        policy.tell(chosen, rewards)
        batches.append(chosen.tolist())
        count += len(chosen)
    return batches


def _exact_scores(problem, hp, indices, rewards, radius, hallucinated=()):
    r"""Brute force: mean from (indices, rewards), sd also conditioned on the
    hallucinated arms, both from SingleTaskGP models built from scratch."""

    def posterior(idx, y):
        train_Y = y.unsqueeze(-1)
        model = SingleTaskGP(
            problem.arms[idx],
            train_Y,
            train_Yvar=torch.full_like(train_Y, hp.noise),
            covar_module=hp.kernel(dtype=torch.float64),
            mean_module=ZeroMean(),
            outcome_transform=None,
        ).eval()
        with torch.no_grad():
            post = model.posterior(problem.arms)
        return post.mean.squeeze(-1), post.variance.squeeze(-1)

    mean, _ = posterior(torch.tensor(indices), torch.tensor(rewards).double())
    all_idx = torch.tensor(list(indices) + list(hallucinated))
    dummy = torch.zeros(len(all_idx), dtype=torch.float64)  # variance ignores y
    _, variance = posterior(all_idx, dummy)
    return mean + radius * variance.clamp(min=0).sqrt()


def test_uniform_finite_and_box(problem, box):
    policy = Uniform(problem, 10, _generator(), batch_size=4)
    chosen = policy.ask()
    assert chosen.dtype == torch.long and chosen.shape == (4,)
    counts = torch.zeros(150)
    policy = Uniform(problem, 10**5, _generator(1), batch_size=1000)
    for _ in range(30):
        counts += torch.bincount(policy.ask(), minlength=150)
    # 200 expected draws per arm; chi-square with 149 dof stays far below 250.
    chi2 = ((counts - 200) ** 2 / 200).sum()
    assert chi2 < 250
    policy = Uniform(box, 10, _generator(), batch_size=500)
    points = policy.ask()
    assert points.shape == (500, 2)
    assert (points >= box.bounds[0]).all() and (points <= box.bounds[1]).all()
    assert abs(points.mean().item() - 0.5) < 0.05
    with pytest.raises(ValueError, match="batch_size"):
        Uniform(problem, 10, _generator(), batch_size=0)


def test_epsilon_greedy_exploits_best_empirical_mean(problem, box):
    policy = EpsilonGreedy(problem, 10, _generator(), epsilon=0.0, batch_size=3)
    first = policy.ask()  # nothing observed yet: random
    assert first.shape == (3,)
    # arm 5: mean 0.6 over two pulls; arm 9: mean 0.55; arm 2: 0.1
    policy.tell(torch.tensor([5, 9, 2]), torch.tensor([0.7, 0.55, 0.1]).double())
    policy.tell(torch.tensor([5]), torch.tensor([0.5]).double())
    assert policy.ask().tolist() == [5, 5, 5]
    policy.tell(torch.tensor([5]), torch.tensor([-1.0]).double())  # mean now 0.0667
    assert policy.ask().tolist() == [9, 9, 9]
    policy = EpsilonGreedy(box, 10, _generator(), epsilon=0.0)
    points = torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=torch.float64)
    policy.tell(points, torch.tensor([0.2, 0.9]).double())
    torch.testing.assert_close(policy.ask(), points[1:])
    policy = EpsilonGreedy(problem, 10, _generator(), epsilon=1.0, batch_size=200)
    policy.tell(torch.tensor([5]), torch.tensor([1.0]).double())
    assert len(set(policy.ask().tolist())) > 50  # always exploring
    with pytest.raises(ValueError, match="epsilon"):
        EpsilonGreedy(problem, 10, _generator(), epsilon=1.5)
    with pytest.raises(TypeError, match="epsilon"):
        EpsilonGreedy(problem, 10, _generator(), epsilon="0.1")


def test_exact_ucb_matches_brute_force(problem):
    hp = KernelHyperparameters.from_problem(problem)
    indices = [b[0] for b in _drive(problem, partial(ExactUCB, bayes_radius=1.5), 8)]
    # Replay: each choice after the first is the brute-force UCB argmax.
    policy = ExactUCB(problem, 8, _generator(), bayes_radius=1.5)
    noise = _generator(100)
    seen, ys = [], []
    for t in range(8):
        chosen = policy.ask()
        if t > 0:
            scores = _exact_scores(problem, hp, seen, ys, 1.5)
            assert int(chosen) == int(scores.argmax())
        y = problem.arm_values[chosen] + problem.noise_std * torch.randn(
            1, generator=noise, dtype=torch.float64
        )
        policy.tell(chosen, y)
        seen.append(int(chosen))
        ys.append(float(y))
    assert seen == indices


def test_srinivas_schedule_is_used(problem):
    batches = _drive(problem, partial(ExactUCB, bayes_radius="srinivas", delta=0.1), 6)
    assert len(batches) == 6
    with pytest.raises(ValueError, match="bayes_radius"):
        ExactUCB(problem, 5, _generator(), bayes_radius=0.0)


def test_bucb_batch_size_one_is_ucb(problem):
    ucb = _drive(problem, partial(ExactUCB, bayes_radius=1.0), 20, seed=2)
    bucb = _drive(
        problem, partial(ExactBUCB, bayes_radius=1.0, batch_size=1), 20, seed=2
    )
    assert ucb == bucb


def test_bucb_fixed_batches_match_brute_force(problem):
    hp = KernelHyperparameters.from_problem(problem)
    policy = ExactBUCB(problem, 9, _generator(), bayes_radius=1.0, batch_size=3)
    seen, ys = [], []
    noise = _generator(7)
    for _ in range(3):
        batch = policy.ask().tolist()
        assert len(batch) == 3
        if seen:
            for j, index in enumerate(batch):
                scores = _exact_scores(problem, hp, seen, ys, 1.0, batch[:j])
                assert index == int(scores.argmax())
        y = problem.arm_values[batch] + 0.05 * torch.randn(
            3, generator=noise, dtype=torch.float64
        )
        policy.tell(torch.tensor(batch), y)
        seen += batch
        ys += y.tolist()


def test_bucb_adaptive_rule(problem):
    hp = KernelHyperparameters.from_problem(problem, noise=0.05)
    ratio = 4.0
    # Replay and check the rule on every batch from scratch.
    policy = ExactBUCB(
        problem,
        60,
        _generator(),
        bayes_radius=1.0,
        max_variance_ratio=ratio,
        noise=0.05,
    )
    noise = _generator(100)
    seen, stopped_by_rule = [], 0
    while len(seen) < 60:
        batch = policy.ask().tolist()
        info = 0.0
        for j, index in enumerate(batch):
            var = _posterior_variance(problem, hp, seen + batch[:j])[index]
            info += math.log1p(var / hp.noise)
            assert j == 0 or info <= math.log(ratio) + 1e-9
        if len(seen) + len(batch) < 60:  # not cut by the horizon: the next pick
            scores = policy.posterior.mean + policy.posterior.variance.sqrt()
            var = _posterior_variance(problem, hp, seen + batch)[int(scores.argmax())]
            assert info + math.log1p(var / hp.noise) > math.log(ratio)
            stopped_by_rule += len(batch) > 1
        y = problem.arm_values[batch] + problem.noise_std * torch.randn(
            len(batch), generator=noise, dtype=torch.float64
        )
        policy.tell(torch.tensor(batch), y)
        seen += batch
    assert len(seen) == 60 and stopped_by_rule >= 3


def _posterior_variance(problem, hp, indices):
    r"""Exact GP variance of every arm by the textbook formula (RBF by hand)."""

    def k(A, B):
        return hp.outputscale * torch.exp(
            -torch.cdist(A, B).square() / (2 * hp.lengthscale**2)
        )

    prior = torch.full((problem.arms.shape[0],), hp.outputscale, dtype=torch.float64)
    if not indices:
        return prior
    X = problem.arms[indices]
    K = k(X, X) + hp.noise * torch.eye(len(indices), dtype=torch.float64)
    cross = k(problem.arms, X)
    return prior - (cross * torch.linalg.solve(K, cross.T).T).sum(-1)


def test_bucb_truncated_batch_is_forgotten(problem):
    policy = ExactBUCB(problem, 10, _generator(), bayes_radius=1.0, batch_size=4)
    first = policy.ask()
    policy.tell(first, problem.arm_values[first])
    batch = policy.ask()
    assert policy.posterior.num_observations == 8
    policy.tell(batch[:2], problem.arm_values[batch[:2]])
    assert policy.posterior.num_observations == policy.posterior.num_rewarded == 6
    hp = KernelHyperparameters.from_problem(problem)
    expected = _posterior_variance(problem, hp, first.tolist() + batch[:2].tolist())
    torch.testing.assert_close(
        policy.posterior.variance, expected.clamp(min=0), rtol=1e-6, atol=1e-9
    )
    assert len(policy.ask()) == 4  # room = 10 - 6


def test_exact_policies_reject_box_and_bad_options(box):
    problem = make_synthetic_problem("ackley", dim=2, num_arms=20, seed=3)
    for cls in (ExactUCB, ExactBUCB):
        with pytest.raises(ValueError, match="finite"):
            cls(box, 5, _generator())
    with pytest.raises(ValueError, match="max_variance_ratio"):
        ExactBUCB(problem, 5, _generator(), max_variance_ratio=0.5)
    with pytest.raises(ValueError, match="batch_size"):
        ExactBUCB(problem, 5, _generator(), batch_size=0)
    with pytest.raises(ValueError, match="bayes_radius"):
        ExactUCB(problem, 5, _generator(), bayes_radius=0.0)


def test_float32_runs(problem):
    problem32 = make_synthetic_problem(
        "ackley", dim=3, num_arms=150, noise_std=0.05, seed=3, dtype=torch.float32
    )
    for policy in (ExactUCB, partial(ExactBUCB, batch_size=2)):
        batches = _drive(problem32, policy, 8)
        assert sum(len(b) for b in batches) == 8
