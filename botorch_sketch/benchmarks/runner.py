r"""Run benchmark methods on problems for a horizon of exactly ``T`` evaluations.

:func:`run_policy` builds a method's ask/tell object
(:class:`~botorch_sketch.benchmarks.methods.BenchmarkMethod`) and drives it: it asks
for at most the evaluations the horizon has left, validates each batch, truncates the
last one so that exactly ``T`` rewards are observed, draws the Gaussian reward noise,
times ``ask()`` and ``tell()`` separately (synchronizing CUDA first), records the
object's diagnostics and measures peak memory. :func:`run_benchmark` runs every
(problem, method, seed) combination, skipping methods that do not take a problem with
a note; with a :class:`RunStore` it writes each run to its own JSON file as soon as it
finishes and, when resuming, reuses the files of runs made with the same settings.

Seeds: run seed ``s`` builds the method with ``torch.Generator().manual_seed(2 s)``
and draws the reward noise from ``manual_seed(2 s + 1)``, both CPU generators (methods
on other devices draw on the CPU and move the result). The noise sequence depends only
on the seed, so methods see common random numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import botorch
import gpytorch
import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from botorch_sketch.benchmarks.measurement import (
    PeakMemoryMonitor,
    measure_matmul_gflops,
)
from botorch_sketch.benchmarks.methods import BenchmarkOptimizer, PolicyConfig
from botorch_sketch.benchmarks.problems import Problem
from botorch_sketch.benchmarks.results import RunTrace, expected_uniform_regret
from botorch_sketch.benchmarks.writers import safe_name
from botorch_sketch.utils.validation import check_int

#: Progress display modes: tqdm bars, periodic log lines, nothing.
PROGRESS_MODES = ("bar", "log", "off")


def _progress_mode(progress: bool | str) -> str:
    if isinstance(progress, bool):
        return "bar" if progress else "off"
    if progress not in PROGRESS_MODES:
        raise ValueError(f"`progress` must be a bool or one of {PROGRESS_MODES}.")
    return progress


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
) -> RunTrace:
    r"""Run a method on ``problem`` for exactly ``horizon`` noisy evaluations.

    Unless ``warm_up_steps=0``, a few untimed ask/tell rounds of a throwaway build
    come first, so the first method of a process is not charged for one-time costs
    (lazy imports, TorchScript compilation); the measured run then builds the method
    afresh with the run's own generators, making the same choices as without.

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

    Returns:
        The run's :class:`RunTrace`.

    Example:
        >>> trace = run_policy(problem, "uniform", horizon=100, seed=0)
        >>> trace.curve("regret_ratio")[-1]
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
    if uniform_regret is None:
        uniform_regret = expected_uniform_regret(problem)
    label = label or config.label
    device = problem.bounds.device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    clock = _Clock(sync)
    values = np.empty(horizon)
    ask_seconds = np.zeros(horizon)
    tell_seconds = np.zeros(horizon)
    batch_index = np.empty(horizon, dtype=np.int64)
    diagnostics: dict[str, np.ndarray] = {}
    noise_generator = torch.Generator().manual_seed(2 * seed + 1)
    description = f"{label} | {problem.name} | seed {seed}"
    if mode == "log":
        bar = _LogProgress(horizon, description, log, log_every)
    else:
        bar = tqdm(
            total=horizon,
            desc=description,
            disable=mode == "off",
            leave=False,
            dynamic_ncols=True,
        )
    if warm_up_steps:
        _warm_up(problem, config, horizon, warm_up_steps)
    with PeakMemoryMonitor(device) as memory, bar:
        optimizer, setup_seconds = clock.time(
            config.build, problem, horizon, torch.Generator().manual_seed(2 * seed)
        )
        diagnostics_of = getattr(optimizer, "diagnostics", dict)
        t = 0
        batch = 0
        while t < horizon:
            chosen, seconds = clock.time(optimizer.ask, horizon - t)
            chosen = _validated_batch(problem, chosen, optimizer)[: horizon - t]
            size = chosen.shape[0]
            true, rewards = _evaluate(problem, chosen, noise_generator)
            ask_seconds[t] = seconds
            tell_seconds[t + size - 1] = clock.time(optimizer.tell, chosen, rewards)[1]
            values[t : t + size] = true.detach().double().cpu().numpy()
            batch_index[t : t + size] = batch
            for key, value in diagnostics_of().items():
                series = diagnostics.setdefault(key, np.full(horizon, math.nan))
                series[t : t + size] = float(value)
            t += size
            batch += 1
            bar.update(size)
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
    )


def _evaluate(
    problem: Problem, chosen: Tensor, noise_generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    r"""True values and noisy rewards of a validated batch ``chosen``."""
    if problem.is_finite:
        true = problem.arm_values[chosen]
    else:
        true = problem.objective(chosen)
    noise = torch.randn(chosen.shape[0], generator=noise_generator, dtype=torch.float64)
    return true, true + problem.noise_std * noise.to(true)


def _warm_up(problem: Problem, config: PolicyConfig, horizon: int, steps: int) -> None:
    r"""Untimed ask/tell rounds of a build on throwaway generators (the measured run
    builds the method again), so one-time costs such as lazy imports and TorchScript
    compilation are charged to no method's time or memory."""
    optimizer = config.build(problem, horizon, torch.Generator().manual_seed(0))
    noise_generator = torch.Generator().manual_seed(1)
    t = 0
    for _ in range(steps):
        if t >= horizon:
            break
        chosen = optimizer.ask(horizon - t)
        chosen = _validated_batch(problem, chosen, optimizer)[: horizon - t]
        optimizer.tell(chosen, _evaluate(problem, chosen, noise_generator)[1])
        t += chosen.shape[0]


class _LogProgress:
    r"""A progress "bar" that logs ``description: t = .../T (... s)`` at most every
    ``every`` seconds (for logs and pipes, where tqdm's redraws are noise)."""

    def __init__(
        self, total: int, description: str, log: Callable[[str], None], every: float
    ) -> None:
        self.total, self.description, self.log, self.every = (
            total,
            description,
            log,
            every,
        )
        self.done = 0
        self.start = self.last = time.perf_counter()

    def update(self, count: int) -> None:
        self.done += count
        now = time.perf_counter()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            self.log(
                f"  {self.description}: t = {self.done}/{self.total} "
                f"({now - self.start:.0f} s)"
            )

    def __enter__(self) -> _LogProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class _Clock:
    r"""Wall-clock timing of a call, synchronizing the device before reading."""

    def __init__(self, sync: Callable[[], None] | None) -> None:
        self.sync = sync

    def time(self, call: Callable[..., object], *args: object) -> tuple[object, float]:
        if self.sync:
            self.sync()
        start = time.perf_counter()
        result = call(*args)
        if self.sync:
            self.sync()
        return result, time.perf_counter() - start


def _json_normal(value: object) -> object:
    r"""``value`` as it reads back from JSON (tuples as lists, other objects as
    their repr)."""
    return json.loads(json.dumps(value, default=repr))


def run_fingerprint(
    problem: Problem, config: PolicyConfig, horizon: int, uniform_regret: float
) -> dict[str, object]:
    r"""What makes two runs of the same seed interchangeable: the problem (name,
    settings, a SHA-256 of its bounds, arms and arm values, dtype, device), the policy
    (registry name, options resolved for ``horizon``) and ``horizon``."""
    digest = hashlib.sha256()
    for tensor in (problem.bounds, problem.arms, problem.arm_values):
        if tensor is not None:
            digest.update(tensor.detach().double().cpu().contiguous().numpy().tobytes())
    return _json_normal(
        {
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
    )


class RunStore:
    r"""Finished runs, one JSON file each,
    ``directory/<problem>__<label>__seed<s>.json``, holding
    ``{"fingerprint": ..., "trace": RunTrace.to_dict()}``.

    Files are written atomically (a temporary file renamed into place), so an
    interrupted write never leaves a half file under the final name.

    Example:
        >>> store = RunStore("benchmark_results/runs")
        >>> store.save(trace, fingerprint)
        >>> store.load("cadata", "bbkb", 0, fingerprint)  # the trace, or None
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, problem: str, label: str, seed: int) -> Path:
        return (
            self.directory
            / f"{safe_name(problem)}__{safe_name(label)}__seed{seed}.json"
        )

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
        except (OSError, ValueError, KeyError, TypeError) as error:
            return None, f"{path} is unreadable ({error})"
        if payload.get("fingerprint") != fingerprint or (
            trace.problem,
            trace.policy,
            trace.seed,
        ) != (problem, label, seed):
            return None, f"{path} was made with other settings"
        return trace, None

    def traces(self) -> list[RunTrace]:
        r"""Every stored run, in file-name order, whatever its settings (to report on
        runs gathered from earlier commands)."""
        if not self.directory.is_dir():
            return []
        return [
            RunTrace.from_dict(json.loads(path.read_text())["trace"])
            for path in sorted(self.directory.glob("*__seed*.json"))
        ]

    def __len__(self) -> int:
        r"""Number of stored run files."""
        if not self.directory.is_dir():
            return 0
        return sum(1 for _ in self.directory.glob("*__seed*.json"))


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
) -> tuple[list[RunTrace], list[str]]:
    r"""Run every method on every problem for every seed.

    Option names are checked first, so unknown ones fail before any run. Methods that
    do not take a problem's kind (finite / box) are skipped on it with a note passed
    to ``log``.

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
    reused = sum(stored is not None for *_, stored in plan)
    if resume:
        note(f"resuming: {reused} of {len(plan)} runs already done")
    traces = []
    for number, (
        problem,
        config,
        seed,
        uniform_regret,
        fingerprint,
        trace,
    ) in enumerate(plan, 1):
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
    device = torch.device(device) if device is not None else torch.device("cpu")
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
