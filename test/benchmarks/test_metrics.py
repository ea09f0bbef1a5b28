import csv
import json
import math

import numpy as np
import pytest
import torch

from botorch_sketch.benchmarks.metrics import (
    PeakMemoryMonitor,
    RunTrace,
    aggregate_curve,
    checkpoints,
    expected_uniform_regret,
    format_table,
    mean_interval,
    measure_matmul_gflops,
    summarize,
    write_results,
)
from botorch_sketch.benchmarks.policies.base import Problem


def _trace(policy="p", seed=0, values=(0.5, 1.0, 0.0, 0.75), **kwargs):
    values = np.array(values)
    defaults = {
        "problem": "toy",
        "policy": policy,
        "seed": seed,
        "optimum": 1.0,
        "uniform_regret": 0.5,
        "values": values,
        "ask_seconds": np.array([0.1, 0.2, 0.0, 0.3]),
        "tell_seconds": np.array([0.0, 0.4, 0.0, 0.5]),
        "batch_index": np.array([0, 0, 1, 1]),
        "diagnostics": {"dictionary_size": np.array([2.0, 2.0, 3.0, 3.0])},
        "setup_seconds": 1.0,
        "peak_memory_mb": 12.0,
    }
    return RunTrace(**(defaults | kwargs))


def _box_problem():
    bounds = torch.tensor([[0.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
    return Problem("lin", bounds, lambda X: X.sum(-1), 0.1, optimum=3.0)


def test_expected_uniform_regret():
    arms = torch.rand(10, 2, dtype=torch.float64)
    values = torch.tensor([0.0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=torch.float64)
    problem = Problem(
        "f", torch.tensor([[0.0, 0], [1, 1]]), None, 0.1, 9.0, arms, values
    )
    assert expected_uniform_regret(problem) == pytest.approx(9.0 - 4.5)
    # Box: E[x1 + x2] = 0.5 + 1.0 under uniform sampling; Monte Carlo error ~ 0.003.
    assert expected_uniform_regret(_box_problem()) == pytest.approx(1.5, abs=0.02)


def test_curves_by_hand():
    trace = _trace()
    np.testing.assert_allclose(trace.curve("cumulative_regret"), [0.5, 0.5, 1.5, 1.75])
    np.testing.assert_allclose(
        trace.curve("regret_ratio"), [0.5 / 0.5, 0.5 / 1.0, 1.5 / 1.5, 1.75 / 2.0]
    )
    np.testing.assert_allclose(trace.curve("simple_regret"), [0.5, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(trace.curve("cumulative_time"), [1.1, 1.7, 1.7, 2.5])
    np.testing.assert_allclose(trace.curve("cumulative_ask_time"), [0.1, 0.3, 0.3, 0.6])
    np.testing.assert_allclose(trace.curve("batch_size"), [2, 2, 2, 2])
    np.testing.assert_allclose(trace.curve("dictionary_size"), [2, 2, 3, 3])
    summary = trace.summary()
    assert summary["num_batches"] == 2 and summary["max_batch_size"] == 2
    assert summary["total_seconds"] == pytest.approx(2.5)
    assert summary["dictionary_size"] == 3.0
    with pytest.raises(ValueError, match="Unknown curve"):
        trace.curve("nope")


def test_time_per_evaluation_is_a_trailing_window_mean():
    np.testing.assert_allclose(
        _trace().curve("time_per_evaluation"), [0.1, 0.6, 0, 0.8]
    )
    rng = np.random.default_rng(0)
    horizon = 120  # window of 120 // 50 = 2 evaluations
    ask, tell = rng.random(horizon), rng.random(horizon)
    trace = _trace(
        values=np.zeros(horizon),
        ask_seconds=ask,
        tell_seconds=tell,
        batch_index=np.arange(horizon),
        diagnostics={},
    )
    seconds = ask + tell
    expected = [seconds[max(0, i - 1) : i + 1].mean() for i in range(horizon)]
    np.testing.assert_allclose(trace.curve("time_per_evaluation"), expected)


def test_mean_interval_student_t():
    samples = np.array([[1.0, 2.0], [3.0, 6.0]])
    mean, low, high = mean_interval(samples)
    np.testing.assert_allclose(mean, [2.0, 4.0])
    # n = 2: t_{0.975, 1} = 12.7062; sd = sqrt(2), sqrt(8); half = t sd / sqrt(2).
    np.testing.assert_allclose(high - mean, [12.7062047, 2 * 12.7062047], rtol=1e-6)
    np.testing.assert_allclose(mean - low, high - mean)
    mean, low, high = mean_interval(np.array([[5.0]]))
    assert mean == low == high == 5.0


def test_aggregate_and_summary_table():
    traces = [
        _trace(seed=0),
        _trace(seed=1, values=(1.0, 1.0, 1.0, 1.0)),
        _trace(policy="q"),
    ]
    steps, mean, low, high = aggregate_curve(traces[:2], "cumulative_regret")
    np.testing.assert_allclose(steps, [1, 2, 3, 4])
    np.testing.assert_allclose(mean, [0.25, 0.25, 0.75, 0.875])
    assert (low <= mean).all() and (high >= mean).all()
    rows = summarize(traces, reference="q")
    assert [(r["policy"], r["seeds"]) for r in rows] == [("p", 2), ("q", 1)]
    # p: cumulative regret 0.875 (mean of 1.75 and 0) vs q: 1.75; equal times.
    assert rows[0]["regret_vs_reference"] == pytest.approx(0.5)
    assert rows[0]["time_vs_reference"] == pytest.approx(1.0)
    assert "time_vs_reference" not in summarize(traces)[0]  # no exact-ucb here
    assert rows[0]["cumulative_regret"] == pytest.approx(0.875)
    assert rows[1]["regret_ratio"] == pytest.approx(0.875)
    table = format_table(rows)
    assert "0.8750" in table and "time/exact" in table
    assert len(table.splitlines()) == 4


def test_checkpoints():
    assert checkpoints(3).tolist() == [1, 2, 3]
    points = checkpoints(10_000, max_points=50)
    assert points[0] == 1 and points[-1] == 10_000 and len(points) <= 50


def test_write_results(tmp_path):
    traces = [_trace(seed=0), _trace(seed=1), _trace(policy="nan", uniform_regret=0.0)]
    paths = write_results(traces, tmp_path / "out", {"matmul_gflops": 3.0}, 3)
    assert [p.name for p in paths] == ["summary.csv", "curves.csv", "results.json"]
    assert all(p.parent == tmp_path / "out" for p in paths)
    with (tmp_path / "out" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["policy"] for row in rows] == ["p", "nan"]
    with (tmp_path / "out" / "curves.csv").open() as handle:
        curves = list(csv.DictReader(handle))
    assert len(curves) == 3 * 3  # 3 runs x 3 checkpoints
    assert [row["t"] for row in curves[:3]] == ["1", "2", "4"]
    assert float(curves[2]["cumulative_regret"]) == pytest.approx(1.75)
    # Strict JSON: the NaN regret ratio (zero uniform regret) becomes null.
    payload = json.loads(
        (tmp_path / "out" / "results.json").read_text(),
        parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"),
    )
    assert payload["metadata"]["matmul_gflops"] == 3.0
    assert payload["runs"][2]["curves"]["regret_ratio"] == [None, None, None]
    assert payload["runs"][0]["curves"]["t"] == [1, 2, 4]


@pytest.mark.skipif(
    not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc"
)
def test_peak_memory_monitor_sees_a_large_tensor():
    with PeakMemoryMonitor(interval=0.001) as monitor:
        block = torch.ones(12_500_000, dtype=torch.float64)  # 95 MiB, touched
        block.add_(1.0)
        __import__("time").sleep(0.05)
        del block
    assert "RSS" in monitor.method
    assert 80 <= monitor.peak_mb <= 400
    with PeakMemoryMonitor() as idle:
        pass
    assert idle.peak_mb < 30


def test_matmul_throughput_is_measured():
    gflops = measure_matmul_gflops(size=128, repeats=2)
    assert math.isfinite(gflops) and gflops > 0
