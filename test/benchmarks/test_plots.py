import numpy as np
import pytest
from scipy.stats import t as student_t

from benchmarks.plots import (
    machine_line,
    plot_all,
    plot_problem,
    plot_title,
)
from benchmarks.results import RunTrace, aggregate_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _trace(problem, policy, seed, diagnostics=None):
    rng = np.random.default_rng(seed)
    return RunTrace(
        problem=problem,
        policy=policy,
        seed=seed,
        optimum=1.0,
        uniform_regret=0.5,
        values=rng.uniform(size=20),
        ask_seconds=np.full(20, 0.01),
        tell_seconds=np.full(20, 0.02),
        batch_index=np.repeat(np.arange(10), 2),
        diagnostics=diagnostics or {},
    )


def test_plot_problem_writes_every_view(tmp_path):
    dictionary = {"dictionary_size": np.arange(20.0)}
    traces = [
        _trace("p/1", "a", 0, dictionary),
        _trace("p/1", "a", 1, dictionary),
        _trace("p/1", "b", 0),
        _trace("other", "a", 0),
    ]
    paths = plot_problem(traces, tmp_path / "plots", "p/1")
    names = [path.name for path in paths]
    assert names == [
        "p_1_regret_ratio.png",
        "p_1_cumulative_time.png",
        "p_1_time_per_evaluation.png",
        "p_1_batch_size.png",
        "p_1_dictionary_size.png",
        "p_1_regret_vs_time.png",
    ]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
    # Without any dictionary diagnostic that view is left out.
    assert len(plot_problem(traces, tmp_path, "other")) == 5
    assert len(plot_all(traces, tmp_path / "all")) == 11
    with pytest.raises(ValueError, match="No traces"):
        plot_problem(traces, tmp_path, "missing")


def test_bands_never_go_below_zero_and_one_seed_has_no_interval(tmp_path):
    r"""Sizes whose t-interval over 5 seeds would reach -100 are clipped at 0;
    2 seeds show their range; a one-seed title names the seed, not an interval."""
    sizes = [0.0, 0.0, 0.0, 0.0, 300.0]  # final dictionary sizes of 5 seeds
    traces = [
        _trace("p", "a", seed, {"dictionary_size": np.full(20, size)})
        for seed, size in enumerate(sizes)
    ]
    _, mean, low, high = aggregate_curve(traces, "dictionary_size")
    half = student_t.ppf(0.975, 4) * np.std(sizes, ddof=1) / np.sqrt(5)
    assert mean[-1] - half < -100  # what the unclipped interval would show
    np.testing.assert_allclose(low, 0.0)
    np.testing.assert_allclose(high, 60.0 + half)
    _, _, low, high = aggregate_curve(traces[3:], "dictionary_size")
    np.testing.assert_allclose(low, 0.0)
    np.testing.assert_allclose(high, 300.0)
    one = {"a": [_trace("p", "a", 3)], "b": [_trace("p", "b", 3)]}
    assert plot_title("p", one) == "p: seed 3"
    two = {"a": traces[:2], "b": traces[2:4]}
    assert plot_title("p", two) == "p: mean and range (min, max) of 2 seeds"
    mixed = {"a": traces, "b": traces[:1]}
    assert "legend" in plot_title("p", mixed)
    for name in ("t-interval over 1", "1 seeds"):
        assert name not in plot_title("p", one)
    assert len(plot_problem(traces + [_trace("p", "b", 0)], tmp_path, "p")) == 6


def test_machine_line_and_log_axes_use_the_range():
    traces = [_trace("p", "a", seed) for seed in range(6)]
    assert machine_line(traces) is None
    for trace, gflops in zip(traces, [6.2, 6.2, 33.0, 6.2, 6.2, 6.2], strict=True):
        trace.environment = {"torch_threads": 1, "matmul_gflops": gflops}
    assert (
        machine_line(traces[:2]) == "1 thread, matmul 6.2 GFLOP/s measured at the start"
    )
    assert "matmul 6.2-33.0 GFLOP/s" in machine_line(traces)
    traces[0].environment = {}
    assert machine_line(traces).endswith("(some runs unknown)")
    _, mean, low, high = aggregate_curve(traces, "cumulative_time", "range")
    stacked = np.stack([trace.curve("cumulative_time") for trace in traces])
    np.testing.assert_array_equal(low, stacked.min(axis=0))
    np.testing.assert_array_equal(high, stacked.max(axis=0))
    assert plot_title("p", {"a": traces}, "range") == (
        "p: mean and range (min, max) of 6 seeds"
    )
