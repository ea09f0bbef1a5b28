r"""Constrained problems and problems of several losses in the tuning benchmark:
the problems against BoTorch's functions, the best feasible loss and the
hypervolume against hand counts, and tiny runs of the driver and the report."""

import json
import math

import numpy as np
import pytest
import torch

pytest.importorskip("optuna")
pytest.importorskip("matplotlib")

from botorch.test_functions import multi_objective, synthetic

from benchmarks.presets import Block, Preset
from benchmarks.results import RunTrace
from benchmarks.runner import RunStore
from benchmarks.tuning import cli
from benchmarks.tuning.driver import (
    TrialLog,
    fingerprint,
    load_problems,
    run_preset,
    stored_runs,
    to_trace,
    with_optima,
)
from benchmarks.tuning.methods import (
    CONSTRAINED_METHODS,
    CONSTRAINTS_ATTR,
    METHODS,
    MULTI_OBJECTIVE_METHODS,
    method_factory,
)
from benchmarks.tuning.presets import PRESETS
from benchmarks.tuning.problems import (
    CONSTRAINED_PROBLEMS,
    MULTI_OBJECTIVE_PROBLEMS,
    PROBLEMS,
    TuningProblem,
    box_space,
    make_tuning_problem,
)
from benchmarks.tuning.report import (
    best_feasible,
    constrained_rows,
    constrained_tables,
    hypervolume,
    hypervolume_rows,
    hypervolume_tables,
    hypervolumes,
    relative_hypervolume_lines,
)

#: Problem -> BoTorch's function and a point: the optimum its references report
#: (PressureVessel, WeldedBeamSO, SpeedReducer and ConstrainedGramacy, rounded as
#: published: some slightly infeasible) or its optimizer (ConstrainedHartmann).
CONSTRAINED = {
    "pressure-vessel": (
        synthetic.PressureVessel(),
        [0.8125, 0.4375, 42.098446, 176.636596],
    ),
    "welded-beam": (
        synthetic.WeldedBeamSO(),
        [0.205730, 3.470489, 9.036624, 0.205729],
    ),
    "speed-reducer": (
        synthetic.SpeedReducer(),
        [3.5, 0.7, 17.0, 7.3, 7.8, 3.350215, 5.286683],
    ),
    "constrained-hartmann": (
        synthetic.ConstrainedHartmann(dim=6),
        synthetic.Hartmann(dim=6).optimizers[0].tolist(),
    ),
    "constrained-gramacy": (synthetic.ConstrainedGramacy(), [0.1954, 0.4044]),
}
#: Problem -> BoTorch's function, a point on its Pareto front (none known for
#: BraninCurrin) and its losses there.
MULTI_OBJECTIVE = {
    "branin-currin": (multi_objective.BraninCurrin(), [0.5, 0.5], None),
    "dtlz2": (
        multi_objective.DTLZ2(dim=6),
        [1 / 3] + [0.5] * 5,
        [math.cos(math.pi / 6), math.sin(math.pi / 6)],
    ),
    "zdt1": (multi_objective.ZDT1(dim=6), [0.25] + [0.0] * 5, [0.25, 0.5]),
}


def _config(point):
    return {f"x{i}": float(value) for i, value in enumerate(point)}


def test_the_new_problems_are_registered_and_the_others_unchanged():
    assert set(CONSTRAINED) == set(CONSTRAINED_PROBLEMS)
    assert set(MULTI_OBJECTIVE) == set(MULTI_OBJECTIVE_PROBLEMS)
    assert set(CONSTRAINED) | set(MULTI_OBJECTIVE) <= set(PROBLEMS)
    branin = make_tuning_problem("branin")
    assert (branin.num_objectives, branin.constraints) == (1, None)
    assert branin.reference_point is None and branin.max_hypervolume is None
    with pytest.raises(ValueError, match="reference point"):
        TuningProblem("p", box_space([(0, 1)]), sum, None, num_objectives=2)
    with pytest.raises(ValueError, match="reference point"):
        TuningProblem("p", box_space([(0, 1)]), sum, 0.0, reference_point=(1.0,))


@pytest.mark.parametrize("name", sorted(CONSTRAINED))
def test_constrained_problems_are_botorch_functions(name):
    function, point = CONSTRAINED[name]
    problem = make_tuning_problem(name)
    x = torch.tensor([point], dtype=torch.float64)
    config = _config(point)
    assert problem.num_objectives == 1 and problem.reference_point is None
    assert problem.optimum == function.optimal_value
    assert problem.loss(config) == float(function.evaluate_true(x))
    values = problem.constraints(config)
    assert len(values) == function.num_constraints
    assert values == (-function.evaluate_slack_true(x)).squeeze(0).tolist()
    # Optuna's convention: feasible when every value is <= 0
    assert (max(values) <= 0) == bool(function.is_feasible(x, noise=False))
    if name in ("constrained-hartmann", "constrained-gramacy"):  # optimum feasible
        assert max(values) <= 0
        assert problem.loss(config) == pytest.approx(problem.optimum, abs=1e-4)


@pytest.mark.parametrize("name", sorted(MULTI_OBJECTIVE))
def test_multi_objective_problems_are_botorch_functions(name):
    function, point, losses = MULTI_OBJECTIVE[name]
    problem = make_tuning_problem(name)
    x = torch.tensor([point], dtype=torch.float64)
    assert problem.num_objectives == 2 and problem.optimum is None
    assert problem.constraints is None
    got = problem.loss(_config(point))
    assert isinstance(got, tuple)
    assert list(got) == function.evaluate_true(x).squeeze(0).tolist()
    if losses is not None:
        assert got == pytest.approx(losses)
    # BoTorch's reference point is that of the minimized (un-negated) losses
    assert problem.reference_point == tuple(function.ref_point.tolist())
    assert problem.max_hypervolume == pytest.approx(function.max_hv)
    expected = {
        "branin-currin": ((18.0, 6.0), 59.36011874867746),
        "dtlz2": ((1.1, 1.1), 1.21 - math.pi / 4),
        "zdt1": ((11.0, 11.0), 120 + 2 / 3),
    }[name]
    assert problem.reference_point == expected[0]
    assert problem.max_hypervolume == pytest.approx(expected[1])


def test_hypervolume_of_three_points_and_of_a_pareto_front():
    reference = [4.0, 4.0]
    # three Pareto points: a staircase of 1 x 1 + 1 x 2 + 1 x 3
    points = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert hypervolume(points, reference) == pytest.approx(6.0)
    # a dominated point, a point beyond the reference and one on it add nothing
    more = np.concatenate([points, [[2.5, 2.5], [5.0, 0.0], [0.5, 4.0]]])
    assert hypervolume(more, reference) == pytest.approx(6.0)
    assert hypervolume(np.empty((0, 2)), reference) == 0.0
    assert hypervolume(np.array([[0.0, 0.0]]), reference) == 16.0
    # ZDT1's front, minimized, against BoTorch's reference point: its max_hv
    problem = make_tuning_problem("zdt1")
    front = multi_objective.ZDT1(dim=6).gen_pareto_front(2000).numpy()
    volume = hypervolume(front, problem.reference_point)
    assert volume == pytest.approx(problem.max_hypervolume, rel=1e-4)
    assert volume < problem.max_hypervolume


def _mo_problem():
    return TuningProblem(
        "two",
        box_space([(0, 1)]),
        lambda c: (c["x0"], 1 - c["x0"]),
        None,
        num_objectives=2,
        reference_point=(4.0, 4.0),
        max_hypervolume=8.0,
    )


def test_hypervolume_curves_and_rows_of_a_tiny_history():
    losses = [(3.0, 1.0), (5.0, 0.0), (1.0, 3.0), (2.5, 2.5), (2.0, 2.0)]
    log = TrialLog(
        configs=[{"x0": 0.1 * i} for i in range(5)],
        losses=losses,
        ask_seconds=[0.0] * 5,
        tell_seconds=[0.001] * 5,
    )
    trace = to_trace(("two", 1, "m", 0), log, None, _mo_problem())
    assert trace.metadata["reference_point"] == [4.0, 4.0]
    assert list(trace.diagnostics["loss_1"]) == [1.0, 0.0, 3.0, 2.5, 2.0]
    assert list(trace.values) == [-3.0, -5.0, -1.0, -2.5, -2.0]
    # 3: the first point; the second lies beyond the reference; ...; 6: 3 points
    assert list(hypervolumes(trace, [1, 2, 3, 4, 5])) == pytest.approx(
        [3.0, 3.0, 5.0, 5.25, 6.0]
    )
    again = RunTrace.from_dict(json.loads(json.dumps(trace.to_dict())))
    assert list(hypervolumes(again, [5])) == pytest.approx([6.0])
    other = to_trace(("two", 1, "m", 1), log, None, _mo_problem())
    rows = hypervolume_rows([trace, other], [3, 5])
    assert [row["budget"] for row in rows] == [3, 5]
    assert rows[1]["hypervolume_mean"] == pytest.approx(6.0)
    assert rows[1]["fraction_mean"] == pytest.approx(0.75)
    assert rows[1]["fraction_std"] == 0.0 and rows[1]["seeds"] == 2
    assert rows[1]["seconds_per_trial"] == pytest.approx(0.001)
    table = hypervolume_tables(rows, [3, 5], {"two": ([4.0, 4.0], 8.0)})
    assert "| two, 1 in flight | 0.7500 ± 0 (2 seeds) |" in table
    assert "two: reference point [4.0, 4.0], largest hypervolume 8" in table
    # with_optima leaves the unknown minimum of such a problem unknown
    assert math.isnan(with_optima({("two", 1, "m", 0): trace})[0].optimum)


def test_best_feasible_loss_of_a_tiny_history():
    def trace(seed, losses, constraints):
        log = TrialLog(
            configs=[{"x0": float(i)} for i in range(len(losses))],
            losses=losses,
            constraints=constraints,
            ask_seconds=[0.0] * len(losses),
            tell_seconds=[0.0] * len(losses),
        )
        return to_trace(("c", 1, "m", seed), log, 1.0)

    first = trace(
        0, [5.0, 3.0, 4.0, 1.0, 2.0], [[1, -1], [-1, 0], [0, 0], [0.5, -3], [-2, -2]]
    )
    assert list(first.diagnostics["violation"]) == [1.0, 0.0, 0.0, 0.5, 0.0]
    assert list(best_feasible(first)) == [math.inf, 3.0, 3.0, 3.0, 2.0]
    second = trace(1, [0.5, 6.0, 7.0, 8.0, 4.0], [[2, 0]] + [[-1, -1]] * 4)
    assert list(best_feasible(second)) == [math.inf, 6.0, 6.0, 6.0, 4.0]
    rows = constrained_rows([first, second], [1, 3, 5])
    one, three, five = rows
    assert one["feasible_seeds"] == 0 and math.isnan(one["best_mean"])
    assert three["feasible_seeds"] == 2 and three["best_mean"] == 4.5
    assert three["best_min"] == 3.0 and three["best_max"] == 6.0
    assert five["best_mean"] == 3.0 and five["feasible_per_100"] == 70.0
    table = constrained_tables(rows, [1, 3, 5], {"c": 1.0})
    assert "| c, 1 in flight | none feasible (2 seeds) |" in table
    assert "| c, 1 in flight | 3 ± 1.4 (2 seeds) |" in table
    assert "Known minima (BoTorch's `optimal_value`): c: 1." in table
    assert "| c, 1 in flight | 70.0 |" in table
    # one seed feasible at trial 2: its best, and how many seeds found one
    late = trace(2, [1.0, 1.0, 9.0], [[1.0], [1.0], [-1.0]])
    (row,) = constrained_rows([first, late], [2])
    assert row["feasible_seeds"] == 1 and row["best_mean"] == 3.0
    assert "3 ± 0 (1 of 2 seeds feasible)" in constrained_tables([row], [2], {})


def test_methods_take_constraints_and_several_losses_or_refuse():
    assert set(CONSTRAINED_METHODS) <= set(METHODS)
    assert set(MULTI_OBJECTIVE_METHODS) <= set(METHODS)
    problem = make_tuning_problem("constrained-gramacy")
    for options in ({"constrained": True}, {"num_objectives": 2}):
        with pytest.raises(ValueError, match="cmaes runs"):
            method_factory("cmaes")(problem.space, 0, 1, **options)
    for name in PRESETS:
        for block in PRESETS[name].blocks:
            for problem_name in block.problems:
                if problem_name in CONSTRAINED_PROBLEMS:
                    assert set(block.methods) <= set(CONSTRAINED_METHODS)
                if problem_name in MULTI_OBJECTIVE_PROBLEMS:
                    assert set(block.methods) <= set(MULTI_OBJECTIVE_METHODS)


TINY = Preset(
    "tiny-outcomes",
    "",
    (
        Block(("constrained-gramacy", "zdt1"), ("random", "tpe"), 10, 1, (0, 1)),
        Block(("branin",), ("random",), 10, 1, (0,)),
    ),
    (5, 10),
)


def test_the_driver_runs_constrained_and_multi_objective_problems(tmp_path):
    problems, notes = load_problems(TINY, tmp_path)
    assert notes == []
    store = RunStore(tmp_path / "runs")
    traces = run_preset(TINY, problems, store=store)
    assert len(traces) == 2 * 2 * 2 + 1
    for (name, *_), trace in traces.items():
        assert trace.horizon == 10
        if name == "constrained-gramacy":
            violation = trace.diagnostics["violation"]
            assert set(trace.diagnostics) == {"violation"} and min(violation) >= 0
            assert 0 < (violation == 0).sum() < 10  # some feasible, some not
        elif name == "zdt1":
            assert set(trace.diagnostics) == {"loss_0", "loss_1"}
            assert list(trace.values) == list(-trace.diagnostics["loss_0"])
            assert trace.metadata["max_hypervolume"] == pytest.approx(120 + 2 / 3)
        else:
            assert trace.diagnostics == {} and "reference_point" not in trace.metadata
    # the fingerprints: new keys only for the new kinds of problem
    block = TINY.blocks[0]
    plain = fingerprint(("branin", 1, "random", 0), TINY.blocks[1], problems["branin"])
    assert "constrained" not in plain and "num_objectives" not in plain
    settings = fingerprint(("zdt1", 1, "tpe", 0), block, problems["zdt1"])
    assert settings["num_objectives"] == 2
    assert settings["reference_point"] == [11.0, 11.0]
    key = ("constrained-gramacy", 1, "tpe", 0)
    assert fingerprint(key, block, problems[key[0]])["constrained"] is True
    done, reruns = stored_runs(TINY, problems, store)
    assert reruns == [] and len(done) == len(traces)
    for key, trace in traces.items():
        assert done[key].to_dict() == trace.to_dict()


@pytest.mark.parametrize("name", ["constrained-gramacy", "branin-currin"])
def test_optuna_samplers_get_the_constraints_and_the_directions(name):
    from benchmarks.tuning.driver import method_options, run_trials

    problem = make_tuning_problem(name)
    method = method_factory("tpe")(problem.space, 0, 2, **method_options(problem))
    log = run_trials(
        lambda: method, problem.loss, 12, 2, 0, constraints=problem.constraints
    )
    study = method.study
    assert len(study.directions) == problem.num_objectives
    if problem.constraints is None:
        assert log.constraints == [] and all(len(v) == 2 for v in log.losses)
        assert sorted(t.values for t in study.trials) == sorted(map(list, log.losses))
        return
    assert len(log.constraints) == 12
    for trial in study.trials:  # stored by the objective, read by the sampler
        values = trial.user_attrs[CONSTRAINTS_ATTR]
        assert trial.system_attrs["constraints"] == tuple(values)
        assert values == problem.constraints(trial.params)


def test_cli_writes_the_constrained_and_hypervolume_tables(tmp_path, monkeypatch):
    monkeypatch.setitem(PRESETS, TINY.name, TINY)
    out = tmp_path / "out"
    argv = ["--preset", TINY.name, "--output-dir", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    tables = (out / "tables.md").read_text()
    assert "Simple regret after 5 trials" in tables  # branin: as before
    assert "Best feasible loss after 10 trials" in tables
    assert "| constrained-gramacy, 1 in flight | " in tables
    assert "Known minima (BoTorch's `optimal_value`): constrained-gramacy: 0.5998" in (
        tables
    )
    assert "Hypervolume of the observed losses after 5 trials" in tables
    assert "| zdt1, 1 in flight | " in tables
    assert "zdt1: reference point [11.0, 11.0], largest hypervolume 120.667" in tables
    names = {path.name for path in out.iterdir()}
    assert {"constrained.csv", "hypervolume.csv", "regret.csv"} <= names
    assert "constrained-gramacy_1_in_flight_best_feasible.png" in names
    assert "zdt1_1_in_flight_hypervolume.png" in names
    assert "zdt1_1_in_flight_time_per_trial.png" in names
    assert "zdt1_1_in_flight_regret.png" not in names
    regret = (out / "regret.csv").read_text()
    assert "branin" in regret and "zdt1" not in regret
    (out / "tables.md").unlink()
    assert cli.main([*argv, "--collect", str(out)]) == 0
    assert (out / "tables.md").read_text() == tables


def test_problems_and_methods_options_run_part_of_a_preset(
    tmp_path, monkeypatch, capsys
):
    preset = cli.restrict(PRESETS["constrained"], ["welded-beam", "speed-reducer"])
    assert [block.problems for block in preset.blocks] == [
        ("welded-beam", "speed-reducer")
    ] * 2
    assert [block.methods for block in preset.blocks] == [
        block.methods for block in PRESETS["constrained"].blocks
    ]
    tiny = cli.restrict(TINY, ["zdt1"])
    assert [block.problems for block in tiny.blocks] == [("zdt1",)]
    monkeypatch.setitem(PRESETS, TINY.name, TINY)
    out = tmp_path / "out"
    argv = ["--preset", TINY.name, "--output-dir", str(out), "--no-progress"]
    assert cli.main([*argv, "--problems", "zdt1"]) == 0
    assert len(list((out / "runs").glob("*.json"))) == 4
    assert not (out / "regret.csv").exists() and (out / "hypervolume.csv").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main([*argv, "--problems", "zdt1,dtlz2"])
    assert "argument --problems: tiny-outcomes has no problem dtlz2" in (
        capsys.readouterr().err
    )
    only_tpe = cli.restrict(TINY, methods=["tpe"])
    assert [(block.problems, block.methods) for block in only_tpe.blocks] == [
        (("constrained-gramacy", "zdt1"), ("tpe",))
    ]
    both = cli.restrict(TINY, ["zdt1", "branin"], ["random"])
    assert [(block.problems, block.methods) for block in both.blocks] == [
        (("zdt1",), ("random",)),
        (("branin",), ("random",)),
    ]
    fresh = tmp_path / "fresh"
    argv = ["--preset", TINY.name, "--output-dir", str(fresh), "--no-progress"]
    assert cli.main([*argv, "--problems", "zdt1", "--methods", "tpe"]) == 0
    assert sorted(path.name for path in (fresh / "runs").glob("*.json")) == [
        "zdt1_1_in_flight__tpe__seed0.json",
        "zdt1_1_in_flight__tpe__seed1.json",
    ]
    with pytest.raises(SystemExit):
        cli.main([*argv, "--methods", "cmaes"])
    assert "argument --methods: tiny-outcomes has no method cmaes" in (
        capsys.readouterr().err
    )
    one_seed = cli.restrict(TINY, seeds=[1])
    assert [(block.problems, block.seeds) for block in one_seed.blocks] == [
        (("constrained-gramacy", "zdt1"), (1,))
    ]
    for bad in ("2", "x"):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--seeds", bad])
        assert "argument --seeds:" in capsys.readouterr().err


def test_problems_of_unknown_largest_hypervolume_are_summed_up_relative_to_the_best():
    def row(problem, method, volume, largest=math.nan, budget=10):
        return {
            "problem": problem,
            "method": method,
            "budget": budget,
            "hypervolume_mean": volume,
            "max_hypervolume": largest,
        }

    rows = [
        row("f1", "a", 2.0),
        row("f1", "b", 4.0),
        row("f2", "a", 9.0),
        row("f2", "b", 9.5),
        row("f3", "a", 0.0),  # no method inside the reference box: left out
        row("f3", "b", 0.0),
        row("known", "a", 1.0, largest=3.0),  # a known largest: not in the summary
        row("known", "b", 3.0, largest=3.0),
        row("f1", "a", 1.0, budget=20),  # the other budget
        row("f1", "b", 1.0, budget=20),
    ]
    lines = relative_hypervolume_lines(rows, [10, 20])
    text = "\n".join(lines)
    # by hand: a = (2/4 + 9/9.5) / 2, b = 1; at 0.95 or more: a on f2 (0.947: no)
    assert "over the 2 problems whose largest is unknown" in text
    assert f"| a | {(0.5 + 9 / 9.5) / 2:.3f} | 0 of 2 | 0 |" in lines
    assert "| b | 1.000 | 2 of 2 | 2 |" in lines
    assert "| a | 1.000 | 1 of 1 | 1 |" in lines  # budget 20: a tie goes to a
    assert "| b | 1.000 | 1 of 1 | 0 |" in lines
    assert relative_hypervolume_lines(rows[6:8], [10]) == []
