r"""A tiny real run of every method, checked end to end."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("ray.tune")
pytest.importorskip("matplotlib")

from botorch_sketch.benchmarks.tuning import cli
from botorch_sketch.benchmarks.tuning.driver import (
    arm_set_floor,
    load_problems,
    optima,
    run_preset,
    to_traces,
)
from botorch_sketch.benchmarks.tuning.presets import PRESETS, Block, TuningPreset
from botorch_sketch.benchmarks.tuning.report import regret_rows

from .helpers import contains

METHODS = ("bbkb", "sgpts", "tpe", "gp", "random")
TINY = TuningPreset(
    "tiny",
    "Branin, 8 trials, 1 and 2 in flight, 2 seeds",
    tuple(Block(("branin",), METHODS, 8, k, (0, 1)) for k in (1, 2)),
    (4, 8),
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    problems, notes = load_problems(TINY, tmp_path_factory.mktemp("no-data"))
    logs = run_preset(TINY, problems)
    return problems, notes, logs


def test_every_method_makes_the_budget_of_valid_evaluations(tiny_run):
    problems, notes, logs = tiny_run
    assert notes == []
    assert set(logs) == {
        ("branin", k, m, s) for k in (1, 2) for m in METHODS for s in (0, 1)
    }
    space = problems["branin"].space
    for (_, in_flight, method, _), log in logs.items():
        assert len(log.losses) == 8 and not log.stopped
        assert all(contains(space, config) for config in log.configs), method
        assert log.max_running <= in_flight
        assert len(log.ask_seconds) == len(log.tell_seconds) == 8
        assert log.setup_seconds >= 0 and min(log.ask_seconds) >= 0


def test_regret_is_nonnegative_and_nonincreasing(tiny_run):
    problems, _, logs = tiny_run
    traces = to_traces(logs, problems)
    assert optima(logs, problems) == {"branin": problems["branin"].optimum}
    for trace in traces:
        regret = trace.curve("simple_regret")
        assert (regret >= -1e-9).all() and (np.diff(regret) <= 0).all()
        assert np.isfinite(trace.curve("cumulative_time")).all()
    rows = regret_rows(traces, TINY.budgets)
    assert len(rows) == 2 * len(METHODS) * 2
    for row in rows:
        assert row["seeds"] == 2 and row["regret_min"] <= row["regret_mean"]
        assert row["seconds_per_trial"] > 0


def test_arm_set_floor_is_the_best_arm_regret(tiny_run):
    problems, _, _ = tiny_run
    floor = arm_set_floor(problems["branin"], (0,))
    assert 0 < floor < 0.1  # 2,048 Sobol points of a 2-d box come close
    unknown = dataclasses.replace(problems["branin"], optimum=None)
    with pytest.raises(ValueError, match="no known minimum"):
        arm_set_floor(unknown, (0,))


def test_unknown_optimum_is_the_best_loss_found(tiny_run):
    problems, _, logs = tiny_run
    unknown = {"branin": dataclasses.replace(problems["branin"], optimum=None)}
    best = min(min(log.losses) for log in logs.values())
    assert optima(logs, unknown) == {"branin": best}
    regrets = [t.curve("simple_regret")[-1] for t in to_traces(logs, unknown)]
    assert min(regrets) == 0.0 and min(regrets) >= 0


def test_cli_writes_results_tables_and_plots(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    out = tmp_path / "out"
    argv = ["--preset", "tiny", "--data-dir", str(tmp_path), "--output-dir", str(out)]
    assert cli.main([*argv, "--no-progress"]) == 0
    out_text = capsys.readouterr().out
    assert "Simple regret after 4 trials" in out_text
    assert "initial arm set" in out_text
    assert "| branin, 2 in flight | " in out_text
    names = {path.name for path in out.iterdir()}
    assert {"results.json", "summary.csv", "curves.csv", "regret.csv"} <= names
    assert {"tables.md", "traces.json", "branin_1_in_flight_regret.png"} <= names
    assert "branin_2_in_flight_regret_vs_time.png" in names
    saved = json.loads((out / "traces.json").read_text())
    assert len(saved["traces"]) == 2 * len(METHODS) * 2
    (out / "tables.md").unlink()
    assert cli.main([*argv, "--collect", str(out)]) == 0
    assert (out / "tables.md").is_file()


def test_cli_skips_missing_cadata_with_a_message(tmp_path, monkeypatch, capsys):
    block = Block(("hgb-cadata",), ("random",), 2, 1, (0,))
    monkeypatch.setitem(PRESETS, "tiny", TuningPreset("tiny", "", (block,), (2,)))
    problems, notes = load_problems(PRESETS["tiny"], tmp_path)
    assert problems == {} and "skipped hgb-cadata" in notes[0]
    assert "cadata.csv not found" in notes[0]
    assert (
        cli.main(
            [
                "--preset",
                "tiny",
                "--data-dir",
                str(tmp_path),
                "--no-progress",
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "nothing to run" in capsys.readouterr().err


def test_ax_default_strategy_runs_through_the_driver():
    pytest.importorskip("ax")
    from botorch_sketch.benchmarks.tuning.driver import run_trials
    from botorch_sketch.benchmarks.tuning.methods import method_factory
    from botorch_sketch.benchmarks.tuning.problems import make_tuning_problem

    problem = make_tuning_problem("mixed")
    build = method_factory("ax")
    log = run_trials(lambda: build(problem.space, 0, 2), problem.loss, 6, 2, seed=0)
    assert len(log.losses) == 6 and log.max_running == 2
    assert all(contains(problem.space, config) for config in log.configs)
