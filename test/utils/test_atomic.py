r"""Atomic calls (``botorch_sketch.utils.atomic``) on the real components the loops
hold: updates of a candidate state and of both Thompson samplers, made inside
:func:`rolled_back_on_failure` and followed by a fault, leave the component as an
untouched twin, bit for bit, without recomputing anything; the same updates
made after the rollback agree with the twin's."""

from __future__ import annotations

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.generation.thompson_arms import (
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.sampling.arm_features import ArmFeatureCache
from botorch_sketch.utils.atomic import rolled_back_on_failure

DTYPE = torch.float64
NUM_ARMS = 60


class Fault(Exception):
    r"""The fault raised at the end of the rolled-back block."""


def arms_and_kernel():
    generator = torch.Generator().manual_seed(0)
    arms = torch.rand(NUM_ARMS, 2, generator=generator, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.2
    return arms, kernel


def batches(count, seed):
    r"""``count`` batch ends: observed indices, rewards and a dictionary of six
    arms, each a new one (so points keep entering and leaving)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        indices = torch.randint(NUM_ARMS, (5,), generator=generator)
        rewards = torch.randn(5, generator=generator, dtype=DTYPE)
        yield indices, rewards, torch.randperm(NUM_ARMS, generator=generator)[:6]


def candidate_state():
    arms, kernel = arms_and_kernel()
    state = CandidateState(arms, kernel, noise=0.3)
    for indices, rewards, dictionary in batches(3, seed=1):
        state.update(indices, rewards, dictionary)
    return state


def assert_same_candidate_state(actual, expected):
    for name in ("mean", "variance", "features", "gram_inverse", "counts"):
        assert torch.equal(getattr(actual, name), getattr(expected, name)), name
    assert torch.equal(actual.dictionary, expected.dictionary)
    assert actual.noise == expected.noise and actual.flops == expected.flops


def churn(state):
    r"""Enough dictionary changes to compact the cache and to fill and grow it."""
    for indices, rewards, dictionary in batches(12, seed=2):
        state.update(indices, rewards, dictionary)


@pytest.mark.parametrize("change", [churn, lambda state: state.refresh(0.7)])
def test_a_rolled_back_candidate_state_is_as_before(change):
    # updates, compactions and a refresh write the A x m cache aside (or past
    # its used columns): the rollback takes the very buffer back, uncopied
    state, twin = candidate_state(), candidate_state()
    buffer = state._store.buffer
    with pytest.raises(Fault), rolled_back_on_failure(state):
        change(state)
        assert state._store.buffer is not buffer
        raise Fault
    assert state._store.buffer is buffer
    assert_same_candidate_state(state, twin)
    for each in (state, twin):
        for indices, rewards, dictionary in batches(4, seed=3):
            each.update(indices, rewards, dictionary)
    assert_same_candidate_state(state, twin)


@pytest.mark.parametrize("spare", [False, True], ids=["new buffer", "spare columns"])
def test_a_rolled_back_append_of_candidates_is_as_before(spare):
    # the appended candidates' raw columns go into a new, wider buffer, or into
    # the spare columns of the held one, past its used candidates: the rollback
    # takes the held buffer back, and later appends agree with the twin's
    state, twin = candidate_state(), candidate_state()
    points = torch.rand(12, 2, generator=torch.Generator().manual_seed(9)).to(DTYPE)
    if spare:
        for each in (state, twin):
            each.append_points(points[:2])
    buffer = state._store.buffer
    with pytest.raises(Fault), rolled_back_on_failure(state):
        state.append_points(points[2:7])
        state.update(torch.tensor([NUM_ARMS + 3]), torch.ones(1, dtype=DTYPE), None)
        state.add_to_dictionary(NUM_ARMS + 3)
        assert (state._store.buffer is buffer) == spare
        raise Fault
    assert state._store.buffer is buffer
    assert_same_candidate_state(state, twin)
    for each in (state, twin):
        each.append_points(points[7:])
        for indices, rewards, dictionary in batches(4, seed=3):
            each.update(
                indices, rewards, torch.cat([dictionary, torch.tensor([NUM_ARMS + 4])])
            )
    assert_same_candidate_state(state, twin)


def sampler(kind):
    arms, kernel = arms_and_kernel()
    cache = ArmFeatureCache(arms, kernel, 64, basis_seed=5)
    if kind == "sparse":
        built = CachedSparseThompson(cache, 0.3, num_inducing=4, prior_block=4)
    else:
        built = IncrementalExactThompson(cache, 0.3, prior_block=4)
    indices, rewards, _ = next(batches(1, seed=4))
    built.observe(indices, rewards, (rewards - 0.1) / 2.0)
    return built


def observe(sampler, count, seed):
    r"""``count`` times: a repeat of an inducing (or observed) arm, which the
    sparse sampler adds by a rank-one update, then a batch of new arms."""
    for indices, rewards, _ in batches(count, seed):
        sampler.observe(sampler.update_arms[:1], rewards[:1])
        sampler.observe(indices, rewards)
        sampler.set_targets((sampler.rewards - 0.2) / 1.5)


def draws(sampler):
    r"""Path values of five draws of two paths (the prior bank refills once)."""
    generator = torch.Generator().manual_seed(6)
    return [sampler.sample_values(2, 0.8, generator) for _ in range(5)]


@pytest.mark.parametrize("kind", ["sparse", "exact"])
def test_a_rolled_back_sampler_is_as_before(kind):
    # observations one at a time (the sparse sampler's rank-one updates) and in
    # batches (re-selections that reuse freed column slots), draws from the
    # bank, new targets
    rolled, twin = sampler(kind), sampler(kind)
    reselections = getattr(rolled, "reselections", 0)
    with pytest.raises(Fault), rolled_back_on_failure(rolled):
        observe(rolled, 6, seed=7)
        draws(rolled)
        if kind == "sparse":  # columns of dropped inducing points were reused
            assert rolled.reselections > reselections + 1
        raise Fault
    assert torch.equal(rolled.observed, twin.observed)
    assert torch.equal(rolled.update_arms, twin.update_arms)
    assert rolled.cache.num_columns == twin.cache.num_columns
    assert_same_draws(rolled, twin)
    for each in (rolled, twin):  # a rank-one update of the restored statistics
        each.observe(each.update_arms[:1], torch.ones(1, dtype=DTYPE))
    assert_same_draws(rolled, twin)
    for each in (rolled, twin):
        observe(each, 2, seed=8)
    assert_same_draws(rolled, twin)


def assert_same_draws(sampler, twin):
    for values, expected in zip(draws(sampler), draws(twin), strict=True):
        assert torch.equal(values, expected)
