r"""Run a tuning preset: every block's runs, as :class:`~..results.RunTrace` objects.

Traces follow the benchmark package's conventions (rewards are maximized): a trace's
``values`` are the negated losses in completion order and its ``optimum`` the negated
minimum, so ``simple_regret`` is the best loss so far minus the minimum. A problem
with an unknown minimum is measured against the smallest loss any run of the preset
found on it. The problem label holds the concurrency (``"branin, 8 in flight"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from botorch_sketch.benchmarks.results import RunTrace
from botorch_sketch.benchmarks.tuning.driver import TrialLog, run_trials
from botorch_sketch.benchmarks.tuning.methods import method_factory
from botorch_sketch.benchmarks.tuning.presets import TuningPreset
from botorch_sketch.benchmarks.tuning.problems import (
    MissingDataError,
    TuningProblem,
    make_tuning_problem,
)

#: ``(problem, in flight, method, seed)`` -> the run's log.
Logs = dict[tuple[str, int, str, int], TrialLog]


def load_problems(
    preset: TuningPreset, data_dir: str | Path
) -> tuple[dict[str, TuningProblem], list[str]]:
    r"""The preset's problems by name, and one note per problem skipped for
    missing data."""
    problems, notes = {}, []
    for name in dict.fromkeys(p for block in preset.blocks for p in block.problems):
        try:
            problems[name] = make_tuning_problem(name, data_dir)
        except MissingDataError as error:
            notes.append(f"skipped {name}: {error}")
    return problems, notes


def run_preset(
    preset: TuningPreset,
    problems: dict[str, TuningProblem],
    on_told: Callable[[], None] | None = None,
) -> Logs:
    r"""Every run of the preset on the given problems (others skipped)."""
    logs: Logs = {}
    for block in preset.blocks:
        for name in block.problems:
            problem = problems.get(name)
            if problem is None:
                continue
            for method in block.methods:
                build = method_factory(method)
                for seed in block.seeds:
                    logs[name, block.in_flight, method, seed] = run_trials(
                        partial(build, problem.space, seed, block.in_flight),
                        problem.loss,
                        block.budget,
                        block.in_flight,
                        seed,
                        max_optimizer_seconds=block.max_optimizer_seconds,
                        on_told=on_told,
                    )
    return logs


def optima(logs: Logs, problems: dict[str, TuningProblem]) -> dict[str, float]:
    r"""Each problem's minimum: known, or the smallest loss of any run."""
    found: dict[str, float] = {}
    for (name, *_), log in logs.items():
        found[name] = min(found.get(name, math.inf), min(log.losses))
    return {
        name: problems[name].optimum if problems[name].optimum is not None else best
        for name, best in found.items()
    }


def to_traces(logs: Logs, problems: dict[str, TuningProblem]) -> list[RunTrace]:
    r"""One :class:`RunTrace` per run (see the module docstring)."""
    minimum = optima(logs, problems)
    return [
        RunTrace(
            problem=f"{name}, {in_flight} in flight",
            policy=method,
            seed=seed,
            optimum=-minimum[name],
            uniform_regret=math.nan,
            values=-np.asarray(log.losses),
            ask_seconds=np.asarray(log.ask_seconds),
            tell_seconds=np.asarray(log.tell_seconds),
            batch_index=np.arange(len(log.losses)),
            setup_seconds=log.setup_seconds,
            environment={"torch_threads": 1},
        )
        for (name, in_flight, method, seed), log in logs.items()
    ]


def arm_set_floor(problem: TuningProblem, seeds: tuple[int, ...]) -> float:
    r"""The mean over ``seeds`` of the smallest regret among the searchers' default
    arm set (``DEFAULT_NUM_ARMS`` scrambled Sobol configurations of the space, as
    ``BBKBSearch(seed=s)`` and ``SGPTSSearch(seed=s)`` draw them): a floor on their
    simple regret. Needs a known minimum."""
    from botorch_sketch.benchmarks.tuning.space import to_tune
    from botorch_sketch.integrations.tune_space import DEFAULT_NUM_ARMS, ArmSpace

    if problem.optimum is None:
        raise ValueError(f"{problem.name} has no known minimum.")
    best = []
    for seed in seeds:
        arms = ArmSpace(to_tune(problem.space), DEFAULT_NUM_ARMS, seed, [])
        best.append(min(problem.loss(arms.config(i)) for i in range(arms.num_arms)))
    return float(np.mean(best)) - problem.optimum
