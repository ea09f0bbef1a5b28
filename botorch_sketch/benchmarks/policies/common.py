r"""Pieces shared by benchmark policies: fixed kernels, radius schedules, and the
incremental exact GP posterior over a finite arm set.

Every GP-based policy of the benchmark uses the *same* fixed hyperparameters, read from
``problem.hyperparameters`` (keys ``"lengthscale"``, ``"outputscale"`` and optionally
``"noise_variance"``; the noise variance defaults to ``problem.noise_std ** 2``) and
optionally overridden per policy. Confidence radii are on the *Bayesian* scale:
``u(x) = mu(x) + radius_t * sigma(x)`` with ``sigma`` the exact (or approximate)
posterior standard deviation under that noise variance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch import Tensor

from botorch_sketch.benchmarks.policies.base import Problem
from botorch_sketch.utils.validation import check_matrix, check_positive

#: Constant confidence radius (Bayesian scale) used when a policy is given none.
DEFAULT_RADIUS = 1.0


@dataclass(frozen=True)
class KernelHyperparameters:
    r"""Fixed hyperparameters of a scaled RBF kernel plus Gaussian noise.

    The kernel is ``k(x, x') = outputscale * exp(-||x - x'||^2 / (2 lengthscale^2))``
    (GPyTorch's ``ScaleKernel(RBFKernel())``) and observations carry noise of
    variance ``noise_variance``.

    Example:
        >>> hp = KernelHyperparameters.from_problem(problem, lengthscale=0.3)
        >>> kernel = hp.kernel(dtype=torch.float64)
    """

    lengthscale: float
    outputscale: float
    noise_variance: float

    def __post_init__(self) -> None:
        check_positive(self.lengthscale, "lengthscale")
        check_positive(self.outputscale, "outputscale")
        check_positive(self.noise_variance, "noise_variance")

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        *,
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise_variance: float | None = None,
    ) -> KernelHyperparameters:
        r"""Read the problem's suggested settings; explicit arguments take precedence.

        Args:
            problem: Its ``hyperparameters`` must provide ``"lengthscale"`` unless
                ``lengthscale`` is given; ``"outputscale"`` defaults to 1 and
                ``"noise_variance"`` to ``problem.noise_std ** 2``.
            lengthscale: Override of the RBF lengthscale.
            outputscale: Override of the kernel's prior variance.
            noise_variance: Override of the model's noise variance (the ridge term).

        Returns:
            The resolved hyperparameters.
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
        if noise_variance is None:
            noise_variance = suggested.get("noise_variance", problem.noise_std**2)
        return cls(float(lengthscale), float(outputscale), float(noise_variance))

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
    radius: float | str = DEFAULT_RADIUS,
    *,
    num_arms: int | None = None,
    delta: float = 0.05,
) -> Callable[[int], float]:
    r"""Return ``t -> radius_t``, the confidence radius for the ``t``-th decision.

    Two schedules exist:

    - a number ``c``: the constant radius ``radius_t = c`` (the benchmark default);
    - ``"srinivas"``: GP-UCB's finite-arm theory value (Srinivas et al., 2010,
      Theorem 1), ``radius_t = sqrt(2 log(A t^2 pi^2 / (6 delta)))`` with ``A`` arms.

    Args:
        radius: A positive constant or the name ``"srinivas"``.
        num_arms: ``A``, required by ``"srinivas"``.
        delta: Confidence level of ``"srinivas"``, in ``(0, 1)``.

    Returns:
        A callable mapping ``t >= 1`` to a positive radius.

    Example:
        >>> schedule = make_radius_schedule("srinivas", num_arms=1000, delta=0.1)
        >>> schedule(1), schedule(100)
    """
    if isinstance(radius, str):
        if radius != "srinivas":
            raise ValueError(
                f"`radius` must be a number or 'srinivas', got {radius!r}."
            )
        if num_arms is None or num_arms < 1:
            raise ValueError("`num_arms` (>= 1) is required by radius='srinivas'.")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"`delta` must lie in (0, 1), got {delta}.")
        log_term = math.log(num_arms * math.pi**2 / (6.0 * delta))
        return lambda t: math.sqrt(2.0 * (log_term + 2.0 * math.log(max(t, 1))))
    value = check_positive(radius, "radius")
    return lambda t: value


class IncrementalExactPosterior:
    r"""Exact GP posterior of every arm, updated in ``O(A t)`` per observation.

    With a fixed kernel ``k`` and noise variance ``s2``, let ``X_t`` be the ``t``
    observed arms (repeats allowed), ``K_t + s2 I = L_t L_t^T`` and
    ``W_t = K(arms, X_t) L_t^{-T}`` (``A x t``). Then, with ``a_t = L_t^{-1} y_t``,

        mean(x) = W_t[x] . a_t,      variance(x) = k(x, x) - ||W_t[x]||^2.

    Appending an observation of arm ``j`` adds one row to ``L`` and one column to
    ``W``: the new row of ``L`` is ``[l, d]`` with ``l = W_t[j]`` (no triangular solve
    needed) and ``d^2 = k(j, j) + s2 - ||l||^2``, and the new column is
    ``w = (K(arms, x_j) - W_t l) / d``. Variances drop by ``w^2`` and means move by
    ``w * (y_j - l . a_t) / d``. Observations may be appended before their reward is
    known (hallucination, as in GP-BUCB): the variance is updated at once, the mean
    when :meth:`set_rewards` supplies the rewards in order.

    ``W`` is stored transposed (``capacity x A``, one contiguous row per observation)
    and preallocated, so memory is ``O(A capacity)`` and nothing is recomputed.

    Example:
        >>> hp = KernelHyperparameters(lengthscale=3.0, outputscale=1.0,
        ...                            noise_variance=1e-4)
        >>> post = IncrementalExactPosterior(arms, hp, capacity=100)
        >>> post.append(7)
        >>> post.set_rewards(torch.tensor([0.3], dtype=arms.dtype))
        >>> post.mean.shape, post.variance.shape  # (A,), (A,)
    """

    def __init__(
        self, arms: Tensor, hyperparameters: KernelHyperparameters, capacity: int
    ) -> None:
        r"""Start from the prior.

        Args:
            arms: ``A x d`` finite arm set.
            hyperparameters: Fixed RBF kernel and noise variance ``s2``.
            capacity: Maximal number of observations (``W`` is ``capacity x A``).
        """
        check_matrix(arms, "arms")
        if not isinstance(hyperparameters, KernelHyperparameters):
            raise TypeError("`hyperparameters` must be a KernelHyperparameters.")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"`capacity` must be a positive int, got {capacity!r}.")
        self.arms = arms
        self.hyperparameters = hyperparameters
        self.noise_variance = hyperparameters.noise_variance
        num_arms = arms.shape[0]
        factory = {"dtype": arms.dtype, "device": arms.device}
        # k(a, b) = s exp(a.b - |a|^2/2 - |b|^2/2) on arms scaled by 1/lengthscale.
        self._scaled = arms / hyperparameters.lengthscale
        self._half_sq_norms = 0.5 * self._scaled.square().sum(dim=-1)
        self.prior_variance = torch.full(
            (num_arms,), hyperparameters.outputscale, **factory
        )
        self._w = torch.empty(capacity, num_arms, **factory)
        self._diag = torch.empty(capacity, **factory)
        self._alpha = torch.empty(capacity, **factory)
        self._arm_of = torch.empty(capacity, dtype=torch.long, device=arms.device)
        self.mean = torch.zeros(num_arms, **factory)
        self.variance = self.prior_variance.clone()
        self.num_observations = 0
        self.num_rewarded = 0

    def kernel_column(self, index: int) -> Tensor:
        r"""``K(arms, arms[index])`` (``A``), from cached scaled arms and norms."""
        exponent = self._scaled @ self._scaled[index]
        exponent -= self._half_sq_norms
        exponent -= self._half_sq_norms[index]
        return exponent.clamp_(max=0.0).exp_().mul_(self.hyperparameters.outputscale)

    @property
    def capacity(self) -> int:
        return self._w.shape[0]

    @property
    def num_pending(self) -> int:
        r"""Observations appended whose rewards are not known yet."""
        return self.num_observations - self.num_rewarded

    def append(self, index: int) -> float:
        r"""Condition on an observation of arm ``index`` (reward to come).

        Args:
            index: Arm index in ``[0, A)``.

        Returns:
            The posterior variance of that arm *before* this observation.
        """
        num_arms = self.arms.shape[0]
        if not 0 <= int(index) < num_arms:
            raise ValueError(f"`index` must lie in [0, {num_arms}), got {index}.")
        t = self.num_observations
        if t >= self.capacity:
            raise ValueError(
                f"`capacity` ({self.capacity}) exceeded; allocate a larger posterior."
            )
        index = int(index)
        variance_before = float(self.variance[index])
        column = self.kernel_column(index)
        if t > 0:
            l_row = self._w[:t, index]
            column = column - l_row @ self._w[:t]
        # d^2 = posterior variance of the arm + noise; clamp guards rounding only.
        d_squared = max(variance_before, 0.0) + self.noise_variance
        d = math.sqrt(d_squared)
        w = self._w[t]
        torch.div(column, d, out=w)
        self.variance.sub_(w * w).clamp_(min=0.0)
        self._diag[t] = d
        self._arm_of[t] = index
        self.num_observations = t + 1
        return variance_before

    def set_rewards(self, rewards: Tensor) -> None:
        r"""Supply the rewards of the oldest pending observations, in order.

        Args:
            rewards: ``b`` rewards, ``1 <= b <= num_pending``.
        """
        if not isinstance(rewards, Tensor) or rewards.dim() != 1:
            raise ValueError("`rewards` must be a 1-d tensor.")
        if not 1 <= rewards.shape[0] <= self.num_pending:
            raise ValueError(
                f"`rewards` has {rewards.shape[0]} entries but {self.num_pending} "
                "observations are pending."
            )
        if not torch.isfinite(rewards).all():
            raise ValueError("`rewards` contains NaN or infinite values.")
        rewards = rewards.to(self._alpha)
        for reward in rewards:
            s = self.num_rewarded
            l_row = self._w[:s, self._arm_of[s]]
            alpha = (reward - l_row @ self._alpha[:s]) / self._diag[s]
            self._alpha[s] = alpha
            self.mean.add_(self._w[s], alpha=float(alpha))
            self.num_rewarded = s + 1

    def discard_pending(self) -> None:
        r"""Forget the observations whose rewards never came.

        Variances are recomputed from the kept columns of ``W`` (``O(A t)``).
        """
        if self.num_pending == 0:
            return
        self.num_observations = self.num_rewarded
        variance = self.prior_variance.clone()
        for rows in self._w[: self.num_observations].split(256):
            variance -= rows.square().sum(dim=0)
        self.variance = variance.clamp_(min=0.0)
