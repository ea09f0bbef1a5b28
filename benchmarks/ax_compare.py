r"""Ax's default strategy against the package's models in Ax, on test functions.

Each run is one Ax ``Client`` loop on a noiseless BoTorch test function (minimized on
its native box) with one strategy of :data:`METHODS`, trials requested with
``--pending k`` in flight (``k = 1``: sequential) or in batches of ``--batch-size b``.
It is recorded as a :class:`~benchmarks.results.RunTrace` (:func:`run_ax`): the
simple regret after each trial and the wall-clock and CPU seconds spent in
``Client.get_next_trials``. ``docs/ax.md`` describes the results.

Run::

    OMP_NUM_THREADS=1 python -m benchmarks.ax_compare \
        --problem branin,hartmann6 --seeds 0-2 -T 40 --pending 2
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import time
import warnings
from collections.abc import Sequence
from itertools import product
from pathlib import Path

import numpy as np
import torch
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
from ax.api.utils.structs import GenerationStrategyDispatchStruct
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.utils.common.logger import set_ax_logger_levels
from botorch.test_functions import Branin, Hartmann, Levy
from botorch.test_functions.synthetic import SyntheticTestFunction

from benchmarks import writers
from benchmarks.arguments import (
    OneLineParser,
    add_options,
    name_list,
)
from benchmarks.methods import BenchmarkMethod
from benchmarks.results import RunTrace, group_traces
from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound
from botorch_sketch.integrations.ax import (
    bkb_generation_strategy,
    sgpts_generation_strategy,
)
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.utils.validation import check_int

#: Test functions by name (minimized on their native boxes).
PROBLEMS: dict[str, tuple[type[SyntheticTestFunction], dict[str, int]]] = {
    "branin": (Branin, {}),
    "hartmann6": (Hartmann, {"dim": 6}),
    "levy4": (Levy, {"dim": 4}),
}


def make_function(problem: str) -> SyntheticTestFunction:
    r"""The noiseless test function ``problem`` (a key of :data:`PROBLEMS`)."""
    if problem not in PROBLEMS:
        raise ValueError(
            f"`problem` must be one of {sorted(PROBLEMS)}, got {problem!r}."
        )
    function_class, options = PROBLEMS[problem]
    return function_class(**options).to(torch.float64)


def _ax_default(seed: int) -> GenerationStrategy:
    struct = GenerationStrategyDispatchStruct(initialization_random_seed=seed)
    return choose_generation_strategy(struct)


def _generic(seed: int) -> GenerationStrategy:
    struct = GenerationStrategyDispatchStruct(
        method="custom", initialization_random_seed=seed
    )
    return choose_generation_strategy(
        struct,
        model_config=ModelConfig(botorch_model_class=NystromGP),
        botorch_acqf_class=BKBUpperConfidenceBound,
    )


def _bkb_ridge(seed: int) -> GenerationStrategy:
    return bkb_generation_strategy(
        radius=0.2, noise=1e-2, initialization_random_seed=seed
    )


#: The strategies, in table order (the last is not run by default): records as the
#: main benchmark's, each built as ``build(seed)`` with a seeded Sobol start.
METHODS: dict[str, BenchmarkMethod] = {
    method.name: method
    for method in (
        BenchmarkMethod("ax-default", "Ax's own choice", _ax_default),
        BenchmarkMethod(
            "generic",
            "Ax's generic route with NystromGP and BKBUpperConfidenceBound",
            _generic,
        ),
        BenchmarkMethod(
            "bkb",
            "bkb_generation_strategy() with its defaults",
            lambda seed: bkb_generation_strategy(initialization_random_seed=seed),
        ),
        BenchmarkMethod(
            "sgpts",
            "sgpts_generation_strategy() with its defaults",
            lambda seed: sgpts_generation_strategy(initialization_random_seed=seed),
        ),
        BenchmarkMethod(
            "bkb-ridge", "BKB with the former fixed lambda and radius", _bkb_ridge
        ),
    )
}


def make_strategy(method: str, seed: int) -> GenerationStrategy:
    r"""The strategy ``method`` (a key of :data:`METHODS`) with a seeded Sobol
    initialization."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}.")
    return METHODS[method].build(seed)


def seconds_per_trial(trace: RunTrace) -> float:
    r"""Wall-clock seconds in ``Client.get_next_trials`` per trial."""
    return float(trace.ask_seconds.sum()) / trace.horizon


def cpu_seconds_per_trial(trace: RunTrace) -> float:
    r"""CPU seconds in ``Client.get_next_trials`` per trial."""
    return trace.metadata["ask_cpu_seconds"] / trace.horizon


def run_ax(
    problem: str,
    method: str,
    seed: int,
    num_trials: int,
    *,
    pending: int = 1,
    batch_size: int = 1,
) -> RunTrace:
    r"""One Ax loop of ``num_trials`` trials, ``pending`` in flight (a new trial
    is requested whenever the oldest completes) or in batches of ``batch_size``; at
    most one of them exceeds 1.

    Its own loop: Ax's ``Client`` owns the trials and asks its generation strategy,
    so the loop is Ax's request and complete cycle, not an ask/tell object's.

    Returns:
        The run, in completion order: ``values`` are the negated ``f`` values (so
        ``simple_regret`` is the smallest ``f`` so far minus the minimum); the
        trials of one ``get_next_trials`` call share a batch and its wall-clock
        seconds are booked at the first of them; ``metadata`` holds ``pending``,
        ``batch_size``, the evaluated ``parameters`` (lists of ``d`` floats) and
        the CPU seconds of every call (``ask_cpu_seconds``).
    """
    check_int(seed, "seed", 0)
    check_int(num_trials, "num_trials", 1)
    check_int(pending, "pending", 1)
    check_int(batch_size, "batch_size", 1)
    if pending > 1 and batch_size > 1:
        raise ValueError("Set `pending` or `batch_size` above 1, not both.")
    function = make_function(problem)
    torch.manual_seed(seed)
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(
                name=f"x{i}", parameter_type="float", bounds=(float(lo), float(hi))
            )
            for i, (lo, hi) in enumerate(function.bounds.t().tolist())
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(make_strategy(method, seed))
    points: list[list[float]] = []
    values: list[float] = []
    batches: list[int] = []
    asked: list[float] = []
    #: trial index -> (parameters, batch, seconds booked at it)
    running: dict[int, tuple[dict, int, float]] = {}
    waited = cpu_seconds = 0.0
    calls = 0  # the calls that returned trials
    while len(values) < num_trials:
        room = num_trials - len(values) - len(running)
        request = min(room, max(pending, batch_size) - len(running))
        if request > 0:
            start, cpu_start = time.perf_counter(), time.process_time()
            trials = client.get_next_trials(max_trials=request)
            waited += time.perf_counter() - start
            cpu_seconds += time.process_time() - cpu_start
            for index in sorted(trials):
                running[index] = (trials[index], calls, waited)
                waited = 0.0
            if trials:
                calls += 1
        if not running:
            raise RuntimeError(f"{method} generated no trial on {problem}.")
        # Pending mode completes the oldest trial; batch mode the whole batch.
        done = sorted(running)[: 1 if pending > 1 else len(running)]
        for index in done:
            parameters, batch, seconds = running.pop(index)
            point = [float(parameters[f"x{i}"]) for i in range(function.dim)]
            value = float(function.evaluate_true(torch.tensor([point]).double()))
            client.complete_trial(index, raw_data={"f": value})
            points.append(point)
            values.append(value)
            batches.append(batch)
            asked.append(seconds)
    return RunTrace(
        problem=problem,
        policy=method,
        seed=seed,
        optimum=-function.optimal_value,
        uniform_regret=math.nan,
        values=-np.asarray(values),
        ask_seconds=np.asarray(asked),
        tell_seconds=np.zeros(num_trials),
        batch_index=np.asarray(batches),
        metadata={
            "pending": pending,
            "batch_size": batch_size,
            "parameters": points,
            "ask_cpu_seconds": cpu_seconds,
        },
    )


def summarize_runs(runs: Sequence[RunTrace]) -> list[dict[str, float | str | int]]:
    r"""One row per (problem, method): final simple regret mean, min and max over
    seeds, and the mean wall-clock and CPU seconds per trial."""
    rows = []
    for (problem, method), group in group_traces(runs).items():
        final = [float(run.curve("simple_regret")[-1]) for run in group]
        seconds = statistics.fmean(seconds_per_trial(run) for run in group)
        cpu_seconds = statistics.fmean(cpu_seconds_per_trial(run) for run in group)
        rows.append(
            {
                "problem": problem,
                "method": method,
                "seeds": len(group),
                "regret_mean": statistics.fmean(final),
                "regret_min": min(final),
                "regret_max": max(final),
                "seconds_per_trial": seconds,
                "cpu_seconds_per_trial": cpu_seconds,
            }
        )
    return rows


def markdown_table(rows: Sequence[dict]) -> str:
    r"""The rows as a :func:`~.writers.markdown_table` (regret: mean [min, max] over
    seeds; seconds per trial: wall-clock and CPU)."""
    header = ["function", "strategy", "seeds", "simple regret: mean [min, max]"]
    cells = [
        [
            row["problem"],
            row["method"],
            row["seeds"],
            f"{row['regret_mean']:.3g} [{row['regret_min']:.3g}, "
            f"{row['regret_max']:.3g}]",
            f"{row['seconds_per_trial']:.2f}",
            f"{row['cpu_seconds_per_trial']:.2f}",
        ]
        for row in rows
    ]
    return writers.markdown_table([*header, "s / trial", "CPU s / trial"], cells, 2)


def build_parser() -> argparse.ArgumentParser:
    r"""The command line (:func:`main`)."""
    parser = OneLineParser(
        prog="python -m benchmarks.ax_compare",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--problem",
        type=name_list(PROBLEMS),
        default=",".join(PROBLEMS),
        metavar="LIST",
        help="comma-separated test functions (default %(default)s)",
    )
    add_options(
        parser,
        *("methods", "seeds", "horizon"),
        methods={"type": name_list(METHODS), "default": ",".join(list(METHODS)[:4])},
        seeds={"default": "0-2"},
        horizon={"default": 40},
    )
    parser.add_argument("--pending", type=int, default=1, help="trials in flight")
    parser.add_argument("--batch-size", type=int, default=1, help="trials per batch")
    add_options(parser, "output_dir", output_dir={"default": "ax_compare_results"})
    return parser


def main(argv: Sequence[str] | None = None) -> list[RunTrace]:
    r"""Command line: run every (problem, method, seed), print the table and save
    every run to ``OUTPUT_DIR/runs.json`` (a list of ``RunTrace.to_dict()``)."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    set_ax_logger_levels(logging.WARNING)
    warnings.filterwarnings("ignore")
    output = Path(args.output_dir) / "runs.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    for problem, method, seed in product(args.problem, args.methods, args.seeds):
        run = run_ax(
            problem,
            method,
            seed,
            args.horizon,
            pending=args.pending,
            batch_size=args.batch_size,
        )
        runs.append(run)
        print(
            f"{problem} {method} seed {seed}: regret "
            f"{run.curve('simple_regret')[-1]:.4g}, "
            f"{seconds_per_trial(run):.2f} s/trial "
            f"({cpu_seconds_per_trial(run):.2f} CPU s/trial)",
            flush=True,
        )
        # rewritten after every run
        output.write_text(json.dumps([done.to_dict() for done in runs]))
    print(markdown_table(summarize_runs(runs)))
    return runs


if __name__ == "__main__":  # pragma: no cover
    main()
