r"""The tuning benchmark's driver: :func:`run_trials` runs one method on one problem
with ``k`` trials in flight; :func:`run_preset` runs a preset, saving each run as a
:class:`~benchmarks.results.RunTrace` (:func:`to_trace`) to a
:class:`~benchmarks.runner.RunStore` as it finishes, and
:func:`with_optima` fills in the minima only known once every run is done. The same
driver runs constrained problems (each trial's constraint values are told with its
loss) and problems of several losses (an Optuna study of as many directions)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.presets import Block, Preset
from benchmarks.results import RunTrace
from benchmarks.runner import RunStore
from benchmarks.tuning.methods import Loss, Method, method_factory
from benchmarks.tuning.problems import (
    MissingDataError,
    TuningProblem,
    make_tuning_problem,
)
from botorch_sketch.utils.validation import check_int

Config = dict[str, Any]


@dataclass
class TrialLog:
    r"""What one run recorded, in completion order.

    Attributes:
        configs: The configuration of each told trial.
        losses: Its loss (a tuple on a problem of several losses).
        constraints: Its constraint values on a constrained problem (``<= 0``:
            feasible); empty on others.
        ask_seconds: Time in ``ask`` for that trial (with the asks that answered
            "wait" just before it).
        tell_seconds: Time in ``tell`` for that trial.
        setup_seconds: Time building the method.
        max_running: The most trials that ran at once.
        stopped: Why the run ended before its budget ("" if it did not).
    """

    configs: list[Config] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)
    constraints: list[list[float]] = field(default_factory=list)
    ask_seconds: list[float] = field(default_factory=list)
    tell_seconds: list[float] = field(default_factory=list)
    setup_seconds: float = 0.0
    max_running: int = 0
    stopped: str = ""

    @property
    def optimizer_seconds(self) -> float:
        return self.setup_seconds + sum(self.ask_seconds) + sum(self.tell_seconds)


def run_trials(
    make: Callable[[], Method],
    loss: Callable[[Config], Loss],
    budget: int,
    in_flight: int,
    seed: int,
    *,
    constraints: Callable[[Config], Sequence[float]] | None = None,
    max_optimizer_seconds: float | None = None,
    on_told: Callable[[], None] | None = None,
) -> TrialLog:
    r"""Run ``budget`` trials of the method built by ``make`` (timed) on ``loss``.

    Its own loop, not the main benchmark's :func:`~benchmarks.runner.run_policy`:
    a tuning method asks for configurations (not arm indices of a problem it was
    built on), a trial is told by a key it issued, and a run may stop at an optimizer
    time cap.

    While fewer than ``in_flight`` trials run, ask (a method may answer None: wait);
    then complete one running trial, chosen in a seeded random order, and tell its
    loss. Each trial is evaluated when asked; only the method's own calls are timed
    (the Optuna methods' ``tell`` stores the constraint values in the trial first:
    a write to the in-memory storage).

    Args:
        make: Builds the method.
        loss: The objective, minimized (a tuple of losses, each minimized, on a
            problem of several).
        budget: Trials to tell.
        in_flight: At most this many trials run at once.
        seed: Seed of the completion order.
        constraints: The constraint values of a configuration (``<= 0``:
            feasible), told with its loss; None: an unconstrained problem.
        max_optimizer_seconds: Stop early once the method's own time exceeds this
            (None: never); :attr:`TrialLog.stopped` says so.
        on_told: Called after each ``tell`` (progress).
    """
    check_int(budget, "budget", 1)
    check_int(in_flight, "in_flight", 1)
    order = np.random.default_rng(seed)
    log = TrialLog()
    start = time.perf_counter()
    method = make()
    log.setup_seconds = time.perf_counter() - start
    running: list[tuple[Any, Config, Loss, list[float] | None, float]] = []
    waited = 0.0
    while len(log.losses) < budget:
        while len(running) < in_flight and len(log.losses) + len(running) < budget:
            start = time.perf_counter()
            proposal = method.ask()
            waited += time.perf_counter() - start
            if proposal is None:
                break
            key, config = proposal
            values = None if constraints is None else list(constraints(config))
            running.append((key, config, loss(config), values, waited))
            waited = 0.0
            log.max_running = max(log.max_running, len(running))
        if not running:
            raise RuntimeError("The method asked to wait with no trial running.")
        key, config, value, values, asked = running.pop(
            int(order.integers(len(running)))
        )
        start = time.perf_counter()
        if values is None:
            method.tell(key, value)
        else:
            method.tell(key, value, values)
        log.tell_seconds.append(time.perf_counter() - start)
        log.configs.append(config)
        log.losses.append(value)
        if values is not None:
            log.constraints.append(values)
        log.ask_seconds.append(asked)
        if on_told is not None:
            on_told()
        if max_optimizer_seconds is not None and (
            log.optimizer_seconds > max_optimizer_seconds
        ):
            if len(log.losses) < budget:
                log.stopped = (
                    f"stopped after {len(log.losses)} trials: optimizer time "
                    f"above {max_optimizer_seconds:g} s"
                )
            break
    return log


#: ``(problem, in flight, method, seed)``: one run of a preset.
Key = tuple[str, int, str, int]
#: Each run's log.
Logs = dict[Key, TrialLog]


def load_problems(
    preset: Preset, data_dir: str | Path
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


def preset_runs(preset: Preset, problems: dict[str, TuningProblem]) -> dict[Key, Block]:
    r"""Every run of the preset on the given problems (others skipped), in order,
    with its block."""
    return {
        (name, block.in_flight, method, seed): block
        for block in preset.blocks
        for name in block.problems
        if name in problems
        for method in block.methods
        for seed in block.seeds
    }


def fingerprint(key: Key, block: Block, problem: TuningProblem) -> dict[str, object]:
    r"""What makes two stored runs interchangeable: the problem (name, space, known
    minimum, data file's SHA-256; and only for a constrained problem or one of
    several losses, that it has constraints, its number of losses, reference point
    and largest hypervolume), the trials in flight, the method, the seed, the budget
    and the optimizer-time cap; as it reads back from JSON."""
    name, in_flight, method, seed = key
    settings = {
        "problem": name,
        "space": [asdict(param) for param in problem.space],
        "optimum": problem.optimum,
        "data_sha256": problem.data_sha256,
        "in_flight": in_flight,
        "method": method,
        "seed": seed,
        "budget": block.horizon,
        "max_optimizer_seconds": block.max_optimizer_seconds,
    }
    if problem.constraints is not None:
        settings["constrained"] = True
    if problem.num_objectives > 1:
        settings["num_objectives"] = problem.num_objectives
        settings["reference_point"] = list(problem.reference_point)
        settings["max_hypervolume"] = problem.max_hypervolume
    return json.loads(json.dumps(settings))


def method_options(problem: TuningProblem) -> dict[str, Any]:
    r"""What a method factory is told of the problem beyond its space: its number
    of losses and whether it has constraints (nothing for an unconstrained problem
    of one loss)."""
    options: dict[str, Any] = {}
    if problem.num_objectives > 1:
        options["num_objectives"] = problem.num_objectives
    if problem.constraints is not None:
        options["constrained"] = True
    return options


def label(name: str, in_flight: int) -> str:
    r"""A trace's problem label: ``"branin, 8 in flight"``."""
    return f"{name}, {in_flight} in flight"


def parse_label(text: str) -> tuple[str, int]:
    r"""The problem name and trials in flight of a :func:`label`."""
    name, _, rest = text.rpartition(", ")
    count = rest.removesuffix(" in flight")
    if not name or not count.isdigit():
        raise ValueError(f"`text` {text!r} is not a label 'NAME, K in flight'.")
    return name, int(count)


def stored_runs(
    preset: Preset, problems: dict[str, TuningProblem], store: RunStore
) -> tuple[dict[Key, RunTrace], list[str]]:
    r"""The preset's runs that ``store`` holds with the same settings
    (:func:`fingerprint`), and one note per stored run made with others."""
    found, notes = {}, []
    for key, block in preset_runs(preset, problems).items():
        name, in_flight, method, seed = key
        settings = fingerprint(key, block, problems[name])
        trace, why = store.load(label(name, in_flight), method, seed, settings)
        if trace is not None:
            found[key] = trace
        elif why is not None:
            notes.append(f"running again: {why}")
    return found, notes


def run_preset(
    preset: Preset,
    problems: dict[str, TuningProblem],
    on_told: Callable[[], None] | None = None,
    *,
    store: RunStore | None = None,
    done: dict[Key, RunTrace] | None = None,
) -> dict[Key, RunTrace]:
    r"""Every run of the preset on the given problems (others skipped), in order,
    as :func:`to_trace` makes it; each new run is saved to ``store`` (if any) as soon
    as it finishes; the runs in ``done`` are taken as they are."""
    traces = {}
    for key, block in preset_runs(preset, problems).items():
        if done is not None and key in done:
            traces[key] = done[key]
            continue
        name, in_flight, method, seed = key
        problem = problems[name]
        build = method_factory(method)
        log = run_trials(
            partial(build, problem.space, seed, in_flight, **method_options(problem)),
            problem.loss,
            block.horizon,
            in_flight,
            seed,
            constraints=problem.constraints,
            max_optimizer_seconds=block.max_optimizer_seconds,
            on_told=on_told,
        )
        traces[key] = to_trace(key, log, problem.optimum, problem)
        if store is not None:
            store.save(traces[key], fingerprint(key, block, problem))
    return traces


def to_trace(
    key: Key, log: TrialLog, minimum: float | None, problem: TuningProblem | None = None
) -> RunTrace:
    r"""The run as a :class:`RunTrace`: rewards are the negated losses (so
    ``simple_regret`` is the best loss so far minus the minimum; an unknown
    ``minimum`` makes ``optimum`` NaN, see :func:`with_optima`), the problem label
    holds the concurrency (:func:`label`), ``metadata["stopped"]`` says why a run
    ended before its budget (absent if it did not) and ``metadata["repeats"]``
    lists the trials (0-based, in completion order) whose configuration an earlier
    trial had.

    On a constrained problem, ``diagnostics["violation"]`` holds each trial's
    total violation, the sum of its positive constraint values (0: feasible), and
    the rewards are the negated losses of every trial, feasible or not (the best
    feasible loss: :func:`~.report.best_feasible`). On a problem of several losses
    (``problem`` says so), ``diagnostics["loss_i"]`` holds each trial's ``i``-th
    loss, the rewards are the negated first losses, and ``metadata`` the
    problem's ``reference_point`` and ``max_hypervolume`` (None when unknown), for
    :func:`~.report.hypervolumes`."""
    name, in_flight, method, seed = key
    seen: set[str] = set()
    repeats = []
    for trial, config in enumerate(log.configs):
        config_key = json.dumps(config, sort_keys=True, default=str)
        if config_key in seen:
            repeats.append(trial)
        seen.add(config_key)
    metadata: dict[str, Any] = {"repeats": repeats}
    if log.stopped:
        metadata["stopped"] = log.stopped
    diagnostics = {}
    losses = np.asarray(log.losses, dtype=np.float64)
    if losses.ndim == 2:
        if problem is None or problem.reference_point is None:
            raise ValueError("A run of several losses needs its problem's settings.")
        diagnostics = {f"loss_{i}": column for i, column in enumerate(losses.T)}
        losses = losses[:, 0]
        metadata["reference_point"] = list(problem.reference_point)
        metadata["max_hypervolume"] = problem.max_hypervolume
    if log.constraints:
        positive = np.maximum(np.asarray(log.constraints, dtype=np.float64), 0.0)
        diagnostics["violation"] = positive.sum(axis=1)
    return RunTrace(
        problem=label(name, in_flight),
        policy=method,
        seed=seed,
        optimum=math.nan if minimum is None else -minimum,
        uniform_regret=math.nan,
        values=-losses,
        ask_seconds=np.asarray(log.ask_seconds),
        tell_seconds=np.asarray(log.tell_seconds),
        batch_index=np.arange(len(log.losses)),
        setup_seconds=log.setup_seconds,
        diagnostics=diagnostics,
        environment={"torch_threads": 1},
        metadata=metadata,
    )


def with_optima(traces: dict[Key, RunTrace]) -> list[RunTrace]:
    r"""The traces, an unknown optimum (NaN) replaced by the problem's best value in
    any of its runs (whatever their concurrency): the regret against the smallest
    loss found; except on constrained problems and problems of several losses,
    whose report needs no minimum (their unknown ones stay NaN)."""
    best: dict[str, float] = {}
    for (name, *_), trace in traces.items():
        best[name] = max(best.get(name, -math.inf), float(np.max(trace.values)))
    return [
        replace(trace, optimum=best[name])
        if math.isnan(trace.optimum) and not _has_outcomes(trace)
        else trace
        for (name, *_), trace in traces.items()
    ]


def _has_outcomes(trace: RunTrace) -> bool:
    r"""Whether the trace is of a constrained problem or one of several losses."""
    return "violation" in trace.diagnostics or "reference_point" in trace.metadata


def to_traces(logs: Logs, problems: dict[str, TuningProblem]) -> list[RunTrace]:
    r""":func:`to_trace` of each run, with :func:`with_optima`."""
    return with_optima(
        {
            key: to_trace(key, log, problems[key[0]].optimum, problems[key[0]])
            for key, log in logs.items()
        }
    )


def arm_set_floor(problem: TuningProblem, seeds: tuple[int, ...]) -> float:
    r"""The mean over ``seeds`` of the smallest regret among the searchers' default
    arm set (``DEFAULT_NUM_ARMS`` scrambled Sobol configurations of the space, as
    ``BBKBSearch(seed=s)`` and ``SGPTSSearch(seed=s)`` draw them): a floor on their
    simple regret. Needs a known minimum."""
    from benchmarks.tuning.space import to_tune
    from botorch_sketch.integrations.tune_space import DEFAULT_NUM_ARMS, ArmSpace

    if problem.optimum is None:
        raise ValueError(f"{problem.name} has no known minimum.")
    best = []
    for seed in seeds:
        arms = ArmSpace(to_tune(problem.space), DEFAULT_NUM_ARMS, seed, [])
        best.append(min(problem.loss(arms.config(i)) for i in range(arms.num_arms)))
    return float(np.mean(best)) - problem.optimum
