r"""Arms added as a loop learns, for the searchers and samplers whose arms are
parameter values of a search space (the Ray Tune searchers, the Optuna samplers),
so that the search is not capped by the precision of its first Sobol arms:

- after every told trial, ``num_local`` candidates in a trust region around the
  best configuration (:class:`~botorch_sketch.generation.trust_region.TrustRegion`:
  a box stretched by the learned lengthscales that grows after improvements and
  shrinks after trials without one), so the search converges locally while the
  first arms keep it global;
- at each refit of the learned kernel, ``count`` points near the best arms at
  distances set by the lengthscales
  (:func:`~botorch_sketch.generation.refinement.refinement_points`).

Both only once the kernel has been fitted. After ``max(100, 20 d)`` told
trials, a restart of the trust region also starts a local phase
(:class:`~botorch_sketch.integrations.local_phase.LocalPhase`): an evolution
strategy from the best configuration whose points are asked in turn
(:meth:`ArmRefiner.next_arm`) until it converges. The points are snapped to the space's
domains; those outside the first arms' bounding box or already arms are dropped,
the others join the arm set and the loop (``add_arms``)."""

from __future__ import annotations

from typing import Any

import torch

from botorch_sketch.generation.refinement import best_arms, refinement_points
from botorch_sketch.generation.trust_region import TrustRegion
from botorch_sketch.generation.ucb_polish import ClosedFormUCB, maximize_ucb
from botorch_sketch.integrations.arm_space import RefinableArms, add_unit_points
from botorch_sketch.integrations.local_phase import LocalPhase
from botorch_sketch.integrations.loop_builder import StudyLoop
from botorch_sketch.utils.validation import check_bool, check_int

#: Configurations added near the best ones at each refit of a learned kernel: on
#: Hartmann-6 (2,048 Sobol arms, 100 trials, 4 in flight, seeds 0-4) 128 took
#: BBKB's mean simple regret from 0.76 to 0.25 and S-GP-TS's from 0.74 to 0.17
#: (the Ray Tune searchers).
DEFAULT_NUM_REFINED = 128

#: Trust-region candidates added after every told trial. Three seeds, 500 trials,
#: one in flight, uncapped refits (BBKBSampler / SGPTSSampler mean simple regret):
#: 8 against none took Levy-10 from 6.6 / 8.3 to 3.3 / 5.3 and left Hartmann-6 and
#: the mixed space as they were; 32 gave the same on Levy-10 (3.3 / 6.8) but led one
#: S-GP-TS seed of Hartmann-6 and two BBKB seeds of the mixed space into a local
#: optimum (0.04 against 2.2e-4, 0.07 against 0.02) at 2-3x the arms.
DEFAULT_NUM_LOCAL = 8

#: L-BFGS-B runs on a BBKB loop's BKB-UCB after every told trial, from the arms
#: of highest UCB, whose maxima join the arms: the UCB
#: maximized in the space, as ``GPSampler`` maximizes its own, not only over the
#: arms drawn so far; on spaces of at least :data:`POLISH_MIN_DIM` dimensions.
DEFAULT_NUM_POLISHED = 2

#: The fewest arm dimensions whose loops polish. bbob, 100 trials, 1 in flight
#: (docs/benchmark-history.md, "Polished UCB"): in 10-D polishing took the fraction of
#: targets solved after 50 / 100 trials from 0.042 / 0.069 to 0.076 / 0.105
#: (instance 1), in 5-D from 0.124 / 0.160 to 0.120 / 0.144 (instances 1-3): the
#: 2,048 first arms of a 5-D space and the trust region's leave little for it.
POLISH_MIN_DIM = 8

#: Most L-BFGS-B iterations of each polishing run.
POLISH_ITERATIONS = 10

#: Best arms the refined configurations are drawn around.
NUM_REFINEMENT_CENTERS = 4


class ArmRefiner:
    r"""Adds arms to a loop with a learned kernel as it learns: ``num_local`` in
    its trust region and ``num_polished`` maxima of its UCB (BBKB loops, see
    :data:`POLISH_MIN_DIM`) after each told trial, ``count`` near the best arms
    after each refit.

    Attributes:
        count: Arms drawn per refit (0: none).
        num_local: Trust-region arms drawn per told trial (0: none).
        num_polished: UCB maxima added per told trial (0: none).
        generator: The source of the draws.
        refined_at: The number of observations of the last refit refined after
            (None: none yet).
        region: The trust region (None until the first call).
        told: Rewards the trust region has counted.
        local: The local phases (None: off).

    Args:
        count: Arms drawn per refit (:data:`DEFAULT_NUM_REFINED`; 0: none).
        seed: Seed of the draws.
        num_local: Trust-region arms per told trial (:data:`DEFAULT_NUM_LOCAL`;
            0: none).
        local_phase: Whether restarts of the trust region start local phases.
        num_polished: L-BFGS-B runs on the UCB per told trial
            (:data:`DEFAULT_NUM_POLISHED`; 0: none).
    """

    def __init__(
        self,
        count: int = DEFAULT_NUM_REFINED,
        seed: int = 0,
        num_local: int = DEFAULT_NUM_LOCAL,
        local_phase: bool = True,
        num_polished: int = DEFAULT_NUM_POLISHED,
    ) -> None:
        self.count = check_int(count, "num_refined", 0)
        self.num_polished = check_int(num_polished, "num_polished", 0)
        self.num_local = check_int(num_local, "num_local", 0)
        self.local = LocalPhase() if check_bool(local_phase, "local_phase") else None
        check_int(seed, "seed", 0)
        self.generator = torch.Generator().manual_seed(seed)
        self.refined_at: int | None = None
        self.region: TrustRegion | None = None
        self.told = 0

    def refine(self, loop: StudyLoop, arms: RefinableArms) -> None:
        r"""After a tell to ``loop`` (a
        :class:`~botorch_sketch.generation.bbkb_loop.BBKB` or
        :class:`~botorch_sketch.generation.sgpts_loop.SGPTS` on ``arms.features``):
        count the new rewards in the trust region, then, once the kernel has been
        fitted, add its candidates, and the refined points if the loop refitted
        since the last call (none while a local phase runs and no other trial is
        in flight), and update the local phase."""
        refits = getattr(loop, "refits", None)
        if refits is None or not arms.refinable:
            return
        rewards = loop.rewards
        if self.region is None:
            self.region = TrustRegion(loop.kernel_inputs.shape[-1])
        spread = float(rewards.std()) if rewards.numel() > 1 else 0.0
        self.region.observe(rewards[self.told :], spread)
        self.told = rewards.numel()
        if refits.last is None or rewards.numel() == 0:
            return
        # a phase asks its own points; the loop picks only for trials beyond them
        if self.local is None or self.local.strategy is None or loop.pending.numel():
            self._add_candidates(loop, arms)
            self._add_polished(loop, arms)
        if self.local is not None:
            self.local.observe(loop, arms, self.region, self.generator)

    def _add_candidates(self, loop: StudyLoop, arms: RefinableArms) -> None:
        r"""The trust region's candidates, and the refined points if the loop
        refitted since the last call, as arms."""
        rewards = loop.rewards
        lengthscales = loop.covar_module.base_kernel.lengthscale
        unit = []
        if self.num_local:
            best = best_arms(loop.observed, rewards, 1)
            unit.append(
                self.region.candidates(
                    loop.kernel_inputs[best[0]],
                    lengthscales,
                    self.num_local,
                    self.generator,
                )
            )
        if self.count and loop.refits.last != self.refined_at:
            self.refined_at = loop.refits.last
            best = best_arms(loop.observed, rewards, NUM_REFINEMENT_CENTERS)
            unit.append(
                refinement_points(
                    loop.kernel_inputs[best], lengthscales, self.count, self.generator
                )
            )
        if unit:
            add_unit_points(loop, arms, torch.cat(unit))

    def _add_polished(self, loop: StudyLoop, arms: RefinableArms) -> None:
        r"""The maxima of the loop's BKB-UCB by L-BFGS-B from its ``num_polished``
        arms of highest UCB, as arms
        (:func:`~botorch_sketch.generation.ucb_polish.maximize_ucb`): BBKB loops on
        :data:`POLISH_MIN_DIM` dimensions or more. The UCB is the posterior's; the
        batch's greedy then counts the trials in flight among all arms."""
        if not self.num_polished or loop.kernel_inputs.shape[-1] < POLISH_MIN_DIM:
            return
        if not hasattr(loop, "ucb_scores") or loop.model is None:
            return
        scores = loop.ucb_scores()
        starts = scores.topk(min(self.num_polished, scores.numel())).indices
        ucb = ClosedFormUCB(loop.model, loop.ucb_radius)
        maxima = maximize_ucb(ucb, loop.kernel_inputs[starts], POLISH_ITERATIONS)
        add_unit_points(loop, arms, maxima)

    def next_arm(self, loop: StudyLoop, arms: RefinableArms) -> int | None:
        r"""The next arm the local phase asks ``loop`` for, a spare added to
        ``arms`` and ``loop`` if need be (None: none, the loop picks)."""
        if self.local is None:
            return None
        return self.local.next_arm(loop, arms, self.generator)

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume the draws exactly."""
        return {
            "count": self.count,
            "num_local": self.num_local,
            "num_polished": self.num_polished,
            "generator": self.generator.get_state(),
            "refined_at": self.refined_at,
            "region": None if self.region is None else self.region.state_dict(),
            "told": self.told,
            "local": None if self.local is None else self.local.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ArmRefiner:
        r"""The refiner saved by :meth:`state_dict`."""
        refiner = cls(
            state["count"],
            num_local=state["num_local"],
            local_phase=state.get("local") is not None,
            num_polished=state.get("num_polished", 0),  # saved before polishing: 0
        )
        refiner.generator.set_state(state["generator"])
        refiner.refined_at = state["refined_at"]
        refiner.told = check_int(state["told"], "state['told']", 0)
        if state["region"] is not None:
            refiner.region = TrustRegion(state["region"]["dim"])
            refiner.region.load_state_dict(state["region"])
        if state.get("local") is not None:
            refiner.local = LocalPhase.from_state_dict(state["local"])
        return refiner
