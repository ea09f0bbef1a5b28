r"""The local phase on a real BBKB loop over a search space: when it starts, the
arms it asks, the strategy's updates against one told the loop's rewards
directly, evaluated and failed arms, its end and the next phase, resuming."""

import copy
import math

import numpy as np
import pytest
import torch

from botorch_sketch.generation import evolution_strategy
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.evolution_strategy import EvolutionStrategy
from botorch_sketch.generation.trust_region import TrustRegion
from botorch_sketch.integrations import local_phase
from botorch_sketch.integrations.arm_space import DomainArms, NumericDomain
from botorch_sketch.integrations.local_phase import (
    LOCAL_PHASE_AFTER,
    MAX_INITIAL_STEP,
    MIN_INITIAL_STEP,
    RESTART_STEP,
    LocalPhase,
    trials_before_phase,
    warm_start,
)


def objective(values: torch.Tensor) -> torch.Tensor:
    r"""A quadratic in large units (float32 would not rank its values)."""
    quadratic = (values[:, 0] - 0.7) ** 2 + 2 * (values[:, 1] / 20 + 0.4) ** 2
    return 1e7 - quadratic


def setup(integer: bool = False, told: int = LOCAL_PHASE_AFTER) -> tuple:
    r"""A BBKB loop told ``told`` of its arms (kernel fitted), its arm set (a
    grid of 5 x 40 if ``integer``), a trust region, a generator."""
    arms = DomainArms(
        [
            NumericDomain("x", -2, 3, integer=integer),
            NumericDomain("y", -20, 20, integer=integer)
            if integer
            else NumericDomain("y", -1.0, 1.0),
        ],
        num_arms=256,
        seed=0,
    )
    loop = BBKB(arms.features, seed=0)
    for _ in range(told):
        index = loop.ask(1)
        loop.tell(index, objective(arms.values[index]))
    assert loop.refits.last is not None
    return loop, arms, TrustRegion(2), torch.Generator().manual_seed(4)


def evaluate(loop, arms, phase, region, generator, count: int) -> list[int]:
    r"""Ask and tell ``count`` arms of the phase's queue, observing after each."""
    asked = []
    for _ in range(count):
        index = phase.next_arm(loop, arms, generator)
        asked.append(index)
        loop.ask_arms(torch.tensor([index]))
        loop.tell(torch.tensor([index]), objective(arms.values[[index]]))
        phase.observe(loop, arms, region, generator)
    return asked


def ranked_arms(loop) -> list[int]:
    r"""The observed arms, best mean reward first."""
    rewards = {}
    for arm, reward in zip(loop.observed.tolist(), loop.rewards.tolist(), strict=True):
        rewards.setdefault(arm, []).append(reward)
    return sorted(rewards, key=lambda arm: -np.mean(rewards[arm]))


def test_a_phase_starts_at_a_restart_after_enough_trials_from_the_best_arm():
    loop, arms, region, generator = setup(told=LOCAL_PHASE_AFTER - 1)
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    assert phase.strategy is None  # too early
    index = loop.ask(1)
    loop.tell(index, objective(arms.values[index]))
    region.restarts = 0
    phase.observe(loop, arms, region, generator)
    assert phase.strategy is None  # no restart yet
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    assert phase.phases == 1 and phase.restarts_seen == 1
    strategy = phase.strategy
    # warm-started from the best 10% of the arms (100 told: 10 > 2 d + 1)
    ranked = ranked_arms(loop)[:10]
    points = loop.kernel_inputs[ranked].numpy()
    offsets = points[1:] - points[0]
    spread = offsets.T @ offsets / 9
    variance = np.trace(spread) / 2
    assert torch.equal(strategy.mean, loop.kernel_inputs[ranked[0]])
    assert strategy.sigma == pytest.approx(np.sqrt(variance), rel=1e-12)
    expected = 0.9 * spread / variance + 0.1 * np.eye(2)
    np.testing.assert_allclose(strategy.covariance.numpy(), expected, rtol=1e-12)
    assert strategy.population == 6  # 4 + floor(3 ln 2)
    # the generation's points are arms, asked in turn, none evaluated yet
    assert len(phase.queue) == len(set(phase.queue)) == strategy.population
    low, high = loop.box
    unit = (arms.features[phase.queue] - low) / (high - low)
    assert torch.allclose(unit, phase._points)
    observed = set(loop.observed.tolist())
    assert not observed & set(phase.queue)


def test_an_update_is_the_strategy_told_the_loops_rewards():
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    start = copy.deepcopy(phase.strategy.state_dict())
    points, generation = phase._points.clone(), list(phase._arms)
    asked = evaluate(loop, arms, phase, region, generator, phase.strategy.population)
    assert asked == generation and phase.strategy.generation == 1
    reference = EvolutionStrategy.from_state_dict(start)
    reference.tell(points, objective(arms.values[generation]))
    assert torch.equal(phase.strategy.mean, reference.mean)  # rewards in float64
    assert torch.equal(phase.strategy.covariance, reference.covariance)
    assert len(phase.queue) == phase.strategy.population  # the next generation


def test_points_on_evaluated_arms_take_their_reward_without_a_trial():
    loop, arms, region, generator = setup(integer=True)
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    known = 0
    for arm, reward in zip(phase._arms, phase._rewards, strict=True):
        told = loop.observed == arm
        if bool(told.any()):
            assert reward == float(loop.rewards[told].mean())
            assert arm not in phase.queue
            known += 1
        else:
            assert reward is None and arm in phase.queue
    assert known > 0


def test_a_failed_arm_ranks_last():
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    index = phase.next_arm(loop, arms, generator)
    loop.ask_arms(torch.tensor([index]))
    loop.fail(torch.tensor([index]))
    other = loop.ask(1)
    loop.tell(other, objective(arms.values[other]))
    phase.observe(loop, arms, region, generator)
    position = phase._arms.index(index)
    assert phase._rewards[position] == float(loop.rewards.min())
    assert phase.strategy.generation == 0  # the rest of the generation is asked


def test_arms_another_worker_took_are_skipped():
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    first, second, third = phase.queue[:3]
    loop.ask_arms(torch.tensor([first]))  # another worker's running trial
    loop.ask_arms(torch.tensor([second]))
    loop.tell(torch.tensor([second]), objective(arms.values[[second]]))
    assert phase.next_arm(loop, arms, generator) == third
    assert phase.queue[:1] != [third]


def test_spares_keep_every_worker_on_the_strategy_and_any_lambda_told_update_it():
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    reference = copy.deepcopy(phase.strategy)
    population = reference.population
    asked = []  # every worker busy, nothing told: the generation, then spares
    while (index := phase.next_arm(loop, arms, generator)) is not None:
        loop.ask_arms(torch.tensor([index]))
        asked.append(index)
    spares = math.floor(local_phase.MAX_SPARE_SHARE * population)
    assert spares >= 1 and len(phase._arms) == population + spares
    assert len(set(asked)) == len(asked)
    points, drawn = phase._points.clone(), list(phase._arms)
    for index in reversed(asked):  # the spares come back first
        if phase.strategy.generation == 1:
            break
        loop.tell(torch.tensor([index]), objective(arms.values[[index]]))
        phase.observe(loop, arms, region, generator)
    assert phase.strategy.generation == 1
    # the update: the first lambda drawn points among those told
    told = [i for i, arm in enumerate(drawn) if bool((loop.observed == arm).any())]
    chosen = told[:population]
    assert chosen[-1] >= population  # spares among them
    rewards = [float(loop.rewards[loop.observed == drawn[i]].mean()) for i in chosen]
    reference.tell(points[chosen], torch.tensor(rewards, dtype=torch.float64))
    assert torch.equal(phase.strategy.mean, reference.mean)
    assert torch.equal(phase.strategy.covariance, reference.covariance)


def test_a_converged_phase_ends_and_the_next_restart_doubles_the_population(
    monkeypatch,
):
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    population, phase_sigma = phase.strategy.population, phase.strategy.sigma
    monkeypatch.setattr(evolution_strategy, "MIN_STEP", 1.0)  # any step is small
    evaluate(loop, arms, phase, region, generator, population)
    assert (
        phase.strategy is None
        and phase.queue == []
        and phase.next_arm(loop, arms, generator) is None
    )
    monkeypatch.undo()
    region.restarts = 2
    phase.observe(loop, arms, region, generator)
    assert phase.phases == 2 and phase.strategy.population == 2 * population
    # IPOP's restart: from the best arm at a large isotropic step, not warm-started
    # from the arms crowding the basin the first phase searched
    strategy = phase.strategy
    assert torch.equal(strategy.mean, loop.kernel_inputs[ranked_arms(loop)[0]])
    assert strategy.sigma == RESTART_STEP > phase_sigma
    assert torch.equal(strategy.covariance, torch.eye(2, dtype=torch.float64))


def test_a_resumed_phase_asks_the_same_arms():
    loop, arms, region, generator = setup()
    phase = LocalPhase()
    region.restarts = 1
    phase.observe(loop, arms, region, generator)
    evaluate(loop, arms, phase, region, generator, 3)
    resumed = LocalPhase.from_state_dict(phase.state_dict())
    state = (loop.state_dict(), copy.deepcopy(arms), generator.get_state())
    first = evaluate(loop, arms, phase, region, generator, 12)
    loop.load_state_dict(state[0])
    arms = state[1]
    generator.set_state(state[2])
    assert evaluate(loop, arms, resumed, region, generator, 12) == first
    assert torch.equal(phase.strategy.mean, resumed.strategy.mean)


def test_the_warm_start_is_bounded_and_copes_with_a_single_point():
    point = torch.full((1, 3), 0.5, dtype=torch.float64)
    sigma, covariance = warm_start(point)
    assert sigma == MAX_INITIAL_STEP and torch.equal(covariance, torch.eye(3).double())
    close = point + 1e-9 * torch.eye(3, dtype=torch.float64)
    assert warm_start(torch.cat([point, close]))[0] == MIN_INITIAL_STEP
    far = torch.tensor([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    sigma, covariance = warm_start(far)  # collinear: the identity keeps C regular
    assert sigma == MAX_INITIAL_STEP
    assert float(torch.linalg.eigvalsh(covariance).min()) == pytest.approx(0.1)


def test_the_phase_waits_longer_in_more_dimensions():
    assert trials_before_phase(2) == trials_before_phase(5) == LOCAL_PHASE_AFTER
    assert trials_before_phase(10) == 200 and trials_before_phase(50) == 1000
