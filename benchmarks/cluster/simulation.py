r"""One run of a cluster method (:func:`simulate`), driven by
:func:`~botorch_sketch.parallel.run_parallel` on a
:class:`~botorch_sketch.parallel.SimulatedEngine` with log-normal evaluation times."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import NoReturn

import numpy as np
import torch
from torch import Tensor

from benchmarks.cluster.methods import (
    METHODS,
    gflop,
    method_label,
    method_options,
    refit_seconds,
)
from benchmarks.methods import BenchmarkOptimizer
from benchmarks.problems import Problem
from benchmarks.results import RunTrace, expected_uniform_regret
from botorch_sketch.parallel import EvaluationLog, SimulatedEngine, run_parallel
from botorch_sketch.utils.validation import (
    check_at_least,
    check_indices,
    check_int,
    check_positive,
)


class _Measured:
    r"""A cluster method as :func:`~botorch_sketch.parallel.run_parallel`'s optimizer:
    checks its answers (errors name the method) and measures its ``ask`` and ``tell``
    (CPU and wall-clock time, asks, empty asks, the simulated time the last
    evaluation was handed out). It cannot fail arms or be checkpointed."""

    def __init__(
        self,
        method: BenchmarkOptimizer,
        name: str,
        arms: Tensor,
        horizon: int,
        engine: SimulatedEngine,
    ) -> None:
        self.method, self.name, self.arms = method, name, arms
        self.horizon, self.engine = horizon, engine
        self.started: list[int] = []  # the asked arms, in order
        self.running: Counter[int] = Counter()  # pending arm -> evaluations
        self.ask_seconds = self.tell_seconds = self.wall_seconds = 0.0
        self.num_asks = self.empty_asks = 0
        self.ask_latencies: list[float] = []
        self.last_start = math.nan

    @property
    def pending(self) -> Tensor:
        return torch.tensor(list(self.running.elements()), dtype=torch.long)

    def ask(self, max_arms: int | None = None) -> Tensor:
        start, wall = time.process_time(), time.perf_counter()
        chosen = self.method.ask(max_arms)
        self.ask_seconds += time.process_time() - start
        self.ask_latencies.append(time.perf_counter() - wall)
        self.wall_seconds += self.ask_latencies[-1]
        where = f"{self.name}.ask({max_arms})"  # errors name the method
        chosen = check_indices(chosen, where, self.arms.shape[0])
        if chosen.numel() > max_arms:
            raise ValueError(f"{where} must return at most {max_arms} indices.")
        self.num_asks += 1
        self.empty_asks += chosen.numel() == 0
        if chosen.numel() == 0 and not self.running:
            raise RuntimeError(f"{self.name} asked to wait with nothing running.")
        self.started.extend(chosen.tolist())
        self.running.update(chosen.tolist())
        if len(self.started) == self.horizon and math.isnan(self.last_start):
            self.last_start = self.engine.now
        return chosen

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        start, wall = time.process_time(), time.perf_counter()
        self.method.tell(indices, rewards)
        self.tell_seconds += time.process_time() - start
        self.wall_seconds += time.perf_counter() - wall
        self.running -= Counter(indices.tolist())

    def _unsupported(self, *args: object) -> NoReturn:
        raise NotImplementedError("A simulated run has no failures or checkpoints.")

    fail = state_dict = load_state_dict = _unsupported


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
) -> RunTrace:
    r"""Run ``method`` on ``workers`` simulated workers for ``horizon`` evaluations.

    Its own driver, not the main benchmark's :func:`~benchmarks.runner.run_policy`:
    the library's :func:`~botorch_sketch.parallel.run_parallel` on a simulated clock
    (:class:`~botorch_sketch.parallel.SimulatedEngine`), since what is measured is
    how the method keeps workers busy as evaluations end at different times.

    Run seed ``s`` gives the method ``torch.Generator().manual_seed(2 s)``, and the
    evaluation times, then the reward noise, of the ``k``-th started evaluation
    ``manual_seed(2 s + 1)``: all methods see common random numbers.

    Args:
        problem: A finite problem.
        method: A key of :data:`~.methods.METHODS`.
        workers: ``W`` in ``[1, 1000]``.
        horizon: ``T >= 1`` evaluations.
        seed: Run seed.
        duration_mean: Mean evaluation time (simulated seconds).
        duration_sigma: Log-standard deviation of the evaluation times (0: constant).
        ratio_threshold: BBKB's ``C~`` of ``bbkb-sync`` / ``bbkb-async`` (the label
            gets ``-c<C~>``); None: the methods' defaults.
        uniform_regret: Precomputed :func:`~.results.expected_uniform_regret`.

    Returns:
        The run's :class:`~benchmarks.results.RunTrace` (its cluster
        records: :mod:`~benchmarks.cluster.report`).
    """
    if not problem.is_finite:
        raise ValueError("`problem` must be finite (an arm set).")
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {sorted(METHODS)}, got {method!r}.")
    check_int(workers, "workers", 1, 1000)
    check_int(horizon, "horizon", 1)
    check_int(seed, "seed", 0)
    duration_mean = check_positive(duration_mean, "duration_mean")
    duration_sigma = check_at_least(duration_sigma, "duration_sigma", 0.0)
    if uniform_regret is None:
        uniform_regret = expected_uniform_regret(problem)
    # the times, then the reward noise, of the k-th started evaluation
    world = torch.Generator().manual_seed(2 * seed + 1)
    engine = SimulatedEngine.lognormal(
        horizon, duration_mean, duration_sigma, generator=world
    )
    noise = problem.noise_std * torch.randn(
        horizon, generator=world, dtype=torch.float64
    )
    arm_values = problem.arm_values.detach().double().cpu()

    generator = torch.Generator().manual_seed(2 * seed)
    start = time.process_time()
    options = method_options(method, workers, ratio_threshold)
    runner = METHODS[method](problem, horizon, generator, **options)
    setup_seconds = time.process_time() - start
    optimizer = _Measured(runner, method, problem.arms, horizon, engine)

    def objective(x: Tensor) -> float:
        r"""The noisy reward of the ``k``-th started evaluation (``x`` is its arm):
        the engine evaluates at submission, in the order the arms were asked."""
        order = engine.num_submitted
        return float(arm_values[optimizer.started[order]]) + float(noise[order])

    times, busy, asks, tells = [], [], [], []

    def record(log: EvaluationLog) -> None:
        times.append(engine.now)
        busy.append(engine.busy_time)
        asks.append(optimizer.ask_seconds)
        tells.append(optimizer.tell_seconds)

    log = run_parallel(
        optimizer,
        objective,
        engine,
        num_workers=workers,
        budget=horizon,
        progress=False,
        callback=record,
    )
    # CPU time since the previous completion, booked at each completion
    asks[-1], tells[-1] = optimizer.ask_seconds, optimizer.tell_seconds
    return RunTrace(
        problem=problem.name,
        policy=method_label(method, ratio_threshold),
        seed=seed,
        optimum=problem.optimum,
        uniform_regret=uniform_regret,
        values=arm_values[log.indices].numpy(),
        ask_seconds=np.diff(asks, prepend=0.0),
        tell_seconds=np.diff(tells, prepend=0.0),
        batch_index=np.arange(len(times)),
        diagnostics={
            "simulated_time": np.array(times),
            "busy_worker_time": np.array(busy),
        },
        setup_seconds=setup_seconds,
        metadata={
            "workers": workers,
            "num_asks": optimizer.num_asks,
            "empty_asks": optimizer.empty_asks,
            "wall_seconds": optimizer.wall_seconds,
            "gflop": gflop(runner),
            "last_start": optimizer.last_start,
            "ask_p99_ms": 1e3 * float(np.quantile(optimizer.ask_latencies, 0.99)),
            "refit_seconds": refit_seconds(runner),
        },
    )
