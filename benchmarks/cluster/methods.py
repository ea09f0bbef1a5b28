r"""The methods of the simulated cluster: one :class:`ClusterMethod` record per name
in :data:`METHODS` (how to build its ask/tell object, and whether it runs in
synchronous batches or asynchronously), and their labels."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from benchmarks.methods import BenchmarkOptimizer, build_bbkb
from benchmarks.policies.baselines import ExactBUCB, Uniform
from benchmarks.policies.common import (
    KernelHyperparameters,
    draw_seed,
)
from benchmarks.problems import Problem
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS


@dataclass(frozen=True)
class MethodSetup:
    r"""What a method builder gets: the problem, ``W``, ``T``, the method's generator
    and BBKB's ``C~`` for ``bbkb-sync`` and ``bbkb-async`` (None: their defaults)."""

    problem: Problem
    workers: int
    horizon: int
    generator: torch.Generator
    ratio_threshold: float | None = None


@dataclass(frozen=True)
class ClusterMethod:
    r"""A method of the simulated cluster.

    Attributes:
        name: Registry name (``--methods``).
        label: Name in tables and legends.
        build: ``build(setup)``: the run's ask/tell object.
        synchronous: Driven in :class:`SynchronousBatches`, else asked for the free
            workers after every completion.
        uses_ratio: Takes BBKB's ``C~`` (``--ratio-threshold``; the trace's method
            then gets ``-c<C~>``).
    """

    name: str
    label: str
    build: Callable[[MethodSetup], BenchmarkOptimizer]
    synchronous: bool = False
    uses_ratio: bool = False

    def __call__(self, setup: MethodSetup) -> BenchmarkOptimizer:
        r"""The run's ask/tell object as the simulation drives it."""
        optimizer = self.build(setup)
        return SynchronousBatches(optimizer) if self.synchronous else optimizer


class SynchronousBatches:
    r"""An ask/tell object driven in synchronous batches: its batch (truncated to
    the free workers) is asked when nothing runs and told, in the asked order, once
    every evaluation of it is back."""

    def __init__(self, optimizer: BenchmarkOptimizer) -> None:
        self.optimizer = optimizer
        self._batch: list[int] = []
        self._rewards: list[float | None] = []

    def ask(self, free: int) -> Tensor:
        if self._batch:
            return torch.empty(0, dtype=torch.long)
        batch = self.optimizer.ask(free)[:free]
        self._batch = batch.tolist()
        self._rewards = [None] * len(self._batch)
        return batch

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        for arm, reward in zip(indices.tolist(), rewards.tolist(), strict=True):
            slot = next(
                i
                for i, asked in enumerate(self._batch)
                if asked == arm and self._rewards[i] is None
            )
            self._rewards[slot] = reward
        if None not in self._rewards:
            batch = torch.tensor(self._batch, dtype=torch.long)
            rewards = torch.tensor(self._rewards, dtype=torch.float64)
            self.optimizer.tell(batch, rewards)
            self._batch, self._rewards = [], []

    def diagnostics(self) -> dict[str, float]:
        return getattr(self.optimizer, "diagnostics", dict)()


def gflop(optimizer: Any) -> float:
    r"""The floating-point work ``optimizer`` counted so far (GFLOP; NaN if none)."""
    return float(getattr(optimizer, "diagnostics", dict)().get("gflop", math.nan))


def refit_seconds(optimizer: Any) -> float:
    r"""CPU seconds ``optimizer`` spent refitting hyperparameters (NaN if it learns
    none)."""
    if getattr(optimizer, "refits", None) is None:
        return math.nan
    return optimizer.refit_seconds


def _bbkb(setup: MethodSetup, **options: Any) -> BBKB:
    return build_bbkb(setup.problem, setup.horizon, setup.generator, **options)


def _bbkb_sync(setup: MethodSetup) -> BBKB:
    threshold = 2.0 if setup.ratio_threshold is None else setup.ratio_threshold
    return _bbkb(setup, ratio_threshold=threshold, max_batch_size=setup.workers)


def _bbkb_async(setup: MethodSetup) -> BBKB:
    hp = KernelHyperparameters.from_problem(setup.problem)
    options = asynchronous_options(setup.workers, hp.outputscale / hp.noise)
    if setup.ratio_threshold is not None:
        options["ratio_threshold"] = setup.ratio_threshold
    return _bbkb(setup, **options)


def _thompson_loop(loop: type[SGPTS], setup: MethodSetup) -> SGPTS:
    r"""``loop`` (S-GP-TS or its exact baseline) on the problem's kernel; both draw
    the same feature basis on the same seed."""
    hp = KernelHyperparameters.from_problem(setup.problem)
    arms = setup.problem.arms
    options = SGPTSOptions(noise=hp.noise, cache_dtype=torch.float32)
    return loop(
        arms,
        options,
        covar_module=hp.kernel(dtype=arms.dtype, device=arms.device),
        seed=draw_seed(setup.generator),
    )


#: All cluster methods, by name, in table order. The ``-learned`` ones are the loops
#: with their defaults (learned kernel, ``lambda`` and scale).
METHODS: dict[str, ClusterMethod] = {
    method.name: method
    for method in (
        ClusterMethod(
            "bkb",
            "sequential BKB",
            lambda setup: _bbkb(
                setup, ratio_threshold=1.0, max_batch_size=setup.workers
            ),
            synchronous=True,
        ),
        ClusterMethod(
            "bbkb-sync",
            "synchronous BBKB",
            _bbkb_sync,
            synchronous=True,
            uses_ratio=True,
        ),
        ClusterMethod("bbkb-async", "asynchronous BBKB", _bbkb_async, uses_ratio=True),
        ClusterMethod(
            "bbkb-async-learned",
            "asynchronous BBKB, learned kernel",
            lambda setup: BBKB(
                setup.problem.arms,
                BBKBOptions(**asynchronous_options(setup.workers)),
                seed=draw_seed(setup.generator),
            ),
        ),
        ClusterMethod(
            "gp-bucb",
            "GP-BUCB, batches of W",
            lambda setup: ExactBUCB(
                setup.problem, setup.horizon, setup.generator, batch_size=setup.workers
            ),
            synchronous=True,
        ),
        ClusterMethod(
            "sgpts-async",
            "asynchronous S-GP-TS",
            lambda setup: _thompson_loop(SGPTS, setup),
        ),
        ClusterMethod(
            "sgpts-async-learned",
            "asynchronous S-GP-TS, learned kernel",
            lambda setup: SGPTS(
                setup.problem.arms,
                SGPTSOptions(cache_dtype=torch.float32),
                seed=draw_seed(setup.generator),
            ),
        ),
        ClusterMethod(
            "gpts-async",
            "asynchronous exact GP-TS",
            lambda setup: _thompson_loop(ExactGPTS, setup),
        ),
        ClusterMethod(
            "uniform",
            "uniform",
            lambda setup: Uniform(
                setup.problem, setup.horizon, setup.generator, batch_size=None
            ),
        ),
    )
}


def _uses_ratio(name: str) -> bool:
    return getattr(METHODS.get(name), "uses_ratio", False)


def _split(method: str) -> tuple[str, str | None]:
    r"""A trace's method as ``(name, C~)``: its ``-c<C~>`` suffix split off (None
    without one)."""
    name, sep, threshold = method.rpartition("-c")
    return (name, threshold) if sep and _uses_ratio(name) else (method, None)


def method_label(method: str, ratio_threshold: float | None) -> str:
    r"""A trace's method: the name, with ``-c<C~>`` for a BBKB threshold given
    (None: the method's default)."""
    if _uses_ratio(method) and ratio_threshold is not None:
        return f"{method}-c{ratio_threshold:g}"
    return method


def base_method(method: str) -> str:
    r"""A trace's method without its ``-c<C~>`` suffix."""
    return _split(method)[0]


def label(method: str) -> str:
    r"""Table and legend name of a trace's method (``-c<C~>``: BBKB's threshold)."""
    name, threshold = _split(method)
    text = getattr(METHODS.get(name), "label", name)
    return text if threshold is None else f"{text}, C~ = {threshold}"
