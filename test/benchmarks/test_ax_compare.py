r"""Tests of the Ax comparison script: real Ax loops (sequential, with pending trials,
in batches), the regret recomputed from the evaluated points, the summary against
hand-computed figures, and argument checks."""

import json
import logging

import pytest

pytest.importorskip("ax")

import numpy as np
import torch
from ax.utils.common.logger import set_ax_logger_levels
from botorch.test_functions import Branin

from benchmarks.ax_compare import (
    METHODS,
    cpu_seconds_per_trial,
    main,
    make_function,
    make_strategy,
    markdown_table,
    run_ax,
    seconds_per_trial,
    summarize_runs,
)
from benchmarks.methods import BenchmarkMethod
from benchmarks.results import RunTrace

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def quiet_single_threaded_ax():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    set_ax_logger_levels(logging.WARNING)
    yield
    set_ax_logger_levels(logging.INFO)
    torch.set_num_threads(threads)


def recomputed_regret(points):
    r"""Simple regret after each point, from Branin's closed form (not the script's
    function object) and its known minimum 0.397887."""
    values = Branin().evaluate_true(torch.tensor(points, dtype=torch.float64))
    return values.cummin(0).values - 0.397887357729738


@pytest.mark.parametrize(
    ("method", "pending", "batch_size"),
    [("bkb", 2, 1), ("generic", 1, 1), ("sgpts", 1, 3)],
)
def test_run_ax_records_every_trial_and_its_regret(method, pending, batch_size):
    run = run_ax("branin", method, 0, 7, pending=pending, batch_size=batch_size)
    parameters = run.metadata["parameters"]
    assert run.horizon == len(parameters) == 7
    low, high = make_function("branin").bounds
    points = torch.tensor(parameters, dtype=torch.float64)
    assert ((points >= low) & (points <= high)).all()
    expected = recomputed_regret(parameters)
    regret = torch.tensor(run.curve("simple_regret"), dtype=torch.float64)
    assert torch.allclose(regret, expected)
    # a batch per request that returned trials: at most max(pending, batch_size)
    sizes = np.bincount(run.batch_index)
    assert sizes.sum() == 7 and 1 <= sizes.min() <= sizes.max() <= max(
        pending, batch_size
    )
    assert run.ask_seconds.sum() > 0 and run.metadata["ask_cpu_seconds"] > 0
    assert seconds_per_trial(run) == pytest.approx(run.ask_seconds.sum() / 7)
    assert cpu_seconds_per_trial(run) * 7 == pytest.approx(
        run.metadata["ask_cpu_seconds"]
    )


def test_seeds_make_runs_repeatable():
    first = run_ax("branin", "sgpts", 3, 6)
    second = run_ax("branin", "sgpts", 3, 6)
    assert first.metadata["parameters"] == second.metadata["parameters"]


def test_strategies_are_the_named_ones():
    assert all(isinstance(method, BenchmarkMethod) for method in METHODS.values())
    with pytest.raises(ValueError, match="method"):
        make_strategy("nope", 0)
    names = {method: make_strategy(method, 0).name for method in METHODS}
    assert "BKBUpperConfidenceBound" in names["generic"]
    assert "BKBUpperConfidenceBound" in names["bkb"]
    assert "ScaledPathThompsonSampling" in names["sgpts"]
    assert "BKBUpperConfidenceBound" in names["bkb-ridge"]
    ridge = make_strategy("bkb-ridge", 0).nodes_by_name["MBM"].generator_specs[0]
    assert ridge.generator_kwargs["botorch_acqf_options"] == {"radius": 0.2}
    assert "BKB" not in names["ax-default"] and "MBM" in names["ax-default"]


def _run(problem, method, seed, regret, seconds, cpu_seconds):
    trials = len(regret)
    return RunTrace(
        problem=problem,
        policy=method,
        seed=seed,
        optimum=0.0,
        uniform_regret=float("nan"),
        values=-np.asarray(regret),
        ask_seconds=np.array([seconds] + [0.0] * (trials - 1)),
        tell_seconds=np.zeros(trials),
        batch_index=np.arange(trials),
        metadata={"ask_cpu_seconds": cpu_seconds},
    )


def test_summary_and_table_match_hand_computed_figures():
    runs = [
        _run("branin", "bkb", 0, [3.0, 1.0], 2.0, 1.0),
        _run("branin", "bkb", 1, [2.0, 0.5], 4.0, 3.0),
        _run("branin", "bkb", 2, [2.0, 0.3], 6.0, 2.0),
        _run("hartmann6", "sgpts", 0, [1.0], 0.5, 0.25),
    ]
    rows = summarize_runs(runs)
    assert rows[0] == {
        "problem": "branin",
        "method": "bkb",
        "seeds": 3,
        "regret_mean": pytest.approx(0.6),
        "regret_min": 0.3,
        "regret_max": 1.0,
        "seconds_per_trial": pytest.approx((1.0 + 2.0 + 3.0) / 3),
        "cpu_seconds_per_trial": pytest.approx((0.5 + 1.5 + 1.0) / 3),
    }
    assert rows[1]["seeds"] == 1 and rows[1]["seconds_per_trial"] == 0.5
    assert rows[1]["cpu_seconds_per_trial"] == 0.25
    table = markdown_table(rows).splitlines()
    assert table[2] == "| branin | bkb | 3 | 0.6 [0.3, 1] | 2.00 | 1.00 |"
    assert table[3] == "| hartmann6 | sgpts | 1 | 1 [1, 1] | 0.50 | 0.25 |"
    assert len(table) == 4


def test_main_writes_every_run(tmp_path, capsys):
    output = tmp_path / "runs.json"
    argv = ["--problem", "branin", "--methods", "sgpts", "--seeds", "0,1"]
    runs = main([*argv, "-T", "6", "--output-dir", str(tmp_path)])
    records = json.loads(output.read_text())
    assert [record["seed"] for record in records] == [0, 1]
    assert RunTrace.from_dict(records[1]).values.tolist() == runs[1].values.tolist()
    assert records[1]["metadata"] == runs[1].metadata
    assert "| branin | sgpts | 2 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"seed": True}, TypeError, "seed"),
        ({"seed": 1.0}, TypeError, "seed"),
        ({"num_trials": 0}, ValueError, "num_trials"),
        ({"pending": 2, "batch_size": 2}, ValueError, "batch_size"),
        ({"problem": "rosenbrock"}, ValueError, "problem"),
        ({"method": "random"}, ValueError, "method"),
    ],
)
def test_run_ax_checks_its_arguments(kwargs, error, argument):
    arguments = {"problem": "branin", "method": "bkb", "seed": 0, "num_trials": 5}
    with pytest.raises(error, match=argument):
        run_ax(**{**arguments, **kwargs})


def test_main_rejects_unknown_names():
    with pytest.raises(SystemExit):
        main(["--methods", "random"])
