r"""The local phase of the searchers and samplers: once the model-guided search
has settled in a basin, an evolution strategy takes the trials over and converges
there, where a stationary global model stalls (curved valleys, ill-conditioned or
rotated basins).

A phase starts when the trust region (:mod:`~botorch_sketch.generation.trust_region`)
restarts, after at least :func:`trials_before_phase` told trials: CMA-ES
(:class:`~botorch_sketch.generation.evolution_strategy.EvolutionStrategy`) from the
best arm, its first step and covariance those of the best arms around it
(:func:`warm_start`, after the warm-started CMA-ES of Nomura, Watanabe, Akimoto,
Ozaki and Onishi, AAAI 2021), so a basin the model has narrowed down is not searched
again at a coarse scale. Each generation's points become arms (snapped to the
space's domains); the arms not evaluated yet are asked in turn, the others give the
strategy their observed reward without a trial, and every result is also told to
the loop, so the model keeps learning. When the strategy stops (converged, or no
longer a local search) the phase ends and the model picks again, until the next
restart starts a phase from the best arm then, with a population twice the last
one's and a large isotropic first step, :data:`RESTART_STEP` (IPOP-CMA-ES: Auger
and Hansen, "A Restart CMA Evolution Strategy With Increasing Population Size",
CEC 2005): the best arms then crowd the basin the last phase converged in, so a
warm start would search it again at the scale it ended with.

Measured on COCO's bbob suite: docs/benchmark-history.md, "The local phase: CMA-ES
after the model, 1,000 trials".
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.generation.evolution_strategy import EvolutionStrategy
from botorch_sketch.generation.refinement import best_arms
from botorch_sketch.generation.trust_region import TrustRegion
from botorch_sketch.integrations.arm_space import RefinableArms, add_unit_points
from botorch_sketch.integrations.loop_builder import StudyLoop

#: Told trials before the first local phase, per dimension and at least (the
#: model's search alone until then): 100 in 5-d, 200 in 10-d.
TRIALS_PER_DIMENSION, LOCAL_PHASE_AFTER = 20, 100

#: Share of the observed arms, best first, whose spread around the best one gives
#: a phase its first step and covariance (at least ``2 d + 1`` arms).
WARM_START_SHARE = 0.1

#: Bounds of the first step, in the unit cube of the arms' bounding box.
MIN_INITIAL_STEP, MAX_INITIAL_STEP = 1e-6, 0.3

#: Share of the identity in the first covariance (the rest: the arms' spread).
ISOTROPIC_SHARE = 0.1

#: First step of every phase after the first, with the identity as covariance (in
#: the unit cube): IPOP restarts at a global scale. Warm-started instead, restarts
#: began at the scale the last phase ended with (``sigma`` near ``1e-6``) and spent
#: up to half of 5,000 trials there (docs/benchmark-history.md, "Restarts of the
#: local phase").
RESTART_STEP = 0.3

#: Spare points a generation may add, as a share of its population, while its
#: points are all asked and some still in flight: they keep workers on the
#: strategy's distribution (as Optuna's ``CmaEsSampler`` does) instead of the
#: model's picks; the update takes ``lambda`` told points, the earliest drawn.
#: With 8 in flight (bbob 5-D, 72 runs, 1,000 trials) half a population solved
#: 0.304 of the targets, a whole one 0.292, none 0.233 (docs/benchmark-history.md).
MAX_SPARE_SHARE = 0.5

#: Generations drawn in one call at most when every point lands on an evaluated
#: arm (a coarse discrete space): the strategy then waits for the next tell.
MAX_FREE_GENERATIONS = 100


class LocalPhase:
    r"""The evolution strategy of the current local phase and the arms of its
    generation.

    Attributes:
        strategy: The running strategy (None between phases).
        phases: Phases started so far.
        restarts_seen: The trust region's restarts when the last phase started
            or ended (a later restart starts the next one).
        queue: Arms of the generation to ask, in order.
    """

    def __init__(self) -> None:
        self.strategy: EvolutionStrategy | None = None
        self.phases = self.restarts_seen = 0
        self.queue: list[int] = []
        self._points = torch.empty(0, 0, dtype=torch.float64)  # the generation
        self._arms: list[int | None] = []  # the arm of each point
        self._rewards: list[float | None] = []  # each point's reward, once known

    def next_arm(
        self, loop: StudyLoop, arms: RefinableArms, generator: torch.Generator
    ) -> int | None:
        r"""The next arm of the generation to evaluate, skipping those ``loop``
        already has pending or observed (another worker's trials); once the
        generation is all asked but not all told (other trials in flight), a
        spare point of the same distribution, up to :data:`MAX_SPARE_SHARE` of a
        population. None: none left, let the model pick."""
        while True:
            while self.queue:
                arm = self.queue.pop(0)
                pending = bool((loop.pending == arm).any())
                if not (pending or bool((loop.observed == arm).any())):
                    return arm
            if not self._draw_spare(loop, arms, generator):
                return None

    def _draw_spare(
        self, loop: StudyLoop, arms: RefinableArms, generator: torch.Generator
    ) -> bool:
        r"""Add one more point of the running strategy's distribution to the
        generation (queued unless its arm is evaluated); False when no phase runs
        or the generation holds its spares already."""
        strategy = self.strategy
        population = strategy.population if strategy else 0
        limit = population + math.floor(MAX_SPARE_SHARE * population)
        if len(self._arms) >= limit:
            return False
        point = strategy.ask(1, generator)
        self._points = torch.cat([self._points, point])
        self._arms += add_unit_points(loop, arms, point)
        self._rewards.append(None)
        self._collect(loop)
        if self._rewards[-1] is None and self._arms[-1] is not None:
            self.queue.append(self._arms[-1])
        return True

    def observe(
        self,
        loop: StudyLoop,
        arms: RefinableArms,
        region: TrustRegion,
        generator: torch.Generator,
    ) -> None:
        r"""After a tell to ``loop`` (its kernel fitted): give the generation the
        rewards of its arms, update the strategy once all are known, start or end
        a phase."""
        if self.strategy is not None:
            self._collect(loop)
        elif (
            loop.rewards.numel() >= trials_before_phase(region.dim)
            and region.restarts > self.restarts_seen
        ):
            self._start(loop)
        else:
            return
        self._advance(loop, arms, generator)
        self.restarts_seen = region.restarts

    def _start(self, loop: StudyLoop) -> None:
        r"""A strategy at the best arm, its population doubled per phase before:
        the first warm-started from the best :data:`WARM_START_SHARE` of the
        observed arms, the next ones at :data:`RESTART_STEP`."""
        dim = loop.kernel_inputs.shape[-1]
        population = (4 + math.floor(3 * math.log(dim))) * 2**self.phases
        count = 1  # a restart needs the best arm only
        if self.phases == 0:
            count = max(2 * dim + 1, int(WARM_START_SHARE * loop.rewards.numel()))
        best = best_arms(loop.observed, loop.rewards, count)
        points = loop.kernel_inputs[best].to(torch.float64).cpu()
        sigma, covariance = (
            warm_start(points) if self.phases == 0 else (RESTART_STEP, None)
        )
        self.strategy = EvolutionStrategy(points[0], sigma, covariance, population)
        self.phases += 1

    def _collect(self, loop: StudyLoop) -> None:
        r"""The reward of every point whose arm is now observed (its mean reward),
        or the worst reward so far if its arm failed or could not be added."""
        worst = float(loop.rewards.min())
        failed = set(loop.failed.tolist())
        for position, arm in enumerate(self._arms):
            if self._rewards[position] is not None:
                continue
            told = loop.observed == arm if arm is not None else None
            if told is not None and bool(told.any()):
                self._rewards[position] = float(loop.rewards[told].mean())
            elif arm is None or arm in failed:
                self._rewards[position] = worst

    def _advance(
        self, loop: StudyLoop, arms: RefinableArms, generator: torch.Generator
    ) -> None:
        r"""While ``lambda`` points of the generation are told: update the
        strategy with the ``lambda`` told ones drawn first (independent draws of
        one distribution, spares or not), end the phase if the strategy stops,
        else draw the next generation."""
        for _ in range(MAX_FREE_GENERATIONS):
            population = self.strategy.population
            known = [i for i, reward in enumerate(self._rewards) if reward is not None]
            if self._rewards and len(known) < population:
                return
            if self._rewards:  # the first population points told, spares or not
                chosen = known[:population]
                rewards = [self._rewards[i] for i in chosen]
                self.strategy.tell(
                    self._points[chosen], torch.tensor(rewards, dtype=torch.float64)
                )
            if self.strategy.stopped:
                self.strategy, self.queue = None, []
                self._points, self._arms, self._rewards = self._points[:0], [], []
                return
            self._points = self.strategy.ask(self.strategy.population, generator)
            self._arms = add_unit_points(loop, arms, self._points)
            self._rewards = [None] * len(self._arms)
            self._collect(loop)
            unknown = [
                arm
                for arm, reward in zip(self._arms, self._rewards, strict=True)
                if reward is None
            ]
            self.queue = list(dict.fromkeys(unknown))

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume exactly."""
        return {
            "strategy": None if self.strategy is None else self.strategy.state_dict(),
            "phases": self.phases,
            "restarts_seen": self.restarts_seen,
            "queue": list(self.queue),
            "points": self._points.clone(),
            "arms": list(self._arms),
            "rewards": list(self._rewards),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> LocalPhase:
        r"""The phase saved by :meth:`state_dict`."""
        phase = cls()
        if state["strategy"] is not None:
            phase.strategy = EvolutionStrategy.from_state_dict(state["strategy"])
        phase.phases, phase.restarts_seen = state["phases"], state["restarts_seen"]
        phase.queue = list(state["queue"])
        phase._points = state["points"].clone()
        phase._arms, phase._rewards = list(state["arms"]), list(state["rewards"])
        return phase


def trials_before_phase(dim: int) -> int:
    r"""Told trials before a local phase may start in ``dim`` dimensions:
    ``max(LOCAL_PHASE_AFTER, TRIALS_PER_DIMENSION * dim)``."""
    return max(LOCAL_PHASE_AFTER, TRIALS_PER_DIMENSION * dim)


def warm_start(points: Tensor) -> tuple[float, Tensor]:
    r"""The first step and covariance of a strategy at ``points[0]`` (the best)
    from the spread of the others around it: with ``S = (1 / (n - 1))
    sum_{i >= 1} (x_i - x_0)(x_i - x_0)^T`` and ``s^2 = tr(S) / d`` (the mean
    variance), ``sigma = s`` clipped to ``[MIN_INITIAL_STEP, MAX_INITIAL_STEP]``
    and ``C = (1 - a) S / s^2 + a I`` with ``a`` :data:`ISOTROPIC_SHARE`, so that a
    direction the points share (a category, an integer) stays searchable.

    Args:
        points: ``n x d`` points of the unit cube, best first.

    Returns:
        ``sigma`` and the ``d x d`` covariance ``C`` (the largest step and the
        identity for fewer than two distinct points).
    """
    dim = points.shape[-1]
    offsets = points[1:] - points[0]
    spread = offsets.T @ offsets / max(offsets.shape[0], 1)
    variance = float(spread.trace()) / dim
    identity = torch.eye(dim, dtype=points.dtype)
    if variance <= 0:
        return MAX_INITIAL_STEP, identity
    sigma = min(max(math.sqrt(variance), MIN_INITIAL_STEP), MAX_INITIAL_STEP)
    shape = (1 - ISOTROPIC_SHARE) * spread / variance + ISOTROPIC_SHARE * identity
    return sigma, shape
