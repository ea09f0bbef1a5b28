r"""The simulated cluster: event times against brute-force schedules, utilization and
makespan in closed form, adapters, validation, the CLI."""

import copy
import dataclasses
import heapq
import json
import math

import numpy as np
import pytest
import torch

from botorch_sketch.benchmarks import cluster
from botorch_sketch.benchmarks.cluster import (
    METHODS,
    ClusterTrace,
    SynchronousMethod,
    UniformMethod,
    simulate,
    summarize,
    time_to_reach,
)
from botorch_sketch.benchmarks.policies.baselines import UniformPolicy
from botorch_sketch.benchmarks.problems import make_problem
from botorch_sketch.generation.bbkb_loop import asynchronous_options


@pytest.fixture(scope="module")
def problem():
    return make_problem("rosenbrock:dim=3:arms=300:noise_variance=1:lengthscale=0.5")


def _world(seed, horizon, sigma=1.0, mean=1.0):
    r"""Durations and noise of the ``k``-th started evaluation, drawn independently
    of the simulator's code path from the documented seeding."""
    g = torch.Generator().manual_seed(2 * seed + 1)
    z = torch.randn(horizon, generator=g, dtype=torch.float64)
    return (mean * torch.exp(sigma * z - sigma**2 / 2)).numpy()


def _greedy_schedule(durations, workers):
    r"""Brute force: job ``k`` starts on the earliest free worker as soon as one is
    free (jobs in order, nobody waits); the completion times, sorted, and the last
    job's start."""
    free_at = [0.0] * workers
    ends = []
    for d in durations:
        i = int(np.argmin(free_at))
        start = free_at[i]
        free_at[i] += d
        ends.append(free_at[i])
    return np.sort(ends), start


@pytest.mark.parametrize("workers", [1, 7, 50])
def test_never_waiting_methods_keep_all_workers_busy(problem, workers):
    horizon = 80
    durations = _world(3, horizon)
    trace = simulate(problem, "uniform", workers=workers, horizon=horizon, seed=3)
    ends, last_start = _greedy_schedule(durations, workers)
    np.testing.assert_allclose(trace.times, ends)
    # every worker is busy until the last evaluation starts
    assert trace.last_start == pytest.approx(last_start)
    assert trace.utilization_until_last_start() == pytest.approx(1.0)
    # busy worker-time at the end is the sum of all durations
    assert trace.busy[-1] == pytest.approx(durations.sum())
    assert trace.utilization()[-1] == pytest.approx(
        durations.sum() / (workers * trace.makespan)
    )
    # S-GP-TS never waits either: the same schedule (common random numbers)
    for method in ("sgpts-async", "gpts-async"):
        run = simulate(problem, method, workers=workers, horizon=horizon, seed=3)
        np.testing.assert_allclose(run.times, trace.times)
        assert run.empty_asks == 0


def test_exact_thompson_baseline_shares_the_basis_and_ignores_pending(problem):
    def setup():
        return cluster.MethodSetup(problem, 4, 30, torch.Generator().manual_seed(5))

    exact, sparse = METHODS["gpts-async"](setup()), METHODS["sgpts-async"](setup())
    # the same feature basis and the same uniform first arms as asynchronous S-GP-TS
    assert torch.equal(exact.sampler.cache.features, sparse.loop.sampler.cache.features)
    first = exact.ask(4)
    assert torch.equal(first, sparse.ask(4))
    values = problem.arm_values[first]
    exact.tell(first[:2], values[:2])  # two still pending
    sampler = exact.sampler
    assert torch.equal(sampler.observed, first[:2])
    # its paths are the exact sampler's (tested against BoTorch's Matheron paths)
    by_hand = copy.deepcopy(sampler)
    g = torch.Generator().manual_seed(0)
    g.set_state(exact.generator.get_state())
    assert torch.equal(exact.ask(3), by_hand.sample(3, 1.0, g).indices)


def test_uniform_values_are_its_arms_in_completion_order(problem):
    horizon, workers = 40, 6
    trace = simulate(problem, "uniform", workers=workers, horizon=horizon, seed=1)
    durations = _world(1, horizon)
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
    np.testing.assert_allclose(trace.times, ends)
    np.testing.assert_array_equal(trace.values, problem.arm_values[arms].numpy())


def test_sequential_and_fixed_batches_have_closed_form_makespans(problem, monkeypatch):
    horizon, workers = 60, 8
    durations = _world(0, horizon)
    bkb = simulate(problem, "bkb", workers=workers, horizon=horizon, seed=0)
    assert bkb.makespan == pytest.approx(durations.sum())
    np.testing.assert_allclose(bkb.times, np.cumsum(durations))
    assert bkb.utilization()[-1] == pytest.approx(1 / workers)
    assert bkb.last_start == pytest.approx(durations[:-1].sum())
    assert bkb.utilization_until_last_start() == pytest.approx(1 / workers)
    grid = np.geomspace(0.01, 2 * bkb.makespan, 50)
    fraction = cluster.busy_fraction(bkb, grid)
    inside = grid <= bkb.makespan
    np.testing.assert_allclose(fraction[inside], 1 / workers)
    assert np.isnan(fraction[~inside]).all() and inside.sum() > 40

    def fixed_batches(setup):
        policy = UniformPolicy(batch_size=5)
        policy.reset(setup.problem, setup.horizon, setup.generator)
        return SynchronousMethod(policy)

    monkeypatch.setitem(METHODS, "fixed", fixed_batches)
    trace = simulate(problem, "fixed", workers=workers, horizon=horizon, seed=0)
    batch_ends = np.cumsum(durations.reshape(-1, 5).max(axis=1))
    np.testing.assert_allclose(trace.times[4::5], batch_ends)
    assert trace.busy[-1] == pytest.approx(durations.sum())
    # the last batch starts when the one before it ends
    assert trace.last_start == pytest.approx(batch_ends[-2])
    assert trace.utilization_until_last_start() == pytest.approx(
        durations[:-5].sum() / (workers * batch_ends[-2])
    )
    # all 5 of a batch's evaluations run from its start to their ends
    first = durations[:5]
    grid = np.sort(first)
    expected = [np.mean(np.minimum(first, g) - np.minimum(first, a)) * 5 / (g - a) / 8
                for a, g in zip(np.r_[0, grid[:-1]], grid, strict=True)]  # fmt: skip
    np.testing.assert_allclose(cluster.busy_fraction(trace, grid), expected)
    # 12 batches; every other completion finds free workers and an empty answer
    assert trace.num_asks - trace.empty_asks == 12 and trace.empty_asks == 11 * 4


def test_synchronous_method_tells_the_batch_in_asked_order(problem):
    class Recorder(UniformPolicy):
        def ask(self):
            return torch.tensor([4, 2, 4])

        def tell(self, chosen, rewards):
            self.told = (chosen.tolist(), rewards.tolist())

    policy = Recorder()
    policy.reset(problem, 10, torch.Generator())
    method = SynchronousMethod(policy)
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
    np.testing.assert_allclose(runs[0].times, runs[1].times)


def test_bbkb_async_settings_follow_the_workers_and_flops_are_counted(problem):
    setup = cluster.MethodSetup(problem, 40, 100, torch.Generator().manual_seed(0))
    loop = METHODS["bbkb-async"](setup).loop
    # outputscale 1 and noise variance 1: C~ = 1 + 0.07 x 40, a cap of 40 + 40 / 20
    assert asynchronous_options(40)["ratio_threshold"] == pytest.approx(3.8)
    assert loop.batch_options["ratio_threshold"] == pytest.approx(3.8)
    assert loop.batch_options["max_batch_size"] == 42 and loop.end_fraction == 0.05
    two = METHODS["bbkb-async"](dataclasses.replace(setup, ratio_threshold=2.0))
    assert two.loop.batch_options["ratio_threshold"] == 2.0
    runs = {
        name: simulate(problem, name, workers=10, horizon=60, seed=0)
        for name in ("bbkb-async", "bbkb-sync", "uniform")
    }
    assert runs["bbkb-async"].method == "bbkb-async"  # the default: no C~ in it
    for name in ("bbkb-async", "bbkb-sync"):
        assert runs[name].gflop > 0
        assert runs[name].summary()["mflop_per_suggestion"] == pytest.approx(
            1e3 * runs[name].gflop / 60
        )
    assert math.isnan(runs["uniform"].gflop)
    given = simulate(problem, "bbkb-async", workers=10, horizon=60, ratio_threshold=2)
    assert given.method == "bbkb-async-c2"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_completes_the_horizon(problem, method):
    trace = simulate(problem, method, workers=10, horizon=50, seed=0)
    assert trace.horizon == 50 and np.all(np.diff(trace.times) >= 0)
    assert 0 < trace.utilization()[-1] <= 1 + 1e-12
    assert trace.summary()["ms_per_suggestion"] > 0


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
    assert trace.busy[-1] / 20_000 == pytest.approx(2.0, rel=0.015)


def _trace(times, values, method="m", seed=0):
    n = len(values)
    return ClusterTrace(
        "p", method, seed, 2, 1.0, 0.5, np.array(times, float), np.array(values),
        np.ones(n), 0.1, 0.1, 0.0, n, 0,
    )  # fmt: skip


def test_time_to_reach_and_summary():
    # regret ratios 2 * (1 - v) averaged: 1.0, 0.6, 0.6667, 0.5
    trace = _trace([1, 2, 3, 4], [0.5, 0.9, 0.6, 1.0])
    np.testing.assert_allclose(trace.regret_ratio(), [1.0, 0.6, 2 / 3, 0.5])
    assert time_to_reach(trace, 0.65) == 4.0  # dips at t=2, stays below from t=4
    assert time_to_reach(trace, 1.0) == 1.0
    assert time_to_reach(trace, 0.4) == math.inf
    reference = _trace([2, 4, 6, 8], [0.65] * 4, method="bbkb-sync")  # ratio 0.7
    rows = summarize([trace, reference])
    mine = next(r for r in rows if r["method"] == "m")
    assert mine["time_to_reference"] == pytest.approx(2.0 / 8.0)  # <= 0.7 from t=2
    # simple regrets 0.5, 0.1, 0.1, 0: as good as the reference's 0.35 at t = 2
    assert cluster.time_to_find(trace, 0.1) == 2.0
    assert cluster.time_to_find(trace, 0.0) == 4.0
    assert cluster.time_to_find(trace, -0.1) == math.inf
    assert mine["time_to_reference_best"] == pytest.approx(2.0 / 8.0)
    # the reference's ratio at t = 4 (its 2nd completion); NaN before its first
    assert mine["reference_at_makespan"] == pytest.approx(0.7)
    assert math.isnan(cluster._on_grid(reference, reference.regret_ratio(), [1.0])[0])
    assert mine["utilization"] == pytest.approx(1 / (2 * 4))  # busy 1 of 2 x 4


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

    class Greedy(UniformMethod):
        def ask(self, free):
            return torch.zeros(free + 1, dtype=torch.long)

    class Stuck(UniformMethod):
        def ask(self, free):
            return torch.zeros(0, dtype=torch.long)

    for name, kind, error in (
        ("greedy", Greedy, ValueError),
        ("stuck", Stuck, RuntimeError),
    ):
        monkeypatch.setitem(METHODS, name, lambda setup, k=kind: k(10, setup.generator))
        with pytest.raises(error, match=name):
            simulate(problem, name, workers=2, horizon=3)


def test_cli_writes_table_json_and_plots(tmp_path):
    code = cluster.main(
        [
            "--problem",
            "rosenbrock:dim=2:arms=200:noise_variance=1:lengthscale=0.5",
            "--methods",
            "bbkb-sync,sgpts-async,uniform",
            "-W",
            "4",
            "-T",
            "24",
            "--seeds",
            "0,1",
            "--ratio-threshold",
            "3",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    results = json.loads((tmp_path / "cluster_results.json").read_text())
    assert len(results["runs"]) == 6 and len(results["rows"]) == 3
    assert results["settings"]["workers"] == 4
    table = (tmp_path / "cluster_table.md").read_text()
    assert table.count("\n") == 5 and "asynchronous S-GP-TS" in table
    assert "synchronous BBKB, C~ = 3" in table
    # the saved full traces give the same table
    collected = tmp_path / "collected"
    assert cluster.main(["--collect", str(tmp_path), "--output-dir", str(collected),
                         "--reference", "bbkb-sync-c3"]) == 0  # fmt: skip
    assert (collected / "cluster_table.md").read_text() == table
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "cluster_rosenbrock2_200_w4_regret.png",
        "cluster_rosenbrock2_200_w4_tradeoff.png",
        "cluster_rosenbrock2_200_w4_utilization.png",
    ]


def test_traces_saved_before_the_last_start_was_recorded_load(tmp_path, problem):
    trace = simulate(problem, "uniform", workers=2, horizon=5, duration_sigma=0.0)
    # constant durations: starts at 0, 0, 1, 1, 2; busy 4 of 2 x 2 until then
    assert trace.last_start == 2.0
    assert trace.summary()["utilization_until_last_start"] == pytest.approx(1.0)
    assert trace.summary()["utilization"] == pytest.approx(5 / 6)
    path = cluster.save_trace(trace, tmp_path)
    with np.load(path) as data:
        old = {key: data[key] for key in data.files if key != "last_start"}
    np.savez(path, **old)
    loaded = cluster.load_trace(path)
    np.testing.assert_array_equal(loaded.times, trace.times)
    assert math.isnan(loaded.summary()["utilization_until_last_start"])


def test_tradeoff_plot_needs_a_reference_and_names_what_it_leaves_out():
    reference = _trace([2, 4], [0.9, 0.9], method="bbkb-sync")
    close = dataclasses.replace(
        _trace([1, 2], [0.9, 0.8], method="close"), last_start=1.0
    )
    far = _trace([1, 2], [0.0, 0.0], method="far")  # 10x the reference's regret
    assert cluster.plot_tradeoff([close, far]) is None  # no reference
    assert cluster.plot_tradeoff([reference, far]) is None  # nothing drawn
    figure = cluster.plot_tradeoff([reference, close, far])
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert texts == ["not drawn (above 2): far"]
    (points,) = figure.axes[0].collections
    # busy 1 of 2 workers until t = 1; regret ratios 0.3 / 0.2
    np.testing.assert_allclose(points.get_offsets(), [[0.5, 1.5]])
