r"""Run benchmark methods on problems for exactly ``T`` evaluations each.

Run seed ``s`` builds the method with ``torch.Generator().manual_seed(2 s)`` and draws
the Gaussian reward noise from ``manual_seed(2 s + 1)`` (CPU generators), so every
method sees the same noise sequence. :class:`RunStore` keeps each finished run in a
JSON file, for ``--resume``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

import botorch
import gpytorch
import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from benchmarks.measurement import (
    PeakMemoryMonitor,
    measure_matmul_gflops,
)
from benchmarks.methods import BenchmarkOptimizer, PolicyConfig
from benchmarks.op_counts import OpCounter
from benchmarks.problems import Problem
from benchmarks.results import RunTrace, expected_uniform_regret
from benchmarks.writers import safe_name
from botorch_sketch.utils.validation import check_int

#: Progress display modes: tqdm bars, periodic log lines, nothing.
PROGRESS_MODES = ("bar", "log", "off")

Timer = Callable[..., tuple[object, float]]


def _progress_mode(progress: bool | str) -> str:
    if isinstance(progress, bool):
        return "bar" if progress else "off"
    if progress not in PROGRESS_MODES:
        raise ValueError(f"`progress` must be a bool or one of {PROGRESS_MODES}.")
    return progress


def _timer(device: torch.device) -> Timer:
    r"""``timed(call, *args) -> (result, seconds)``, synchronizing CUDA around it."""
    cuda = device.type == "cuda"

    def timed(call: Callable[..., object], *args: object) -> tuple[object, float]:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = call(*args)
        if cuda:
            torch.cuda.synchronize(device)
        return result, time.perf_counter() - start

    return timed


def _validated_batch(
    problem: Problem, chosen: object, optimizer: BenchmarkOptimizer
) -> Tensor:
    r"""Check ``ask()``'s output against the problem (indices or points)."""
    where = f"{type(optimizer).__name__}.ask()"
    if not isinstance(chosen, Tensor):
        raise TypeError(f"{where} must return a tensor, got {type(chosen).__name__}.")
    if problem.is_finite:
        if chosen.dim() != 1 or chosen.dtype != torch.long or chosen.numel() == 0:
            raise ValueError(
                f"{where} must return a non-empty 1-d LongTensor of arm indices, got "
                f"shape {tuple(chosen.shape)} and dtype {chosen.dtype}."
            )
        num_arms = problem.arms.shape[0]
        if chosen.min() < 0 or chosen.max() >= num_arms:
            raise ValueError(f"{where} returned indices outside [0, {num_arms}).")
        return chosen
    if chosen.dim() != 2 or chosen.shape[0] == 0 or chosen.shape[1] != problem.dim:
        raise ValueError(
            f"{where} must return a non-empty b x {problem.dim} tensor of points, got "
            f"shape {tuple(chosen.shape)}."
        )
    if not torch.isfinite(chosen).all():
        raise ValueError(f"{where} returned NaN or infinite points.")
    low, high = problem.bounds
    slack = 1e-6 * (high - low)
    if ((chosen < low - slack) | (chosen > high + slack)).any():
        raise ValueError(f"{where} returned points outside the problem's bounds.")
    return chosen


def _batches(
    problem: Problem,
    optimizer: BenchmarkOptimizer,
    horizon: int,
    noise_generator: torch.Generator,
    timed: Timer,
) -> Iterator[tuple[int, Tensor, float, float]]:
    r"""Ask, evaluate (adding the reward noise) and tell until ``horizon``
    evaluations, truncating the last batch; yields ``(t, true values, ask seconds,
    tell seconds)`` per batch, ``t`` counting the evaluations before it."""
    t = 0
    while t < horizon:
        chosen, ask_seconds = timed(optimizer.ask, horizon - t)
        chosen = _validated_batch(problem, chosen, optimizer)[: horizon - t]
        if problem.is_finite:
            true = problem.arm_values[chosen]
        else:
            true = problem.objective(chosen)
        noise = torch.randn(
            chosen.shape[0], generator=noise_generator, dtype=torch.float64
        )
        rewards = true + problem.noise_std * noise.to(true)
        _, tell_seconds = timed(optimizer.tell, chosen, rewards)
        yield t, true, ask_seconds, tell_seconds
        t += chosen.shape[0]


def _replay(
    problem: Problem,
    config: PolicyConfig,
    horizon: int,
    seed: int,
    evaluations: int,
    timed: Timer,
) -> Iterator[tuple[int, Tensor, float, float]]:
    r"""The batches (:func:`_batches`) of a fresh build of run ``seed``'s method,
    up to ``evaluations`` evaluations, outside the measured run."""
    optimizer = config.build(problem, horizon, torch.Generator().manual_seed(2 * seed))
    noise_generator = torch.Generator().manual_seed(2 * seed + 1)
    return _batches(problem, optimizer, evaluations, noise_generator, timed)


def _warm_up(
    problem: Problem, config: PolicyConfig, horizon: int, steps: int, timed: Timer
) -> None:
    r"""Ask/tell rounds of a throwaway build, so one-time costs (lazy imports,
    TorchScript compilation) are charged to no run's time or memory."""
    rounds = _replay(problem, config, horizon, 0, horizon, timed)
    for _ in itertools.islice(rounds, steps):
        pass


#: Evaluations of each run replayed under :class:`OpCounter` by the main benchmark.
COUNTED_EVALUATIONS = 500


def count_operations(
    problem: Problem, config: PolicyConfig, horizon: int, seed: int, evaluations: int
) -> dict[str, float]:
    r"""ATen calls and host synchronizations per evaluation over the first
    ``evaluations`` evaluations of a run (its ask, evaluation and tell), replayed
    untimed from a fresh build with the run's seed, so the counts are those of the
    timed run's first batches (the last batch is cut at ``evaluations``).

    Args:
        problem: The run's problem.
        config: The run's method.
        horizon: The run's ``T`` (the method may plan with it).
        seed: The run's seed (:func:`run_policy`).
        evaluations: How many evaluations to replay (at most ``horizon``).

    Returns:
        ``{"aten_calls_per_evaluation": ..., "syncs_per_evaluation": ...}``.
    """
    check_int(evaluations, "evaluations", 1)
    evaluations = min(evaluations, horizon)
    counted = 0
    with OpCounter() as counter:
        for _, true, _, _ in _replay(
            problem, config, horizon, seed, evaluations, _untimed
        ):
            counted += true.shape[0]
    return {
        "aten_calls_per_evaluation": counter.total_calls / counted,
        "syncs_per_evaluation": counter.total_syncs / counted,
    }


def _untimed(call: Callable[..., object], *args: object) -> tuple[object, float]:
    return call(*args), 0.0


def run_policy(
    problem: Problem,
    config: PolicyConfig | str,
    horizon: int,
    seed: int = 0,
    *,
    label: str | None = None,
    progress: bool | str = True,
    uniform_regret: float | None = None,
    warm_up_steps: int = 2,
    log: Callable[[str], None] = print,
    log_every: float = 60.0,
    counted_evaluations: int = 0,
) -> RunTrace:
    r"""Run a method on ``problem`` for exactly ``horizon`` noisy evaluations.

    ``ask()`` and ``tell()`` are timed separately; the method's ``diagnostics()`` are
    recorded after each batch, and the peak memory over the run. Unless
    ``warm_up_steps=0``, untimed ask/tell rounds of a throwaway build come first, so
    no method is charged for one-time costs (lazy imports, TorchScript compilation);
    they do not change the measured run's choices.

    Args:
        problem: The problem.
        config: The method with its options (a registry name: its defaults).
        horizon: Number of evaluations ``T``.
        seed: Run seed (the method's randomness and reward noise).
        label: Method name in the trace (default ``config.label``).
        progress: ``"bar"`` (or True) for a tqdm progress bar, ``"log"`` for a line
            to ``log`` every ``log_every`` seconds, ``"off"`` (or False) for nothing.
        uniform_regret: Precomputed :func:`expected_uniform_regret` of ``problem``.
        warm_up_steps: Untimed ask/tell rounds before the measured run.
        log: Receives the progress lines of ``progress="log"``.
        log_every: Seconds between progress lines.
        counted_evaluations: Replay this many first evaluations untimed under
            :class:`OpCounter` after the run (:func:`count_operations`) and keep
            the counts in the trace's metadata; 0 for none.

    Returns:
        The run's :class:`RunTrace`.
    """
    check_int(horizon, "horizon", 1)
    mode = _progress_mode(progress)
    check_int(seed, "seed", 0)
    if isinstance(config, str):
        config = PolicyConfig(config)
    if not config.method.supports(problem):
        kind = "finite" if problem.is_finite else "box"
        raise ValueError(f"`{config.name}` does not support {kind} problems.")
    check_int(warm_up_steps, "warm_up_steps", 0)
    check_int(counted_evaluations, "counted_evaluations", 0)
    if uniform_regret is None:
        uniform_regret = expected_uniform_regret(problem)
    label = label or config.label
    device = problem.bounds.device
    timed = _timer(device)
    values = np.empty(horizon)
    ask_seconds = np.zeros(horizon)
    tell_seconds = np.zeros(horizon)
    batch_index = np.empty(horizon, dtype=np.int64)
    diagnostics: dict[str, np.ndarray] = {}
    description = f"{label} | {problem.name} | seed {seed}"
    start = last_log = time.perf_counter()
    bar = tqdm(
        total=horizon,
        desc=description,
        disable=mode != "bar",
        leave=False,
        dynamic_ncols=True,
    )
    if warm_up_steps:
        _warm_up(problem, config, horizon, warm_up_steps, timed)
    with PeakMemoryMonitor(device) as memory, bar:
        optimizer, setup_seconds = timed(
            config.build, problem, horizon, torch.Generator().manual_seed(2 * seed)
        )
        diagnostics_of = getattr(optimizer, "diagnostics", dict)
        noise_generator = torch.Generator().manual_seed(2 * seed + 1)
        batches = _batches(problem, optimizer, horizon, noise_generator, timed)
        for batch, (t, true, ask, tell) in enumerate(batches):
            size = true.shape[0]
            ask_seconds[t] = ask
            tell_seconds[t + size - 1] = tell
            values[t : t + size] = true.detach().double().cpu().numpy()
            batch_index[t : t + size] = batch
            for key, value in diagnostics_of().items():
                series = diagnostics.setdefault(key, np.full(horizon, math.nan))
                series[t : t + size] = float(value)
            bar.update(size)
            now = time.perf_counter()
            if mode == "log" and now - last_log >= log_every and t + size < horizon:
                last_log = now
                log(f"  {description}: t = {t + size}/{horizon} ({now - start:.0f} s)")
    counts = (
        count_operations(problem, config, horizon, seed, counted_evaluations)
        if counted_evaluations
        else {}
    )
    return RunTrace(
        problem=problem.name,
        policy=label,
        seed=seed,
        optimum=problem.optimum,
        uniform_regret=uniform_regret,
        values=values,
        ask_seconds=ask_seconds,
        tell_seconds=tell_seconds,
        batch_index=batch_index,
        diagnostics=diagnostics,
        setup_seconds=setup_seconds,
        peak_memory_mb=memory.peak_mb,
        memory_method=memory.method,
        metadata=counts,
    )


def run_fingerprint(
    problem: Problem, config: PolicyConfig, horizon: int, uniform_regret: float
) -> dict[str, object]:
    r"""What makes two runs of the same seed interchangeable: the problem (name,
    settings, a SHA-256 of its bounds, arms and arm values, dtype, device), the policy
    (registry name, options resolved for ``horizon``) and ``horizon``; as it reads
    back from JSON."""
    digest = hashlib.sha256()
    for tensor in (problem.bounds, problem.arms, problem.arm_values):
        if tensor is not None:
            digest.update(tensor.detach().double().cpu().contiguous().numpy().tobytes())
    fingerprint = {
        "problem": problem.name,
        "dtype": str(problem.bounds.dtype).removeprefix("torch."),
        "device": str(problem.bounds.device),
        "noise_std": problem.noise_std,
        "optimum": problem.optimum,
        "uniform_regret": uniform_regret,
        "hyperparameters": problem.hyperparameters,
        "data_sha256": digest.hexdigest(),
        "policy": config.name,
        "options": config.resolved_options(horizon),
        "horizon": horizon,
    }
    return json.loads(json.dumps(fingerprint, default=repr))


def _check_stored_trace(trace: RunTrace) -> None:
    r"""Raise ``ValueError`` unless a loaded run is well formed: names that are
    strings, and every per-evaluation record (the values, times, batch indices
    from 0 and diagnostics) with one entry per evaluation, at least one."""
    if not (isinstance(trace.problem, str) and isinstance(trace.policy, str)):
        raise ValueError("the problem and policy names must be strings")
    records = {
        "values": trace.values,
        "ask_seconds": trace.ask_seconds,
        "tell_seconds": trace.tell_seconds,
        "batch_index": trace.batch_index,
        **{f"diagnostics[{key!r}]": v for key, v in trace.diagnostics.items()},
    }
    horizon = len(trace.values)
    for name, record in records.items():
        if record.ndim != 1 or len(record) != horizon or horizon == 0:
            raise ValueError(
                f"`{name}` must hold one entry per evaluation ({horizon}), got "
                f"shape {record.shape}"
            )
    if trace.batch_index.min() < 0:
        raise ValueError("`batch_index` must count batches from 0")


class RunStore:
    r"""Finished runs, one JSON file each: ``<problem>__<label>__seed<s>.json`` in
    ``directory`` holds ``{"fingerprint": ..., "trace": RunTrace.to_dict()}``
    (written to a temporary file, then renamed: no half file has the final name)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, problem: str, label: str, seed: int) -> Path:
        name = f"{safe_name(problem)}__{safe_name(label)}__seed{seed}.json"
        return self.directory / name

    def save(self, trace: RunTrace, fingerprint: dict[str, object]) -> Path:
        r"""Write ``trace`` with its ``fingerprint`` (:func:`run_fingerprint`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(trace.problem, trace.policy, trace.seed)
        partial = path.with_name(path.name + ".partial")
        payload = {"fingerprint": fingerprint, "trace": trace.to_dict()}
        partial.write_text(json.dumps(payload))
        os.replace(partial, path)
        return path

    def load(
        self, problem: str, label: str, seed: int, fingerprint: dict[str, object]
    ) -> tuple[RunTrace | None, str | None]:
        r"""``(trace, None)`` if a run with this ``fingerprint`` is stored, else
        ``(None, why)`` (``why`` is None when there is no file at all)."""
        path = self.path(problem, label, seed)
        if not path.is_file():
            return None, None
        try:
            payload = json.loads(path.read_text())
            trace = RunTrace.from_dict(payload["trace"])
            _check_stored_trace(trace)
            fingerprint_stored = payload.get("fingerprint")
        # AttributeError: JSON of another shape (a list for a mapping);
        # OverflowError: an infinite seed; RecursionError: nesting deeper than
        # the parser's stack
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            OverflowError,
            RecursionError,
        ) as error:
            return None, f"{path} is unreadable ({error!r})"
        if fingerprint_stored != fingerprint or (
            (trace.problem, trace.policy, trace.seed) != (problem, label, seed)
        ):
            return None, f"{path} was made with other settings"
        return trace, None

    def _files(self) -> list[Path]:
        return sorted(self.directory.glob("*__seed*.json"))

    def traces(self) -> list[RunTrace]:
        r"""Every stored run, in file-name order, whatever its settings."""
        return [
            RunTrace.from_dict(json.loads(path.read_text())["trace"])
            for path in self._files()
        ]

    def __len__(self) -> int:
        return len(self._files())


def run_benchmark(
    problems: Sequence[Problem],
    policies: Sequence[PolicyConfig],
    horizon: int,
    seeds: Sequence[int],
    *,
    progress: bool | str = True,
    log: Callable[[str], None] = print,
    store: RunStore | None = None,
    resume: bool = False,
    on_trace: Callable[[RunTrace], None] | None = None,
    environment: dict[str, object] | None = None,
    counted_evaluations: int = 0,
) -> tuple[list[RunTrace], list[str]]:
    r"""Run every method on every problem for every seed.

    Option names are checked before any run; a method that does not take a problem's
    kind (finite / box) is skipped on it with a note.

    Args:
        problems: Problems to run.
        policies: Methods (registry name, label, options).
        horizon: Evaluations per run.
        seeds: Run seeds.
        progress: ``"bar"``/True, ``"log"`` (a line per finished run and periodic
            lines within long runs) or ``"off"``/False, see :func:`run_policy`.
        log: Receives one line per note (and the ``"log"`` progress lines).
        store: Where each run is written as soon as it finishes.
        resume: Reuse the runs ``store`` holds with the same settings
            (:func:`run_fingerprint`) instead of running them again.
        on_trace: Called with each finished (or reused) run, in order.
        environment: Stored in each new run's :attr:`RunTrace.environment`.
        counted_evaluations: ATen calls and host synchronizations are counted
            over this many first evaluations of each run (:func:`count_operations`).

    Returns:
        ``(traces, notes)``, traces in (problem, policy, seed) order.
    """
    check_int(horizon, "horizon", 1)
    mode = _progress_mode(progress)
    if not seeds:
        raise ValueError("`seeds` must not be empty.")
    labels = [config.label for config in policies]
    if len(set(labels)) != len(labels):
        raise ValueError(f"Policy labels must be unique, got {labels}.")
    if resume and store is None:
        raise ValueError("`resume` needs a `store`.")
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        log(f"note: {text}")

    for config in policies:
        config.method.check(config.resolved_options(horizon))
    plan = []
    for problem in problems:
        uniform_regret = expected_uniform_regret(problem)
        for config in policies:
            if not config.method.supports(problem):
                kind = "finite" if problem.is_finite else "box"
                note(f"skipping {config.label} on {problem.name} (no {kind} support)")
                continue
            fingerprint = run_fingerprint(problem, config, horizon, uniform_regret)
            for seed in seeds:
                stored = None
                if resume:
                    stored, why = store.load(
                        problem.name, config.label, seed, fingerprint
                    )
                    if why is not None:
                        note(f"running again: {why}")
                plan.append(
                    (problem, config, seed, uniform_regret, fingerprint, stored)
                )
    if resume:
        reused = sum(run[-1] is not None for run in plan)
        note(f"resuming: {reused} of {len(plan)} runs already done")
    traces = []
    for number, run in enumerate(plan, 1):
        problem, config, seed, uniform_regret, fingerprint, trace = run
        if trace is None:
            start = time.perf_counter()
            trace = run_policy(
                problem,
                config,
                horizon,
                seed,
                label=config.label,
                progress=mode,
                uniform_regret=uniform_regret,
                log=log,
                counted_evaluations=counted_evaluations,
            )
            trace.environment = dict(environment or {})
            if store is not None:
                store.save(trace, fingerprint)
            if mode == "log":
                log(
                    f"run {number}/{len(plan)} done: {config.label} | {problem.name} "
                    f"| seed {seed} ({time.perf_counter() - start:.1f} s)"
                )
        traces.append(trace)
        if on_trace is not None:
            on_trace(trace)
    return traces, notes


def environment_metadata(
    dtype: torch.dtype, device: torch.device | str | None = None
) -> dict[str, object]:
    r"""Versions, thread count, and the measured matmul throughput (GFLOP/s)."""
    device = torch.device("cpu" if device is None else device)
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
        "torch_threads": torch.get_num_threads(),
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "matmul_gflops": measure_matmul_gflops(dtype=dtype, device=device),
        "matmul_gflops_note": "best of 3 products of two 1024 x 1024 matrices "
        "(2 n^3 flops), measured in this run",
    }
