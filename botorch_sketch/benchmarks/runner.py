r"""Run policies on problems for a horizon of exactly ``T`` evaluations.

:func:`run_policy` drives one ask/tell loop: it validates each batch, truncates the
last one so that exactly ``T`` rewards are observed, draws the Gaussian reward noise,
times ``ask()`` and ``tell()`` separately (synchronizing CUDA first), records the
policy's diagnostics and measures peak memory. :func:`run_benchmark` runs every
(problem, policy, seed) combination, skipping unavailable or unsuited policies with a
note.

Seeds: run seed ``s`` gives the policy ``torch.Generator().manual_seed(2 s)`` and the
reward noise ``manual_seed(2 s + 1)``, both CPU generators (policies on other devices
draw on the CPU and move the result). The noise sequence depends only on the seed, so
policies see common random numbers.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import botorch
import gpytorch
import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from botorch_sketch.benchmarks.metrics import (
    PeakMemoryMonitor,
    RunTrace,
    expected_uniform_regret,
    measure_matmul_gflops,
)
from botorch_sketch.benchmarks.policies.base import Policy, Problem
from botorch_sketch.benchmarks.registry import PolicyConfig, policy_status


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def _validated_batch(problem: Problem, chosen: object, policy: Policy) -> Tensor:
    r"""Check ``ask()``'s output against the problem (indices or points)."""
    where = f"{type(policy).__name__}.ask()"
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
    policy: Policy,
    horizon: int,
    seed: int = 0,
    *,
    label: str | None = None,
    progress: bool = True,
    uniform_regret: float | None = None,
    warm_up_steps: int = 2,
) -> RunTrace:
    r"""Run ``policy`` on ``problem`` for exactly ``horizon`` noisy evaluations.

    Unless ``warm_up_steps=0``, a few untimed ask/tell rounds with throwaway random
    numbers come first, so the first policy of a process is not charged for one-time
    costs (lazy imports, TorchScript compilation); the measured run then starts from
    ``reset`` with the run's own generators, making the same choices as without.

    Args:
        problem: The problem.
        policy: A fresh (or re-usable) policy; ``reset`` is called first.
        horizon: Number of evaluations ``T``.
        seed: Run seed (policy randomness and reward noise).
        label: Policy name in the trace (default ``policy.name``).
        progress: Show a tqdm progress bar.
        uniform_regret: Precomputed :func:`expected_uniform_regret` of ``problem``.
        warm_up_steps: Untimed ask/tell rounds before the measured run.

    Returns:
        The run's :class:`RunTrace`.

    Example:
        >>> trace = run_policy(problem, UniformPolicy(), horizon=100, seed=0)
        >>> trace.curve("regret_ratio")[-1]
    """
    _check_positive_int(horizon, "horizon")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    if problem.is_finite and not policy.supports_finite:
        raise ValueError(f"{type(policy).__name__} does not support finite problems.")
    if not problem.is_finite and not policy.supports_box:
        raise ValueError(f"{type(policy).__name__} does not support box problems.")
    if isinstance(warm_up_steps, bool) or not isinstance(warm_up_steps, int):
        raise TypeError(f"`warm_up_steps` must be an int, got {warm_up_steps!r}.")
    if warm_up_steps < 0:
        raise ValueError(f"`warm_up_steps` must be >= 0, got {warm_up_steps}.")
    if uniform_regret is None:
        uniform_regret = expected_uniform_regret(problem)
    label = label or policy.name
    device = problem.bounds.device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    clock = _Clock(sync)
    values = np.empty(horizon)
    ask_seconds = np.zeros(horizon)
    tell_seconds = np.zeros(horizon)
    batch_index = np.empty(horizon, dtype=np.int64)
    diagnostics: dict[str, np.ndarray] = {}
    noise_generator = torch.Generator().manual_seed(2 * seed + 1)
    bar = tqdm(
        total=horizon,
        desc=f"{label} | {problem.name} | seed {seed}",
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
    )
    if warm_up_steps:
        _warm_up(problem, policy, horizon, warm_up_steps)
    with PeakMemoryMonitor(device) as memory, bar:
        setup_seconds = clock.time(
            policy.reset, problem, horizon, torch.Generator().manual_seed(2 * seed)
        )[1]
        t = 0
        batch = 0
        while t < horizon:
            chosen, seconds = clock.time(policy.ask)
            chosen = _validated_batch(problem, chosen, policy)[: horizon - t]
            size = chosen.shape[0]
            true, rewards = _evaluate(problem, chosen, noise_generator)
            ask_seconds[t] = seconds
            tell_seconds[t + size - 1] = clock.time(policy.tell, chosen, rewards)[1]
            values[t : t + size] = true.detach().double().cpu().numpy()
            batch_index[t : t + size] = batch
            for key, value in policy.diagnostics().items():
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


def _warm_up(problem: Problem, policy: Policy, horizon: int, steps: int) -> None:
    r"""Untimed ask/tell rounds on throwaway generators (the measured run resets the
    policy), so one-time costs such as lazy imports and TorchScript compilation are
    charged to no policy's time or memory."""
    policy.reset(problem, horizon, torch.Generator().manual_seed(0))
    noise_generator = torch.Generator().manual_seed(1)
    t = 0
    for _ in range(steps):
        if t >= horizon:
            break
        chosen = _validated_batch(problem, policy.ask(), policy)[: horizon - t]
        policy.tell(chosen, _evaluate(problem, chosen, noise_generator)[1])
        t += chosen.shape[0]


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


def run_benchmark(
    problems: Sequence[Problem],
    policies: Sequence[PolicyConfig],
    horizon: int,
    seeds: Sequence[int],
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> tuple[list[RunTrace], list[str]]:
    r"""Run every policy on every problem for every seed.

    Every available policy is built once first, so bad options fail before any run.
    Policies whose module cannot be imported, or that do not support a problem's kind
    (finite / box), are skipped with a note passed to ``log``.

    Args:
        problems: Problems to run.
        policies: Policies (registry name, label, options).
        horizon: Evaluations per run.
        seeds: Run seeds.
        progress: Show tqdm progress bars.
        log: Receives one line per note.

    Returns:
        ``(traces, notes)``.
    """
    _check_positive_int(horizon, "horizon")
    if not seeds:
        raise ValueError("`seeds` must not be empty.")
    labels = [config.label for config in policies]
    if len(set(labels)) != len(labels):
        raise ValueError(f"Policy labels must be unique, got {labels}.")
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        log(f"note: {text}")

    built: dict[str, Policy] = {}
    for config in policies:
        reason = policy_status(config.name)
        if reason is not None:
            note(f"skipping {config.label} ({reason})")
            continue
        built[config.label] = config.build(horizon)
    traces = []
    for problem in problems:
        uniform_regret = expected_uniform_regret(problem)
        for config in policies:
            if config.label not in built:
                continue
            probe = built[config.label]
            kind_ok = probe.supports_finite if problem.is_finite else probe.supports_box
            if not kind_ok:
                kind = "finite" if problem.is_finite else "box"
                note(f"skipping {config.label} on {problem.name} (no {kind} support)")
                continue
            for seed in seeds:
                traces.append(
                    run_policy(
                        problem,
                        config.build(horizon),
                        horizon,
                        seed,
                        label=config.label,
                        progress=progress,
                        uniform_regret=uniform_regret,
                    )
                )
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
