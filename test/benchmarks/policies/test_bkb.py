r"""BKB/BBKB benchmark policies on a small finite problem."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.benchmarks.policies.bkb import BBKBPolicy, BKBPolicy
from botorch_sketch.benchmarks.problems import Problem

DTYPE = torch.float64


def make_problem(num_arms=400, d=2):
    arms = torch.rand(
        num_arms, d, generator=torch.Generator().manual_seed(0), dtype=DTYPE
    )

    def objective(X):
        return -((X - 0.3) ** 2).sum(-1)

    values = objective(arms)
    return Problem(
        name="bowl",
        bounds=torch.tensor([[0.0] * d, [1.0] * d], dtype=DTYPE),
        objective=objective,
        noise_std=0.01,
        optimum=float(values.max()),
        arms=arms,
        arm_values=values,
        hyperparameters={"lengthscale": 0.3, "outputscale": 1.0, "noise_variance": 1.0},
    )


def drive(policy, problem, evaluations, seed=0):
    policy.reset(problem, evaluations, torch.Generator().manual_seed(seed))
    noise = torch.Generator().manual_seed(seed + 1)
    pulled = []
    while sum(p.numel() for p in pulled) < evaluations:
        chosen = policy.ask()
        left = evaluations - sum(p.numel() for p in pulled)
        chosen = chosen[:left]
        rewards = problem.arm_values[chosen] + problem.noise_std * torch.randn(
            chosen.shape[0], generator=noise, dtype=DTYPE
        )
        policy.tell(chosen, rewards)
        pulled.append(chosen)
    return torch.cat(pulled)


def test_bkb_policy_equals_bbkb_with_ratio_one():
    problem = make_problem()
    a = drive(BKBPolicy(radius=1.0), problem, 25)
    b = drive(BBKBPolicy(radius=1.0, ratio_threshold=1.0), problem, 25)
    assert torch.equal(a, b)


@pytest.mark.parametrize("radius", [0.5, "theory"])
def test_bbkb_policy_pulls_exactly_the_horizon_and_learns(radius):
    problem = make_problem()
    policy = BBKBPolicy(radius=radius, ratio_threshold=4.0)
    pulled = drive(policy, problem, 300)
    assert pulled.shape == (300,)
    diagnostics = policy.diagnostics()
    assert diagnostics["dictionary_size"] >= 1
    if radius == "theory":
        # Theorem 2 with lambda = 1, F = 1: (1 + sqrt 2) dominates; it over-explores
        assert diagnostics["radius"] > 1 + 2**0.5
        return
    regret = problem.optimum - problem.arm_values[pulled[-50:]].mean()
    uniform = problem.optimum - problem.arm_values.mean()
    assert regret < 0.5 * uniform


def test_policies_reject_box_problems_and_bad_radius():
    problem = make_problem()
    box = Problem(
        name="box",
        bounds=problem.bounds,
        objective=problem.objective,
        noise_std=0.01,
        optimum=0.0,
        hyperparameters={"lengthscale": 0.3},
    )
    with pytest.raises(ValueError, match="finite"):
        BBKBPolicy().reset(box, 10, torch.Generator())
    with pytest.raises(ValueError, match="radius"):
        BBKBPolicy(radius=-1.0)


def test_end_fraction_reaches_the_loop():
    # a full batch with one arm done: the default loop ends it and asks on; with
    # end_fraction = 1 the loop waits for the whole batch; a bad value fails at
    # reset, naming the option, before the policy has a loop
    problem = make_problem()
    asks = []
    for fraction in (0.0, 1.0):
        policy = BBKBPolicy(radius=0.5, ratio_threshold=4.0, end_fraction=fraction)
        drive(policy, problem, 20)
        loop = policy.loop
        assert loop.options.end_fraction == fraction
        batch = loop.ask()
        assert batch.numel() >= 2 and loop.ask().numel() == 0
        loop.tell(batch[:1], problem.arm_values[batch[:1]])
        asks.append(loop.ask().numel())
    assert asks[0] >= 1 and asks[1] == 0
    for bad, error in ((1.5, ValueError), ("0.1", TypeError)):
        with pytest.raises(error, match="end_fraction"):  # checked when built
            BBKBPolicy(end_fraction=bad)
