r"""The Optuna methods of the tuning benchmark (the package's samplers and Optuna's
own in one study setup) and the time-per-trial report of the ``optuna`` presets."""

import math

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("matplotlib")

from optuna.trial import TrialState

from benchmarks.tuning import cli
from benchmarks.tuning.driver import TrialLog, run_trials, to_traces
from benchmarks.tuning.methods import METHODS, method_factory
from benchmarks.tuning.presets import OPTUNA_METHODS, PRESETS
from benchmarks.tuning.problems import make_tuning_problem
from benchmarks.tuning.report import (
    growth_notes,
    time_growth,
    window_rows,
    window_tables,
)
from botorch_sketch.integrations.optuna import ASK_KEY

from .helpers import contains

SMOKE = PRESETS["optuna-smoke"]


def test_the_optuna_presets_use_known_methods():
    assert set(OPTUNA_METHODS) <= set(METHODS)
    for name in ("optuna", "optuna-parallel", "optuna-large", "optuna-smoke"):
        for block in PRESETS[name].blocks:
            assert set(block.methods) <= set(METHODS)
        assert all(first <= last for first, last in PRESETS[name].windows)


@pytest.mark.parametrize("name", ["bbkb-optuna", "sgpts-optuna"])
@pytest.mark.parametrize("in_flight", [1, 3])
def test_our_samplers_choose_the_trials_in_the_study(name, in_flight):
    problem = make_tuning_problem("mixed")
    method = method_factory(name)(problem.space, 0, in_flight)
    log = run_trials(lambda: method, problem.loss, 12, in_flight, seed=0)
    assert len(log.losses) == 12 and log.max_running == in_flight
    assert all(contains(problem.space, config) for config in log.configs)
    trials = method.study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 12
    assert sorted(t.value for t in trials) == sorted(log.losses)
    # the first trial has no completed one to learn from: the independent sampler
    # draws it; from the next completion on, the loop chooses arms
    chosen = [t.number for t in trials if ASK_KEY in t.system_attrs]
    assert 0 not in chosen and len(chosen) >= 12 - in_flight - 1
    # every completion before the last ask reached the loop, each once
    told = method.study.sampler.told_trials
    assert len(set(told)) == len(told) >= 12 - in_flight


@pytest.mark.parametrize("name", ["cmaes", "random-optuna"])
def test_optuna_samplers_are_seeded(name):
    problem = make_tuning_problem("branin")
    build = method_factory(name)
    runs = [
        run_trials(lambda s=s: build(problem.space, s, 2), problem.loss, 6, 2, seed=0)
        for s in (0, 0, 1)
    ]
    assert runs[0].configs == runs[1].configs != runs[2].configs


def _log(seconds: np.ndarray) -> TrialLog:
    count = len(seconds)
    return TrialLog(
        configs=[{"x0": 0.0, "x1": 0.0}] * count,
        losses=list(np.linspace(1.0, 0.5, count)),
        ask_seconds=list(seconds),
        tell_seconds=[0.0] * count,
    )


def test_time_growth_recovers_a_power_law_and_windows_take_medians():
    problem = make_tuning_problem("branin")
    n = np.arange(1, 201)
    logs = {
        ("branin", 1, "gp", 0): _log(1e-4 * n**1.5),
        ("branin", 1, "tpe", 0): _log(np.full(400, 2e-3)),
        ("branin", 1, "tpe", 1): _log(np.full(400, 4e-3)),
    }
    gp, *_ = traces = to_traces(logs, {"branin": problem})
    slope, seconds = time_growth(gp, 5000)
    assert slope == pytest.approx(1.5)
    assert seconds == pytest.approx(1e-4 * 5000**1.5)
    (note,) = growth_notes(traces, 400)
    assert note.startswith("gp on branin, 1 in flight, seed 0: 200 trials")
    assert "n^1.50" in note
    rows = window_rows(traces, [(1, 100), (301, 400)])
    got = {(row["method"], row["window"]): row for row in rows}
    assert set(got) == {("gp", "1-100"), ("tpe", "1-100"), ("tpe", "301-400")}
    median = 1e-4 * (50**1.5 + 51**1.5) / 2  # trials 50 and 51 of 1-100
    assert got["gp", "1-100"]["median_seconds"] == pytest.approx(median)
    assert got["tpe", "301-400"]["seeds"] == 2
    assert math.isclose(got["tpe", "301-400"]["median_seconds"], 3e-3)
    table = window_tables(rows)
    assert "| method | 1-100 | 301-400 |" in table
    assert "| gp | " in table and table.count("| tpe | 3 | 3 |") == 1


def test_optuna_smoke_preset_writes_windows_and_time_plots(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--preset", SMOKE.name, "--data-dir", str(tmp_path)]
    assert cli.main([*argv, "--output-dir", str(out), "--no-progress"]) == 0
    tables = (out / "tables.md").read_text()
    for method in (*OPTUNA_METHODS, "gp"):
        assert f" {method} |" in tables
    assert "Median optimizer time per trial [ms] in windows of trials" in tables
    assert "| method | 1-4 | 5-8 |" in tables
    assert "initial arm set" not in tables  # a note on the Ray Tune searchers
    names = {path.name for path in out.iterdir()}
    for label in ("branin_1_in_flight", "mixed_2_in_flight"):
        assert f"{label}_time_per_trial.png" in names
    capsys.readouterr()
