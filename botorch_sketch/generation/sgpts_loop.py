r"""Asynchronous ask/tell S-GP-TS on a finite arm set, resumable.

Thompson sampling needs no hallucination to run asynchronously (Kandasamy et al.,
AISTATS 2018): every asked arm is the argmax of its own fresh sample path of the
current posterior, so ``ask`` never has to wait for outcomes, and arms still being
evaluated (pending) do not enter the model. The posterior is S-GP-TS's sparse
variational model (Vakili et al., NeurIPS 2021) kept by
:class:`~botorch_sketch.generation.thompson_arms.CachedSparseThompson`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.acquisition.thompson import resolve_alpha
from botorch_sketch.generation.pending import staying_pending
from botorch_sketch.generation.thompson_arms import (
    ArmThompsonSampler,
    CachedSparseThompson,
)
from botorch_sketch.models.nystrom import default_covar_module
from botorch_sketch.sampling.arm_features import ArmFeatureCache
from botorch_sketch.utils.validation import (
    check_allocation,
    check_finite,
    check_indices,
    check_int,
    check_matrix,
    check_positive,
)

_STATE_KEYS = (
    "seed",
    "observed",
    "rewards",
    "tell_sizes",
    "pending",
    "failed",
    "generator",
)


class SGPTS:
    r"""Asynchronous S-GP-TS: ``ask(k)`` arms (the argmax of one fresh scaled path
    each), evaluate them anywhere, ``tell`` or ``fail`` them in any order.

    Until the first outcome arrives, asked arms are uniformly random. After that,
    ``ask(k)`` draws ``k`` paths ``f~ = mu + alpha (f - mu)`` of the sparse
    posterior over all ``A`` arms and returns their argmaxes,
    ``O(A (M + m) k + m^2 k)`` (for ``k < prior_block`` the ``O(A M)`` prior part of
    each path is computed ahead, ``prior_block`` paths at a time); ``tell`` updates
    the inducing set and ``q(u)``
    (:class:`~botorch_sketch.generation.thompson_arms.CachedSparseThompson`). Pending
    arms (asked, neither told nor failed) never enter the posterior; failed arms are
    kept in :attr:`failed`; :meth:`ask_arms` adds arms of the user's choice to the
    pending ones. Used synchronously (``ask(k)``, then ``tell`` all ``k``)
    it is the batch S-GP-TS of ``CachedSparseThompson.sample(k)``.

    :meth:`state_dict` holds the observations with the sizes of the ``tell`` calls,
    the pending and failed arms, the generator state and the prior weights drawn
    ahead; ``load_state_dict`` replays the observations in the same calls and
    continues with the same choices.

    Example:
        >>> loop = SGPTS(arms, covar_module=kernel, noise=0.5, seed=0)
        >>> running = loop.ask(8)             # one arm per free worker
        >>> loop.tell(running[:1], y0)        # outcomes in any order
        >>> loop.fail(running[1:2])           # a crashed evaluation
        >>> more = loop.ask(2)                # 6 still pending
    """

    def __init__(
        self,
        arms: Tensor,
        *,
        covar_module: Kernel | None = None,
        noise: float = 1.0,
        num_inducing: int = 100,
        num_features: int = 1000,
        alpha: float | Callable[[int], float] = 1.0,
        inducing_quality: str = "variance",
        memory_budget: float = 4 * 2**30,
        cache_dtype: torch.dtype | None = None,
        prior_block: int = 64,
        seed: int = 0,
    ) -> None:
        r"""
        Args:
            arms: ``A x d`` arm set.
            covar_module: Fixed stationary kernel without batch shape (default:
                NystromGP's default).
            noise: Gaussian observation noise variance.
            num_inducing: Maximal number ``m`` of inducing points.
            num_features: Even number ``M`` of random Fourier features.
            alpha: Exploration scale: a constant ``>= 0`` or a schedule
                ``t -> alpha_t`` of the number of observations ``t`` plus one.
            inducing_quality: ``"variance"`` or ``"improvement"``.
            memory_budget: Bytes the cached features and kernel columns may take.
            cache_dtype: Storage dtype of that cache (default the arms' dtype).
            prior_block: Prior parts of paths computed ahead in one pass over the
                cached features, for ``ask`` calls of fewer arms
                (:class:`~botorch_sketch.generation.thompson_arms.PriorPathBank`;
                ``prior_block x A`` more memory; ``1``: none ahead).
            seed: Seed of the (CPU) generator behind the feature basis and every
                later random choice (the same choices on every device).
        """
        check_matrix(arms, "arms")
        check_positive(noise, "noise")
        check_int(num_inducing, "num_inducing", 1)
        check_int(num_features, "num_features", 2)
        check_int(prior_block, "prior_block", 1)
        check_int(seed, "seed", 0)
        if not callable(alpha):
            resolve_alpha(alpha, 1)
        self.arms = arms
        self.covar_module = (
            covar_module
            if covar_module is not None
            else default_covar_module(arms.shape[-1])
        ).to(arms)
        self.noise = float(noise)
        self.num_inducing = num_inducing
        self.num_features = num_features
        self.alpha = alpha
        self.inducing_quality = inducing_quality
        self.memory_budget = memory_budget
        self.cache_dtype = cache_dtype
        self.prior_block = prior_block
        self.seed = seed
        self.generator, self.sampler = self._new_sampler(seed)
        empty = torch.empty(0, dtype=torch.long, device=arms.device)
        self.pending = empty
        self.failed = empty.clone()
        self.tell_sizes: list[int] = []

    def _new_sampler(self, seed: int) -> tuple[torch.Generator, ArmThompsonSampler]:
        r"""A generator seeded with ``seed`` that drew the feature basis of a fresh
        sampler (no observations)."""
        # draws on the CPU, then moved: the same choices on every device
        generator = torch.Generator().manual_seed(seed)
        cache = ArmFeatureCache(
            self.arms,
            self.covar_module,
            self.num_features,
            generator=generator,
            memory_budget=self.memory_budget,
            cache_dtype=self.cache_dtype,
        )
        return generator, self._build_sampler(cache)

    def _build_sampler(self, cache: ArmFeatureCache) -> ArmThompsonSampler:
        r"""The posterior the loop samples from: S-GP-TS's sparse one (a subclass may
        return another sampler over ``cache``, e.g. the exact posterior)."""
        return CachedSparseThompson(
            cache,
            self.noise,
            self.num_inducing,
            inducing_quality=self.inducing_quality,
            prior_block=self.prior_block,
        )

    @property
    def num_observations(self) -> int:
        return self.sampler.num_observations

    @property
    def observed(self) -> Tensor:
        r"""Told arm indices, in the order told (``t``)."""
        return self.sampler.observed

    @property
    def rewards(self) -> Tensor:
        r"""Their rewards (``t``)."""
        return self.sampler.targets

    def ask(self, max_arms: int | None = None) -> Tensor:
        r"""``max_arms`` (default 1) new arm indices, added to :attr:`pending`.

        Each is the argmax of a fresh path (uniformly random before any outcome), so
        the result is never empty; ``max_arms=0`` is a ValueError.

        Returns:
            A LongTensor of ``max_arms`` arm indices (repeats possible).
        """
        k = 1 if max_arms is None else check_int(max_arms, "max_arms", 1)
        sampler = self.sampler
        # one path per arm: a k x (arms) block of path values
        check_allocation(k * self.arms.shape[0], "`max_arms`", self.arms)
        if sampler.num_observations == 0:
            indices = torch.randint(
                self.arms.shape[0], (k,), generator=self.generator
            ).to(self.arms.device)
        else:
            alpha = resolve_alpha(self.alpha, sampler.num_observations + 1)
            indices = sampler.sample(k, alpha, self.generator).indices
        self.pending = torch.cat([self.pending, indices])
        return indices

    def ask_arms(self, indices: Tensor) -> None:
        r"""Mark user-chosen arms asked, as if :meth:`ask` had returned them (e.g.
        configurations to evaluate first): they join :attr:`pending`.

        Args:
            indices: ``b`` arm indices (LongTensor, repeats allowed).
        """
        check_indices(indices, "indices", self.arms.shape[0])
        self.pending = torch.cat([self.pending, indices.to(self.arms.device)])

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Report outcomes of pending arms (any non-empty sub-multiset, any order).

        Args:
            indices: ``b`` pending arm indices.
            rewards: ``b`` (or ``b x 1``) finite rewards.
        """
        keep = staying_pending(self.pending, indices, self.arms.shape[0])
        pending = self.pending[keep]
        rewards = check_finite(rewards, "rewards").detach().reshape(-1)
        if rewards.shape[0] != indices.shape[0]:
            raise ValueError(
                f"`rewards` must hold one value per entry of `indices` "
                f"({indices.shape[0]}), got {rewards.shape[0]}."
            )
        self.sampler.observe(indices, rewards.to(self.arms))
        self.tell_sizes.append(indices.shape[0])
        self.pending = pending

    def fail(self, indices: Tensor) -> None:
        r"""Mark pending arms as failed: they leave :attr:`pending`, join
        :attr:`failed` and never enter the posterior."""
        self.pending = self.pending[
            staying_pending(self.pending, indices, self.arms.shape[0])
        ]
        self.failed = torch.cat([self.failed, indices.to(self.failed.device)])

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume exactly, pending and failed arms included."""
        return {
            "seed": self.seed,
            "observed": self.observed.clone(),
            "rewards": self.rewards.clone(),
            "tell_sizes": list(self.tell_sizes),
            "pending": self.pending.clone(),
            "failed": self.failed.clone(),
            "generator": self.generator.get_state(),
            "prior_weights": self.sampler.prior_bank.remaining.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (same arms and options; any ``seed``).

        The state is validated first; then the feature basis is redrawn from the
        saved seed and the observations are replayed in the saved ``tell`` calls,
        ``O(A M + t m^2)``, so later choices equal the saved loop's. (States saved
        before ``prior_weights`` existed load with none drawn ahead.)"""
        if not isinstance(state, dict):
            raise TypeError(f"`state` must be a dict, got {type(state).__name__}.")
        missing = set(_STATE_KEYS) - set(state)
        if missing:
            raise ValueError(f"`state` misses the keys {sorted(missing)}.")
        num_arms = self.arms.shape[0]
        seed = check_int(state["seed"], "state['seed']", 0)
        observed = check_indices(state["observed"], "state['observed']", num_arms)
        pending = check_indices(state["pending"], "state['pending']", num_arms)
        failed = check_indices(state["failed"], "state['failed']", num_arms)
        rewards = check_finite(state["rewards"], "state['rewards']")
        if rewards.shape != observed.shape:
            raise ValueError("`state['rewards']` must match `state['observed']`.")
        sizes = state["tell_sizes"]
        if (
            not isinstance(sizes, list)
            or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes
            )
            or sum(sizes) != observed.shape[0]
        ):
            raise ValueError(
                "`state['tell_sizes']` must be a list of positive ints summing to "
                "the number of observations."
            )
        if not isinstance(state["generator"], Tensor):
            raise TypeError("`state['generator']` must be a generator state tensor.")
        try:  # a generator state that cannot be set fails here, before any change
            torch.Generator().set_state(state["generator"])
        except RuntimeError as error:
            raise ValueError(
                f"`state['generator']` is not a generator state: {error}"
            ) from error
        prior_weights = check_matrix(
            state.get("prior_weights", self.arms.new_empty(0, self.num_features)),
            "state['prior_weights']",
            num_cols=self.num_features,
            allow_empty=True,
        )
        generator, sampler = self._new_sampler(seed)
        device = self.arms.device
        for chunk, values in zip(
            observed.to(device).split(sizes),
            rewards.to(self.arms).split(sizes),
            strict=True,
        ):
            sampler.observe(chunk, values)
        generator.set_state(state["generator"])
        sampler.prior_bank.load(prior_weights)
        self.seed, self.generator, self.sampler = seed, generator, sampler
        self.tell_sizes = list(sizes)
        self.pending = pending.clone().to(device)
        self.failed = failed.clone().to(device)
