r"""A tiny real run of every method, checked end to end."""

import dataclasses
import json
import math

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("ray.tune")
pytest.importorskip("matplotlib")

from benchmarks.presets import Block, Preset
from benchmarks.runner import RunStore
from benchmarks.tuning import cli
from benchmarks.tuning.driver import (
    arm_set_floor,
    fingerprint,
    load_problems,
    run_preset,
    run_trials,
    stored_runs,
    with_optima,
)
from benchmarks.tuning.methods import method_factory
from benchmarks.tuning.presets import PRESETS
from benchmarks.tuning.problems import PROBLEMS, make_tuning_problem
from benchmarks.tuning.report import regret_rows

from .helpers import contains

METHODS = ("bbkb", "sgpts", "tpe", "gp", "random")
TINY = Preset(
    "tiny",
    "Branin, 8 trials, 1 and 2 in flight, 2 seeds",
    tuple(Block(("branin",), METHODS, 8, k, (0, 1)) for k in (1, 2)),
    (4, 8),
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    problems, notes = load_problems(TINY, tmp_path_factory.mktemp("no-data"))
    store = RunStore(tmp_path_factory.mktemp("out") / "runs")
    stored_at_tell = []  # the runs on disk at each trial's tell
    traces = run_preset(
        TINY, problems, lambda: stored_at_tell.append(len(store)), store=store
    )
    return problems, notes, store, stored_at_tell, traces


@pytest.mark.parametrize("method", METHODS)
def test_every_method_proposes_configurations_in_the_space(method):
    problem = make_tuning_problem("branin")
    build = method_factory(method)
    log = run_trials(lambda: build(problem.space, 0, 2), problem.loss, 6, 2, seed=0)
    assert len(log.losses) == 6 and log.max_running <= 2
    assert all(contains(problem.space, config) for config in log.configs)


def test_every_method_makes_the_budget_of_valid_evaluations(tiny_run):
    _, notes, _, _, traces = tiny_run
    assert notes == []
    assert list(traces) == [
        ("branin", k, m, s) for k in (1, 2) for m in METHODS for s in (0, 1)
    ]
    for trace in traces.values():
        assert trace.horizon == 8 and "stopped" not in trace.metadata
        assert trace.metadata["repeats"] == []  # 8 distinct configurations
        assert len(trace.ask_seconds) == len(trace.tell_seconds) == 8
        assert trace.setup_seconds >= 0 and min(trace.ask_seconds) >= 0


def test_each_run_is_saved_as_it_finishes(tiny_run):
    problems, _, store, stored_at_tell, traces = tiny_run
    # the n-th tell (from 1) of the 8-trial runs sees the (n - 1) // 8 runs before
    assert stored_at_tell == [n // 8 for n in range(len(traces) * 8)]
    assert len(store) == len(traces)
    for key, trace in traces.items():
        name, k, method, seed = key
        block = next(b for b in TINY.blocks if b.in_flight == k)
        settings = fingerprint(key, block, problems[name])
        assert settings["budget"] == 8 and settings["method"] == method
        stored, why = store.load(trace.problem, method, seed, settings)
        assert why is None and stored.to_dict() == trace.to_dict()


def test_regret_is_nonnegative_and_nonincreasing(tiny_run):
    problems, _, _, _, traces = tiny_run
    traces = with_optima(traces)
    for trace in traces:
        assert trace.optimum == -problems["branin"].optimum
        regret = trace.curve("simple_regret")
        assert (regret >= -1e-9).all() and (np.diff(regret) <= 0).all()
        assert np.isfinite(trace.curve("cumulative_time")).all()
    rows = regret_rows(traces, TINY.budgets)
    assert len(rows) == 2 * len(METHODS) * 2
    for row in rows:
        assert row["seeds"] == 2 and row["regret_min"] <= row["regret_mean"]
        assert row["seconds_per_trial"] > 0


def test_arm_set_floor_is_the_best_arm_regret(tiny_run):
    problems, *_ = tiny_run
    floor = arm_set_floor(problems["branin"], (0,))
    assert 0 < floor < 0.1  # 2,048 Sobol points of a 2-d box come close
    unknown = dataclasses.replace(problems["branin"], optimum=None)
    with pytest.raises(ValueError, match="no known minimum"):
        arm_set_floor(unknown, (0,))


def test_unknown_optimum_is_the_best_loss_found(tiny_run):
    *_, traces = tiny_run
    unknown = {k: dataclasses.replace(t, optimum=math.nan) for k, t in traces.items()}
    best = max(float(t.values.max()) for t in traces.values())
    assert {t.optimum for t in with_optima(unknown)} == {best}
    regrets = [t.curve("simple_regret")[-1] for t in with_optima(unknown)]
    assert min(regrets) == 0.0 and min(regrets) >= 0


def _small(budget=6, seeds=(0, 1), problem="branin"):
    r"""2 methods x 2 seeds of ``budget`` trials on ``problem``, 1 in flight."""
    block = Block((problem,), ("random", "tpe"), budget, 1, seeds)
    return Preset("small", "", (block,), (budget,))


def _run(out, *options):
    argv = ["--preset", "small", "--output-dir", str(out), "--no-progress"]
    assert cli.main([*argv, *options]) == 0
    return json.loads((out / "traces.json").read_text())["traces"]


def test_resume_reuses_the_runs_of_the_same_settings(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "small", _small())
    out = tmp_path / "out"
    first = _run(out)
    assert len(list((out / "runs").glob("*.json"))) == 4
    (out / "runs" / "branin_1_in_flight__tpe__seed1.json").unlink()
    capsys.readouterr()
    again = _run(out, "--resume")
    assert "note: resuming: 3 of 4 runs already done" in capsys.readouterr().out
    assert again[:3] == first[:3]  # reused: timings included
    assert again[3]["values"] == first[3]["values"]  # run again, same seed
    assert again[3]["tell_seconds"] != first[3]["tell_seconds"]
    monkeypatch.setitem(PRESETS, "small", _small(seeds=(0, 2)))
    changed = _run(out, "--resume")
    assert "note: resuming: 2 of 4 runs already done" in capsys.readouterr().out
    assert changed[0] == first[0] and changed[2] == first[2]  # the seed-0 runs
    monkeypatch.setitem(PRESETS, "small", _small(budget=5, seeds=(0, 2)))
    shorter = _run(out, "--resume")
    text = capsys.readouterr().out
    assert "note: resuming: 0 of 4 runs already done" in text
    assert text.count("made with other settings") == 4
    assert [t["values"] for t in shorter] == [t["values"][:5] for t in changed]
    _run(out)
    assert "holds 6 finished run(s) of an earlier command" in capsys.readouterr().out


def test_an_unknown_minimum_covers_stored_and_new_runs(tmp_path, monkeypatch):
    branin = make_tuning_problem("branin")
    unknown = dataclasses.replace(branin, name="branin-unknown", optimum=None)
    monkeypatch.setitem(PROBLEMS, "branin-unknown", lambda _: unknown)
    monkeypatch.setitem(PRESETS, "small", _small(problem="branin-unknown"))
    out = tmp_path / "out"
    first = _run(out)
    best = max(max(t["values"]) for t in first)
    assert {t["optimum"] for t in first} == {best}
    stored = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    assert {run["trace"]["optimum"] for run in stored} == {None}  # NaN on disk
    assert {run["fingerprint"]["optimum"] for run in stored} == {None}
    winner = next(t for t in first if max(t["values"]) == best)
    files = {
        p.name.split("__", 1)[1]: p for p in (out / "runs").glob("*.json")
    }  # "<method>__seed<s>.json" -> path
    key = f"{winner['policy']}__seed{winner['seed']}.json"
    last = first
    for keep_winner in (False, True):  # the best run new, then stored
        for name, path in files.items():
            if (name == key) != keep_winner:
                path.unlink()
        again = _run(out, "--resume")
        assert _untimed(again) == _untimed(first)  # optimum: best, as before
        reused = [(t["policy"], t["seed"]) for t in again if t in last]  # timings too
        if keep_winner:  # the best run stored, the 3 others new
            assert reused == [(winner["policy"], winner["seed"])]
        else:  # the best run new, the 3 others stored
            assert len(reused) == 3 and (winner["policy"], winner["seed"]) not in reused
        last = again


def test_a_stopped_run_keeps_why_in_its_stored_trace(tmp_path):
    block = Block(("branin",), ("random",), 5, 1, (0,), max_optimizer_seconds=0.0)
    preset = Preset("capped", "", (block,), (5,))
    problems = {"branin": make_tuning_problem("branin")}
    store = RunStore(tmp_path)
    (trace,) = run_preset(preset, problems, store=store).values()
    assert trace.horizon == 1
    assert trace.metadata == {
        "stopped": "stopped after 1 trials: optimizer time above 0 s",
        "repeats": [],
    }
    done, notes = stored_runs(preset, problems, store)
    assert notes == [] and list(done.values())[0].to_dict() == trace.to_dict()


def _untimed(traces):
    times = ("ask_seconds", "tell_seconds", "setup_seconds")
    return [{k: v for k, v in t.items() if k not in times} for t in traces]


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
    monkeypatch.setitem(PRESETS, "tiny", Preset("tiny", "", (block,), (2,)))
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
    from benchmarks.tuning.driver import run_trials
    from benchmarks.tuning.methods import method_factory
    from benchmarks.tuning.problems import make_tuning_problem

    problem = make_tuning_problem("mixed")
    build = method_factory("ax")
    log = run_trials(lambda: build(problem.space, 0, 2), problem.loss, 6, 2, seed=0)
    assert len(log.losses) == 6 and log.max_running == 2
    assert all(contains(problem.space, config) for config in log.configs)
