r"""The methods of the simulated cluster: one
:class:`~benchmarks.methods.BenchmarkMethod` record per name in :data:`METHODS`, as
the main benchmark's, each built as ``build(problem, horizon, generator, *, workers)``
(BBKB's ``C~`` as the option ``ratio_threshold``, None: the method's default); a
method run in synchronous batches builds its loop inside a :class:`SynchronousBatches`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from benchmarks.methods import BenchmarkMethod, BenchmarkOptimizer, build_bbkb
from benchmarks.policies.baselines import ExactBUCB, Uniform
from benchmarks.policies.common import (
    KernelHyperparameters,
    draw_seed,
)
from benchmarks.problems import Problem
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.hyperparameters import FIT_INDUCING
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS


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


def _bbkb_sync(
    problem: Problem,
    horizon: int,
    generator: torch.Generator,
    *,
    workers: int,
    ratio_threshold: float | None = None,
) -> SynchronousBatches:
    threshold = 2.0 if ratio_threshold is None else ratio_threshold
    return SynchronousBatches(
        build_bbkb(
            problem,
            horizon,
            generator,
            ratio_threshold=threshold,
            max_batch_size=workers,
        )
    )


def _bbkb_async(
    problem: Problem,
    horizon: int,
    generator: torch.Generator,
    *,
    workers: int,
    ratio_threshold: float | None = None,
) -> BBKB:
    hp = KernelHyperparameters.from_problem(problem)
    options = asynchronous_options(workers, hp.outputscale / hp.noise)
    if ratio_threshold is not None:
        options["ratio_threshold"] = ratio_threshold
    return build_bbkb(problem, horizon, generator, **options)


def _bbkb_learned(
    problem: Problem,
    horizon: int,
    generator: torch.Generator,
    *,
    workers: int,
    fit_inducing: int | None = None,
) -> BBKB:
    options = BBKBOptions(**asynchronous_options(workers), fit_inducing=fit_inducing)
    return BBKB(problem.arms, options, seed=draw_seed(generator))


def _gp_bucb(
    problem: Problem, horizon: int, generator: torch.Generator, *, workers: int
) -> SynchronousBatches:
    return SynchronousBatches(
        ExactBUCB(problem, horizon, generator, batch_size=workers)
    )


def _thompson_loop(
    loop: type[SGPTS], problem: Problem, generator: torch.Generator
) -> SGPTS:
    r"""``loop`` (S-GP-TS or its exact baseline) on the problem's kernel; both draw
    the same feature basis on the same seed."""
    hp = KernelHyperparameters.from_problem(problem)
    options = SGPTSOptions(noise=hp.noise, cache_dtype=torch.float32)
    return loop(
        problem.arms,
        options,
        covar_module=hp.kernel(dtype=problem.arms.dtype, device=problem.arms.device),
        seed=draw_seed(generator),
    )


def _sgpts(
    problem: Problem, horizon: int, generator: torch.Generator, *, workers: int
) -> SGPTS:
    return _thompson_loop(SGPTS, problem, generator)


def _gpts(
    problem: Problem, horizon: int, generator: torch.Generator, *, workers: int
) -> ExactGPTS:
    return _thompson_loop(ExactGPTS, problem, generator)


def _sgpts_learned(
    problem: Problem, horizon: int, generator: torch.Generator, *, workers: int
) -> SGPTS:
    options = SGPTSOptions(cache_dtype=torch.float32)
    return SGPTS(problem.arms, options, seed=draw_seed(generator))


def _uniform(
    problem: Problem, horizon: int, generator: torch.Generator, *, workers: int
) -> Uniform:
    return Uniform(problem, horizon, generator, batch_size=None)


#: All cluster methods, by name, in table order; the description is the table and
#: legend name. The ``-learned`` ones are the loops with their defaults (learned
#: kernel, ``lambda`` and scale); ``bbkb-async-fit100-learned`` refits on a
#: study's 100 inducing points (``fit_inducing=FIT_INDUCING``, the Optuna
#: samplers' and Ray Tune searchers' cap) instead of a loop's 50.
METHODS: dict[str, BenchmarkMethod] = {
    method.name: method
    for method in (
        BenchmarkMethod(
            "bkb", "sequential BKB", _bbkb_sync, fixed={"ratio_threshold": 1.0}
        ),
        BenchmarkMethod("bbkb-sync", "synchronous BBKB", _bbkb_sync),
        BenchmarkMethod("bbkb-async", "asynchronous BBKB", _bbkb_async),
        BenchmarkMethod(
            "bbkb-async-learned", "asynchronous BBKB, learned kernel", _bbkb_learned
        ),
        BenchmarkMethod(
            "bbkb-async-fit100-learned",
            "asynchronous BBKB, learned kernel, refits on 100 inducing points",
            _bbkb_learned,
            fixed={"fit_inducing": FIT_INDUCING},
        ),
        BenchmarkMethod("gp-bucb", "GP-BUCB, batches of W", _gp_bucb),
        BenchmarkMethod("sgpts-async", "asynchronous S-GP-TS", _sgpts),
        BenchmarkMethod(
            "sgpts-async-learned",
            "asynchronous S-GP-TS, learned kernel",
            _sgpts_learned,
        ),
        BenchmarkMethod("gpts-async", "asynchronous exact GP-TS", _gpts),
        BenchmarkMethod("uniform", "uniform", _uniform),
    )
}


def _uses_ratio(name: str) -> bool:
    r"""Whether the method ``name`` takes BBKB's ``C~`` (``--ratio-threshold``)."""
    return name in METHODS and "ratio_threshold" in METHODS[name].options()


def method_options(
    method: str, workers: int, ratio_threshold: float | None = None
) -> dict[str, Any]:
    r"""The options the simulation builds ``method`` with: ``workers``, and BBKB's
    ``C~`` for a method that takes it."""
    options: dict[str, Any] = {"workers": workers}
    if _uses_ratio(method):
        options["ratio_threshold"] = ratio_threshold
    return options


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
    text = METHODS[name].description if name in METHODS else name
    return text if threshold is None else f"{text}, C~ = {threshold}"
