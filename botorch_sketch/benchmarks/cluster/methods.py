r"""The methods of the simulated cluster: an ask/tell interface over the benchmark's
policies and loops, and the builders of :data:`METHODS`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_sketch.benchmarks.policies.base import Policy
from botorch_sketch.benchmarks.policies.baselines import ExactBUCBPolicy
from botorch_sketch.benchmarks.policies.bkb import BBKBPolicy
from botorch_sketch.benchmarks.policies.common import KernelHyperparameters
from botorch_sketch.benchmarks.problems import Problem
from botorch_sketch.generation.ask_tell import ArmLoop
from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS


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

    def refit_seconds(self) -> float:
        r"""CPU seconds spent refitting hyperparameters (NaN if none are learned)."""
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
    subset): :class:`~botorch_sketch.BBKB`,
    :class:`~botorch_sketch.generation.sgpts_loop.SGPTS` or
    :class:`~botorch_sketch.generation.sgpts_loop.ExactGPTS`."""

    def __init__(self, loop: ArmLoop) -> None:
        self.loop = loop

    def ask(self, free: int) -> Tensor:
        return self.loop.ask(free)

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        self.loop.tell(indices, rewards)

    def gflop(self) -> float:
        if isinstance(self.loop, BBKB):
            return self.loop.diagnostics()["gflop"]
        return math.nan

    def refit_seconds(self) -> float:
        return self.loop.refit_seconds if self.loop.refits is not None else math.nan


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


def _bbkb_async_learned(setup: MethodSetup) -> ClusterMethod:
    r"""Asynchronous BBKB with its defaults for ``W`` workers: no kernel given, so
    it learns the kernel, ``lambda`` and the rewards' scale."""
    arms = setup.problem.arms
    seed = int(torch.randint(2**31 - 1, (1,), generator=setup.generator))
    options = BBKBOptions(**asynchronous_options(setup.workers))
    return AsynchronousMethod(BBKB(arms, options, seed=seed))


def _gp_bucb(setup: MethodSetup) -> ClusterMethod:
    return _synchronous(ExactBUCBPolicy(batch_size=setup.workers), setup)


def _thompson_loop(loop: type[SGPTS], setup: MethodSetup) -> ClusterMethod:
    r"""``loop`` (S-GP-TS or its exact baseline) on the problem's kernel, seeded from
    the method's generator: both draw the same feature basis on the same seed."""
    hp = KernelHyperparameters.from_problem(setup.problem)
    arms = setup.problem.arms
    seed = int(torch.randint(2**31 - 1, (1,), generator=setup.generator))
    options = SGPTSOptions(noise=hp.noise_variance, cache_dtype=torch.float32)
    return AsynchronousMethod(
        loop(
            arms,
            options,
            covar_module=hp.kernel(dtype=arms.dtype, device=arms.device),
            seed=seed,
        )
    )


def _sgpts_async(setup: MethodSetup) -> ClusterMethod:
    return _thompson_loop(SGPTS, setup)


def _sgpts_async_learned(setup: MethodSetup) -> ClusterMethod:
    r"""Asynchronous S-GP-TS with its defaults (learned kernel, ``lambda`` and
    scale), single-precision feature cache as :func:`_sgpts_async`."""
    arms = setup.problem.arms
    seed = int(torch.randint(2**31 - 1, (1,), generator=setup.generator))
    options = SGPTSOptions(cache_dtype=torch.float32)
    return AsynchronousMethod(SGPTS(arms, options, seed=seed))


def _gpts_async(setup: MethodSetup) -> ClusterMethod:
    return _thompson_loop(ExactGPTS, setup)


def _uniform(setup: MethodSetup) -> ClusterMethod:
    return UniformMethod(setup.problem.arms.shape[0], setup.generator)


#: Method name -> ``build(setup)``.
METHODS: dict[str, Callable[[MethodSetup], ClusterMethod]] = {
    "bkb": _bkb,
    "bbkb-sync": _bbkb_sync,
    "bbkb-async": _bbkb_async,
    "bbkb-async-learned": _bbkb_async_learned,
    "gp-bucb": _gp_bucb,
    "sgpts-async": _sgpts_async,
    "sgpts-async-learned": _sgpts_async_learned,
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
    "bbkb-async-learned": "asynchronous BBKB, learned kernel",
    "gp-bucb": "GP-BUCB, batches of W",
    "sgpts-async": "asynchronous S-GP-TS",
    "sgpts-async-learned": "asynchronous S-GP-TS, learned kernel",
    "gpts-async": "asynchronous exact GP-TS",
    "uniform": "uniform",
}


def method_label(method: str, ratio_threshold: float | None) -> str:
    r"""A trace's method: the name, with ``-c<C~>`` for a BBKB threshold given
    (None: the method's default)."""
    if method in USES_RATIO and ratio_threshold is not None:
        return f"{method}-c{ratio_threshold:g}"
    return method


def base_method(method: str) -> str:
    r"""A trace's method without its ``-c<C~>`` suffix."""
    name, sep, _ = method.rpartition("-c")
    return name if sep and name in USES_RATIO else method


def label(method: str) -> str:
    r"""Table and legend name of a trace's method (``-c<C~>``: BBKB's threshold)."""
    name, sep, threshold = method.rpartition("-c")
    if sep and name in USES_RATIO:
        return f"{LABELS[name]}, C~ = {threshold}"
    return LABELS.get(method, method)
