r"""The repeat rule of the loops: no configuration twice on a deterministic objective
(pending arms included), repeats on a noisy one only where one more evaluation
removes at least ``delta k(x, x)`` (checked on a dense DTC posterior), and the
papers' batches unchanged with a fixed kernel."""

from __future__ import annotations

import math

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BBKB, SGPTS
from botorch_sketch.generation.bbkb import gen_bbkb_batch
from botorch_sketch.generation.hyperparameters import MIN_LEARNED_NOISE
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.repeats import (
    DEFAULT_MIN_REPEAT_REDUCTION,
    DETERMINISTIC_NOISE,
    EQUAL_REPEATS,
    holds_told_arms,
    repeat_reduction,
    repeat_threshold,
    repeats_agree,
)

DTYPE = torch.float64


def objective(X):
    return -((X - 0.3) ** 2).sum(-1)


def _arms(n=300, d=2, seed=0):
    return torch.rand(n, d, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def _kernel(lengthscale=0.3):
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = lengthscale
    return kernel


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_a_self_tuning_loop_never_repeats_a_deterministic_objective(loop_class):
    arms = _arms()
    loop = loop_class(arms, seed=0)
    asked = []
    for _ in range(60):  # BBKB's batches: one arm or more
        told_repeat = len(set(asked)) < len(asked)
        deterministic = loop.noise <= DETERMINISTIC_NOISE or told_repeat
        indices = loop.ask(4) if loop_class is SGPTS else loop.ask()
        # a repeat only while a fit has found noise (a few observations may) and
        # before a repeat has shown the same reward
        assert not (deterministic and set(indices.tolist()) & set(asked))
        asked += indices.tolist()
        loop.tell(indices, objective(arms[indices]))
    assert loop.noise <= DETERMINISTIC_NOISE  # deterministic: lambda at its floor
    assert len(asked) >= 60 and len(set(asked)) >= len(asked) - 2


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_pending_arms_are_not_asked_again(loop_class):
    # asynchronous asks: half of each ask stays pending across the next asks
    arms = _arms(200)
    loop = loop_class(
        arms, covar_module=_kernel(), noise=0.01, seed=1, min_repeat_reduction=math.inf
    )
    loop.ask_arms(torch.tensor([5, 6]))
    asked = [5, 6]
    for _ in range(25):
        indices = loop.ask(3, wait=False)
        asked += indices.tolist()
        assert not set(indices.tolist()) & set(loop.observed.tolist())
        done = loop.pending[: max(1, loop.pending.numel() // 2)]
        loop.tell(done, objective(arms[done]))
    assert len(set(asked)) == len(asked)


def _dense_scaled_variance(loop, index, hallucinated):
    r"""``sigma~^2(x)`` of a BBKB loop's DTC posterior on its dictionary, with the
    batch arms ``hallucinated``, from dense matrices."""
    X, kernel, noise = loop.kernel_inputs, loop.covar_module, loop.noise
    with torch.no_grad():
        S = X[loop.state.dictionary]
        L = torch.linalg.cholesky(kernel(S, S).to_dense())
        features = torch.linalg.solve_triangular(
            L, kernel(S, X).to_dense(), upper=False
        ).mT
        rows = torch.cat([loop.observed[: loop.incorporated], hallucinated])
        Z = features[rows]
        V = Z.mT @ Z + noise * torch.eye(Z.shape[1], dtype=DTYPE)
        z = features[index]
        prior = kernel(X[index : index + 1], diag=True)[0]
        return (prior - z @ z) / noise + z @ torch.linalg.solve(V, z), prior


def _repeats(loop, batch):
    r"""The arms of ``batch`` chosen earlier in it (a noisy objective's told arms
    may open a batch again; the rule holds their further copies)."""
    return [
        s for s, index in enumerate(batch.tolist()) if index in set(batch[:s].tolist())
    ]


def test_noisy_repeats_follow_the_rule_on_a_dense_posterior():
    arms = _arms(150)
    delta = 1e-3
    options = {"covar_module": _kernel(), "noise": 0.2, "radius": 0.1}
    loop = BBKB(
        arms, seed=0, ratio_threshold=6.0, min_repeat_reduction=delta, **options
    )
    papers = BBKB(arms, seed=0, ratio_threshold=6.0, **options)
    noise = torch.Generator().manual_seed(2)
    repeats = papers_repeats = 0
    for _ in range(12):
        batch = loop.ask()
        for s in _repeats(loop, batch):
            scaled, prior = _dense_scaled_variance(loop, int(batch[s]), batch[:s])
            reduction = repeat_reduction(scaled, prior, loop.noise)
            assert float(reduction) >= delta * (1 - 1e-8)
            repeats += 1
        y = objective(arms[batch])
        loop.tell(batch, y + 0.2 * torch.randn(y.shape, generator=noise, dtype=DTYPE))
        indices = papers.ask()
        papers_repeats += len(_repeats(papers, indices))
        papers.tell(indices, objective(arms[indices]))
    assert 0 < repeats < papers_repeats / 2


def _walked_argmaxes(loop, values, pending, delta):
    r"""The S-GP-TS repeat rule, arm by arm (the brute force): each path walks its
    arms in decreasing value and takes the first one not pending, or pending with
    one more evaluation removing at least ``delta k(x, x)``, its own pending
    copies hallucinated; passed-over arms stay passed over. (A noisy objective's
    told arms count as fresh.)"""
    sampler = loop.sampler
    copies = torch.bincount(pending, minlength=values.shape[0])
    measured = (copies > 0).tolist()
    spent, picks = set(), []
    for column in values.unbind(-1):
        pick = int(column.argmax())
        for index in column.argsort(descending=True).tolist():
            if index in spent:
                continue
            if not measured[index]:
                pick = index
                break
            x = sampler.cache.arms[index : index + 1]
            prior = sampler.cache.kernel(x, diag=True).detach()
            told = sampler.variance(torch.tensor([index])) / sampler.noise
            scaled = told / (1 + copies[index] * told)
            if float(repeat_reduction(scaled, prior, sampler.noise)) >= delta:
                pick = index
                break
            spent.add(index)
        copies[pick] += 1
        measured[pick] = True
        picks.append(pick)
    return picks


@pytest.mark.parametrize("delta", [1e-3, 0.2])
def test_sgpts_walks_blocks_of_arms_as_the_arm_by_arm_rule(delta):
    # many arms pending: with delta 0.2 no further copy pays and the paths walk
    # past more than a block of them; with 1e-3 some pending arms are taken again
    arms = _arms(400)
    loop = SGPTS(
        arms,
        covar_module=_kernel(0.15),
        noise=0.05,
        seed=3,
        num_inducing=60,
        min_repeat_reduction=delta,
    )
    noise = torch.Generator().manual_seed(5)
    for _ in range(75):
        indices = loop.ask(4)
        y = objective(arms[indices])
        loop.tell(indices, y + 0.2 * torch.randn(y.shape, generator=noise, dtype=DTYPE))
    values = loop.sampler.sample_values(12, 1.0, torch.Generator().manual_seed(8))
    # the 150 best arms of the first path pending
    pending = values[:, 0].topk(150).indices
    expected = _walked_argmaxes(loop, values, pending, delta)
    assert loop._admitted_argmaxes(values, pending).tolist() == expected
    measured = set(pending.tolist())
    ranks = [
        int((column > column[pick]).sum())
        for column, pick in zip(values.unbind(-1), expected, strict=True)
    ]
    if delta == 0.2:
        assert not set(expected) & measured and max(ranks) > 64
    else:
        assert set(expected) & measured


def test_a_fixed_kernel_loop_keeps_the_papers_batches():
    arms = _arms(200)
    loop = BBKB(arms, covar_module=_kernel(0.5), noise=1.0, radius=0.5, seed=0)
    assert loop._repeat_threshold() == 0.0
    noise = torch.Generator().manual_seed(4)
    sizes = []
    for step in range(15):
        indices = loop.ask()
        sizes.append((indices.numel(), indices.unique().numel()))
        if step > 0:
            batch = gen_bbkb_batch(loop.model, arms, ratio_threshold=2.0, radius=0.5)
            assert torch.equal(indices, batch.indices)
        y = objective(arms[indices])
        loop.tell(
            indices, y + 0.01 * torch.randn(y.shape, generator=noise, dtype=DTYPE)
        )
    assert any(size > distinct for size, distinct in sizes)  # repeats kept


def test_threshold_resolution():
    assert repeat_threshold(None, learned_kernel=False, learned_noise=None) == 0.0
    floor = repeat_threshold(None, learned_kernel=True, learned_noise=MIN_LEARNED_NOISE)
    assert floor == math.inf
    at_botorch_floor = repeat_threshold(
        None, learned_kernel=True, learned_noise=DETERMINISTIC_NOISE
    )
    assert at_botorch_floor == math.inf
    assert (
        repeat_threshold(None, learned_kernel=True, learned_noise=0.01)
        == DEFAULT_MIN_REPEAT_REDUCTION
    )
    assert repeat_threshold(0.5, learned_kernel=True, learned_noise=1e-4) == 0.5
    # told arms are held only on a deterministic objective
    assert holds_told_arms(math.inf)
    assert not holds_told_arms(DEFAULT_MIN_REPEAT_REDUCTION) and not holds_told_arms(
        0.0
    )


@pytest.mark.parametrize("options_class", [BBKBOptions, SGPTSOptions])
@pytest.mark.parametrize(
    "value, error",
    [
        (-1.0, ValueError),
        (float("nan"), ValueError),
        (True, TypeError),
        ("a", TypeError),
    ],
)
def test_bad_min_repeat_reduction(options_class, value, error):
    with pytest.raises(error, match="min_repeat_reduction"):
        options_class(min_repeat_reduction=value)


def test_repeats_agree_against_a_brute_force_check():
    generator = torch.Generator().manual_seed(0)
    for trial in range(200):
        t = int(torch.randint(1, 12, (1,), generator=generator))
        observed = torch.randint(0, 6, (t,), generator=generator)
        rewards = torch.randint(0, 3, (t,), generator=generator).to(DTYPE)
        if trial % 3 == 0:  # a deterministic objective
            rewards = observed.to(DTYPE) ** 2
        if trial % 7 == 0:  # agreement up to rounding
            rewards = rewards + EQUAL_REPEATS * 0.1 * torch.rand(t, generator=generator)
        spread = float(rewards.max() - rewards.min())
        by_arm: dict[int, list[float]] = {}
        for arm, reward in zip(observed.tolist(), rewards.tolist(), strict=True):
            by_arm.setdefault(arm, []).append(reward)
        repeated = [values for values in by_arm.values() if len(values) > 1]
        expected = bool(repeated) and all(
            max(v) - min(v) <= EQUAL_REPEATS * spread for v in repeated
        )
        assert repeats_agree(observed, rewards) == expected


def test_agreeing_repeats_stop_the_repeats_of_a_self_tuning_loop():
    learned = {"learned_kernel": True, "learned_noise": 0.05}
    assert repeat_threshold(None, **learned) == DEFAULT_MIN_REPEAT_REDUCTION
    assert repeat_threshold(None, **learned, repeats_agree=True) == math.inf
    assert repeat_threshold(0.2, **learned, repeats_agree=True) == 0.2
    fixed = {"learned_kernel": False, "learned_noise": None, "repeats_agree": True}
    assert repeat_threshold(None, **fixed) == 0.0


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_once_a_repeat_gave_the_same_reward_a_rough_objective_is_not_repeated(
    loop_class,
):
    # a deterministic objective that a smooth kernel fits with noise: the learned
    # lambda alone would let arms be measured again (11 and 2 repeats without the
    # agreement rule)
    arms = _arms(200)

    def rough(x):
        steps = torch.sign(torch.sin(25 * x[:, 0])) + torch.sign(
            torch.sin(17 * x[:, 1])
        )
        return steps + x.sum(-1)

    loop, asked, late = loop_class(arms, seed=0), [], 0
    for _ in range(50):
        told_repeat = len(set(asked)) < len(asked)
        indices = loop.ask(2) if loop_class is SGPTS else loop.ask()
        late += told_repeat * len(set(indices.tolist()) & set(asked))
        asked += indices.tolist()
        loop.tell(indices, rough(arms[indices]))
    assert late == 0 and len(set(asked)) >= len(asked) - 2
