r"""COCO's bbob suite in the tuning benchmark: the problem wrapper and its f_opt,
the ECDF against a brute-force count, and the report of a tiny run."""

import itertools
import json
from functools import partial

import numpy as np
import pytest

pytest.importorskip("cocoex")
pytest.importorskip("optuna")
pytest.importorskip("matplotlib")

import cocoex

from benchmarks.presets import Block, Preset
from benchmarks.tuning import cli
from benchmarks.tuning.coco import (
    BBOB_TARGETS,
    ecdf_rows,
    fraction_solved,
    targets_hit,
)
from benchmarks.tuning.driver import (
    TrialLog,
    load_problems,
    parse_label,
    to_trace,
)
from benchmarks.tuning.presets import PRESETS
from benchmarks.tuning.problems import (
    BBOB_FUNCTIONS,
    BBOBSpec,
    bbob_suite,
    make_tuning_problem,
    parse_bbob,
)


def _config(point):
    return {f"x{i}": float(value) for i, value in enumerate(point)}


def test_bbob_names_parse_and_bad_names_raise():
    spec = parse_bbob("bbob:function=3:dim=5:instance=1")
    assert spec == BBOBSpec(3, 5, 1) and spec.name == "bbob:function=3:dim=5:instance=1"
    assert parse_bbob("bbob:instance=2:dim=10:function=24") == BBOBSpec(24, 10, 2)
    assert parse_bbob("branin") is None
    for bad in ("bbob:function=3:dim=5", "bbob:function=3:dim=5:instance=x"):
        with pytest.raises(ValueError, match="`name`"):
            parse_bbob(bad)
    with pytest.raises(ValueError, match="`function`"):
        parse_bbob("bbob:function=25:dim=5:instance=1")
    with pytest.raises(ValueError, match="`instance`"):
        make_tuning_problem("bbob:function=1:dim=5:instance=0")
    suite = bbob_suite()
    assert len(suite) == 24 * 2 * 5 == len(set(suite))
    assert suite[:2] == (
        "bbob:function=1:dim=5:instance=1",
        "bbob:function=1:dim=5:instance=2",
    )
    assert bbob_suite((2,), (10,), (3,)) == ("bbob:function=2:dim=10:instance=3",)


def test_bbob_biobj_problems_are_cocoexs_two_losses_with_its_nadir():
    # the suite object of each problem is built apart: its values are cocoex's own
    suite = cocoex.Suite("bbob-biobj", "", "dimensions:5 instance_indices:1")
    rng = np.random.default_rng(1)
    for function in (1, 28, 55):
        name = f"bbob-biobj:function={function}:dim=5:instance=1"
        problem = make_tuning_problem(name)
        assert problem.num_objectives == 2 and problem.optimum is None
        assert [(p.low, p.high) for p in problem.space] == [(-5.0, 5.0)] * 5
        reference = suite.get_problem_by_function_dimension_instance(function, 5, 1)
        points = rng.uniform(-5.0, 5.0, (20, 5))
        assert [problem.loss(_config(x)) for x in points] == [
            tuple(reference(x)) for x in points
        ]
        assert problem.reference_point == tuple(reference.largest_fvalues_of_interest)
    assert (
        BBOBSpec(7, 5, 2, "bbob-biobj").name == "bbob-biobj:function=7:dim=5:instance=2"
    )
    assert parse_bbob("bbob-biobj:function=7:dim=5:instance=2") is None  # bbob only
    with pytest.raises(ValueError, match="`function`"):
        make_tuning_problem("bbob-biobj:function=56:dim=5:instance=1")
    with pytest.raises(ValueError, match="bbob-biobj problem is"):
        make_tuning_problem("bbob-biobj:function=1:dim=5")
    preset = PRESETS["multi-objective-bbob-biobj"]
    problems = bbob_suite(tuple(range(1, 56)), (5,), (1,), "bbob-biobj")
    assert [block.problems for block in preset.blocks] == [problems] * 2
    assert len(set(problems)) == 55
    assert problems[-1] == "bbob-biobj:function=55:dim=5:instance=1"


@pytest.mark.parametrize("dim", [5, 10])
def test_bbob_values_equal_cocoex_and_never_beat_f_opt(dim):
    suite = cocoex.Suite("bbob", "instances: 1-2", f"dimensions: {dim}")
    rng = np.random.default_rng(0)
    for function, instance in itertools.product(BBOB_FUNCTIONS, (1, 2)):
        problem = make_tuning_problem(BBOBSpec(function, dim, instance).name)
        assert [(p.low, p.high) for p in problem.space] == [(-5.0, 5.0)] * dim
        reference = suite.get_problem_by_function_dimension_instance(
            function, dim, instance
        )
        points = rng.uniform(-5.0, 5.0, (50, dim))
        values = [problem.loss(_config(x)) for x in points]
        assert values == [reference(x) for x in points]
        assert min(values) >= problem.optimum
        # at COCO's optimum the value is f_opt (up to rounding in the last bits)
        best = cocoex.BareProblem("bbob", function, dim, instance).best_parameter()
        gap = problem.loss(_config(best)) - problem.optimum
        assert abs(gap) <= 1e-12 * max(1.0, abs(problem.optimum))


def test_sphere_f_opt_is_its_minimum():
    problem = make_tuning_problem("bbob:function=1:dim=5:instance=3")
    best = cocoex.BareProblem("bbob", 1, 5, 3).best_parameter()
    assert problem.loss(_config(best)) == problem.optimum
    for i, step in itertools.product(range(5), (0.5, -0.25)):
        moved = best.copy()
        moved[i] += step  # f = ||x - x_opt||^2 + f_opt
        assert problem.loss(_config(moved)) - problem.optimum == pytest.approx(
            step**2, rel=1e-9
        )


def test_targets_are_cocos_defaults():
    assert len(BBOB_TARGETS) == 51
    np.testing.assert_allclose(
        np.log10(BBOB_TARGETS), [2 - 0.2 * k for k in range(51)], atol=1e-12
    )
    assert targets_hit(np.array([1e3, 100.0, 1.0, 0.0])).tolist() == [0, 1, 11, 51]


def _brute_force(runs, horizon, targets):
    per_step = []
    for t in range(1, horizon + 1):
        solved = sum(
            any(value <= target for value in run[:t])
            for run in runs
            for target in targets
        )
        per_step.append(solved / (len(runs) * len(targets)))
    return np.array(per_step)


def test_fraction_solved_matches_a_brute_force_count():
    runs = [
        np.array([150.0, 20.0, 30.0, 0.5, 1e-9, 2e-9]),
        np.array([1e4, 99.0, BBOB_TARGETS[20]]),  # a target exactly: solved
        np.array([3.0]),  # ended after one evaluation
        np.array([0.0, 5.0]),
    ]
    got = fraction_solved(runs, 7)
    np.testing.assert_array_equal(got, _brute_force(runs, 7, BBOB_TARGETS))
    small = np.array([10.0, 1.0])
    np.testing.assert_array_equal(
        fraction_solved(runs, 4, small), _brute_force(runs, 4, small)
    )
    with pytest.raises(ValueError, match="`runs`"):
        fraction_solved([], 3)
    with pytest.raises(ValueError, match="`horizon`"):
        fraction_solved(runs, 0)


def _trace(name, method, losses, stopped=""):
    log = TrialLog(losses=list(losses), stopped=stopped)
    log.ask_seconds = log.tell_seconds = [0.001] * len(losses)
    return to_trace((name, 1, method, 0), log, 0.0)


def test_ecdf_rows_skip_budgets_past_unfinished_runs_not_past_stopped_ones():
    f1, f2 = bbob_suite((1, 2), (5,), (1,))
    traces = [
        _trace(f1, "a", [200.0, 50.0, 0.9, 0.9]),
        _trace(f2, "a", [1e-9] * 4),
        _trace(f1, "gp", [50.0, 0.9], stopped="time"),
        _trace(f2, "gp", [0.9] * 3),  # a smaller budget, not stopped
        _trace("branin", "a", [1.0, 1.0, 1.0, 1.0]),  # not bbob: left out
    ]
    rows = {(r["method"], r["budget"]): r for r in ecdf_rows(traces, (1, 3, 4))}
    assert set(rows) == {("a", 1), ("a", 3), ("a", 4), ("gp", 1), ("gp", 3)}
    assert rows["a", 1]["fraction_solved"] == (0 + 51) / 102
    assert rows["a", 3]["fraction_solved"] == (11 + 51) / 102
    assert rows["gp", 3]["fraction_solved"] == (11 + 11) / 102
    assert rows["gp", 3]["stopped"] == 1 and rows["a", 4]["stopped"] == 0
    assert {r["group"] for r in rows.values()} == {"5-D, 1 in flight"}


def test_labels_parse_back():
    assert parse_label("bbob:function=1:dim=5:instance=1, 8 in flight") == (
        "bbob:function=1:dim=5:instance=1",
        8,
    )
    with pytest.raises(ValueError, match="`text`"):
        parse_label("branin")


def test_bbob_presets_name_valid_problems_and_methods():
    from benchmarks.tuning.methods import METHODS

    names = [name for name in PRESETS if name.startswith("bbob")]
    assert {
        "bbob-5d",
        "bbob-10d-parallel",
        "bbob-5d-100",
        "bbob-10d-100",
        "bbob-smoke",
    } <= set(names)
    for name in names:
        for block in PRESETS[name].blocks:
            assert set(block.methods) <= set(METHODS)
            assert all(parse_bbob(problem) for problem in block.problems)
    assert PRESETS["bbob-5d"].budgets == (50, 100, 300, 1000, 5000)
    assert {b.in_flight for b in PRESETS["bbob-10d-parallel"].blocks} == {8}
    assert {b.in_flight for b in PRESETS["bbob-5d-100-parallel"].blocks} == {8}
    # GPSampler runs to 300 trials at most, with the larger cap beyond 100
    ours, gp = PRESETS["bbob-5d-1000"].blocks
    assert (ours.horizon, gp.horizon, gp.max_optimizer_seconds) == (1000, 300, 300.0)
    assert PRESETS["bbob-5d-1000"].budgets == (50, 100, 300, 1000)
    assert PRESETS["bbob-5d-100"].blocks[1].max_optimizer_seconds == 120.0
    # the 5,000-trial instance-1 presets: TPE stops at 1,000 trials
    ours, tpe = PRESETS["bbob-10d-5000-parallel"].blocks
    assert (ours.horizon, tpe.horizon, ours.in_flight, tpe.in_flight) == (
        5000,
        1000,
        8,
        8,
    )
    assert ours.methods == ("bbkb-optuna", "cmaes") and tpe.methods == ("tpe",)
    assert len(ours.problems) == 24 and PRESETS["bbob-5d-5000"].budgets[-1] == 5000


SMOKE = Preset(
    "bbob-tiny",
    "",
    (
        Block(
            ("branin", *bbob_suite((1, 21), (5,), (1, 2))),
            ("random", "tpe-independent"),
            12,
            1,
            (0,),
        ),
    ),
    (6, 12),
)


def test_cli_reports_cocos_measures_on_a_tiny_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "bbob-tiny", SMOKE)
    out = tmp_path / "out"
    argv = ["--preset", "bbob-tiny", "--data-dir", str(tmp_path)]
    assert cli.main([*argv, "--output-dir", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "| branin, 1 in flight |" in text  # the other problems' tables
    assert "COCO bbob, 5-D, 1 in flight: fraction of the" in text
    assert "| tpe-independent |" in text and "| f21 |" in text
    names = {path.name for path in out.iterdir()}
    assert {"bbob_ecdf_5d_1_in_flight.png", "bbob_ecdf.csv"} <= names
    assert "branin_1_in_flight_regret.png" in names
    assert not any(name.startswith("bbob_function") for name in names)
    saved = json.loads((out / "traces.json").read_text())
    problems, _ = load_problems(SMOKE, tmp_path)
    for trace in saved["traces"]:  # rewards are the negated losses
        name = parse_label(trace["problem"])[0]
        assert trace["optimum"] == -problems[name].optimum
    again = tmp_path / "again"
    assert cli.main([*argv, "--output-dir", str(again), "--collect", str(out)]) == 0
    assert (again / "tables.md").read_text() == (out / "tables.md").read_text()


def test_tpe_variants_differ_only_as_optuna_says():
    from benchmarks.tuning.driver import run_trials
    from benchmarks.tuning.methods import TPE_VARIANTS, method_factory

    problem = make_tuning_problem("bbob:function=1:dim=5:instance=1")
    configs = {}
    for name in TPE_VARIANTS:
        build = partial(method_factory(name), problem.space, 0, 1)
        log = run_trials(build, problem.loss, 14, 1, 0)
        configs[name] = log.configs
    # the first 10 trials are the same random start; then the models differ
    assert configs["tpe-multivariate"][:10] == configs["tpe-independent"][:10]
    assert configs["tpe-multivariate"][10:] != configs["tpe-independent"][10:]
    default = "tpe-multivariate" if _optuna_major() >= 5 else "tpe-independent"
    assert configs["tpe"] == configs[default]


def _optuna_major():
    import optuna

    return int(optuna.__version__.split(".")[0])
