r"""Pieces shared by the benchmark policies: the fixed kernel hyperparameters, the
confidence-radius schedules and the incremental exact posterior over a finite arm set.

Radii are on the Bayesian scale: the index is ``mu(x) + bayes_radius_t * sigma(x)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch import Tensor

from benchmarks.problems import Problem
from botorch_sketch.models.incremental_exact import IncrementalExactGP
from botorch_sketch.models.kernel_columns import KernelColumns
from botorch_sketch.utils.validation import check_int, check_matrix, check_positive

#: Constant Bayesian-scale radius of a benchmark policy given none (the library's
#: own default is ``DEFAULT_BAYES_RADIUS``).
BENCHMARK_BAYES_RADIUS = 1.0


@dataclass(frozen=True)
class KernelHyperparameters:
    r"""Fixed hyperparameters of ``ScaleKernel(RBFKernel())`` plus Gaussian noise of
    variance ``noise`` (the ridge ``lambda``), shared by every GP-based policy."""

    lengthscale: float
    outputscale: float
    noise: float

    def __post_init__(self) -> None:
        check_positive(self.lengthscale, "lengthscale")
        check_positive(self.outputscale, "outputscale")
        check_positive(self.noise, "noise")

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        *,
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise: float | None = None,
    ) -> KernelHyperparameters:
        r"""Read ``problem.hyperparameters``; explicit arguments take precedence.

        ``"lengthscale"`` is required unless given, ``"outputscale"`` defaults to 1
        and ``"noise"`` to ``problem.noise_std ** 2``.
        """
        suggested = problem.hyperparameters
        if lengthscale is None:
            if "lengthscale" not in suggested:
                raise ValueError(
                    f"Problem `{problem.name}` suggests no lengthscale; pass "
                    "`lengthscale` to the policy."
                )
            lengthscale = suggested["lengthscale"]
        if outputscale is None:
            outputscale = suggested.get("outputscale", 1.0)
        if noise is None:
            noise = suggested.get("noise", problem.noise_std**2)
        return cls(float(lengthscale), float(outputscale), float(noise))

    def kernel(
        self, *, dtype: torch.dtype = torch.float64, device: torch.device | None = None
    ) -> ScaleKernel:
        r"""Return a ``ScaleKernel(RBFKernel())`` with these values, gradients off."""
        # GPyTorch stores values through a softplus; set them as tensors of the final
        # dtype, since a float32 round trip would perturb float64 values by ~1e-7.
        kernel = ScaleKernel(RBFKernel()).to(dtype=dtype, device=device)
        factory = {"dtype": dtype, "device": device}
        kernel.base_kernel.lengthscale = torch.tensor(self.lengthscale, **factory)
        kernel.outputscale = torch.tensor(self.outputscale, **factory)
        return kernel.requires_grad_(False)


def make_radius_schedule(
    bayes_radius: float | str = BENCHMARK_BAYES_RADIUS,
    *,
    num_arms: int | None = None,
    delta: float = 0.05,
) -> Callable[[int], float]:
    r"""Return ``t -> bayes_radius_t``, the radius of the ``t``-th decision.

    Args:
        bayes_radius: A positive constant, or ``"srinivas"`` for GP-UCB's finite-arm
            theory value (Srinivas et al., 2010, Theorem 1),
            ``sqrt(2 log(A t^2 pi^2 / (6 delta)))`` with ``A`` arms.
        num_arms: ``A``, required by ``"srinivas"``.
        delta: Confidence level of ``"srinivas"``, in ``(0, 1)``.

    Returns:
        A callable mapping ``t >= 1`` to a positive radius.
    """
    if isinstance(bayes_radius, str):
        if bayes_radius != "srinivas":
            raise ValueError(
                f"`bayes_radius` must be a number or 'srinivas', got {bayes_radius!r}."
            )
        if num_arms is None:
            raise ValueError(
                "`num_arms` (>= 1) is required by bayes_radius='srinivas'."
            )
        check_int(num_arms, "num_arms", 1)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"`delta` must lie in (0, 1), got {delta}.")
        log_term = math.log(num_arms * math.pi**2 / (6.0 * delta))
        return lambda t: math.sqrt(2.0 * (log_term + 2.0 * math.log(max(t, 1))))
    value = check_positive(bayes_radius, "bayes_radius")
    return lambda t: value


class IncrementalExactPosterior(IncrementalExactGP):
    r"""Exact GP posterior of every arm under the benchmark's fixed kernel:
    :class:`~botorch_sketch.models.incremental_exact.IncrementalExactGP` (``O(A t)``
    per observation) with kernel columns in closed form from cached scaled arms."""

    def __init__(
        self, arms: Tensor, hyperparameters: KernelHyperparameters, capacity: int
    ) -> None:
        r"""Start from the prior on ``A x d`` ``arms``, for at most ``capacity``
        observations."""
        check_matrix(arms, "arms")
        if not isinstance(hyperparameters, KernelHyperparameters):
            raise TypeError("`hyperparameters` must be a KernelHyperparameters.")
        self.arms = arms
        self.hyperparameters = hyperparameters
        self._columns = KernelColumns(
            hyperparameters.kernel(dtype=arms.dtype, device=arms.device), arms
        )
        prior_variance = arms.new_full((arms.shape[0],), hyperparameters.outputscale)
        super().__init__(
            prior_variance, self.kernel_column, hyperparameters.noise, capacity
        )
        self.column_flops = self._columns.flops_per_column

    def kernel_column(self, index: int) -> Tensor:
        r"""``K(arms, arms[index])``, of shape ``A``."""
        index = torch.tensor([index], device=self.arms.device)
        return self._columns(index).squeeze(-1)


#: The benchmark spelling of a feature cache's storage dtype (None: the arms').
CACHE_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64}


def resolve_cache_dtype(name: str | None) -> torch.dtype | None:
    r"""The torch dtype of a ``cache_dtype`` option (a key of :data:`CACHE_DTYPES`)."""
    if name not in CACHE_DTYPES:
        raise ValueError(
            f"`cache_dtype` must be 'float32', 'float64' or None, got {name!r}."
        )
    return CACHE_DTYPES[name]


def check_finite(problem: Problem, name: str) -> None:
    r"""Raise unless ``problem`` is finite (an arm set); ``name`` names the method."""
    if not problem.is_finite:
        raise ValueError(f"`{name}` needs a finite problem (arms).")


def check_box(problem: Problem, name: str) -> None:
    r"""Raise unless ``problem`` is a box; ``name`` names the method."""
    if problem.is_finite:
        raise ValueError(f"Problem `{problem.name}` is finite; `{name}` needs a box.")


def draw_seed(generator: torch.Generator) -> int:
    r"""A seed in ``[0, 2^31 - 1)`` for a library object, drawn from ``generator``."""
    return int(torch.randint(2**31 - 1, (1,), generator=generator))
