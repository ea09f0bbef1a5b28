r"""Baselines: uniform, epsilon-greedy, exact GP-UCB and GP-BUCB.

Each is an ask/tell object built for one run, ``Class(problem, horizon, generator,
**options)``: ``ask(max_arms)`` returns arm indices (or box points) and ``tell``
receives them with their rewards. The GP baselines use the shared fixed kernel
(:class:`~.common.KernelHyperparameters`) and a radius schedule
(:func:`~.common.make_radius_schedule`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from benchmarks.policies.common import (
    BENCHMARK_BAYES_RADIUS,
    IncrementalExactPosterior,
    KernelHyperparameters,
    check_finite,
    make_radius_schedule,
)
from benchmarks.problems import Problem
from botorch_sketch.utils.validation import check_at_least, check_int, check_number


def _check_batch_size(value: int | None, name: str) -> int | None:
    return None if value is None else check_int(value, name, 1)


class Uniform:
    r"""Uniformly random arms (finite problems) or points (box problems), ``batch_size``
    per ``ask()`` (None: ``max_arms``, the ask's)."""

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        batch_size: int | None = 1,
    ) -> None:
        self.batch_size = _check_batch_size(batch_size, "batch_size")
        self.problem = problem
        self.generator = generator

    def ask(self, max_arms: int | None = None) -> Tensor:
        size = max_arms if self.batch_size is None else self.batch_size
        return self.problem.uniform_choices(size, self.generator)

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        r"""Uniform sampling ignores rewards."""


class EpsilonGreedy:
    r"""Epsilon-greedy: each of ``batch_size`` choices is uniformly random with
    probability ``epsilon`` in ``[0, 1]`` (always before the first observation), else
    the arm with the best empirical mean (box problems: the best observed point)."""

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        epsilon: float = 0.1,
        batch_size: int = 1,
    ) -> None:
        self.epsilon = check_number(epsilon, "epsilon")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"`epsilon` must lie in [0, 1], got {epsilon}.")
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.problem = problem
        self.generator = generator
        self._uniform = Uniform(problem, horizon, generator, batch_size=batch_size)
        if problem.is_finite:
            num_arms = problem.arms.shape[0]
            self._sums = torch.zeros(num_arms, dtype=torch.float64)
            self._counts = torch.zeros(num_arms, dtype=torch.float64)
        else:
            self._best_point: Tensor | None = None
            self._best_reward = -math.inf

    def _greedy(self) -> Tensor | None:
        if self.problem.is_finite:
            if not self._counts.any():
                return None
            means = torch.where(
                self._counts > 0, self._sums / self._counts.clamp(min=1), -math.inf
            )
            return means.argmax().to(self.problem.arms.device)
        return self._best_point

    def ask(self, max_arms: int | None = None) -> Tensor:
        chosen = self._uniform.ask()
        greedy = self._greedy()
        if greedy is not None:
            exploit = torch.rand(self.batch_size, generator=self.generator)
            exploit = (exploit >= self.epsilon).to(chosen.device)
            if self.problem.is_finite:
                chosen = torch.where(exploit, greedy, chosen)
            else:
                chosen = torch.where(exploit.unsqueeze(-1), greedy, chosen)
        return chosen

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        rewards = rewards.detach().to(device="cpu", dtype=torch.float64)
        if self.problem.is_finite:
            chosen = chosen.cpu()
            self._sums.index_add_(0, chosen, rewards)
            self._counts.index_add_(0, chosen, torch.ones_like(rewards))
            return
        best = int(rewards.argmax())
        if float(rewards[best]) > self._best_reward:
            self._best_reward = float(rewards[best])
            self._best_point = chosen[best].clone()


class ExactUCB:
    r"""Exact GP-UCB on a finite arm set with ``O(A t)`` incremental updates.

    Plays ``argmax mean_t + radius_t * sd_t`` over all arms, the exact posterior kept
    by :class:`~.common.IncrementalExactPosterior` (``A x T`` numbers). The first arm
    is uniformly random.
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        bayes_radius: float | str = BENCHMARK_BAYES_RADIUS,
        delta: float = 0.05,
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise: float | None = None,
    ) -> None:
        r"""Args:
        bayes_radius: Constant Bayesian-scale radius or ``"srinivas"``.
        delta: Confidence level of the ``"srinivas"`` schedule.
        lengthscale, outputscale, noise: Overrides of the problem's kernel.
        """
        check_finite(problem, type(self).__name__)
        self.problem = problem
        self.generator = generator
        self.hyperparameters = KernelHyperparameters.from_problem(
            problem, lengthscale=lengthscale, outputscale=outputscale, noise=noise
        )
        self.schedule = make_radius_schedule(
            bayes_radius, num_arms=problem.arms.shape[0], delta=delta
        )
        self.posterior = IncrementalExactPosterior(
            problem.arms, self.hyperparameters, capacity=horizon
        )

    def _pick(self, radius: float, first: bool) -> int:
        r"""The UCB argmax, or a uniformly random arm for the ``first`` pick."""
        if first:
            num_arms = self.problem.arms.shape[0]
            return int(torch.randint(num_arms, (1,), generator=self.generator))
        post = self.posterior
        return int((post.mean + radius * post.variance.sqrt()).argmax())

    def ask(self, max_arms: int | None = None) -> Tensor:
        t = self.posterior.num_observations
        index = self._pick(self.schedule(t + 1), first=t == 0)
        return torch.tensor([index], device=self.problem.arms.device)

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        for index in chosen.tolist():
            self.posterior.append(index)
        self.posterior.set_rewards(rewards)

    def diagnostics(self) -> dict[str, float]:
        # the UCB argmax reads every arm's mean and variance: ~4 A flops per step
        scoring = 4.0 * self.posterior.num_points * self.posterior.num_observations
        return {"gflop": (self.posterior.flops + scoring) / 1e9}


class ExactBUCB(ExactUCB):
    r"""Exact GP-BUCB / GP-AUCB (Desautels, Krause, Burdick, JMLR 2014).

    Within a batch the mean is frozen and the variance conditions on the batch's
    earlier arms without their rewards. Batches have ``batch_size`` arms or, when it
    is None (GP-AUCB), grow while ``sum_{s in batch} log(1 + sd_{s-1}^2(x_s) / s2) <=
    log(max_variance_ratio)``, which bounds every arm's variance ratio by
    ``max_variance_ratio``; the arm that would break the bound starts the next batch.
    A batch holds at most ``max_arms`` arms (the ask's).
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        batch_size: int | None = None,
        max_variance_ratio: float = 2.0,
        max_batch_size: int | None = None,
        **settings: Any,
    ) -> None:
        r"""Args:
        batch_size: Fixed batch size; None for the adaptive rule.
        max_variance_ratio: Bound ``C >= 1`` of the adaptive rule (1: GP-UCB).
        max_batch_size: Cap on adaptive batches (None: no cap).
        settings: Those of :class:`ExactUCB`.
        """
        _check_batch_size(batch_size, "batch_size")
        _check_batch_size(max_batch_size, "max_batch_size")
        check_at_least(max_variance_ratio, "max_variance_ratio", 1.0)
        super().__init__(problem, horizon, generator, **settings)
        self.batch_size = batch_size
        self.max_variance_ratio = float(max_variance_ratio)
        self.max_batch_size = max_batch_size
        self.horizon = horizon

    def ask(self, max_arms: int | None = None) -> Tensor:
        post = self.posterior
        room = self.horizon - post.num_observations
        if max_arms is not None:
            room = min(room, max_arms)
        limit = min(self.batch_size or self.max_batch_size or room, room)
        budget = math.log(self.max_variance_ratio)
        noise = self.hyperparameters.noise
        radius = self.schedule(post.num_observations + 1)
        chosen: list[int] = []
        spent = 0.0
        while len(chosen) < limit:
            index = self._pick(radius, first=post.num_rewarded == 0 and not chosen)
            if self.batch_size is None:
                spent += math.log1p(float(post.variance[index]) / noise)
                if chosen and spent > budget:
                    break
            post.append(index)
            chosen.append(index)
        return torch.tensor(chosen, device=self.problem.arms.device)

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        self.posterior.set_rewards(rewards)
        self.posterior.discard_pending()
