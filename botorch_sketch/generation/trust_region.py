r"""A trust region that follows the incumbent, for local candidates: a box around
the best observed point whose side grows after a run of improvements and halves
after a run of trials without one, restarting at its initial size once it has
shrunk below a floor (TuRBO: Eriksson et al., "Scalable Global Optimization via
Local Bayesian Optimization", NeurIPS 2019). The box is stretched per coordinate by
the learned lengthscales (normalized to a geometric mean of one), so it is long
where the objective varies slowly.

Candidates are drawn uniformly in the box, and, as TuRBO does in high dimension,
each coordinate is moved from the center only with probability ``min(1, 20 / d)``
(at least one coordinate moved), so that in ten or more dimensions most candidates
change a few coordinates of the incumbent.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.utils.validation import check_generator, check_int, check_matrix

#: Side of the box (in the unit cube, before the lengthscale stretch) at the start
#: and after a restart; the largest and the smallest sides (TuRBO's values).
INITIAL_LENGTH, MAX_LENGTH, MIN_LENGTH = 0.8, 1.6, 2.0**-7

#: Improvements in a row that double the side.
SUCCESS_TOLERANCE = 3

#: An improvement is a new best reward above the old one by more than this
#: fraction of the rewards' standard deviation (so the rule is the same in any
#: units of the rewards).
MIN_IMPROVEMENT = 1e-3

#: Expected number of coordinates a candidate moves (TuRBO's perturbation mask).
MOVED_COORDINATES = 20.0


class TrustRegion:
    r"""The side length and the success / failure counts of a trust region.

    Attributes:
        length: The side now, in ``[MIN_LENGTH, MAX_LENGTH]``.
        successes: Improvements in a row.
        failures: Trials without improvement in a row.
        best: The best reward seen (None before any).
        restarts: Times the side fell below :data:`MIN_LENGTH` and restarted.

    Args:
        dim: The dimension ``d``; ``max(4, d)`` trials without improvement
            halve the side.
    """

    def __init__(self, dim: int) -> None:
        self.dim = check_int(dim, "dim", 1)
        self.failure_tolerance = max(4, self.dim)
        self.length = INITIAL_LENGTH
        self.successes = self.failures = self.restarts = 0
        self.best: float | None = None

    def observe(self, rewards: Tensor, spread: float) -> None:
        r"""Count the trials of ``rewards`` (``b``, those told since the last
        call): one success if their best beats :attr:`best` by more than
        ``MIN_IMPROVEMENT * spread``, else ``b`` failures; then resize.

        Args:
            rewards: ``b >= 1`` new rewards (larger is better).
            spread: The standard deviation of all rewards so far (``>= 0``).
        """
        if rewards.numel() == 0:
            return
        new_best = float(rewards.max())
        if self.best is None:
            self.best = new_best
            return
        if new_best > self.best + MIN_IMPROVEMENT * spread:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + rewards.numel()
        self.best = max(self.best, new_best)
        if self.successes >= SUCCESS_TOLERANCE:
            self.length, self.successes = min(2 * self.length, MAX_LENGTH), 0
        elif self.failures >= self.failure_tolerance:
            self.length, self.failures = self.length / 2, 0
            if self.length < MIN_LENGTH:
                self.length, self.restarts = INITIAL_LENGTH, self.restarts + 1

    def candidates(
        self,
        center: Tensor,
        lengthscales: Tensor,
        count: int,
        generator: torch.Generator,
    ) -> Tensor:
        r"""``count`` points of the box around ``center``, inside the unit cube.

        The box has sides ``length * l_i / prod(l)^{1/d}`` (``l`` the
        lengthscales); a point takes a uniform draw of the box in each coordinate
        moved (each with probability ``min(1, 20 / d)``, at least one) and the
        center's value in the others. ``O(count d)``.

        Args:
            center: ``d`` point of the unit cube (the incumbent).
            lengthscales: ``d`` (or one) positive lengthscales.
            count: Points to draw (``>= 1``).
            generator: The source of every draw (on the CPU).

        Returns:
            ``count x d`` points in ``[0, 1]^d``, in ``center``'s dtype and device.
        """
        check_matrix(center.unsqueeze(0), "center", num_cols=self.dim)
        check_int(count, "count", 1)
        check_generator(generator)
        scales = lengthscales.detach().reshape(-1).to(center)
        if scales.numel() not in (1, self.dim) or not bool((scales > 0).all()):
            raise ValueError(
                f"`lengthscales` must be one or {self.dim} positive values."
            )
        sides = self.length * scales / scales.log().mean().exp()
        low = (center - sides / 2).clamp(0.0, 1.0)
        high = (center + sides / 2).clamp(0.0, 1.0)
        uniform = torch.rand(count, self.dim, generator=generator, dtype=torch.float64)
        moved = torch.rand(count, self.dim, generator=generator) < min(
            1.0, MOVED_COORDINATES / self.dim
        )
        forced = torch.randint(self.dim, (count,), generator=generator)
        moved[torch.arange(count), forced] |= ~moved.any(-1)
        points = low + (high - low) * uniform.to(center)
        return torch.where(moved.to(center.device), points, center)

    def state_dict(self) -> dict[str, Any]:
        r"""The dimension, the side, the counts and the best reward."""
        return {
            "dim": self.dim,
            "length": self.length,
            "successes": self.successes,
            "failures": self.failures,
            "restarts": self.restarts,
            "best": self.best,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (of a region of the same dimension)."""
        if state["dim"] != self.dim:
            raise ValueError(f"`state['dim']` must be {self.dim}, got {state['dim']}.")
        length = float(state["length"])
        if not MIN_LENGTH <= length <= MAX_LENGTH or not math.isfinite(length):
            raise ValueError(f"`state['length']` out of range: {length}.")
        self.length = length
        self.successes = check_int(state["successes"], "state['successes']", 0)
        self.failures = check_int(state["failures"], "state['failures']", 0)
        self.restarts = check_int(state["restarts"], "state['restarts']", 0)
        self.best = None if state["best"] is None else float(state["best"])
