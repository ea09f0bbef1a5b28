r"""GP-ThreDS and its baseline IGP-UCB on a growing grid (Salgia, Vakili and Zhao,
NeurIPS 2021), as benchmark methods on boxes.

Settings are resolved per problem: the method's options, then :data:`PAPER_SETTINGS`
for the paper's problems, then generic defaults. Both use the benchmark's fixed kernel
(:class:`~benchmarks.policies.common.KernelHyperparameters`) and work
in unit-cube coordinates of ``problem.bounds``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from benchmarks.policies.common import (
    KernelHyperparameters,
    check_box,
    draw_seed,
)
from benchmarks.problems import Problem
from botorch_sketch.generation.options import GPThreDSOptions
from botorch_sketch.generation.threds import GPThreDS
from botorch_sketch.generation.threds_local import first_argmax, threds_radius
from botorch_sketch.models.incremental_exact import IncrementalExactGP
from botorch_sketch.utils.validation import check_int

#: Settings of the paper's experiments, by problem name.
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "threds_branin": {
        "f_range": (0.5, 1.2),
        "rkhs_bound": 0.5,
        "grid_points": 20,
        "grid_max": 80,
    },
    "threds_rosenbrock": {
        "f_range": (3.0, 12.0),
        "rkhs_bound": 2.0,
        "grid_points": 21,
        "grid_max": 50,
    },
}


def resolve_settings(problem: Problem, **given: Any) -> dict[str, Any]:
    r"""The settings ``given`` (None: not given) over :data:`PAPER_SETTINGS` for
    the problem over ``noise_std = problem.noise_std``."""
    settings: dict[str, Any] = {"noise_std": problem.noise_std}
    settings.update(PAPER_SETTINGS.get(problem.name, {}))
    settings.update({key: value for key, value in given.items() if value is not None})
    return settings


def exact_posterior(
    X: Tensor, y: Tensor, grid: Tensor, kernel: Kernel, noise: float
) -> tuple[Tensor, Tensor]:
    r"""Exact zero-mean GP posterior on ``grid``, computed from scratch.

    The values of BoTorch's ``SingleTaskGP`` (zero mean, fixed kernel and noise)
    without its ``A x A`` test covariance: ``O(n^3 + A n^2)`` time, ``O(A n)`` memory.

    Args:
        X: ``n x d`` observed points.
        y: ``n`` observations.
        grid: ``A x d`` points to score.
        kernel: GPyTorch kernel with fixed hyperparameters.
        noise: ``s2 > 0``.

    Returns:
        ``(mean, variance)``, each of shape ``A``.
    """
    with torch.no_grad():
        gram = kernel(X, X).to_dense()
        cross = kernel(X, grid).to_dense()
        prior_variance = kernel(grid, diag=True)
    gram = gram + noise * torch.eye(X.shape[0], dtype=X.dtype, device=X.device)
    chol = torch.linalg.cholesky(gram)
    V = torch.linalg.solve_triangular(chol, cross, upper=False)
    a = torch.linalg.solve_triangular(chol, y.unsqueeze(-1), upper=False).squeeze(-1)
    variance = (prior_variance - V.square().sum(dim=0)).clamp_min(0.0)
    return a @ V, variance


class _GPThreDS(GPThreDS):
    r"""GPThreDS with the benchmark's ``ask(max_arms)`` (one point) and
    ``diagnostics()``."""

    def ask(self, max_arms: int | None = None) -> Tensor:
        return super().ask()

    def diagnostics(self) -> dict[str, float]:
        return {
            "epoch": self.epoch,
            "threshold": self.threshold,
            "num_cubes": self.cubes.shape[0],
            "cube_level": self.level,
        }


def build_gp_threds(
    problem: Problem,
    horizon: int,
    generator: torch.Generator,
    *,
    mode: str = "cube",
    f_range: tuple[float, float] | None = None,
    rkhs_bound: float | None = None,
    noise_std: float | None = None,
    grid_points: int | None = None,
    lengthscale: float | None = None,
    outputscale: float | None = None,
    noise: float | None = None,
    cap: int | None = None,
    max_depth: int | None = None,
    delta: float | None = None,
    gamma: Callable[[int], float] | None = None,
    tol_coef: float | None = None,
    c_coef: float | None = None,
    walk_delta: float | None = None,
    readmit_after: int | None = None,
    reuse_observations: bool | None = None,
) -> GPThreDS:
    r"""GP-ThreDS (:class:`~botorch_sketch.generation.threds.GPThreDS`) for a run;
    mode ``"rwt"`` seeds its random first queries from ``generator``.

    Args:
        f_range: Interval believed to contain the maximum (required unless the
            problem is in :data:`PAPER_SETTINGS`).
        noise_std: Sub-Gaussian noise scale in the radius (default
            ``problem.noise_std``).
        lengthscale, outputscale, noise: Overrides of the problem's kernel.
        mode, rkhs_bound, grid_points, others: See
            :class:`~botorch_sketch.generation.options.GPThreDSOptions`; None keeps
            the paper's setting or the default. ``readmit_after`` and
            ``reuse_observations`` are extensions (label runs that use them).
    """
    check_box(problem, "gp-threds")
    s = resolve_settings(
        problem,
        f_range=f_range,
        rkhs_bound=rkhs_bound,
        noise_std=noise_std,
        grid_points=grid_points,
    )
    if "f_range" not in s:
        raise ValueError(
            f"Problem `{problem.name}` has no known f_range; pass `f_range` to "
            "gp-threds (GP-ThreDS has no safe default for it)."
        )
    hyper = KernelHyperparameters.from_problem(
        problem, lengthscale=lengthscale, outputscale=outputscale, noise=noise
    )
    extra = {
        "cap": cap,
        "max_depth": max_depth,
        "delta": delta,
        "gamma": gamma,
        "tol_coef": tol_coef,
        "c_coef": c_coef,
        "walk_delta": walk_delta,
        "readmit_after": readmit_after,
        "reuse_observations": reuse_observations,
    }
    # the generator's defaults for the settings neither given nor the paper's
    resolved = {key: s[key] for key in ("rkhs_bound", "grid_points") if key in s}
    options = GPThreDSOptions(
        f_range=s["f_range"],
        noise=hyper.noise,
        noise_std=s["noise_std"],
        mode=mode,
        **resolved,
        **{key: value for key, value in extra.items() if value is not None},
    )
    bounds = problem.bounds
    return _GPThreDS(
        bounds,
        options,
        covar_module=hyper.kernel(dtype=bounds.dtype, device=bounds.device),
        seed=draw_seed(generator),
    )


class IncrementalIGPUCBGrid:
    r"""IGP-UCB on a growing grid (the GP-ThreDS paper's baseline).

    The first query is a random point of the ``grid_start^d`` grid; after ``t``
    observations the next one maximizes ``mu + radius_t sigma`` (the paper's
    :func:`~botorch_sketch.generation.threds_local.threds_radius`) over the
    ``n_t^d`` grid, ``n_t = min(grid_start + t, grid_max)``, near-ties going to the
    lowest index. Once the grid stops growing, the posterior of its points is updated
    incrementally (``IncrementalExactGP``, ``O(A t)`` per step).
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        rkhs_bound: float | None = None,
        noise_std: float | None = None,
        delta: float = 1e-3,
        gamma: Callable[[int], float] = math.log,
        grid_start: int = 20,
        grid_max: int | None = None,
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise: float | None = None,
    ) -> None:
        r"""Args:
        rkhs_bound, noise_std, delta, gamma: Of the radius (defaults: the paper's
            or 0.5, ``problem.noise_std``, 1e-3, ``log``); ``0 < delta < 1``.
        grid_start: Points per dimension of the first grid (``>= 2``).
        grid_max: Largest points per dimension (default 80 or the paper's).
        lengthscale, outputscale, noise: Overrides of the problem's kernel.
        """
        if not 0.0 < delta < 1.0:
            raise ValueError(f"`delta` must lie in (0, 1), got {delta}.")
        check_int(grid_start, "grid_start", 2)
        self.delta, self.gamma, self.grid_start = delta, gamma, grid_start
        check_box(problem, "igp-ucb-incremental")
        s = resolve_settings(
            problem, rkhs_bound=rkhs_bound, noise_std=noise_std, grid_max=grid_max
        )
        self.grid_max = max(int(s.get("grid_max", 80)), self.grid_start)
        self.rkhs_bound = float(s.get("rkhs_bound", 0.5))
        self.noise_std = float(s["noise_std"])
        hyper = KernelHyperparameters.from_problem(
            problem, lengthscale=lengthscale, outputscale=outputscale, noise=noise
        )
        self.noise = hyper.noise
        self.bounds = problem.bounds
        factory = {"dtype": problem.bounds.dtype, "device": problem.bounds.device}
        self.covar_module = hyper.kernel(**factory)
        self._X = torch.empty(horizon, problem.dim, **factory)
        self._Y = torch.empty(horizon, 1, **factory)
        self.num_observations = 0
        first = torch.randint(self.grid_start, (problem.dim,), generator=generator)
        self._first = first.to(**factory).unsqueeze(0) / (self.grid_start - 1)
        self.grid_size = self.grid_start
        self._horizon = horizon
        self._gp: IncrementalExactGP | None = None

    def ask(self, max_arms: int | None = None) -> Tensor:
        t = self.num_observations
        if t == 0:
            return self._to_user(self._first)
        self.grid_size = min(self.grid_start + t, self.grid_max)
        grid = self._grid(self.grid_size)
        mean, variance = self._posterior(grid)
        radius = threds_radius(
            t, self.rkhs_bound, self.noise_std, self.delta, self.gamma
        )
        self._asked = first_argmax(mean + radius * variance.sqrt())
        self._asked_point = grid[self._asked]
        return self._to_user(self._asked_point.unsqueeze(0))

    def _grid(self, size: int) -> Tensor:
        r"""The ``size^d x d`` grid on the unit cube (end points included)."""
        axis = torch.linspace(0, 1, size, dtype=self._X.dtype).to(self._X.device)
        return torch.cartesian_prod(*([axis] * self._X.shape[1])).reshape(
            -1, self._X.shape[1]
        )

    def _posterior(self, grid: Tensor) -> tuple[Tensor, Tensor]:
        r"""``(mean, variance)`` on ``grid`` given all observations."""
        t = self.num_observations
        if self.grid_size < self.grid_max:
            X, y = self._X[:t], self._Y[:t, 0]
            return exact_posterior(X, y, grid, self.covar_module, self.noise)
        size = grid.shape[0]
        if self._gp is None:
            self._gp = IncrementalExactGP.from_kernel(
                torch.cat([grid, self._X[:t]]),
                self.covar_module,
                self.noise,
                capacity=self._horizon,
            )
            for i, y in enumerate(self._Y[:t, 0].tolist()):
                self._gp.observe(size + i, y)
        return self._gp.mean[:size], self._gp.variance[:size]

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        if self._gp is not None:
            expected = self._to_user(self._asked_point)
            width = self.bounds[1] - self.bounds[0]
            if (
                chosen.shape != (1, width.shape[0])
                or not ((chosen[0] - expected).abs() <= 1e-9 * width).all()
            ):
                raise ValueError(
                    "`chosen` must be the point returned by the last ask()."
                )
            self._gp.observe(self._asked, float(rewards.reshape(())))
        t = self.num_observations
        self._X[t] = (chosen[0] - self.bounds[0]) / (self.bounds[1] - self.bounds[0])
        self._Y[t] = rewards.reshape(())
        self.num_observations = t + 1

    def diagnostics(self) -> dict[str, float]:
        return {"grid_points": self.grid_size ** self._X.shape[1]}

    def _to_user(self, unit: Tensor) -> Tensor:
        return self.bounds[0] + unit * (self.bounds[1] - self.bounds[0])
