r"""The event-driven simulation of ``W`` workers (:func:`simulate`)."""

from __future__ import annotations

import heapq
import math
import time

import numpy as np
import torch
from torch import Tensor

from botorch_sketch.benchmarks.cluster.methods import METHODS, MethodSetup, method_label
from botorch_sketch.benchmarks.cluster.trace import ClusterTrace
from botorch_sketch.benchmarks.problems import Problem
from botorch_sketch.benchmarks.results import expected_uniform_regret
from botorch_sketch.utils.validation import check_int


def _checked_arms(chosen: object, free: int, num_arms: int, method: str) -> Tensor:
    where = f"{method}.ask({free})"
    if not isinstance(chosen, Tensor) or chosen.dtype != torch.long:
        raise TypeError(f"{where} must return a LongTensor.")
    if chosen.dim() != 1 or chosen.shape[0] > free:
        raise ValueError(f"{where} must return at most {free} indices in a 1-d tensor.")
    if chosen.numel() and (chosen.min() < 0 or chosen.max() >= num_arms):
        raise ValueError(f"{where} returned indices outside [0, {num_arms}).")
    return chosen.cpu()


def simulate(
    problem: Problem,
    method: str,
    *,
    workers: int,
    horizon: int,
    seed: int = 0,
    duration_mean: float = 1.0,
    duration_sigma: float = 1.0,
    ratio_threshold: float | None = None,
    uniform_regret: float | None = None,
) -> ClusterTrace:
    r"""Run ``method`` on ``workers`` simulated workers for ``horizon`` evaluations.

    Args:
        problem: A finite problem.
        method: A key of :data:`METHODS`.
        workers: ``W`` in ``[1, 1000]``.
        horizon: ``T >= 1`` evaluations.
        seed: Run seed (see the module docstring).
        duration_mean: Mean evaluation time (simulated seconds).
        duration_sigma: Log-standard deviation of the evaluation times (0: constant).
        ratio_threshold: BBKB's ``C~`` of ``bbkb-sync`` / ``bbkb-async`` (the label
            gets ``-c<C~>``); None: 2 for ``bbkb-sync`` and ``1 + 0.07 W v`` for
            ``bbkb-async`` (:func:`~botorch_sketch.generation.bbkb_loop.
            asynchronous_options`).
        uniform_regret: Precomputed :func:`~.results.expected_uniform_regret`.

    Returns:
        The :class:`ClusterTrace`.

    Example:
        >>> trace = simulate(problem, "sgpts-async", workers=100, horizon=10_000)
        >>> trace.summary()["utilization"]
    """
    if not problem.is_finite:
        raise ValueError("`problem` must be finite (an arm set).")
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {sorted(METHODS)}, got {method!r}.")
    check_int(workers, "workers", 1, 1000)
    check_int(horizon, "horizon", 1)
    check_int(seed, "seed", 0)
    if not (duration_mean > 0 and math.isfinite(duration_mean)):
        raise ValueError(f"`duration_mean` must be > 0, got {duration_mean}.")
    if not (duration_sigma >= 0 and math.isfinite(duration_sigma)):
        raise ValueError(f"`duration_sigma` must be >= 0, got {duration_sigma}.")
    if uniform_regret is None:
        uniform_regret = expected_uniform_regret(problem)
    world = torch.Generator().manual_seed(2 * seed + 1)
    log_durations = torch.randn(horizon, generator=world, dtype=torch.float64)
    durations = (
        duration_mean
        * torch.exp(duration_sigma * log_durations - duration_sigma**2 / 2)
    ).tolist()
    noise = problem.noise_std * torch.randn(
        horizon, generator=world, dtype=torch.float64
    )
    arm_values = problem.arm_values.detach().double().cpu()
    num_arms = arm_values.shape[0]

    start = time.process_time()
    runner = METHODS[method](
        MethodSetup(
            problem,
            workers,
            horizon,
            torch.Generator().manual_seed(2 * seed),
            ratio_threshold,
        )
    )
    setup_seconds = time.process_time() - start
    running: list[tuple[float, int, int]] = []  # (end time, start order, arm)
    times, values, busy = (np.empty(horizon) for _ in range(3))
    now = busy_time = ask_seconds = tell_seconds = wall_seconds = 0.0
    last_start = math.nan
    started = completed = num_asks = empty_asks = 0
    ask_latencies = []
    while completed < horizon:
        free = min(workers - len(running), horizon - started)
        if free > 0:
            start, wall = time.process_time(), time.perf_counter()
            chosen = runner.ask(free)
            ask_seconds += time.process_time() - start
            ask_latencies.append(time.perf_counter() - wall)
            wall_seconds += ask_latencies[-1]
            chosen = _checked_arms(chosen, free, num_arms, method)
            num_asks += 1
            empty_asks += chosen.numel() == 0
            if chosen.numel() == 0 and not running:
                raise RuntimeError(f"{method} asked to wait with nothing running.")
            for arm in chosen.tolist():
                heapq.heappush(running, (now + durations[started], started, arm))
                started += 1
            if started == horizon and math.isnan(last_start):
                last_start = now
        end, order, arm = heapq.heappop(running)
        busy_time += (len(running) + 1) * (end - now)
        now = end
        value = float(arm_values[arm])
        reward = torch.tensor([value + float(noise[order])], dtype=torch.float64)
        start, wall = time.process_time(), time.perf_counter()
        runner.tell(torch.tensor([arm]), reward.to(problem.arms))
        tell_seconds += time.process_time() - start
        wall_seconds += time.perf_counter() - wall
        times[completed], values[completed], busy[completed] = now, value, busy_time
        completed += 1
    return ClusterTrace(
        problem=problem.name,
        method=method_label(method, ratio_threshold),
        seed=seed,
        workers=workers,
        optimum=problem.optimum,
        uniform_regret=uniform_regret,
        times=times,
        values=values,
        busy=busy,
        ask_seconds=ask_seconds,
        tell_seconds=tell_seconds,
        setup_seconds=setup_seconds,
        num_asks=num_asks,
        empty_asks=empty_asks,
        wall_seconds=wall_seconds,
        gflop=runner.gflop(),
        last_start=last_start,
        ask_p99_ms=1e3 * float(np.quantile(ask_latencies, 0.99)),
        refit_seconds=runner.refit_seconds(),
    )
