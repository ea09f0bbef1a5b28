import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import t as student_t

from benchmarks.problems import Problem
from benchmarks.results import (
    MIN_SEEDS_FOR_INTERVAL,
    RunTrace,
    aggregate_curve,
    band_description,
    expected_uniform_regret,
    mean_interval,
    seed_band,
    summarize,
)

from .traces import make_seed_traces, make_trace


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
    trace = make_trace()
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


def test_time_per_evaluation_spreads_batches_then_averages_a_window():
    # Batch 0 took 0.1 + 0.2 + 0.4 s over 2 evaluations, batch 1 0.3 + 0.5 s over 2.
    np.testing.assert_allclose(
        make_trace().curve("time_per_evaluation"), [0.35, 0.35, 0.4, 0.4]
    )
    rng = np.random.default_rng(0)
    horizon = 120  # window of 120 // 50 = 2 evaluations
    sizes = [5, 1, 30, 2, 40, 42]  # batches; time booked at a batch's ends only
    batch_index = np.repeat(np.arange(len(sizes)), sizes)
    ask, tell = np.zeros(horizon), np.zeros(horizon)
    ends = np.cumsum(sizes)
    ask[ends - np.array(sizes)] = rng.random(len(sizes))
    tell[ends - 1] = rng.random(len(sizes))
    trace = make_trace(
        values=np.zeros(horizon),
        ask_seconds=ask,
        tell_seconds=tell,
        batch_index=batch_index,
        diagnostics={},
    )
    per_batch = [(ask + tell)[batch_index == b].sum() / n for b, n in enumerate(sizes)]
    spread = np.array([per_batch[b] for b in batch_index])
    expected = [spread[max(0, i - 1) : i + 1].mean() for i in range(horizon)]
    curve = trace.curve("time_per_evaluation")
    np.testing.assert_allclose(curve, expected)
    assert curve.min() > 0  # no drop to 0 inside a batch (log axes)


def test_mean_interval_student_t():
    samples = np.array([[1.0, 2.0], [3.0, 6.0]])
    mean, low, high = mean_interval(samples)
    np.testing.assert_allclose(mean, [2.0, 4.0])
    # n = 2: t_{0.975, 1} = 12.7062; sd = sqrt(2), sqrt(8); half = t sd / sqrt(2).
    np.testing.assert_allclose(high - mean, [12.7062047, 2 * 12.7062047], rtol=1e-6)
    np.testing.assert_allclose(mean - low, high - mean)
    mean, low, high = mean_interval(np.array([[5.0]]))
    assert mean == low == high == 5.0


def test_seed_band_by_number_of_seeds():
    rng = np.random.default_rng(1)
    one = rng.random((1, 4))
    mean, low, high = seed_band(one, lower=0.0)
    np.testing.assert_array_equal(mean, one[0])
    np.testing.assert_array_equal(low, one[0])
    np.testing.assert_array_equal(high, one[0])
    for n in (2, MIN_SEEDS_FOR_INTERVAL - 1):  # few seeds: the range
        few = rng.normal(size=(n, 4))
        mean, low, high = seed_band(few, lower=0.0)
        np.testing.assert_allclose(mean, few.mean(axis=0))
        np.testing.assert_array_equal(low, few.min(axis=0))  # never clipped: data
        np.testing.assert_array_equal(high, few.max(axis=0))
    many = np.array([[0.0, 5.0], [0.0, 6.0], [0.0, 7.0], [0.0, 4.0], [10.0, 5.5]])
    mean, low, high = seed_band(many, lower=0.0)
    half = student_t.ppf(0.975, 4) * many.std(axis=0, ddof=1) / np.sqrt(5)
    np.testing.assert_allclose(mean, [2.0, 5.5])
    np.testing.assert_allclose(high, mean + half)
    # Column 0: mean 2, half-width 5.55 -> clipped at 0; column 1 stays symmetric.
    assert mean[0] - half[0] < 0
    np.testing.assert_allclose(low, [0.0, 5.5 - half[1]])
    unclipped = seed_band(many)[1]
    np.testing.assert_allclose(unclipped, mean - half)
    _, low, high = seed_band(many, lower=0.0, method="range")
    np.testing.assert_array_equal(low, many.min(axis=0))
    np.testing.assert_array_equal(high, many.max(axis=0))
    with pytest.raises(ValueError, match="method"):
        seed_band(many, method="sd")
    assert band_description(1) == "1 seed"
    assert "range" in band_description(2) and "2 seeds" in band_description(2)
    assert "t-interval of 5 seeds" in band_description(5)


def test_summary_of_one_two_and_many_seeds_against_numpy():
    finals = {
        "one": [0.3],
        "two": [0.1, 0.9],
        "many": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.05, 0.05, 2.0],
    }
    traces = [
        trace for policy, f in finals.items() for trace in make_seed_traces(policy, f)
    ]
    rows = {row["policy"]: row for row in summarize(traces)}
    for policy, values in finals.items():
        row, values = rows[policy], np.array(values)
        assert row["seeds"] == len(values)
        ratio = values / (4 * 0.5)  # R_T / (T r_unif)
        seconds = 1.0 + values  # setup 1 s
        for key, samples in (
            ("cumulative_regret", values),
            ("regret_ratio", ratio),
            ("total_seconds", seconds),
        ):
            assert row[key] == pytest.approx(samples.mean(), rel=1e-12)
            if len(values) == 1:
                assert row[f"{key}_low"] == row[f"{key}_high"] == row[key]
            elif len(values) < 5:
                assert row[f"{key}_low"] == pytest.approx(samples.min(), rel=1e-12)
                assert row[f"{key}_high"] == pytest.approx(samples.max(), rel=1e-12)
            else:
                half = student_t.ppf(0.975, len(values) - 1) * samples.std(ddof=1)
                half /= np.sqrt(len(values))
                assert row[f"{key}_high"] == pytest.approx(samples.mean() + half)
                low = max(samples.mean() - half, 0.0)
                assert row[f"{key}_low"] == pytest.approx(low, abs=1e-12)
    # The 10-seed regrets' t-interval reaches below 0: clipped, never negative.
    assert rows["many"]["cumulative_regret_low"] == 0.0
    assert all(
        v >= 0 for r in rows.values() for k, v in r.items() if k.endswith("_low")
    )
    assert rows["one"]["band"] == "1 seed"
    assert "range (min, max) of 2 seeds" in rows["two"]["band"]
    assert "t-interval of 10 seeds, clipped at 0" in rows["many"]["band"]


def test_trace_round_trips_through_json():
    trace = make_trace(
        diagnostics={"dictionary_size": np.array([2.0, np.nan, 3.0, 3.0])},
        peak_memory_mb=float("nan"),
        uniform_regret=float("nan"),  # the tuning benchmark's traces have none
        memory_method="sampled",
        environment={"torch_threads": 1, "matmul_gflops": 33.0},
    )
    text = json.dumps(trace.to_dict(), allow_nan=False)
    back = RunTrace.from_dict(json.loads(text))
    for name in ("values", "ask_seconds", "tell_seconds", "batch_index"):
        np.testing.assert_array_equal(getattr(back, name), getattr(trace, name))
    np.testing.assert_array_equal(
        back.diagnostics["dictionary_size"], trace.diagnostics["dictionary_size"]
    )
    assert back.batch_index.dtype == np.int64 and math.isnan(back.peak_memory_mb)
    assert math.isnan(back.uniform_regret)
    for key in ("problem", "policy", "seed", "optimum", "setup_seconds", "environment"):
        assert getattr(back, key) == getattr(trace, key)
    assert back.summary()["cumulative_regret"] == trace.summary()["cumulative_regret"]


def test_aggregate_and_summary():
    traces = [
        make_trace(seed=0),
        make_trace(seed=1, values=(1.0, 1.0, 1.0, 1.0)),
        make_trace(policy="q"),
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
