r"""Thompson sampling over a fixed finite arm set with cached work.

Both samplers here draw scaled paths ``f~ = mu + alpha (f - mu)`` of a zero-mean GP
with a fixed kernel and Gaussian noise of variance ``noise`` over ``N`` fixed arms
``A``. The prior part of every path is ``alpha phi(x)^T w`` with ``M`` random Fourier
features ``phi`` (BoTorch's ``gen_kernel_features``) drawn *once* per sampler and fresh
weights ``w ~ N(0, I)`` at every draw, so the ``N x M`` prior features of all arms are
computed once (:class:`~botorch_sketch.sampling.arm_features.ArmFeatureCache`). The
update part is Matheron's rule (Wilson et al., ICML 2020) through ``s`` update points
``U`` with weights ``v``:

    f~(A) = alpha Phi_A w + K_AU v,

evaluated for ``q`` paths at once as two matrix products, ``O(N (M + s) q)``. The
prior part does not depend on the data: for draws of a few paths at a time (an
asynchronous loop asks for one arm per free worker) it is computed ahead for a block
of weights in one pass over the features
(:class:`~botorch_sketch.sampling.arm_features.PriorPathBank`).

- :class:`IncrementalExactThompson` (exact GP-TS): ``U`` the ``t`` observed arms,
  ``v = (K_XX + noise I)^{-1} (y - alpha (Phi_X w + noise^{1/2} eps))``; the kernel
  columns ``K_AX`` are cached and grown by one column per new arm and the Cholesky
  factor of ``K_XX + noise I`` by one row per observation, ``O(N (M + t) + t^2)`` time
  and ``O(N (M + t) + t^2)`` memory per step;
- :class:`CachedSparseThompson` (S-GP-TS, Vakili et al., NeurIPS 2021): ``U = Z`` the
  ``m`` inducing points selected from the data by conditional variance,
  ``v = (K_ZZ + jitter I)^{-1} (L (m_w + alpha C_w eps) - alpha Phi_Z w)`` with
  Titsias' ``q(v) = N(m_w, C_w C_w^T)`` kept as sufficient statistics updated by a
  rank-one term per observation; ``O(N (M + m) + m^3)`` per step while the inducing
  set is unchanged.

Past a memory budget the cache stops storing (first kernel columns, then features)
and recomputes them in chunks at every draw: ``O(N s d)`` resp. ``O(N M d)`` more
time, ``O(chunk (M + s))`` memory.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import torch
from botorch.utils.probability.utils import ndtr as normal_cdf
from botorch.utils.probability.utils import phi as phi_density
from gpytorch import settings
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from botorch_sketch.models.dtc import titsias_q_from_statistics
from botorch_sketch.models.inducing import conditional_variance_factor
from botorch_sketch.models.linalg import GrowingCholesky, solve_lower
from botorch_sketch.sampling.arm_features import ArmFeatureCache, PriorPathBank
from botorch_sketch.sampling.pathwise import standard_normal
from botorch_sketch.utils.atomic import Restorable
from botorch_sketch.utils.validation import (
    check_at_least,
    check_finite,
    check_generator,
    check_int,
    check_positive,
)


class ThompsonArms(NamedTuple):
    r"""Arms chosen by ``q`` paths.

    Attributes:
        indices: ``q`` arm indices, the argmax of each path.
        values: ``q`` path values there.
    """

    indices: Tensor
    values: Tensor


class ArmThompsonSampler(ABC, Restorable):
    r"""Observations and path draws shared by the finite-arm samplers.

    Draws of fewer than ``prior_block`` paths take their prior weights from a
    :class:`~botorch_sketch.sampling.arm_features.PriorPathBank`; larger draws
    compute their prior part directly.

    Restorable (:class:`~botorch_sketch.utils.atomic.Restorable`, as are the cache
    and the bank): an update replaces the tensors it changes, so a checkpoint
    records the sampler by reference.
    """

    def __init__(
        self, cache: ArmFeatureCache, noise: float, prior_block: int = 64
    ) -> None:
        if not isinstance(cache, ArmFeatureCache):
            raise TypeError(f"`cache` must be an ArmFeatureCache, got {type(cache)}.")
        self.cache = cache
        self.noise = check_positive(noise, "noise")
        self.prior_bank = PriorPathBank(cache, prior_block)
        arms = cache.arms
        self.observed = torch.empty(0, dtype=torch.long, device=arms.device)
        #: The ``t`` rewards as observed
        self.rewards = arms.new_empty(0)
        #: The ``t`` values the paths are conditioned on: the rewards, or the
        #: targets given to :meth:`observe` or :meth:`set_targets`
        self.targets = arms.new_empty(0)

    @property
    def num_observations(self) -> int:
        return self.observed.shape[0]

    def set_targets(self, targets: Tensor) -> None:
        r"""Condition on ``targets`` (``t``, one per observation, e.g. the rewards
        standardized or warped by a loop) instead of the current ones. The
        posterior is linear in them: ``O(t m + m^3)`` for the sparse sampler (it
        keeps ``L^{-1} K_{Z X}``), nothing for the exact one."""
        self.targets = self._checked_targets(targets, self.num_observations)
        self._retargeted()

    def _checked_targets(self, targets: Tensor, count: int) -> Tensor:
        r"""``count`` finite targets, in the rewards' dtype and device."""
        check_finite(targets, "targets")
        if targets.shape != (count,):
            raise ValueError(
                f"`targets` must hold one value per observation, shape ({count},), "
                f"got {tuple(targets.shape)}."
            )
        return targets.detach().to(self.rewards)

    def _retargeted(self) -> None:
        r"""Recompute what depends on :attr:`targets` (none by default)."""

    @property
    @abstractmethod
    def noise_size(self) -> int:
        r"""Length of the standard normal vector each path draws for its update."""

    @property
    def memory_bytes(self) -> int:
        r"""Bytes held: the cache's stored tensors and the sampler's state."""
        held = [self.observed, self.rewards, self.targets, *self._state()]
        own = sum(x.numel() * x.element_size() for x in held)
        return self.cache.stored_bytes + self.prior_bank.memory_bytes + own

    @abstractmethod
    def _state(self) -> list[Tensor]:
        r"""The sampler's own tensors (for :attr:`memory_bytes`)."""

    @property
    @abstractmethod
    def update_arms(self) -> Tensor:
        r"""Arms whose kernel columns enter the paths (observed or inducing)."""

    def _append(
        self,
        indices: Tensor,
        rewards: Tensor,
        targets: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        r"""Check and store observations and the targets of all (the rewards if
        None); return the new arm indices and rewards."""
        if not isinstance(indices, Tensor) or indices.dtype != torch.long:
            raise TypeError("`indices` must be a LongTensor of arm indices.")
        indices = indices.reshape(-1).to(self.observed.device)
        if indices.numel() == 0:
            raise ValueError("`indices` must hold at least one arm index.")
        if bool((indices < 0).any()) or bool((indices >= self.cache.num_arms).any()):
            raise ValueError(f"`indices` must lie in [0, {self.cache.num_arms}).")
        check_finite(rewards, "rewards")
        rewards = rewards.reshape(-1).to(self.rewards)
        if rewards.shape != indices.shape:
            raise ValueError(
                f"`rewards` must hold {indices.numel()} values, got {rewards.numel()}."
            )
        all_rewards = torch.cat([self.rewards, rewards])
        if targets is not None:
            targets = self._checked_targets(targets, all_rewards.shape[0])
        self.observed = torch.cat([self.observed, indices])
        self.rewards = all_rewards
        self.targets = all_rewards if targets is None else targets
        return indices, rewards

    def add_arms(self, points: Tensor) -> None:
        r"""Append ``n`` arms (``n x d``, the cache's arms' dtype): their features,
        their entries of the update columns and their prior values of the weights
        drawn ahead, ``O(n (M + s) d + n M r)`` (see
        :meth:`~botorch_sketch.sampling.arm_features.ArmFeatureCache.add_arms`).
        The posterior depends on the observed arms only, so nothing else changes:
        paths keep their values at the old arms."""
        self.cache.add_arms(points)
        self.prior_bank.extend()

    def sample(
        self, q: int = 1, alpha: float = 1.0, generator: torch.Generator | None = None
    ) -> ThompsonArms:
        r"""Draw ``q`` paths and return each path's argmax over the arms.

        From ``generator``: the prior weights (for ``q < prior_block``, a block of
        them when the :attr:`prior_bank` runs out), then the update noise. Cost
        ``O(N (M + s) q)``, of which ``O(N M q)`` is paid ahead by the bank for
        ``q < prior_block``.
        """
        best, indices = self.sample_values(q, alpha, generator).max(dim=0)
        return ThompsonArms(indices, best)

    def sample_values(
        self, q: int = 1, alpha: float = 1.0, generator: torch.Generator | None = None
    ) -> Tensor:
        r"""``N x q`` values of ``q`` fresh paths over the arms, drawn as
        :meth:`sample` draws them (which returns their argmaxes)."""
        check_int(q, "q", 1)
        alpha = check_at_least(alpha, "alpha", 0.0)
        check_generator(generator)
        if self.num_observations == 0:
            raise ValueError("Observe at least one arm before sampling.")
        cache = self.cache
        if q < self.prior_bank.block:
            weights, prior = self.prior_bank.take(q, generator)
        else:
            weights = standard_normal((q, cache.num_features), generator)
            weights = weights.to(cache.arms)
            prior = cache.prior_values(weights)
        noise = standard_normal((q, self.noise_size), generator).to(cache.arms)
        V = self.update_weights(weights, noise, alpha)
        return cache.add_column_values(alpha * prior, self.update_arms, V)

    @abstractmethod
    def variance(self, indices: Tensor) -> Tensor:
        r"""Posterior variances of ``f`` at ``b`` arms (``b``), in the units the
        paths are in, ``O(b s^2)`` for ``s`` update arms."""

    def path_values(self, weights: Tensor, noise: Tensor, alpha: float = 1.0) -> Tensor:
        r"""``N x q`` values of the paths with prior weights ``weights`` (``q x M``)
        and standard normal update draws ``noise`` (``q x noise_size``)."""
        V = self.update_weights(weights, noise, alpha)
        prior = alpha * self.cache.prior_values(weights)
        return self.cache.add_column_values(prior, self.update_arms, V)

    @abstractmethod
    def observe(
        self,
        indices: Tensor,
        rewards: Tensor,
        targets: Tensor | None = None,
    ) -> None:
        r"""Append ``b`` observations: arm ``indices`` (``b``) with ``rewards``;
        condition on ``targets`` (``t + b``, one per observation, all of them)
        from now on, as :meth:`set_targets` would, in the same update (None: on
        the rewards)."""

    @abstractmethod
    def update_weights(self, weights: Tensor, noise: Tensor, alpha: float) -> Tensor:
        r"""``s x q`` weights ``V`` of the update columns ``K_{A, update_arms}`` of
        the paths with prior weights ``weights`` (``q x M``) and update draws
        ``noise`` (``q x noise_size``)."""


class IncrementalExactThompson(ArmThompsonSampler):
    r"""Exact GP-TS over fixed arms with cached columns and a growing Cholesky factor.

    For ``t`` observations ``y`` at arms ``X`` (repeats allowed), path ``j`` is

        f~_j(A) = alpha Phi_A w_j + K_AX (K_XX + noise I)^{-1}
                  (y - alpha (Phi_X w_j + noise^{1/2} eps_j)),

    BoTorch's Matheron path of a zero-mean ``SingleTaskGP`` with fixed noise (scaled
    by ``alpha`` as :func:`~botorch_sketch.sampling.pathwise.draw_scaled_paths`).
    :meth:`observe` appends ``b`` rows to the Cholesky factor, ``O(t^2 b + b^3)``, and
    one kernel column per new arm, ``O(N d)``; :meth:`sample` costs
    ``O(N (M + t) q + t^2 q)``. Memory ``O(N (M + t) + t^2)``, or ``O(N M + t^2)`` once
    the columns exceed the cache's budget (then ``O(N t d)`` more time per draw).

    Example:
        >>> sampler = IncrementalExactThompson(ArmFeatureCache(arms, kernel), 0.5)
        >>> sampler.observe(torch.tensor([0, 5]), torch.tensor([0.3, -0.1]))
        >>> chosen = sampler.sample(q=1, generator=g).indices
    """

    def __init__(
        self, cache: ArmFeatureCache, noise: float, *, prior_block: int = 64
    ) -> None:
        r"""
        Args:
            cache: The arms, kernel and feature basis.
            noise: Gaussian observation noise variance (the ridge ``lambda``).
            prior_block: Prior weights drawn ahead
                (:class:`~botorch_sketch.sampling.arm_features.PriorPathBank`).
        """
        super().__init__(cache, noise, prior_block)
        self._chol = GrowingCholesky(cache.arms)
        self._features = cache.arms.new_zeros(0, cache.num_features)

    @property
    def noise_size(self) -> int:
        return self.num_observations

    def _state(self) -> list[Tensor]:
        return [self._chol.storage, self._features]

    @property
    def update_arms(self) -> Tensor:
        return self.observed

    def observe(
        self,
        indices: Tensor,
        rewards: Tensor,
        targets: Tensor | None = None,
    ) -> None:
        old = self.num_observations
        indices, _ = self._append(indices, rewards, targets)
        cache = self.cache
        cache.add_columns(indices)
        X_new = cache.arms[indices]
        eye = torch.eye(indices.shape[0], dtype=X_new.dtype, device=X_new.device)
        corner = cache.kernel_matrix(X_new, X_new) + self.noise * eye
        cross = cache.kernel_matrix(cache.arms[self.observed[:old]], X_new)
        self._chol.append(cross, corner)
        features = cache.features_at(indices)
        if self.num_observations > self._features.shape[0]:
            capacity = max(self.num_observations, self._features.shape[0] * 5 // 4)
            grown = self._features.new_zeros(capacity, cache.num_features)
            grown[:old] = self._features[:old]
            self._features = grown
        self._features[old : self.num_observations] = features

    @torch.no_grad()
    def variance(self, indices: Tensor) -> Tensor:
        r"""``k(x, x) - k_xX (K_XX + lambda I)^{-1} k_Xx`` at ``b`` arms."""
        cache = self.cache
        X = cache.arms[indices]
        solved = self._chol.forward(cache.kernel_matrix(cache.arms[self.observed], X))
        prior = cache.kernel(X, diag=True).detach()
        return (prior - solved.square().sum(0)).clamp_min(0.0)

    def update_weights(self, weights: Tensor, noise: Tensor, alpha: float) -> Tensor:
        t = self.num_observations
        prior = self._features[:t] @ weights.mT  # t x q
        noisy = prior + self.noise**0.5 * noise.mT
        return self._chol.solve(self.targets.unsqueeze(-1) - alpha * noisy)


class CachedSparseThompson(ArmThompsonSampler):
    r"""S-GP-TS over fixed arms: cached columns, rank-one ``q(u)`` statistics.

    The inducing points ``Z`` (at most ``num_inducing``) are chosen from the observed
    arms by greedy conditional-variance selection, as
    :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` does on the same
    data, and ``q(v) = N(m_w, C_w C_w^T)`` is Titsias' optimum, computed from the
    statistics ``sum_i phi_i phi_i^T`` and the ``m x t`` columns ``phi_i`` (so
    :meth:`set_targets` costs ``O(t m + m^3)``), with
    ``phi_i = L^{-1} k(Z, x_i)``, ``L L^T = K_ZZ + jitter I``
    (:func:`~botorch_sketch.models.dtc.titsias_q_from_statistics`). Path ``j``
    is the model's scaled Matheron path

        f~_j(A) = alpha Phi_A w_j + K_AZ (L L^T)^{-1}
                  (L (m_w + alpha C_w eps_j) - alpha Phi_Z w_j).

    With ``inducing_quality="variance"`` :meth:`observe` checks in ``O(m^2 b)``
    whether greedy selection on all data would still pick the same pivots (a new
    point must beat a pivot's residual variance at its stage); if so, ``Z`` is kept
    and the statistics get ``b`` rank-one terms, ``O(m^2 b + m t + m^3)``; else ``Z`` is
    re-selected and the statistics rebuilt, ``O(n m^2)``, and only the kernel columns
    of new inducing arms are computed, ``O(N d)`` each. With ``"improvement"`` the
    quality weights (expected improvement of every observed point under the model
    before the update) change at every update, so each update re-selects,
    ``O(n m^2)``. A draw costs ``O(N (M + m) q + m^2 q)``, memory
    ``O(N (M + m) + t m)``.

    Example:
        >>> sampler = CachedSparseThompson(ArmFeatureCache(arms, kernel), 0.5, 100)
        >>> sampler.observe(torch.tensor([0, 5]), torch.tensor([0.3, -0.1]))
        >>> chosen = sampler.sample(q=10, generator=g).indices
    """

    def __init__(
        self,
        cache: ArmFeatureCache,
        noise: float,
        num_inducing: int = 100,
        *,
        inducing_quality: str = "variance",
        jitter: float | None = None,
        prior_block: int = 64,
    ) -> None:
        r"""
        Args:
            cache: The arms, kernel and feature basis.
            noise: Gaussian observation noise variance (the ridge ``lambda``).
            num_inducing: Maximal number ``m`` of inducing points.
            inducing_quality: ``"variance"`` or ``"improvement"`` (see
                :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP`).
            jitter: Jitter on ``K_ZZ``; default GPyTorch's variational jitter.
            prior_block: Prior weights drawn ahead
                (:class:`~botorch_sketch.sampling.arm_features.PriorPathBank`).
        """
        super().__init__(cache, noise, prior_block)
        self.num_inducing = check_int(num_inducing, "num_inducing", 1)
        if inducing_quality not in ("variance", "improvement"):
            raise ValueError(
                "`inducing_quality` must be 'variance' or 'improvement', got "
                f"{inducing_quality!r}."
            )
        self.inducing_quality = inducing_quality
        dtype = cache.arms.dtype
        if jitter is None:
            jitter = settings.variational_cholesky_jitter.value(dtype=dtype)
        self.jitter = check_at_least(jitter, "jitter", 0.0)
        # The selection's eligibility threshold, relative to the largest prior variance.
        self._rel_tol = settings.variational_cholesky_jitter.value(dtype=dtype)
        self.reselections = 0
        self.inducing_arms = self.observed.clone()  # no observations, no Z yet

    @property
    def noise_size(self) -> int:
        return self.inducing_arms.shape[0]

    @property
    def update_arms(self) -> Tensor:
        return self.inducing_arms

    def _state(self) -> list[Tensor]:
        if self.num_observations == 0:
            return []
        return [
            self._chol,
            self._phi_z,
            self._gram,
            self._phi,
            self._pivot_chol,
            self._chol_w,
        ]

    def observe(
        self,
        indices: Tensor,
        rewards: Tensor,
        targets: Tensor | None = None,
    ) -> None:
        r"""Append ``b`` observations and update ``Z`` and ``q(u)`` once (see the
        class)."""
        first = self.num_observations == 0
        indices, rewards = self._append(indices, rewards, targets)
        improvement = self.inducing_quality == "improvement"
        if first:
            self._reselect(None)  # first the conditional-variance model of the data
            if improvement:
                self._reselect(self._expected_improvement())
        elif improvement:
            self._reselect(self._expected_improvement())
        else:
            X_new = self.cache.arms[indices]
            k_zx = self.cache.kernel_matrix(self.cache.arms[self.inducing_arms], X_new)
            if self._selection_changes(X_new, k_zx):
                self._reselect(None)
                return
            phi = torch.linalg.solve_triangular(self._chol, k_zx, upper=False)
            self._gram = self._gram + phi @ phi.mT
            self._phi = torch.cat([self._phi, phi], -1)
            self._refresh_q()

    def _selection_changes(self, X_new: Tensor, k_zx: Tensor) -> bool:
        r"""Whether greedy selection on all data picks other pivots than now, with
        new points ``X_new`` (``b x d``) and their columns ``k_zx = k(Z, X_new)``."""
        diag = self.cache.kernel(X_new, diag=True).detach()
        if float(diag.max()) * self._rel_tol > self._threshold:
            return True  # the eligibility threshold moved
        f = torch.linalg.solve_triangular(self._pivot_chol, k_zx, upper=False)
        spent = f.square().cumsum(dim=0)
        before = diag - (spent - f.square())  # residual at each stage, m_t x b
        # Ties go to the earlier (old) point; rounding differs from the from-scratch
        # subtractions by a few ulps per stage (stage 0 always ties for a
        # stationary kernel).
        slack = 8 * f.shape[0] * torch.finfo(f.dtype).eps * float(diag.max())
        if bool((before > self._pivot_variances.unsqueeze(-1) + slack).any()):
            return True
        if self.noise_size < self.num_inducing:
            return bool(((diag - spent[-1]) > self._threshold).any())
        return False

    @torch.no_grad()
    def _reselect(self, quality: Tensor | None) -> None:
        r"""Greedy selection on all data, then ``L``, ``Phi_Z`` and the statistics."""
        cache = self.cache
        X = cache.arms[self.observed]
        selection = conditional_variance_factor(
            X, cache.kernel, self.num_inducing, quality=quality
        )
        pivots = selection.indices
        chosen = self.observed[pivots]
        # columns of arms that stay inducing are kept; only new arms' are computed
        dropped = ~torch.isin(self.inducing_arms, chosen)
        cache.remove_columns(self.inducing_arms[dropped])
        self.inducing_arms = chosen
        cache.add_columns(chosen)
        self._pivot_chol = selection.factor[:, pivots].mT
        self._pivot_variances = selection.pivot_variances
        self._threshold = selection.threshold
        Z = X[pivots]
        eye = torch.eye(Z.shape[0], dtype=Z.dtype, device=Z.device)
        self._chol = psd_safe_cholesky(cache.kernel_matrix(Z, Z) + self.jitter * eye)
        self._phi_z = cache.features_at(self.inducing_arms)
        phi = solve_lower(self._chol, cache.kernel_matrix(Z, X))
        self._gram = phi @ phi.mT
        self._phi = phi
        self.reselections += 1
        self._refresh_q()

    def _refresh_q(self) -> None:
        r"""Titsias' ``q(v)`` from the statistics and the targets, ``O(t m + m^3)``."""
        self._mean_w, self._chol_w = titsias_q_from_statistics(
            self._gram, self._phi @ self.targets, self.noise
        )

    def _retargeted(self) -> None:
        if self.num_observations:
            self._refresh_q()

    @torch.no_grad()
    def _expected_improvement(self) -> Tensor:
        r"""Expected improvement of every observed arm under the current model
        (BoTorch's ``ExpectedImprovementQualityFunction``), ``O(n m^2)``."""
        mean, variance = self._moments(self.observed, self.jitter)
        sigma = variance.clamp_min(1e-12).sqrt()
        u = (mean - mean.max()) / sigma
        return sigma * (phi_density(u) + u * normal_cdf(u))

    def _moments(self, indices: Tensor, jitter: float = 0.0) -> tuple[Tensor, Tensor]:
        r"""Mean and variance of ``q(f)`` at ``b`` arms, ``O(b m^2)``:
        ``phi^T m_w`` and ``k(x, x) + jitter - ||phi||^2 + ||C_w^T phi||^2`` with
        ``phi = L^{-1} k(Z, x)``."""
        cache = self.cache
        X = cache.arms[indices]
        phi = solve_lower(
            self._chol, cache.kernel_matrix(cache.arms[self.inducing_arms], X)
        )
        prior = cache.kernel(X, diag=True).detach() + jitter
        variance = prior - phi.square().sum(0) + (self._chol_w.mT @ phi).square().sum(0)
        return phi.mT @ self._mean_w, variance

    @torch.no_grad()
    def variance(self, indices: Tensor) -> Tensor:
        r"""Variances of ``q(f)`` at ``b`` arms."""
        return self._moments(indices)[1].clamp_min(0.0)

    @property
    def inducing_mean(self) -> Tensor:
        r"""Whitened ``m_w`` of ``q(v)`` (``m_t``)."""
        return self._mean_w

    @property
    def inducing_chol(self) -> Tensor:
        r"""Lower Cholesky factor ``C_w`` of the whitened ``S_w`` (``m_t x m_t``)."""
        return self._chol_w

    def update_weights(self, weights: Tensor, noise: Tensor, alpha: float) -> Tensor:
        whitened = self._mean_w.unsqueeze(-1) + alpha * (self._chol_w @ noise.mT)
        errors = self._chol @ whitened - alpha * (self._phi_z @ weights.mT)
        return torch.cholesky_solve(errors, self._chol)
