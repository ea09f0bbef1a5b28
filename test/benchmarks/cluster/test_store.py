r"""A simulated run through the benchmarks' run store: saved and loaded unchanged, and
reused by ``--resume``."""

import math

import numpy as np
import pytest

from benchmarks.cluster import report
from benchmarks.cluster.cli import main
from benchmarks.cluster.simulation import simulate
from benchmarks.runner import RunStore


def test_a_simulated_run_round_trips_through_the_run_store(tmp_path, problem):
    trace = simulate(problem, "uniform", workers=2, horizon=5, duration_sigma=0.0)
    # constant durations: starts at 0, 0, 1, 1, 2; busy 4 of 2 x 2 until then
    assert trace.metadata["last_start"] == 2.0
    summary = report.run_summary(trace)
    assert summary["utilization_until_last_start"] == pytest.approx(1.0)
    assert summary["utilization"] == pytest.approx(5 / 6)
    assert math.isnan(summary["mflop_per_suggestion"])  # uniform counts no flops
    store = RunStore(tmp_path)
    store.save(trace, {"settings": 1})
    loaded, why = store.load(trace.problem, trace.policy, trace.seed, {"settings": 1})
    assert why is None
    for name in ("simulated_time", "busy_worker_time"):
        np.testing.assert_array_equal(loaded.diagnostics[name], trace.diagnostics[name])
    np.testing.assert_array_equal(loaded.values, trace.values)
    np.testing.assert_equal(report.run_json(loaded), report.run_json(trace))
    assert store.traces()[0].metadata == loaded.metadata
    # a run stored without the last start reports NaN for what needs it
    del loaded.metadata["last_start"]
    assert math.isnan(report.utilization_until_last_start(loaded))


def test_resume_reuses_the_stored_runs_of_the_same_settings(tmp_path, capsys):
    problem = "rosenbrock:dim=2:arms=100:noise=1"
    argv = ["--problem", problem, "--methods", "uniform", "-W", "3", "-T", "12",
            "--output-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    (path,) = (tmp_path / "runs" / "w3").glob("*.json")
    first = (tmp_path / "cluster_table.md").read_text()
    stamp = path.stat().st_mtime_ns
    assert main([*argv, "--resume"]) == 0
    assert path.stat().st_mtime_ns == stamp  # not run again
    assert (tmp_path / "cluster_table.md").read_text() == first
    capsys.readouterr()
    assert main([*argv, "--resume", "-T", "13"]) == 0  # other settings: run again
    assert "running again" in capsys.readouterr().out
