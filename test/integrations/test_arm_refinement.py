r"""Arms added as a loop learns: trust-region candidates after each tell and
refined points after each refit, on a real BBKB loop over a search space."""

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BKBUpperConfidenceBound
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.integrations import arm_refinement
from botorch_sketch.integrations.arm_refinement import ArmRefiner
from botorch_sketch.integrations.arm_space import (
    ChoiceDomain,
    DomainArms,
    NumericDomain,
)

DTYPE = torch.float64


def space() -> DomainArms:
    return DomainArms(
        [
            NumericDomain("x", -2.0, 3.0),
            NumericDomain("n", 1, 9, integer=True),
            ChoiceDomain("c", ["a", "b"]),
        ],
        num_arms=64,
        seed=0,
    )


def objective(values: torch.Tensor) -> torch.Tensor:
    return -((values[:, 0] - 0.7) ** 2) - 0.1 * (values[:, 1] - 4) ** 2 + values[:, 2]


def run(loop_class: type, refiner: ArmRefiner, steps: int) -> tuple:
    arms = space()
    loop = loop_class(arms.features, seed=0)
    counts, fits = [], set()
    for _ in range(steps):
        index = loop.ask(1)
        loop.tell(index, objective(arms.values[index]))
        before = arms.num_arms
        refiner.refine(loop, arms)
        counts.append(arms.num_arms - before)
        fits.add(loop.refits.last)
        assert loop.arms.shape[0] == arms.num_arms  # the loop has every arm
    return arms, loop, counts, fits - {None}


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_local_arms_come_after_each_tell_once_fitted(loop_class):
    refiner = ArmRefiner(count=0, seed=3, num_local=8, num_polished=0)
    arms, loop, counts, fits = run(loop_class, refiner, 30)
    fitted = loop.refits.last
    assert fitted is not None
    # nothing before the first fit, then at most 8 a tell (duplicates dropped)
    assert counts[: loop.refits.first - 1] == [0] * (loop.refits.first - 1)
    assert sum(counts) > 0 and max(counts) <= 8
    assert refiner.told == 30 and refiner.region is not None
    # the values stay in the domains (integers, categories)
    added = arms.values[space().num_arms :]
    assert bool((added[:, 1] == added[:, 1].round()).all())
    assert set(added[:, 2].tolist()) <= {0.0, 1.0}


def test_the_last_local_arms_lie_in_the_box_around_the_best():
    refiner = ArmRefiner(count=0, seed=3, num_local=16, num_polished=0)
    arms, loop, _, _ = run(BBKB, refiner, 25)
    best = int(loop.observed[loop.rewards.argmax()])
    before = arms.num_arms
    index = loop.ask(1)
    loop.tell(index, torch.tensor([-100.0], dtype=DTYPE))  # no improvement
    refiner.refine(loop, arms)
    new = loop.kernel_inputs[before:]
    assert new.shape[0] > 0
    scales = loop.covar_module.base_kernel.lengthscale.detach().reshape(-1)
    sides = refiner.region.length * scales / scales.log().mean().exp()
    center = loop.kernel_inputs[best]
    # snapping integers and categories moves a point by up to one grid step (an
    # integer is 1/7 of the loop's cube: the arms' values are 1-8)
    step = torch.tensor([0.0, 1 / 7, 1.0, 1.0], dtype=DTYPE)
    assert bool(((new - center).abs() <= sides / 2 + step + 1e-9).all())


def test_refits_add_refined_arms_and_zero_counts_add_none():
    arms, loop, counts, fits = run(
        BBKB, ArmRefiner(count=0, seed=1, num_local=0, num_polished=0), 25
    )
    assert sum(counts) == 0 and arms.num_arms == space().num_arms
    refiner = ArmRefiner(count=20, seed=1, num_local=0, num_polished=0)
    arms, loop, counts, fits = run(BBKB, refiner, 25)
    assert refiner.refined_at == loop.refits.last
    assert 0 < sum(counts) <= 20 * len(fits)


def test_a_restored_refiner_draws_the_same_arms():
    refiner = ArmRefiner(count=10, seed=5, num_local=6, num_polished=0)
    arms, loop, _, _ = run(BBKB, refiner, 20)
    restored = ArmRefiner.from_state_dict(refiner.state_dict())
    assert restored.state_dict()["region"] == refiner.state_dict()["region"]
    first, second = space(), space()
    loop_a, loop_b = BBKB(first.features, seed=0), BBKB(second.features, seed=0)
    first.add_values(arms.values[first.num_arms :])
    second.add_values(arms.values[second.num_arms :])
    loop_a.load_state_dict(loop.state_dict())
    loop_b.load_state_dict(loop.state_dict())
    for ref, arm_set, lp in ((refiner, first, loop_a), (restored, second, loop_b)):
        index = lp.ask(1)
        lp.tell(index, objective(arm_set.values[index]))
        ref.refine(lp, arm_set)
    assert torch.equal(first.values, second.values)


def test_a_local_phase_adds_only_its_own_arms_and_asks_them():
    refiner = ArmRefiner(count=16, seed=2, num_local=8, num_polished=0)
    arms, loop, _, _ = run(BBKB, refiner, 99)  # a phase waits for 100 told
    assert refiner.local.strategy is None
    refiner.region.restarts += 1  # as if the region had just restarted
    index = loop.ask(1)
    loop.tell(index, objective(arms.values[index]))
    refiner.refine(loop, arms)
    phase = refiner.local
    assert phase.strategy is not None and phase.queue
    for _ in range(20):
        queued, before = list(phase.queue), arms.num_arms
        index = refiner.next_arm(loop, arms)
        assert index == queued[0]
        loop.ask_arms(torch.tensor([index]))
        loop.tell(torch.tensor([index]), objective(arms.values[[index]]))
        refiner.refine(loop, arms)
        added = set(range(before, arms.num_arms))
        assert added <= set(phase._arms)  # no trust-region or refined arms
        assert loop.arms.shape[0] == arms.num_arms
    assert phase.strategy.generation > 0
    # with another trial in flight the loop also picks: trust-region arms again
    other = loop.ask(1)
    index = refiner.next_arm(loop, arms)
    loop.ask_arms(torch.tensor([index]))
    loop.tell(torch.tensor([index]), objective(arms.values[[index]]))
    before = arms.num_arms
    refiner.refine(loop, arms)
    assert set(range(before, arms.num_arms)) - set(phase._arms)
    assert bool((loop.pending == other).any())
    off = ArmRefiner(count=16, seed=2, num_local=8, local_phase=False, num_polished=0)
    assert off.local is None and off.next_arm(None, None) is None


def test_a_fixed_kernel_gets_no_arms():
    arms = space()
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    loop = BBKB(arms.features, covar_module=kernel, seed=0, noise=0.1)
    refiner = ArmRefiner(count=10, seed=0, num_local=10, num_polished=0)
    for _ in range(12):
        index = loop.ask(1)
        loop.tell(index, objective(arms.values[index]))
        refiner.refine(loop, arms)
    assert arms.num_arms == space().num_arms and refiner.region is None


def test_bad_counts_name_themselves():
    with pytest.raises(ValueError, match="num_local"):
        ArmRefiner(num_local=-1)
    with pytest.raises(ValueError, match="num_refined"):
        ArmRefiner(count=-1, num_polished=0)


def test_polished_arms_improve_the_loops_ucb_from_its_best_arms(monkeypatch):
    # after a tell, `num_polished` L-BFGS-B runs on the loop's BKB-UCB start at its
    # arms of highest UCB; each added arm scores at least its start by BoTorch's
    # acquisition function on the loop's model, lies in the box and is snapped to
    # the domains
    refiner = ArmRefiner(count=0, seed=4, num_local=0, num_polished=0)
    arms, loop, _, _ = run(BBKB, refiner, 20)
    acquisition = BKBUpperConfidenceBound(loop.model, radius=loop.ucb_radius)
    starts = loop.ucb_scores().topk(2).indices
    best_start = float(acquisition(loop.arms[starts].unsqueeze(-2)).max())
    polisher = ArmRefiner(count=0, seed=4, num_local=0, num_polished=2)
    before = arms.num_arms
    polisher._add_polished(loop, arms)  # 4 arm dimensions: below the threshold
    assert arms.num_arms == before
    monkeypatch.setattr(arm_refinement, "POLISH_MIN_DIM", 4)
    polisher._add_polished(loop, arms)
    added = loop.arms[before:]
    assert 1 <= added.shape[0] <= 2
    low, high = loop.box
    assert bool(((added >= low) & (added <= high)).all())
    # the real-valued coordinate is free; the integer and category are snapped
    assert float(acquisition(added.unsqueeze(-2)).max()) >= best_start - 0.05
    values = arms.values[before:]
    assert bool((values[:, 1] == values[:, 1].round()).all())
    # with a trial in flight too (the posterior's UCB; the greedy counts the
    # pending arms when it picks)
    loop.ask(1)
    before = arms.num_arms
    polisher._add_polished(loop, arms)
    assert arms.num_arms > before


def test_num_polished_is_saved_and_checked():
    saved = ArmRefiner(num_polished=3).state_dict()
    assert ArmRefiner.from_state_dict(saved).num_polished == 3
    del saved["num_polished"]  # a state saved before polishing resumes without it
    assert ArmRefiner.from_state_dict(saved).num_polished == 0
    with pytest.raises(ValueError, match="num_polished"):
        ArmRefiner(num_polished=-1)
