r"""The methods of the simulated cluster as data: one :class:`ClusterMethod` record
per name in :data:`METHODS` (how to build its ask/tell object for a run, and whether
the simulation drives it in synchronous batches or asynchronously)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.benchmarks.methods import BenchmarkOptimizer, build_bbkb
from botorch_sketch.benchmarks.policies.baselines import ExactBUCB, Uniform
from botorch_sketch.benchmarks.policies.common import (
    KernelHyperparameters,
    draw_seed,
)
from botorch_sketch.benchmarks.problems import Problem
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS


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


@dataclass(frozen=True)
class ClusterMethod:
    r"""A method of the simulated cluster.

    Attributes:
        name: Registry name (``--methods``; traces carry it).
        label: Name in tables and legends.
        build: ``build(setup)``: the run's ask/tell object (``ask(max_arms)``,
            ``tell(indices, rewards)``).
        synchronous: Driven in synchronous batches (:class:`SynchronousBatches`):
            a batch is asked when nothing runs and told once all of it is back;
            otherwise ``ask(free workers)`` after every completion.
        uses_ratio: Takes BBKB's ``C~`` (``--ratio-threshold``; the trace's method
            gets ``-c<C~>``).
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
                for i, (a, r) in enumerate(zip(self._batch, self._rewards, strict=True))
                if a == arm and r is None
            )
            self._rewards[slot] = reward
        if all(r is not None for r in self._rewards):
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


def _bbkb_async_learned(setup: MethodSetup) -> BBKB:
    r"""Asynchronous BBKB with its defaults for ``W`` workers: no kernel given, so
    it learns the kernel, ``lambda`` and the rewards' scale."""
    options = BBKBOptions(**asynchronous_options(setup.workers))
    return BBKB(setup.problem.arms, options, seed=draw_seed(setup.generator))


def _thompson_loop(loop: type[SGPTS], setup: MethodSetup) -> SGPTS:
    r"""``loop`` (S-GP-TS or its exact baseline) on the problem's kernel, seeded from
    the method's generator: both draw the same feature basis on the same seed."""
    hp = KernelHyperparameters.from_problem(setup.problem)
    arms = setup.problem.arms
    options = SGPTSOptions(noise=hp.noise, cache_dtype=torch.float32)
    return loop(
        arms,
        options,
        covar_module=hp.kernel(dtype=arms.dtype, device=arms.device),
        seed=draw_seed(setup.generator),
    )


def _sgpts_async_learned(setup: MethodSetup) -> SGPTS:
    r"""Asynchronous S-GP-TS with its defaults (learned kernel, ``lambda`` and
    scale), single-precision feature cache as ``sgpts-async``."""
    options = SGPTSOptions(cache_dtype=torch.float32)
    return SGPTS(setup.problem.arms, options, seed=draw_seed(setup.generator))


def _exact_bucb(setup: MethodSetup) -> ExactBUCB:
    problem, generator = setup.problem, setup.generator
    return ExactBUCB(problem, setup.horizon, generator, batch_size=setup.workers)


def _uniform(setup: MethodSetup) -> Uniform:
    r"""Uniformly random arms on every free worker."""
    return Uniform(setup.problem, setup.horizon, setup.generator, batch_size=None)


#: All cluster methods, by name, in table order.
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
            _bbkb_async_learned,
        ),
        ClusterMethod(
            "gp-bucb", "GP-BUCB, batches of W", _exact_bucb, synchronous=True
        ),
        ClusterMethod(
            "sgpts-async",
            "asynchronous S-GP-TS",
            lambda setup: _thompson_loop(SGPTS, setup),
        ),
        ClusterMethod(
            "sgpts-async-learned",
            "asynchronous S-GP-TS, learned kernel",
            _sgpts_async_learned,
        ),
        ClusterMethod(
            "gpts-async",
            "asynchronous exact GP-TS",
            lambda setup: _thompson_loop(ExactGPTS, setup),
        ),
        ClusterMethod("uniform", "uniform", _uniform),
    )
}


def _uses_ratio(name: str) -> bool:
    return getattr(METHODS.get(name), "uses_ratio", False)


def method_label(method: str, ratio_threshold: float | None) -> str:
    r"""A trace's method: the name, with ``-c<C~>`` for a BBKB threshold given
    (None: the method's default)."""
    if _uses_ratio(method) and ratio_threshold is not None:
        return f"{method}-c{ratio_threshold:g}"
    return method


def base_method(method: str) -> str:
    r"""A trace's method without its ``-c<C~>`` suffix."""
    name, sep, _ = method.rpartition("-c")
    return name if sep and _uses_ratio(name) else method


def label(method: str) -> str:
    r"""Table and legend name of a trace's method (``-c<C~>``: BBKB's threshold)."""
    name, sep, threshold = method.rpartition("-c")
    if sep and _uses_ratio(name):
        return f"{METHODS[name].label}, C~ = {threshold}"
    return getattr(METHODS.get(method), "label", method)
