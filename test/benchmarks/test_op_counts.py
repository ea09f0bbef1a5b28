from __future__ import annotations

import pytest
import torch

from benchmarks import methods
from benchmarks.methods import (
    BenchmarkMethod,
    PolicyConfig,
    register_method,
)
from benchmarks.op_counts import OpCounter
from benchmarks.problems import make_synthetic_problem
from benchmarks.runner import count_operations, run_policy


def test_counter_sees_each_call_and_the_host_reads():
    x = torch.arange(6.0)
    with OpCounter() as counter:
        float(x.sum())  # sum + a host read
        x[torch.tensor([0, 2])]  # integer indexing: no read
        x[x > 2]  # comparison + boolean mask (a hidden nonzero)
        torch.nonzero(x)
        bool(x.any())  # any + a host read
    assert counter.calls == {
        "aten.sum": 1,
        "aten._local_scalar_dense": 2,
        "aten.lift_fresh": 1,
        "aten.index": 2,
        "aten.gt": 1,
        "aten.nonzero": 1,
        "aten.any": 1,
    }
    assert counter.syncs == {
        "aten._local_scalar_dense": 2,
        "aten.index": 1,
        "aten.nonzero": 1,
    }
    assert (counter.total_calls, counter.total_syncs) == (9, 4)


class Chatty:
    r"""Plays arms ``0..size-1`` and reads ``reads`` numbers to the host per ask."""

    def __init__(self, problem, horizon, generator, *, size=4, reads=0):
        self.size, self.reads = size, reads

    def ask(self, max_arms=None):
        scores = torch.ones(self.size)
        for _ in range(self.reads):
            float(scores[0])  # select + host read
        return torch.arange(min(self.size, max_arms))

    def tell(self, chosen, rewards):
        pass


@pytest.fixture
def chatty(monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))
    register_method(BenchmarkMethod("chatty", "test", Chatty))


@pytest.fixture(scope="module")
def problem():
    return make_synthetic_problem("ackley", dim=2, num_arms=40, noise_std=0.5)


def test_counts_per_evaluation_grow_by_what_the_method_adds(chatty, problem):
    # the runner's own calls are the same in both; the method's extra reads are
    # 2 calls and 1 host read each, 3 reads per batch of 4 evaluations
    quiet = count_operations(problem, PolicyConfig("chatty"), 40, 0, 20)
    loud = count_operations(
        problem, PolicyConfig("chatty", options={"reads": 3}), 40, 0, 20
    )
    extra_calls = loud["aten_calls_per_evaluation"] - quiet["aten_calls_per_evaluation"]
    extra_syncs = loud["syncs_per_evaluation"] - quiet["syncs_per_evaluation"]
    assert extra_calls == pytest.approx(2 * 3 / 4)
    assert extra_syncs == pytest.approx(3 / 4)
    assert quiet["syncs_per_evaluation"] > 0  # the runner checks the batch


def test_run_policy_keeps_the_counts_in_the_trace(chatty, problem):
    config = PolicyConfig("chatty", options={"reads": 2})
    trace = run_policy(problem, config, 12, seed=0, progress=False)
    assert "aten_calls_per_evaluation" not in trace.summary()
    counted = run_policy(
        problem, config, 12, seed=0, progress=False, counted_evaluations=8
    )
    expected = count_operations(problem, config, 12, 0, 8)
    assert {key: counted.summary()[key] for key in expected} == expected
    with pytest.raises(ValueError, match="counted_evaluations"):
        run_policy(problem, config, 12, progress=False, counted_evaluations=-1)
