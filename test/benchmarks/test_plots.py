import numpy as np
import pytest

from botorch_sketch.benchmarks.metrics import RunTrace
from botorch_sketch.benchmarks.plots import plot_all, plot_problem

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
