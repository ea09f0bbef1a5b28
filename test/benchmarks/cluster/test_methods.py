r"""The cluster methods: synchronous batches told in order, asynchronous BBKB's
settings, exact GP-TS sharing S-GP-TS's basis."""

import copy
import math

import numpy as np
import pytest
import torch

from benchmarks.cluster import report
from benchmarks.cluster.methods import (
    METHODS,
    SynchronousBatches,
    method_options,
)
from benchmarks.cluster.simulation import simulate
from benchmarks.methods import BenchmarkMethod
from benchmarks.policies.baselines import Uniform
from botorch_sketch.generation.bbkb_loop import asynchronous_options
from botorch_sketch.generation.sgpts_loop import ExactGPTS
from botorch_sketch.generation.thompson_arms import IncrementalExactThompson


def test_exact_thompson_baseline_shares_the_basis_and_ignores_pending(problem):
    def build(name):
        return METHODS[name](problem, 30, torch.Generator().manual_seed(5), workers=4)

    exact, sparse = build("gpts-async"), build("sgpts-async")
    assert isinstance(exact, ExactGPTS)
    assert isinstance(exact.sampler, IncrementalExactThompson)
    # the same feature basis and the same uniform first arms as asynchronous S-GP-TS
    features = exact.sampler.cache.features
    assert torch.equal(features, sparse.sampler.cache.features)
    first = exact.ask(4)
    assert torch.equal(first, sparse.ask(4))
    values = problem.arm_values[first]
    exact.tell(first[:2], values[:2])  # two still pending
    sampler = exact.sampler
    assert torch.equal(sampler.observed, first[:2])
    assert torch.equal(exact.pending, first[2:])
    # its paths are the exact sampler's (tested against BoTorch's Matheron paths)
    by_hand = copy.deepcopy(sampler)
    g = torch.Generator().manual_seed(0)
    g.set_state(exact.generator.get_state())
    assert torch.equal(exact.ask(3), by_hand.sample(3, 1.0, g).indices)


def test_methods_are_the_main_benchmarks_records(problem):
    synchronous, uses_ratio = set(), set()
    for name, method in METHODS.items():
        assert isinstance(method, BenchmarkMethod) and method.name == name
        options = method_options(name, 4)
        built = method(problem, 30, torch.Generator().manual_seed(0), **options)
        if isinstance(built, SynchronousBatches):
            synchronous.add(name)
        if "ratio_threshold" in options:
            uses_ratio.add(name)
    assert synchronous == {"bkb", "bbkb-sync", "gp-bucb"}
    assert uses_ratio == {"bbkb-sync", "bbkb-async"}
    with pytest.raises(ValueError, match="ratio_threshold"):
        METHODS["uniform"](problem, 30, torch.Generator(), workers=4, ratio_threshold=2)


def test_synchronous_batches_tell_the_batch_in_asked_order(problem):
    class Recorder(Uniform):
        def ask(self, max_arms=None):
            return torch.tensor([4, 2, 4])

        def tell(self, chosen, rewards):
            self.told = (chosen.tolist(), rewards.tolist())

    policy = Recorder(problem, 10, torch.Generator())
    method = SynchronousBatches(policy)
    assert method.ask(2).tolist() == [4, 2]  # truncated to the free workers
    assert method.ask(2).numel() == 0  # waits while the batch runs
    method.tell(torch.tensor([2]), torch.tensor([0.5]))
    assert not hasattr(policy, "told")
    method.tell(torch.tensor([4]), torch.tensor([0.25]))
    assert policy.told == ([4, 2], [0.25, 0.5])


def test_bbkb_async_on_one_worker_is_sequential_bkb(problem):
    runs = [
        simulate(problem, name, workers=1, horizon=40, seed=2)
        for name in ("bkb", "bbkb-async")
    ]
    np.testing.assert_array_equal(runs[0].values, runs[1].values)
    np.testing.assert_allclose(report.times(runs[0]), report.times(runs[1]))


def test_bbkb_async_settings_follow_the_workers_and_flops_are_counted(problem):
    def build(**options):
        generator = torch.Generator().manual_seed(0)
        return METHODS["bbkb-async"](problem, 100, generator, workers=40, **options)

    loop = build()
    # outputscale 1 and noise variance 1: C~ = 1 + 0.07 x 40, a cap of 40 + 40 / 20
    assert asynchronous_options(40)["ratio_threshold"](1.0) == pytest.approx(3.8)
    assert loop.options.ratio_threshold == pytest.approx(3.8)
    assert loop.options.max_batch_size == 42 and loop.options.end_fraction == 0.05
    two = build(ratio_threshold=2.0)
    assert two.options.ratio_threshold == 2.0
    runs = {
        name: simulate(problem, name, workers=10, horizon=60, seed=0)
        for name in ("bbkb-async", "bbkb-sync", "uniform")
    }
    assert runs["bbkb-async"].policy == "bbkb-async"  # the default: no C~ in it
    for name in ("bbkb-async", "bbkb-sync"):
        assert runs[name].metadata["gflop"] > 0
        assert report.run_summary(runs[name])["mflop_per_suggestion"] == pytest.approx(
            1e3 * runs[name].metadata["gflop"] / 60
        )
    assert math.isnan(runs["uniform"].metadata["gflop"])
    given = simulate(problem, "bbkb-async", workers=10, horizon=60, ratio_threshold=2)
    assert given.policy == "bbkb-async-c2"
