r"""A covariance matrix adaptation evolution strategy (CMA-ES) on the unit cube,
for the local phase of the samplers: once a model-guided search has found a basin,
a search distribution ``N(m, sigma^2 C)`` that learns the basin's scale and
orientation from ranked rewards converges where a stationary global model does not
(curved valleys, ill-conditioned and rotated basins).

The update is the one of Hansen, "The CMA Evolution Strategy: A Tutorial"
(arXiv:1604.00772, 2016), with its default parameters (Table 1): weighted
recombination of the ``mu = lambda / 2`` best, cumulative step-size adaptation,
rank-one and rank-``mu`` covariance updates, and negative weights for the worst
half (active CMA). Points outside the cube are drawn again (up to
:data:`MAX_REDRAWS` times) and then clipped to it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.utils.validation import (
    check_finite,
    check_generator,
    check_int,
    check_matrix,
    check_positive,
)

#: Draws of an out-of-cube point before it is clipped to the cube.
MAX_REDRAWS = 100

#: Smallest eigenvalue kept in the covariance (smaller ones, rounding, are raised).
MIN_EIGENVALUE = 1e-16

#: The strategy stops (:attr:`EvolutionStrategy.stopped`) when its largest step,
#: ``sigma sqrt(max eig C)``, is below this (in the unit cube), or when ``C`` is
#: conditioned worse than :data:`MAX_CONDITION`.
MIN_STEP, MAX_CONDITION = 1e-12, 1e14

#: ... or when that step is longer than this many times the cube's diagonal
#: ``sqrt(d)``: the search is no longer local (a basin on a face or corner of the
#: cube pulls the mean outside and ``sigma`` grows without bound; most draws then
#: need a redraw). The tutorial's ``TolUpSigma`` in the cube's units.
MAX_STEP_IN_DIAGONALS = 1.0

#: Largest change of ``log sigma`` in one generation, as in Hansen's reference
#: ``purecma``: points clipped onto a face of the cube are no draws of
#: ``N(m, sigma^2 C)``, and once ``C`` is nearly singular across that face
#: (eigenvalues near ``1e-12``) their whitened steps, and the path's norm, reach
#: ``1e6``; uncapped, ``exp`` then overflows (bbob f5 in 10-D, a corner optimum).
MAX_LOG_STEP_CHANGE = 1.0

#: ... or when the rewards of the last ``10 + ceil(30 d / lambda)`` generations
#: (their best and worst) span at most this fraction of their largest magnitude:
#: the tutorial's ``TolFun`` (``1e-12``), made relative because rewards come in
#: the user's units. Flat generations (a plateau, or every point clipped onto one
#: corner of the cube) rank their points arbitrarily and teach the strategy
#: nothing.
FLAT_REWARDS = 1e-12


class EvolutionStrategy:
    r"""CMA-ES maximizing rewards on ``[0, 1]^d``, ``O(lambda d^2 + d^3)`` per
    generation.

    Attributes:
        mean: ``d`` center of the search distribution ``m``.
        sigma: Step size.
        covariance: ``d x d`` covariance ``C`` (the distribution is
            ``N(m, sigma^2 C)``).
        population: Points per generation ``lambda``.
        generation: Updates made.

    Args:
        mean: ``d`` start in the unit cube.
        sigma: Initial step size (``> 0``, in the cube's units).
        covariance: ``d x d`` positive definite initial ``C`` (identity if None),
            e.g. the squared lengthscales of a fitted kernel on its diagonal.
        population: ``lambda >= 2`` (default ``4 + floor(3 ln d)``).
    """

    def __init__(
        self,
        mean: Tensor,
        sigma: float,
        covariance: Tensor | None = None,
        population: int | None = None,
    ) -> None:
        mean = check_finite(mean.detach().to(torch.float64).reshape(-1), "mean")
        dim = mean.numel()
        if dim == 0 or not bool(((mean >= 0) & (mean <= 1)).all()):
            raise ValueError("`mean` must be a non-empty point of the unit cube.")
        check_positive(sigma, "sigma")
        if covariance is None:
            covariance = torch.eye(dim, dtype=torch.float64)
        covariance = check_matrix(covariance, "covariance", num_cols=dim)
        covariance = covariance.detach().to(torch.float64)
        if covariance.shape[0] != dim or not bool(
            torch.linalg.eigvalsh((covariance + covariance.T) / 2).min() > 0
        ):
            raise ValueError(f"`covariance` must be {dim} x {dim} positive definite.")
        if population is None:
            population = 4 + math.floor(3 * math.log(dim))
        self.population = check_int(population, "population", 2)
        self.mean, self.sigma = mean.clone(), float(sigma)
        self.covariance = (covariance + covariance.T) / 2
        self.generation = 0
        self._path_sigma = torch.zeros(dim, dtype=torch.float64)
        self._path_c = torch.zeros(dim, dtype=torch.float64)
        #: The best and worst reward of each of the last generations (at most
        #: :attr:`history_length`), oldest first.
        self.history: list[tuple[float, float]] = []
        self._set_parameters(dim)

    @property
    def history_length(self) -> int:
        r"""Generations whose rewards :attr:`stopped` compares:
        ``10 + ceil(30 d / lambda)``."""
        return 10 + math.ceil(30 * self.dim / self.population)

    def _set_parameters(self, dim: int) -> None:
        r"""The weights and learning rates of the tutorial's Table 1."""
        lam, mu = self.population, self.population // 2
        ranks = torch.arange(1, lam + 1, dtype=torch.float64)
        raw = math.log((lam + 1) / 2) - ranks.log()
        mu_eff = float(raw[:mu].sum() ** 2 / (raw[:mu] ** 2).sum())
        mu_eff_minus = float(raw[mu:].sum() ** 2 / (raw[mu:] ** 2).sum())
        c1 = 2 / ((dim + 1.3) ** 2 + mu_eff)
        cmu = min(1 - c1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((dim + 2) ** 2 + mu_eff))
        negative_scale = min(
            1 + c1 / cmu,
            1 + 2 * mu_eff_minus / (mu_eff + 2),
            (1 - c1 - cmu) / (dim * cmu),
        )
        positive = raw.clamp(min=0)
        negative = raw.clamp(max=0)
        self._weights = positive / positive.sum() + negative_scale * negative / (
            -negative.sum()
        )
        self._mu, self._mu_eff = mu, mu_eff
        self._c1, self._cmu = c1, cmu
        self._c_sigma = (mu_eff + 2) / (dim + mu_eff + 5)
        self._d_sigma = (
            1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (dim + 1)) - 1) + self._c_sigma
        )
        self._c_c = (4 + mu_eff / dim) / (dim + 4 + 2 * mu_eff / dim)
        self._chi = math.sqrt(dim) * (1 - 1 / (4 * dim) + 1 / (21 * dim**2))

    @property
    def dim(self) -> int:
        return self.mean.numel()

    def _eigen(self) -> tuple[Tensor, Tensor]:
        r"""``C = B diag(D^2) B^T``: the eigenvectors ``B`` and the square roots
        ``D`` of the eigenvalues (raised to :data:`MIN_EIGENVALUE`)."""
        values, vectors = torch.linalg.eigh(self.covariance)
        return vectors, values.clamp(min=MIN_EIGENVALUE).sqrt()

    def ask(self, count: int, generator: torch.Generator) -> Tensor:
        r"""``count`` draws of ``N(m, sigma^2 C)`` in the unit cube (redrawn while
        outside, at most :data:`MAX_REDRAWS` times, then clipped).

        Args:
            count: Points to draw (``>= 1``; a generation is :attr:`population`).
            generator: The source of every draw (on the CPU).

        Returns:
            ``count x d`` points in ``[0, 1]^d`` (float64).
        """
        check_int(count, "count", 1)
        check_generator(generator)
        vectors, roots = self._eigen()
        points = torch.empty(count, self.dim, dtype=torch.float64)
        todo = torch.arange(count)
        for _ in range(MAX_REDRAWS):
            normal = torch.randn(
                todo.numel(), self.dim, generator=generator, dtype=torch.float64
            )
            points[todo] = self.mean + self.sigma * (normal * roots) @ vectors.T
            outside = ((points[todo] < 0) | (points[todo] > 1)).any(-1)
            todo = todo[outside]
            if todo.numel() == 0:
                break
        return points.clamp(0.0, 1.0)

    def tell(self, points: Tensor, rewards: Tensor) -> None:
        r"""One generation's update from ``points`` (``lambda x d``, e.g. from
        :meth:`ask`) and their ``rewards`` (``lambda``, larger is better).

        With ``y_i = (x_{i:lambda} - m) / sigma`` ranked best first and
        ``<y> = sum_{i <= mu} w_i y_i``: ``m += sigma <y>``; the evolution paths
        ``p_sigma`` (through ``C^{-1/2}``) and ``p_c`` accumulate ``<y>``;
        ``sigma *= exp(min(1, c_sigma / d_sigma (|p_sigma| / E|N(0, I)| - 1)))``
        (:data:`MAX_LOG_STEP_CHANGE`);
        ``C <- (1 + c_1 delta - c_1 - c_mu sum w) C + c_1 p_c p_c^T
        + c_mu sum w_i^o y_i y_i^T``.
        """
        points = check_matrix(points, "points", num_cols=self.dim).to(torch.float64)
        if points.shape[0] != self.population:
            raise ValueError(
                f"`points` must have {self.population} rows (one generation), "
                f"got {points.shape[0]}."
            )
        rewards = check_finite(rewards.detach().to(torch.float64), "rewards")
        if rewards.shape != (self.population,):
            raise ValueError(f"`rewards` must have shape ({self.population},).")
        self.history = [*self.history, (float(rewards.max()), float(rewards.min()))]
        self.history = self.history[-self.history_length :]
        vectors, roots = self._eigen()
        steps = points[rewards.argsort(descending=True, stable=True)] - self.mean
        steps = steps / self.sigma
        step = self._weights[: self._mu] @ steps[: self._mu]
        self.mean = self.mean + self.sigma * step
        whiten = vectors @ torch.diag(1 / roots) @ vectors.T  # C^{-1/2}
        c_sigma, c_c, c1, cmu = self._c_sigma, self._c_c, self._c1, self._cmu
        self._path_sigma = (1 - c_sigma) * self._path_sigma + math.sqrt(
            c_sigma * (2 - c_sigma) * self._mu_eff
        ) * (whiten @ step)
        norm = float(self._path_sigma.norm())
        self.sigma *= math.exp(
            min(MAX_LOG_STEP_CHANGE, c_sigma / self._d_sigma * (norm / self._chi - 1))
        )
        self.generation += 1
        fresh = math.sqrt(1 - (1 - c_sigma) ** (2 * self.generation))
        stalled = norm / fresh >= (1.4 + 2 / (self.dim + 1)) * self._chi
        self._path_c = (1 - c_c) * self._path_c
        if not stalled:
            self._path_c += math.sqrt(c_c * (2 - c_c) * self._mu_eff) * step
        delta = c_c * (2 - c_c) if stalled else 0.0
        whitened_norms = (steps @ whiten).square().sum(-1).clamp(min=MIN_EIGENVALUE)
        weights = torch.where(
            self._weights >= 0, self._weights, self._weights * self.dim / whitened_norms
        )
        covariance = (
            (1 + c1 * delta - c1 - cmu * float(self._weights.sum())) * self.covariance
            + c1 * torch.outer(self._path_c, self._path_c)
            + cmu * (steps.T * weights) @ steps
        )
        self.covariance = (covariance + covariance.T) / 2

    @property
    def stopped(self) -> bool:
        r"""Whether the search is over: converged (the largest step ``sigma
        sqrt(max eig C)`` below :data:`MIN_STEP`, or the rewards of the last
        :attr:`history_length` generations flat, :data:`FLAT_REWARDS`),
        degenerate (``C``'s condition number above :data:`MAX_CONDITION`) or no
        longer local (the step above :data:`MAX_STEP_IN_DIAGONALS` diagonals)."""
        _, roots = self._eigen()
        condition = float((roots.max() / roots.min()) ** 2)
        step = self.sigma * float(roots.max())
        global_step = step > MAX_STEP_IN_DIAGONALS * math.sqrt(self.dim)
        converged = step < MIN_STEP or self._flat()
        return converged or condition > MAX_CONDITION or global_step

    def _flat(self) -> bool:
        r"""Whether the last :attr:`history_length` generations' rewards span at
        most :data:`FLAT_REWARDS` of their largest magnitude."""
        if len(self.history) < self.history_length:
            return False
        values = [value for pair in self.history for value in pair]
        span = max(values) - min(values)
        return span <= FLAT_REWARDS * max(abs(value) for value in values)

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume: the distribution, the paths, the counts."""
        return {
            "mean": self.mean.clone(),
            "sigma": self.sigma,
            "covariance": self.covariance.clone(),
            "population": self.population,
            "generation": self.generation,
            "path_sigma": self._path_sigma.clone(),
            "path_c": self._path_c.clone(),
            "history": [list(pair) for pair in self.history],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> EvolutionStrategy:
        r"""The strategy saved by :meth:`state_dict`."""
        strategy = cls(
            state["mean"], state["sigma"], state["covariance"], state["population"]
        )
        strategy.generation = check_int(state["generation"], "state['generation']", 0)
        strategy._path_sigma = state["path_sigma"].clone()
        strategy._path_c = state["path_c"].clone()
        strategy.history = [(best, worst) for best, worst in state.get("history", [])]
        return strategy
