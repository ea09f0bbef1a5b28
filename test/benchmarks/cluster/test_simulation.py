r"""The event simulation against brute-force schedules and closed-form makespans;
validation."""

import dataclasses
import functools
import heapq
import math

import numpy as np
import pytest
import torch

from benchmarks.cluster import report
from benchmarks.cluster.methods import METHODS, SynchronousBatches
from benchmarks.cluster.report import busy_fraction
from benchmarks.cluster.simulation import simulate
from benchmarks.methods import BenchmarkMethod
from benchmarks.policies.baselines import Uniform
from benchmarks.problems import make_problem

from .helpers import greedy_schedule, heap_simulation, world


@pytest.mark.parametrize("workers", [1, 7, 50])
def test_never_waiting_methods_keep_all_workers_busy(problem, workers):
    horizon = 80
    durations = world(3, horizon)
    trace = simulate(problem, "uniform", workers=workers, horizon=horizon, seed=3)
    ends, last_start = greedy_schedule(durations, workers)
    np.testing.assert_allclose(report.times(trace), ends)
    # every worker is busy until the last evaluation starts
    assert trace.metadata["last_start"] == pytest.approx(last_start)
    assert report.utilization_until_last_start(trace) == pytest.approx(1.0)
    # busy worker-time at the end is the sum of all durations
    assert report.busy(trace)[-1] == pytest.approx(durations.sum())
    assert report.utilization(trace)[-1] == pytest.approx(
        durations.sum() / (workers * report.makespan(trace))
    )
    # S-GP-TS never waits either: the same schedule (common random numbers)
    for method in ("sgpts-async", "gpts-async"):
        run = simulate(problem, method, workers=workers, horizon=horizon, seed=3)
        np.testing.assert_allclose(report.times(run), report.times(trace))
        assert run.metadata["empty_asks"] == 0


def test_uniform_values_are_its_arms_in_completion_order(problem):
    horizon, workers = 40, 6
    trace = simulate(problem, "uniform", workers=workers, horizon=horizon, seed=1)
    durations = world(1, horizon)
    g = torch.Generator().manual_seed(2)
    arms, ends = [], []
    heap, now, started = [], 0.0, 0
    while len(arms) < horizon:  # an independent re-simulation
        free = min(workers - len(heap), horizon - started)
        if free:
            for arm in torch.randint(300, (free,), generator=g).tolist():
                heapq.heappush(heap, (now + durations[started], arm))
                started += 1
        now, arm = heapq.heappop(heap)
        arms.append(arm)
        ends.append(now)
    np.testing.assert_allclose(report.times(trace), ends)
    np.testing.assert_array_equal(trace.values, problem.arm_values[arms].numpy())


def test_sequential_and_fixed_batches_have_closed_form_makespans(problem, monkeypatch):
    horizon, workers = 60, 8
    durations = world(0, horizon)
    bkb = simulate(problem, "bkb", workers=workers, horizon=horizon, seed=0)
    assert report.makespan(bkb) == pytest.approx(durations.sum())
    np.testing.assert_allclose(report.times(bkb), np.cumsum(durations))
    assert report.utilization(bkb)[-1] == pytest.approx(1 / workers)
    assert bkb.metadata["last_start"] == pytest.approx(durations[:-1].sum())
    assert report.utilization_until_last_start(bkb) == pytest.approx(1 / workers)
    grid = np.geomspace(0.01, 2 * report.makespan(bkb), 50)
    fraction = busy_fraction(bkb, grid)
    inside = grid <= report.makespan(bkb)
    np.testing.assert_allclose(fraction[inside], 1 / workers)
    assert np.isnan(fraction[~inside]).all() and inside.sum() > 40

    def fixed_batches(problem, horizon, generator, *, workers):
        return SynchronousBatches(Uniform(problem, horizon, generator, batch_size=5))

    fixed = BenchmarkMethod("fixed", "batches of 5", fixed_batches)
    monkeypatch.setitem(METHODS, "fixed", fixed)
    trace = simulate(problem, "fixed", workers=workers, horizon=horizon, seed=0)
    batch_ends = np.cumsum(durations.reshape(-1, 5).max(axis=1))
    np.testing.assert_allclose(report.times(trace)[4::5], batch_ends)
    assert report.busy(trace)[-1] == pytest.approx(durations.sum())
    # the last batch starts when the one before it ends
    assert trace.metadata["last_start"] == pytest.approx(batch_ends[-2])
    assert report.utilization_until_last_start(trace) == pytest.approx(
        durations[:-5].sum() / (workers * batch_ends[-2])
    )
    # all 5 of a batch's evaluations run from its start to their ends
    first = durations[:5]
    grid = np.sort(first)
    expected = [np.mean(np.minimum(first, g) - np.minimum(first, a)) * 5 / (g - a) / 8
                for a, g in zip(np.r_[0, grid[:-1]], grid, strict=True)]  # fmt: skip
    np.testing.assert_allclose(busy_fraction(trace, grid), expected)
    # 12 batches; every other completion finds free workers and an empty answer
    asks, empty = trace.metadata["num_asks"], trace.metadata["empty_asks"]
    assert asks - empty == 12 and empty == 11 * 4


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_completes_the_horizon(problem, method):
    trace = simulate(problem, method, workers=10, horizon=50, seed=0)
    assert trace.horizon == 50 and np.all(np.diff(report.times(trace)) >= 0)
    assert 0 < report.utilization(trace)[-1] <= 1 + 1e-12
    summary = report.run_summary(trace)
    assert summary["ms_per_suggestion"] > 0 and summary["ask_p99_ms"] > 0
    if method.endswith("-learned"):  # refits ran, inside the loop's CPU time
        assert 0 < summary["refit_share"] < 1
    else:
        assert math.isnan(summary["refit_share"])


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_run_on_run_parallel_is_the_heap_loop_to_the_bit(
    problem, method, monkeypatch
):
    r"""Every method, with waits, ties of end times (``sigma = 0``) and without:
    the same arms asked in the same order, the same times, values and busy time."""
    build, asked = METHODS[method], []

    @functools.wraps(build.build)  # with its signature: the same options
    def recorded(*args, **options):
        runner = build.build(*args, **options)
        ask = runner.ask

        def ask_and_record(free):
            chosen = ask(free)
            asked.extend(chosen.tolist())
            return chosen

        runner.ask = ask_and_record
        return runner

    for workers, horizon, seed, sigma in ((6, 40, 1, 1.0), (3, 20, 2, 0.0)):
        times, values, busy, arms, num_asks, empty_asks, last_start = heap_simulation(
            problem, method, workers, horizon, seed, 2.0, sigma
        )
        asked.clear()
        with monkeypatch.context() as patch:
            patch.setitem(METHODS, method, dataclasses.replace(build, build=recorded))
            trace = simulate(
                problem,
                method,
                workers=workers,
                horizon=horizon,
                seed=seed,
                duration_mean=2.0,
                duration_sigma=sigma,
            )
        assert asked == arms
        np.testing.assert_array_equal(report.times(trace), times)
        np.testing.assert_array_equal(trace.values, values)
        np.testing.assert_array_equal(report.busy(trace), busy)
        asks = (trace.metadata["num_asks"], trace.metadata["empty_asks"])
        assert asks == (num_asks, empty_asks)
        assert trace.metadata["last_start"] == last_start


def test_lognormal_durations_have_the_requested_mean(problem):
    trace = simulate(
        problem,
        "uniform",
        workers=1000,
        horizon=20_000,
        duration_mean=2.0,
        duration_sigma=0.5,
    )
    # sum of 20,000 log-normals: relative standard error 0.53 / sqrt(20,000) < 0.4%
    assert report.busy(trace)[-1] / 20_000 == pytest.approx(2.0, rel=0.015)


def test_bad_inputs(problem, monkeypatch):
    box = make_problem("rosenbrock:dim=2:arms=none:lengthscale=0.5")
    with pytest.raises(ValueError, match="finite"):
        simulate(box, "uniform", workers=2, horizon=3)
    with pytest.raises(ValueError, match="method"):
        simulate(problem, "bbkb", workers=2, horizon=3)
    for workers in (0, 1001):
        with pytest.raises(ValueError, match="workers"):
            simulate(problem, "uniform", workers=workers, horizon=3)
    with pytest.raises(TypeError, match="workers"):
        simulate(problem, "uniform", workers=2.0, horizon=3)
    with pytest.raises(ValueError, match="horizon"):
        simulate(problem, "uniform", workers=2, horizon=0)
    with pytest.raises(ValueError, match="duration_sigma"):
        simulate(problem, "uniform", workers=2, horizon=3, duration_sigma=-1.0)
    with pytest.raises(ValueError, match="duration_mean"):
        simulate(problem, "uniform", workers=2, horizon=3, duration_mean=math.inf)

    class Greedy(Uniform):
        def ask(self, free):
            return torch.zeros(free + 1, dtype=torch.long)

    class Stuck(Uniform):
        def ask(self, free):
            return torch.zeros(0, dtype=torch.long)

    for name, kind, error in (
        ("greedy", Greedy, ValueError),
        ("stuck", Stuck, RuntimeError),
    ):

        def build(problem, horizon, generator, *, workers, kind=kind):
            return kind(problem, 3, generator)

        monkeypatch.setitem(METHODS, name, BenchmarkMethod(name, name, build))
        with pytest.raises(error, match=name):
            simulate(problem, name, workers=2, horizon=3)
