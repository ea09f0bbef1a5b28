r"""Several objectives and constraints on one arm set: each loop's ``ask_values``
against the posterior recomputed from scratch (BBKB) and against its own ask
(S-GP-TS), the rule of :class:`MultiOutcomeLoop` against a brute-force reading of
its definition, the outcomes each loop is told, checks, and resumption."""

from __future__ import annotations

import copy

import pytest
import torch

from botorch_sketch import BBKB, NystromGP
from botorch_sketch.generation.multi_outcome import MultiOutcomeLoop
from botorch_sketch.generation.sgpts_loop import SGPTS

from ..gp_helpers import DTYPE, rbf_kernel, uniform


def outcomes_of(points):
    r"""Two objectives (maximized, optima at 0.3 and 0.7 on every coordinate)
    and one constraint, feasible (``<= 0``) where the coordinates sum to 0.8 or
    more."""
    first = -((points - 0.3) ** 2).sum(-1)
    second = -((points - 0.7) ** 2).sum(-1)
    constraint = 0.8 - points.sum(-1)
    return torch.stack([first, second, constraint], -1)


def run(loop, arms, steps):
    for _ in range(steps):
        index = loop.ask()
        loop.tell(index, outcomes_of(arms[index]))


@pytest.fixture
def arms():
    return uniform(300, 2, seed=0)


def test_bbkb_ask_values_are_the_in_batch_ucb_recomputed_from_scratch(arms):
    # fixed kernel, every told arm in the dictionary: the posterior rebuilt on
    # the told outcomes (the last one told after the batch opened included),
    # conditioned on the pending arms; its argmax is BKB's own ask
    kernel = rbf_kernel(0.3, 1.0)
    loop = BBKB(arms, covar_module=kernel, noise=0.1, ratio_threshold=1.0, qbar=1e6)
    for _ in range(12):
        index = loop.ask()
        loop.tell(index, outcomes_of(arms[index])[:, 0])
    loop.ask_arms(torch.tensor([5, 77, 77]))
    waiting = loop.ask(1, wait=False)
    loop.tell(waiting, outcomes_of(arms[waiting])[:, 0])  # after the batch opened
    replica = copy.deepcopy(loop)
    values = loop.ask_values()
    model = NystromGP(
        arms[loop.observed],
        loop.rewards.unsqueeze(-1),
        covar_module=kernel,
        noise=0.1,
        dictionary=arms[loop.observed.unique()],
    )
    mean = model.posterior(arms.unsqueeze(-2)).mean.squeeze()
    held = arms[loop.pending]
    hallucinated = model.condition_on_observations(
        held, torch.zeros(held.shape[0], 1, dtype=DTYPE)
    )
    expected = mean + loop.ucb_radius * hallucinated.scaled_variance(arms).sqrt()
    torch.testing.assert_close(values, expected)
    assert loop.incorporated == loop.num_observations == 13
    assert int(values.argmax()) == int(replica.ask(1, wait=False))


def test_sgpts_ask_values_argmax_is_its_ask_and_holds_pending_arms(arms):
    loop = SGPTS(arms, seed=3, min_repeat_reduction=float("inf"))
    run_single = [loop.ask() for _ in range(loop.design_left)]
    for index in run_single:
        loop.tell(index, outcomes_of(arms[index])[:, 0])
    for _ in range(10):
        index = loop.ask()
        loop.tell(index, outcomes_of(arms[index])[:, 0])
    loop.ask_arms(torch.tensor([4, 9]))
    replica = copy.deepcopy(loop)
    values = loop.ask_values()
    assert values[torch.tensor([4, 9])].eq(-torch.inf).all()
    assert values[loop.observed].eq(-torch.inf).all()  # deterministic: held
    assert int(values.argmax()) == int(replica.ask(1))
    assert values.isfinite().sum() == 300 - len(set(loop.observed.tolist()) | {4, 9})


def brute_force_choice(values, loops, num_objectives, weights):
    r"""The rule read off its definition, one arm at a time in Python."""
    o = num_objectives
    bounds = [float(loop.targets_at(torch.zeros(1, dtype=DTYPE))) for loop in loops[o:]]
    lows = [float(loop.targets_of(loop.rewards).min()) for loop in loops[:o]]
    rows = values.tolist()
    feasible = [
        all(v == v and abs(v) != float("inf") for v in row)
        and all(row[o + j] >= bound for j, bound in enumerate(bounds))
        for row in rows
    ]
    if not any(feasible):
        violations = [
            sum(max(0.0, bound - row[o + j]) for j, bound in enumerate(bounds))
            for row in rows
        ]
        return min(range(len(rows)), key=lambda a: (violations[a], a))
    scores = [
        min((row[i] - lows[i]) / float(weights[i]) for i in range(o))
        if feasible[a]
        else -float("inf")
        for a, row in enumerate(rows)
    ]
    return max(range(len(rows)), key=lambda a: (scores[a], -a))


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_each_ask_is_the_brute_force_rule_on_the_loops_values(arms, loop_class):
    loops = [loop_class(arms, seed=i) for i in range(3)]
    loop = MultiOutcomeLoop(loops, num_objectives=2, seed=5)
    run(loop, arms, 15)
    assert loop.lead.design_left == 0
    for _ in range(5):
        replicas = copy.deepcopy(loop)
        values = torch.stack([r.ask_values() for r in replicas.loops], -1)
        weights = replicas.scalarization_weights()
        expected = brute_force_choice(values, replicas.loops, 2, weights)
        index = loop.ask()
        assert int(index) == expected
        for outcome_loop in loop.loops:  # asked in every loop
            assert int(outcome_loop.pending[-1]) == expected
        loop.tell(index, outcomes_of(arms[index]))


def test_no_optimistically_feasible_arm_takes_the_least_violation(arms):
    loops = [BBKB(arms, seed=i) for i in range(2)]
    loop = MultiOutcomeLoop(loops, num_objectives=1)
    run_outcomes = torch.tensor([[1.0, 2.0], [0.5, 3.0], [0.2, 1.0]], dtype=DTYPE)
    for row in run_outcomes:
        index = loop.ask()
        loop.tell(index, row.unsqueeze(0))
    values = torch.stack([torch.linspace(0, 1, 300, dtype=DTYPE)] * 2, -1)
    values[:, 1] = -10.0 - torch.arange(300, dtype=DTYPE)  # all far below the bound
    values[17, 1] = -9.5
    assert int(loop.choose(values)) == 17
    assert brute_force_choice(values, loop.loops, 1, None) == 17


def test_each_loop_is_told_its_column_and_constraints_negated(arms):
    loop = MultiOutcomeLoop([SGPTS(arms, seed=i) for i in range(3)], num_objectives=2)
    run(loop, arms, 8)
    told = outcomes_of(arms[loop.observed])
    torch.testing.assert_close(loop.outcomes, told)
    for column, outcome_loop in enumerate(loop.loops):
        sign = -1.0 if column == 2 else 1.0
        torch.testing.assert_close(outcome_loop.rewards, sign * told[:, column])
        assert torch.equal(outcome_loop.observed, loop.observed)
    assert torch.equal(loop.feasible, told[:, 2] <= 0)
    feasible_rewards = loop.rewards[loop.feasible]
    if bool((~loop.feasible).any()) and feasible_rewards.numel():
        assert loop.rewards[~loop.feasible].max() < feasible_rewards.min()


def test_the_merit_of_several_objectives_follows_the_last_weights_on_the_front(arms):
    # brute force: the Pareto front of the feasible outcomes (no other feasible
    # outcome at least as good in both objectives and better in one), its worst
    # value and range per objective, the last weights
    # value and range per objective, the last weights; read after every tell and
    # after a resume, as the front is kept up to date from the new outcomes
    loop = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(3)], num_objectives=2)
    checked = 0
    for step in range(15):
        run(loop, arms, 1)
        if step == 10:
            resumed = MultiOutcomeLoop(
                [BBKB(arms, seed=i) for i in range(3)], num_objectives=2
            )
            resumed.load_state_dict(loop.state_dict())
            loop = resumed
        rows = loop.outcomes.tolist()
        feasible = [row for row in rows if row[2] <= 0]

        def dominated(row, pool=feasible):
            return any(
                all(o[i] >= row[i] for i in (0, 1)) and o[:2] != row[:2] for o in pool
            )

        front = [row for row in feasible if not dominated(row)]
        if not front:
            continue
        low = [min(row[i] for row in front) for i in (0, 1)]
        span = [max(row[i] for row in front) - low[i] or 1.0 for i in (0, 1)]
        weights = loop.weights.tolist()
        for row, merit in zip(rows, loop.rewards.tolist(), strict=True):
            if row[2] <= 0:
                expected = min(
                    (row[i] - low[i]) / (span[i] * weights[i]) for i in (0, 1)
                )
                assert merit == pytest.approx(expected, rel=1e-12)
                checked += 1
    assert checked > 30
    assert weights != [2**-0.5] * 2  # drawn by the asks after the design


def test_the_pareto_front_kept_up_to_date_is_the_front_of_every_outcome(arms):
    # brute force on a front of several points: all outcomes while none is
    # feasible, then the feasible ones only
    loop = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(3)], num_objectives=2)
    generator = torch.Generator().manual_seed(0)
    for step in range(40):
        index = loop.ask()
        if step % 5 != 4:  # else a repeat of the last outcome
            outcome = torch.rand(1, 3, generator=generator, dtype=DTYPE)
            outcome[0, 2] = outcome[0, 2] - (0.0 if step < 12 else 0.7)
        loop.tell(index, outcome)
        rows = loop.outcomes.tolist()
        pool = [row[:2] for row in rows if row[2] <= 0] or [row[:2] for row in rows]
        front = {
            tuple(p)
            for p in pool
            if not any(all(q[i] >= p[i] for i in (0, 1)) and q != p for q in pool)
        }
        kept = [tuple(p) for p in loop.pareto_front().tolist()]
        assert len(kept) == len(front) and set(kept) == front


def test_bad_outcomes_raise_naming_them_and_change_nothing(arms):
    loop = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(3)], num_objectives=2)
    run(loop, arms, 3)
    index = loop.ask()
    before = copy.deepcopy(loop.state_dict())
    for bad in (
        torch.zeros(1, 2, dtype=DTYPE),
        torch.tensor([[0.0, float("nan"), 1.0]], dtype=DTYPE),
        [[0.0, 1.0, 2.0]],
    ):
        with pytest.raises(ValueError, match="outcomes"):
            loop.tell(index, bad)
    after = loop.state_dict()
    torch.testing.assert_close(after["outcomes"], before["outcomes"])
    for saved, now in zip(before["loops"], after["loops"], strict=True):
        assert torch.equal(saved["pending"], now["pending"])
        assert torch.equal(saved["rewards"], now["rewards"])


def test_bad_loops_raise():
    arms = uniform(50, 2, seed=1)
    with pytest.raises(ValueError, match="loops"):
        MultiOutcomeLoop([BBKB(arms)], num_objectives=2)
    with pytest.raises(ValueError, match="loops"):
        MultiOutcomeLoop([BBKB(arms), SGPTS(arms)], num_objectives=1)
    with pytest.raises(ValueError, match="loops"):
        MultiOutcomeLoop([BBKB(arms), BBKB(uniform(50, 2, seed=2))], num_objectives=1)
    used = BBKB(arms, seed=1)
    used.ask()
    with pytest.raises(ValueError, match="fresh"):
        MultiOutcomeLoop([BBKB(arms), used], num_objectives=1)


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_a_loop_resumed_from_its_state_makes_the_same_choices(arms, loop_class):
    def fresh():
        loops = [loop_class(arms, seed=i) for i in range(3)]
        return MultiOutcomeLoop(loops, num_objectives=2, seed=1)

    loop = fresh()
    run(loop, arms, 14)
    loop.ask()  # one pending
    resumed = fresh()
    resumed.load_state_dict(loop.state_dict())
    for _ in range(4):
        index = loop.ask()
        assert torch.equal(resumed.ask(), index)
        loop.tell(index, outcomes_of(arms[index]))
        resumed.tell(index, outcomes_of(arms[index]))
    with pytest.raises(ValueError, match="objectives"):
        MultiOutcomeLoop(
            [loop_class(arms, seed=i) for i in range(3)], num_objectives=1
        ).load_state_dict(loop.state_dict())


def test_constrained_search_ends_feasible_near_the_constrained_optimum(arms):
    # maximize the first objective (peak at 0.3, 0.3, infeasible) subject to
    # x1 + x2 >= 0.8: the optimum is on the boundary at (0.4, 0.4)
    def constrained(points):
        return outcomes_of(points)[:, [0, 2]]

    loop = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(2)], num_objectives=1)
    for _ in range(40):
        index = loop.ask()
        loop.tell(index, constrained(arms[index]))
    feasible = constrained(arms)[:, 1] <= 0
    best = constrained(arms)[feasible, 0].max()
    found = loop.outcomes[loop.feasible, 0].max()
    assert best - found < 0.01
    assert loop.feasible[-10:].float().mean() >= 0.7
