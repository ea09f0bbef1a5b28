r"""A simulated cluster: ask/tell bandits on ``W`` workers with random evaluation times.

Every evaluation takes a log-normal time (mean ``duration_mean``, log-standard
deviation ``duration_sigma``); time is simulated with an event queue, nothing sleeps.
Whenever workers are free (and the horizon ``T`` is not yet handed out), the method is
asked for at most that many arms; it may return fewer or none ("wait for outcomes").
Then the next evaluation completes, the clock jumps to its end and its noisy reward is
told to the method. Run seed ``s`` gives the method ``torch.Generator().manual_seed(2
s)`` and the evaluation times and reward noise of the ``k``-th started evaluation
``manual_seed(2 s + 1)``, so all methods see common random numbers.

Recorded per completed evaluation ``k = 1..T`` (in completion order): the simulated
time, the arm's noiseless value and the busy worker-time so far; per run, the measured
time the method spent in ``ask`` and ``tell`` and the floating-point work it
counted (BBKB, GP-BUCB). Derived: the regret ratio
``R_k / (k r_unif)`` (Calandriello et al., ICML 2020) and simple regret against
simulated time, the utilization ``busy worker-time / (W x makespan)``, the
utilization until the last start (the same up to the time ``t_s`` the ``T``-th
evaluation started: after it no method has work for a free worker, so the straggler
tail that the first includes is the workload's, not the method's) and the
optimizer's time per suggestion (the process's CPU time in ``ask`` + ``tell`` over
``T``, with wall-clock time alongside; not charged to the simulated clock).

Methods (:data:`METHODS`), all on the problem's fixed kernel with the constant radius 1
(Bayesian scale) of the other benchmarks:

- ``bkb``: sequential BKB (:class:`~botorch_sketch.BBKB` with ``ratio_threshold=1``):
  one arm at a time, so one worker is busy;
- ``bbkb-sync``: synchronous BBKB: a batch (at most ``W`` arms) is asked when all
  workers are idle and told when all its evaluations are back;
- ``bbkb-async``: asynchronous BBKB: ``ask(free workers)`` after every completion;
  pending arms enter by the hallucinated variance update and BBKB's rule may answer
  "wait" (no arms); settings :func:`~botorch_sketch.generation.bbkb_loop.
  asynchronous_options` of ``W`` (``C~ = 1 + 0.07 W v`` unless given);
- ``gp-bucb``: GP-BUCB with fixed batches of ``W`` (Desautels et al., JMLR 2014) on
  the exact posterior, synchronous (:class:`~.policies.baselines.ExactBUCBPolicy`:
  ``O(A t)`` per evaluation, ``O(A T)`` memory);
- ``sgpts-async``: asynchronous S-GP-TS (:class:`~botorch_sketch.generation.sgpts_loop.
  SGPTS`, ``m = 100``, ``M = 1000``, single-precision feature cache), a fresh path per
  free worker;
- ``gpts-async``: asynchronous exact GP-TS, the same with the exact posterior
  (:class:`ExactThompsonMethod`: ``O(A (M + t) + t^2)`` per path, ``O(A t)`` memory),
  the exact baseline of ``sgpts-async``;
- ``uniform``: uniformly random arms on every free worker.

Run ``python -m botorch_sketch.benchmarks.cluster --preset cluster-smoke`` (seconds),
``--preset cluster-cadata --data-dir DATA`` or ``--preset cluster-rosenbrock``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from botorch_sketch.benchmarks.policies.base import Policy
from botorch_sketch.benchmarks.policies.baselines import ExactBUCBPolicy
from botorch_sketch.benchmarks.policies.bkb import BBKBPolicy
from botorch_sketch.benchmarks.policies.common import KernelHyperparameters
from botorch_sketch.benchmarks.problems import Problem, make_problem
from botorch_sketch.benchmarks.results import expected_uniform_regret
from botorch_sketch.benchmarks.writers import checkpoints
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.generation.thompson_arms import (
    ArmFeatureCache,
    IncrementalExactThompson,
)


class ClusterMethod(ABC):
    r"""A bandit on the simulated cluster: ``ask(free)`` returns at most ``free`` arm
    indices (possibly none while evaluations run), ``tell`` receives completed ones."""

    @abstractmethod
    def ask(self, free: int) -> Tensor:
        r"""At most ``free`` arm indices (a LongTensor; >= 1 when none is running)."""

    @abstractmethod
    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Outcomes of completed arms (``b`` indices, ``b`` rewards)."""

    def gflop(self) -> float:
        r"""The floating-point work counted so far (GFLOP; NaN if not counted)."""
        return math.nan


class SynchronousMethod(ClusterMethod):
    r"""A benchmark :class:`~.policies.base.Policy` run in synchronous batches: its
    batch (truncated to the free workers) is asked when nothing runs and told, in
    the asked order, once every evaluation of it is back."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._batch: list[int] = []
        self._rewards: list[float | None] = []

    def ask(self, free: int) -> Tensor:
        if self._batch:
            return torch.empty(0, dtype=torch.long)
        batch = self.policy.ask()[:free]
        self._batch = batch.tolist()
        self._rewards = [None] * len(self._batch)
        return batch

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        for arm, reward in zip(indices.tolist(), rewards.tolist(), strict=True):
            slot = next(
                i
                for i, (a, r) in enumerate(zip(self._batch, self._rewards, strict=True))
                if a == arm and r is None
            )
            self._rewards[slot] = reward
        if all(r is not None for r in self._rewards):
            batch = torch.tensor(self._batch, dtype=torch.long)
            self.policy.tell(batch, torch.tensor(self._rewards, dtype=torch.float64))
            self._batch, self._rewards = [], []

    def gflop(self) -> float:
        return float(self.policy.diagnostics().get("gflop", math.nan))


class AsynchronousMethod(ClusterMethod):
    r"""An asynchronous ask/tell loop (``ask(max_arms)``, ``tell`` of any pending
    subset): :class:`~botorch_sketch.BBKB` or
    :class:`~botorch_sketch.generation.sgpts_loop.SGPTS`."""

    def __init__(self, loop: object) -> None:
        self.loop = loop

    def ask(self, free: int) -> Tensor:
        return self.loop.ask(free)

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        self.loop.tell(indices, rewards)

    def gflop(self) -> float:
        if isinstance(self.loop, BBKB):
            return self.loop.diagnostics()["gflop"]
        return math.nan


class ExactThompsonMethod(ClusterMethod):
    r"""Asynchronous exact GP-TS, the exact baseline of asynchronous S-GP-TS: one
    fresh path of the exact posterior per free worker
    (:class:`~botorch_sketch.generation.thompson_arms.IncrementalExactThompson`:
    cached kernel columns of the observed arms, a Cholesky factor grown by rows,
    ``O(A (M + t) + t^2)`` per path); uniformly random arms until the first outcome;
    pending arms never enter the posterior (as in
    :class:`~botorch_sketch.generation.sgpts_loop.SGPTS`)."""

    def __init__(
        self, sampler: IncrementalExactThompson, generator: torch.Generator
    ) -> None:
        self.sampler = sampler
        self.generator = generator

    def ask(self, free: int) -> Tensor:
        if self.sampler.num_observations == 0:
            return torch.randint(
                self.sampler.cache.num_arms, (free,), generator=self.generator
            )
        return self.sampler.sample(free, 1.0, self.generator).indices

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        self.sampler.observe(indices, rewards.to(self.sampler.cache.arms))


class UniformMethod(ClusterMethod):
    r"""Uniformly random arms on every free worker."""

    def __init__(self, num_arms: int, generator: torch.Generator) -> None:
        self.num_arms = num_arms
        self.generator = generator

    def ask(self, free: int) -> Tensor:
        return torch.randint(self.num_arms, (free,), generator=self.generator)

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Uniform sampling ignores outcomes."""


@dataclass(frozen=True)
class MethodSetup:
    r"""What a method builder gets: the problem, ``W``, ``T``, the method's generator
    and BBKB's ratio threshold ``C~`` (sync and async BBKB; None: their defaults,
    2 and :func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options`)."""

    problem: Problem
    workers: int
    horizon: int
    generator: torch.Generator
    ratio_threshold: float | None = None


def _synchronous(policy: Policy, setup: MethodSetup) -> ClusterMethod:
    policy.reset(setup.problem, setup.horizon, setup.generator)
    return SynchronousMethod(policy)


def _bkb(setup: MethodSetup) -> ClusterMethod:
    policy = BBKBPolicy(ratio_threshold=1.0, max_batch_size=setup.workers)
    return _synchronous(policy, setup)


def _bbkb_sync(setup: MethodSetup) -> ClusterMethod:
    threshold = 2.0 if setup.ratio_threshold is None else setup.ratio_threshold
    policy = BBKBPolicy(ratio_threshold=threshold, max_batch_size=setup.workers)
    return _synchronous(policy, setup)


def _bbkb_async(setup: MethodSetup) -> ClusterMethod:
    hp = KernelHyperparameters.from_problem(setup.problem)
    options = asynchronous_options(setup.workers, hp.outputscale / hp.noise_variance)
    if setup.ratio_threshold is not None:
        options["ratio_threshold"] = setup.ratio_threshold
    policy = BBKBPolicy(**options)
    policy.reset(setup.problem, setup.horizon, setup.generator)
    return AsynchronousMethod(policy.loop)


def _gp_bucb(setup: MethodSetup) -> ClusterMethod:
    return _synchronous(ExactBUCBPolicy(batch_size=setup.workers), setup)


def _sgpts_async(setup: MethodSetup) -> ClusterMethod:
    hp = KernelHyperparameters.from_problem(setup.problem)
    arms = setup.problem.arms
    seed = int(torch.randint(2**31 - 1, (1,), generator=setup.generator))
    loop = SGPTS(
        arms,
        covar_module=hp.kernel(dtype=arms.dtype, device=arms.device),
        noise=hp.noise_variance,
        cache_dtype=torch.float32,
        seed=seed,
    )
    return AsynchronousMethod(loop)


def _gpts_async(setup: MethodSetup) -> ClusterMethod:
    hp = KernelHyperparameters.from_problem(setup.problem)
    arms = setup.problem.arms
    # seeded as _sgpts_async seeds SGPTS: the same feature basis on the same seed
    seed = int(torch.randint(2**31 - 1, (1,), generator=setup.generator))
    generator = torch.Generator().manual_seed(seed)
    cache = ArmFeatureCache(
        arms,
        hp.kernel(dtype=arms.dtype, device=arms.device),
        1000,
        generator=generator,
        cache_dtype=torch.float32,
    )
    sampler = IncrementalExactThompson(cache, hp.noise_variance)
    return ExactThompsonMethod(sampler, generator)


def _uniform(setup: MethodSetup) -> ClusterMethod:
    return UniformMethod(setup.problem.arms.shape[0], setup.generator)


#: Method name -> ``build(setup)``.
METHODS: dict[str, Callable[[MethodSetup], ClusterMethod]] = {
    "bkb": _bkb,
    "bbkb-sync": _bbkb_sync,
    "bbkb-async": _bbkb_async,
    "gp-bucb": _gp_bucb,
    "sgpts-async": _sgpts_async,
    "gpts-async": _gpts_async,
    "uniform": _uniform,
}

#: Methods whose label carries ``C~`` when it is not the default 2.
USES_RATIO = ("bbkb-sync", "bbkb-async")

#: Labels in tables and plots.
LABELS = {
    "bkb": "sequential BKB",
    "bbkb-sync": "synchronous BBKB",
    "bbkb-async": "asynchronous BBKB",
    "gp-bucb": "GP-BUCB, batches of W",
    "sgpts-async": "asynchronous S-GP-TS",
    "gpts-async": "asynchronous exact GP-TS",
    "uniform": "uniform",
}


def method_label(method: str, ratio_threshold: float | None) -> str:
    r"""A trace's method: the name, with ``-c<C~>`` for a BBKB threshold given
    (None: the method's default)."""
    if method in USES_RATIO and ratio_threshold is not None:
        return f"{method}-c{ratio_threshold:g}"
    return method


def _base(method: str) -> str:
    name, sep, _ = method.rpartition("-c")
    return name if sep and name in USES_RATIO else method


def label(method: str) -> str:
    r"""Table and legend name of a trace's method (``-c<C~>``: BBKB's threshold)."""
    name, sep, threshold = method.rpartition("-c")
    if sep and name in USES_RATIO:
        return f"{LABELS[name]}, C~ = {threshold}"
    return LABELS.get(method, method)


@dataclass
class ClusterTrace:
    r"""One simulated run, per completed evaluation (arrays of length ``T``).

    Attributes:
        problem: Problem name.
        method: Method name.
        seed: Run seed.
        workers: ``W``.
        optimum: ``f*``.
        uniform_regret: Expected per-step regret of uniform sampling.
        times: Simulated completion times, increasing.
        values: Noiseless values of the completed arms.
        busy: Busy worker-time up to each completion.
        ask_seconds: CPU time of the process in ``ask`` (one thread: the
            optimizer's own compute, unaffected by other processes).
        tell_seconds: CPU time in ``tell``.
        setup_seconds: CPU time building the method.
        num_asks: ``ask`` calls; ``empty_asks`` of them returned no arm.
        empty_asks: See ``num_asks``.
        wall_seconds: Wall-clock time in ``ask`` and ``tell``.
        gflop: The floating-point work the method counted (NaN if it counts
            none).
        last_start: Simulated time ``t_s`` at which the ``T``-th evaluation
            started (NaN in traces saved before it was recorded).
    """

    problem: str
    method: str
    seed: int
    workers: int
    optimum: float
    uniform_regret: float
    times: np.ndarray
    values: np.ndarray
    busy: np.ndarray
    ask_seconds: float
    tell_seconds: float
    setup_seconds: float
    num_asks: int
    empty_asks: int
    wall_seconds: float = math.nan
    gflop: float = math.nan
    last_start: float = math.nan

    @property
    def horizon(self) -> int:
        return self.values.shape[0]

    @property
    def makespan(self) -> float:
        return float(self.times[-1])

    def regret_ratio(self) -> np.ndarray:
        r"""``R_k / (k r_unif)`` after each completion."""
        steps = np.arange(1, self.horizon + 1)
        return np.cumsum(self.optimum - self.values) / (steps * self.uniform_regret)

    def simple_regret(self) -> np.ndarray:
        return self.optimum - np.maximum.accumulate(self.values)

    def utilization(self) -> np.ndarray:
        r"""Busy worker-time so far over ``W`` times the elapsed simulated time."""
        return self.busy / (self.workers * self.times)

    def utilization_until_last_start(self) -> float:
        r"""Busy worker-time over ``W t_s`` up to ``t_s``, the time the ``T``-th
        evaluation started: the share of the workers a method kept busy while it had
        evaluations left to hand out (1 when all started at time 0)."""
        if self.last_start == 0:
            return 1.0
        # busy worker-time grows linearly between completions, and t_s is one
        busy = np.interp(self.last_start, np.r_[0.0, self.times], np.r_[0.0, self.busy])
        return float(busy / (self.workers * self.last_start))

    def summary(self) -> dict[str, float]:
        seconds = self.ask_seconds + self.tell_seconds
        return {
            "makespan": self.makespan,
            "utilization": float(self.utilization()[-1]),
            "utilization_until_last_start": self.utilization_until_last_start(),
            "regret_ratio": float(self.regret_ratio()[-1]),
            "simple_regret": float(self.simple_regret()[-1]),
            "ms_per_suggestion": 1e3 * seconds / self.horizon,
            "wall_ms_per_suggestion": 1e3 * self.wall_seconds / self.horizon,
            "mflop_per_suggestion": 1e3 * self.gflop / self.horizon,
            "gflop_per_cpu_second": self.gflop / seconds,
            "ask_seconds": self.ask_seconds,
            "tell_seconds": self.tell_seconds,
            "setup_seconds": self.setup_seconds,
            "num_asks": self.num_asks,
            "empty_asks": self.empty_asks,
        }

    def to_json(self, max_points: int = 500) -> dict[str, object]:
        r"""Summary and curves at up to ``max_points`` completions."""
        at = checkpoints(self.horizon, max_points) - 1
        return {
            "problem": self.problem,
            "method": self.method,
            "seed": self.seed,
            "workers": self.workers,
            "horizon": self.horizon,
            "summary": self.summary(),
            "curves": {
                "completed": (at + 1).tolist(),
                "time": self.times[at].tolist(),
                "regret_ratio": self.regret_ratio()[at].tolist(),
                "simple_regret": self.simple_regret()[at].tolist(),
                "utilization": self.utilization()[at].tolist(),
            },
        }


_SCALARS = (
    "problem",
    "method",
    "seed",
    "workers",
    "optimum",
    "uniform_regret",
    "ask_seconds",
    "tell_seconds",
    "setup_seconds",
    "num_asks",
    "empty_asks",
    "wall_seconds",
    "gflop",
    "last_start",
)


def save_trace(trace: ClusterTrace, folder: str | Path) -> Path:
    r"""Write the full trace to ``folder/<problem>_w<W>_<method>_s<seed>.npz``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{trace.problem}_w{trace.workers}_{trace.method}_s{trace.seed}.npz"
    scalars = {key: np.array(getattr(trace, key)) for key in _SCALARS}
    np.savez(
        folder / name,
        times=trace.times,
        values=trace.values,
        busy=trace.busy,
        **scalars,
    )
    return folder / name


def load_trace(path: str | Path) -> ClusterTrace:
    r"""Read a trace written by :func:`save_trace`."""
    with np.load(path) as data:
        scalars = {key: data[key].item() for key in _SCALARS if key in data}
        return ClusterTrace(
            times=data["times"], values=data["values"], busy=data["busy"], **scalars
        )


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    if value < low or (high is not None and value > high):
        raise ValueError(f"`{name}` must lie in [{low}, {high}], got {value}.")
    return value


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
    _check_int(workers, "workers", 1, 1000)
    _check_int(horizon, "horizon", 1)
    _check_int(seed, "seed", 0)
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
    while completed < horizon:
        free = min(workers - len(running), horizon - started)
        if free > 0:
            start, wall = time.process_time(), time.perf_counter()
            chosen = runner.ask(free)
            ask_seconds += time.process_time() - start
            wall_seconds += time.perf_counter() - wall
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
    )


def _on_grid(trace: ClusterTrace, curve: np.ndarray, grid: np.ndarray) -> np.ndarray:
    r"""The curve's value at the last completion ``<= grid`` (NaN before the first
    completion and after the makespan)."""
    grid = np.asarray(grid, dtype=float)
    at = np.searchsorted(trace.times, grid, side="right") - 1
    inside = (at >= 0) & (grid <= trace.makespan)
    return np.where(inside, curve[np.maximum(at, 0)], np.nan)


def busy_fraction(trace: ClusterTrace, grid: np.ndarray) -> np.ndarray:
    r"""Fraction of the ``W`` workers busy on average over ``(grid[i-1], grid[i]]``
    (from 0 for ``i = 0``); NaN past the makespan. Exact: evaluations start only at 0
    or at completions, so the busy worker-time grows linearly between completions."""
    grid = np.asarray(grid, dtype=float)
    busy = np.interp(grid, np.r_[0.0, trace.times], np.r_[0.0, trace.busy])
    widths = np.diff(grid, prepend=0.0)
    fraction = np.diff(busy, prepend=0.0) / (trace.workers * widths)
    return np.where(grid <= trace.makespan, fraction, np.nan)


def _time_grid(traces: Sequence[ClusterTrace], points: int = 400) -> np.ndarray:
    low = min(float(t.times[0]) for t in traces)
    high = max(t.makespan for t in traces)
    return np.geomspace(low, high, points)


def time_to_reach(trace: ClusterTrace, target: float) -> float:
    r"""The first simulated time after which the regret ratio stays ``<= target``
    (inf if it ends above)."""
    ratio = trace.regret_ratio()
    above = np.nonzero(ratio > target)[0]
    if above.size == 0:
        return float(trace.times[0])
    if above[-1] == trace.horizon - 1:
        return math.inf
    return float(trace.times[above[-1] + 1])


def time_to_find(trace: ClusterTrace, target: float) -> float:
    r"""The first simulated time at which the simple regret (the best value found
    so far) is ``<= target`` (inf if never)."""
    found = np.nonzero(trace.simple_regret() <= target)[0]
    return float(trace.times[found[0]]) if found.size else math.inf


def summarize(
    traces: Sequence[ClusterTrace], reference: str = "bbkb-sync"
) -> list[dict[str, object]]:
    r"""One row per ``(problem, workers, method)``: means over seeds of
    :meth:`ClusterTrace.summary`, plus, against the reference method's run of the same
    seed, ``time_to_reference``: the time to reach (and stay at or below) its final
    regret ratio over its makespan, ``time_to_reference_best``: the time to find an
    arm as good as its best over its makespan, and ``reference_at_makespan``: its
    regret ratio when this method finished (its last value if it finished
    earlier)."""
    groups: dict[tuple[str, int, str], list[ClusterTrace]] = {}
    for trace in traces:
        groups.setdefault((trace.problem, trace.workers, trace.method), []).append(
            trace
        )
    rows = []
    for (problem, workers, method), group in groups.items():
        row: dict[str, object] = {
            "problem": problem,
            "workers": workers,
            "method": method,
            "seeds": len(group),
            "horizon": group[0].horizon,
        }
        finals = [trace.summary() for trace in group]
        for key in finals[0]:
            row[key] = float(np.mean([final[key] for final in finals]))
        fractions, best_fractions, at_makespan = [], [], []
        for trace in group:
            base = groups.get((problem, workers, reference), [])
            base = [b for b in base if b.seed == trace.seed]
            if base:
                ratio = base[0].regret_ratio()
                fractions.append(time_to_reach(trace, ratio[-1]) / base[0].makespan)
                best = base[0].simple_regret()[-1]
                best_fractions.append(time_to_find(trace, best) / base[0].makespan)
                grid = np.array([min(trace.makespan, base[0].makespan)])
                at_makespan.append(_on_grid(base[0], ratio, grid)[0])
        if fractions:
            row["time_to_reference"] = float(np.mean(fractions))
            row["time_to_reference_best"] = float(np.mean(best_fractions))
            row["reference_at_makespan"] = float(np.mean(at_makespan))
        rows.append(row)
    order = {name: k for k, name in enumerate(METHODS)}

    def key(row: dict[str, object]) -> tuple[object, ...]:
        rank = order.get(_base(str(row["method"])), len(order))
        return row["problem"], row["workers"], rank, row["method"]

    return sorted(rows, key=key)


def format_markdown(rows: Sequence[dict[str, object]], reference: str) -> str:
    r"""A markdown table of :func:`summarize` rows."""
    head = (
        "| problem | W | method | T | seeds | makespan | utilization | utilization "
        "until the last start | regret ratio | "
        f"simple regret | time to {label(reference)}'s final regret "
        f"ratio (/ its makespan) | time to its best arm's value (/ its makespan) | "
        f"{label(reference)}'s regret ratio at this "
        "makespan | optimizer CPU ms / suggestion (wall) | counted MFLOP / "
        "suggestion (GFLOP per CPU second) | empty asks |"
    )
    lines = [head, "|" + "---|" * 16]
    for row in rows:
        reach = row.get("time_to_reference", math.nan)
        find = row.get("time_to_reference_best", math.nan)
        base = row.get("reference_at_makespan", math.nan)
        lines.append(
            f"| {row['problem']} | {row['workers']} | "
            f"{label(row['method'])} | {row['horizon']} | "
            f"{row['seeds']} | {row['makespan']:,.0f} | {row['utilization']:.1%} | "
            f"{row['utilization_until_last_start']:.1%} | "
            f"{row['regret_ratio']:.4f} | {row['simple_regret']:.4f} | "
            f"{reach:.3g} | {find:.3g} | {base:.4f} | {row['ms_per_suggestion']:.2f} "
            f"({row['wall_ms_per_suggestion']:.2f}) | "
            f"{row['mflop_per_suggestion']:.3g} ({row['gflop_per_cpu_second']:.2g}) | "
            f"{row['empty_asks']:.0f} / {row['num_asks']:.0f} |"
        )
    return "\n".join(lines)


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return path


def plot(
    traces: Sequence[ClusterTrace],
    output_dir: str | Path,
    reference: str = "bbkb-sync",
) -> list[Path]:
    r"""For each ``(problem, W)``: ``cluster_<problem>_w<W>_regret.png`` (regret
    ratio vs simulated time, mean over seeds, log time axis, each line ending at its
    makespan), ``..._utilization.png`` (:func:`busy_fraction` over log-spaced
    windows) and, when the reference method ran, ``..._tradeoff.png``
    (:func:`plot_tradeoff`)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[ClusterTrace]] = {}
    for trace in traces:
        runs.setdefault((trace.problem, trace.workers), []).append(trace)
    paths = []
    for (problem, workers), group in runs.items():
        grid = _time_grid(group)
        views = (
            (
                "regret",
                lambda t, g: _on_grid(t, t.regret_ratio(), g),
                "regret ratio R_k / (k r_unif)",
            ),
            ("utilization", busy_fraction, "fraction of workers busy"),
        )
        for suffix, curve, ylabel in views:
            figure = Figure(figsize=(7, 4.2))
            axes = figure.add_subplot()
            methods = dict.fromkeys(t.method for t in group)
            for method in methods:
                mine = [t for t in group if t.method == method]
                curves = np.array([curve(t, grid) for t in mine])
                started = ~np.isnan(curves).all(axis=0)
                mean = np.full(grid.shape, np.nan)
                mean[started] = np.nanmean(curves[:, started], axis=0)
                axes.plot(grid, mean, label=label(method))
            axes.set_xscale("log")
            if suffix == "regret":
                axes.set_yscale("log")
            axes.set_xlabel("simulated wall time (mean evaluation time = 1)")
            axes.set_ylabel(ylabel)
            axes.set_title(f"{problem}, W = {workers} workers, T = {group[0].horizon}")
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize=8)
            figure.tight_layout()
            name = f"cluster_{problem}_w{workers}_{suffix}.png"
            paths.append(_save(figure, output_dir / name))
        name = f"cluster_{problem}_w{workers}_tradeoff.png"
        figure = plot_tradeoff(group, reference)
        if figure is not None:
            paths.append(_save(figure, output_dir / name))
    return paths


def plot_tradeoff(
    traces: Sequence[ClusterTrace], reference: str = "bbkb-sync"
) -> Figure | None:
    r"""One point per run of one ``(problem, W)``: its utilization until the last
    start against its final regret ratio over that of the reference's run of the
    same seed (None when no other method has a reference run). Methods whose runs
    all end above twice the reference's are named in a note, not drawn, so that the
    axis resolves the rest."""
    references = {t.seed: t for t in traces if t.method == reference}
    points, omitted = {}, []
    for method in dict.fromkeys(t.method for t in traces):
        mine = [t for t in traces if t.method == method and t.seed in references]
        if method == reference or not mine:
            continue
        x = [t.utilization_until_last_start() for t in mine]
        y = [t.regret_ratio()[-1] / references[t.seed].regret_ratio()[-1] for t in mine]
        if min(y) > 2:
            omitted.append(label(method))
        else:
            points[label(method)] = (x, y)
    if not points:
        return None
    figure = Figure(figsize=(7, 4.2))
    axes = figure.add_subplot()
    for name, (x, y) in points.items():
        axes.scatter(x, y, label=name, s=24)
    if omitted:
        note = "not drawn (above 2): " + ", ".join(omitted)
        axes.annotate(note, (0.01, 0.01), xycoords="axes fraction", fontsize=8)
    axes.axvline(0.9, color="grey", linestyle="--", linewidth=1)
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes.set_xlabel("utilization until the last start")
    axes.set_ylabel(f"final regret ratio / {label(reference)}'s (same seed)")
    axes.set_title(f"{traces[0].problem}, W = {traces[0].workers}: one point per run")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


@dataclass(frozen=True)
class ClusterPreset:
    r"""A named simulated-cluster run (see :data:`PRESETS`)."""

    problem: str
    methods: tuple[str, ...]
    workers: int
    horizon: int
    seeds: tuple[int, ...]


_ALL = (
    "bkb",
    "bbkb-sync",
    "bbkb-async",
    "gp-bucb",
    "sgpts-async",
    "gpts-async",
    "uniform",
)

#: Presets, all with ``W = 100`` but the smoke run: cadata with ``T = 10^4``
#: (needs ``--data-dir``), Rosenbrock-8 on 20,000 arms with ``T = 2,000`` (the
#: ``default`` benchmark's problem and horizon), and a seconds-long smoke run.
PRESETS = {
    "cluster-cadata": ClusterPreset(
        "cadata:lengthscale=3:noise_variance=1", _ALL, 100, 10_000, (0,)
    ),
    "cluster-rosenbrock": ClusterPreset(
        "rosenbrock:dim=8:arms=20000:noise_variance=1", _ALL, 100, 2000, (0,)
    ),
    "cluster-smoke": ClusterPreset(
        "rosenbrock:dim=8:arms=500:noise_variance=1", _ALL, 8, 60, (0,)
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m botorch_sketch.benchmarks.cluster",
        description="Bandits on a simulated cluster of W workers with log-normal "
        "evaluation times: regret vs simulated time, utilization, optimizer time.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cluster-smoke")
    parser.add_argument("--problem", help="problem spec (overrides the preset's)")
    parser.add_argument(
        "--methods", help=f"comma-separated subset of {', '.join(METHODS)}"
    )
    parser.add_argument("--workers", "-W", type=int, help="workers W (1 to 1000)")
    parser.add_argument("--horizon", "-T", type=int, help="evaluations T")
    parser.add_argument("--seeds", help="comma-separated run seeds, e.g. 0,1,2")
    parser.add_argument("--duration-mean", type=float, default=1.0)
    parser.add_argument("--duration-sigma", type=float, default=1.0)
    parser.add_argument(
        "--ratio-threshold",
        type=float,
        help="BBKB's C~ for bbkb-sync and bbkb-async (default: 2 for bbkb-sync, "
        "1 + W/10 for bbkb-async with outputscale / noise variance 1)",
    )
    parser.add_argument(
        "--reference",
        help="method label of the time-to-reference column (default bbkb-sync, "
        "with -c<C~> for --ratio-threshold C~)",
    )
    parser.add_argument(
        "--collect",
        nargs="+",
        metavar="DIR",
        help="make the table and plots from the runs saved under these output dirs",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("BOTORCH_SKETCH_DATA", "data"),
        help="folder with cadata.csv (default $BOTORCH_SKETCH_DATA or ./data)",
    )
    parser.add_argument("--output-dir", default="cluster-results")
    parser.add_argument("--plot-dir", help="PNG folder (default: --output-dir)")
    return parser


def _run(args: argparse.Namespace) -> tuple[list[ClusterTrace], dict[str, object]]:
    r"""Run the preset with the command line's overrides, saving every trace."""
    preset = PRESETS[args.preset]
    methods = tuple(args.methods.split(",")) if args.methods else preset.methods
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"Unknown methods {unknown}; known: {sorted(METHODS)}.")
    seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else preset.seeds
    workers = args.workers or preset.workers
    horizon = args.horizon or preset.horizon
    problem = make_problem(args.problem or preset.problem, data_dir=args.data_dir)
    uniform_regret = expected_uniform_regret(problem)
    traces = []
    for seed in seeds:
        for method in methods:
            trace = simulate(
                problem,
                method,
                workers=workers,
                horizon=horizon,
                seed=seed,
                duration_mean=args.duration_mean,
                duration_sigma=args.duration_sigma,
                ratio_threshold=args.ratio_threshold,
                uniform_regret=uniform_regret,
            )
            save_trace(trace, Path(args.output_dir) / "runs")
            summary = trace.summary()
            print(
                f"{trace.method} seed {seed}: makespan {summary['makespan']:.1f}, "
                f"utilization {summary['utilization']:.3f} (until the last start "
                f"{summary['utilization_until_last_start']:.3f}), regret ratio "
                f"{summary['regret_ratio']:.4f}, "
                f"{summary['ms_per_suggestion']:.2f} ms CPU / suggestion",
                flush=True,
            )
            traces.append(trace)
    settings = {
        "problem": problem.name,
        "workers": workers,
        "horizon": horizon,
        "seeds": list(seeds),
        "duration_mean": args.duration_mean,
        "duration_sigma": args.duration_sigma,
        "ratio_threshold": args.ratio_threshold,
    }
    return traces, settings


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run a preset (options override it), or with ``--collect`` gather saved runs;
    write ``cluster_results.json``, ``cluster_table.md`` and the PNGs to
    ``--output-dir`` (traces to its ``runs/``) and print the table. Returns the exit
    status."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    if args.collect:
        paths = sorted(p for d in args.collect for p in Path(d).glob("runs/*.npz"))
        if not paths:
            raise SystemExit(f"No saved runs under {args.collect}.")
        traces = [load_trace(path) for path in paths]
        settings: dict[str, object] = {"collected": [str(p) for p in paths]}
    else:
        traces, settings = _run(args)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    reference = args.reference or method_label("bbkb-sync", args.ratio_threshold)
    rows = summarize(traces, reference)
    table = format_markdown(rows, reference)
    command = "python -m botorch_sketch.benchmarks.cluster " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    results = {
        "command": command,
        "settings": settings | {"torch_threads": torch.get_num_threads()},
        "rows": rows,
        "runs": [trace.to_json() for trace in traces],
    }
    (output / "cluster_results.json").write_text(json.dumps(results, indent=1))
    (output / "cluster_table.md").write_text(table + "\n")
    plot(traces, args.plot_dir or output, reference)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
