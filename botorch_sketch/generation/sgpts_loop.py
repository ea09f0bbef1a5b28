r"""Asynchronous ask/tell S-GP-TS on a finite arm set, self-tuning and resumable.

Thompson sampling needs no hallucination to run asynchronously (Kandasamy et al.,
AISTATS 2018): every asked arm is the argmax of its own fresh sample path of the
current posterior, so ``ask`` never has to wait for outcomes, and arms still being
evaluated (pending) do not enter the model. The posterior is S-GP-TS's sparse
variational model (Vakili et al., NeurIPS 2021) kept by
:class:`~botorch_sketch.generation.thompson_arms.CachedSparseThompson`.
"""

from __future__ import annotations

from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.acquisition.thompson import resolve_alpha
from botorch_sketch.generation.ask_tell import STATE_KEYS, ArmLoop
from botorch_sketch.generation.hyperparameters import cube_coordinates
from botorch_sketch.generation.options import SGPTSOptions, merged_options
from botorch_sketch.generation.repeats import (
    hallucinated_variance,
    holds_told_arms,
    repeat_reduction,
)
from botorch_sketch.generation.thompson_arms import (
    ArmThompsonSampler,
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.sampling.arm_features import ArmFeatureCache, draw_basis_seed
from botorch_sketch.utils.validation import (
    check_allocation,
    check_int,
    check_matrix,
)

_STATE_KEYS = (*STATE_KEYS, "seed", "tell_sizes", "prior_weights", "rebuilt_at")

#: Arms of a path the repeat rule checks at once (then 4x as many, and so on): a
#: path whose best arms are all measured does not cost one variance per arm.
WALK_BLOCK = 64


class SGPTS(ArmLoop):
    r"""Asynchronous S-GP-TS: ``ask(k)`` arms (the argmax of one fresh scaled path
    each), evaluate them anywhere, ``tell`` or ``fail`` them in any order.

    ``ask(k)`` draws ``k`` paths ``f~ = mu + alpha (f - mu)`` of the sparse
    posterior over all ``A`` arms and returns their argmaxes,
    ``O(A (M + m) k + m^2 k)`` (for ``k < prior_block`` the ``O(A M)`` prior part of
    each path is computed ahead, ``prior_block`` paths at a time); ``tell`` updates
    the inducing set and ``q(u)``
    (:class:`~botorch_sketch.generation.thompson_arms.CachedSparseThompson`). Pending
    arms (asked, neither told nor failed) never enter the posterior; failed arms are
    kept in :attr:`failed` (Thompson sampling may draw them again: a path's argmax
    knows nothing of failures); :meth:`ask_arms` adds arms of the user's choice to
    the pending ones. Used synchronously (``ask(k)``, then ``tell`` all ``k``) it is
    the batch S-GP-TS of ``CachedSparseThompson.sample(k)``.

    **Self-tuning (the default, no** ``covar_module`` **given).** As
    :class:`~botorch_sketch.generation.bbkb_loop.BBKB`: the arms are mapped to the
    unit cube, the first ``max(5, 2 d)`` asks return a space-filling design
    (:func:`~botorch_sketch.generation.initial_design.space_filling_arms`), the
    paths are conditioned on the rewards standardized and warped by a Yeo-Johnson
    power fitted at each refit (:mod:`~botorch_sketch.generation.reward_warping`;
    updated at each ``tell``, ``O(t m + m^3)``: the posterior is linear in the
    targets), and the ARD lengthscales, outputscale and ``lambda`` are refitted by
    MAP of Titsias' collapsed bound on the inducing points each time the
    observations have grown by ``refit_growth``; a refit rebuilds the feature cache
    once (the same random basis directions, rescaled by the new kernel) and
    re-selects the inducing points. Choices then do not depend on the rewards'
    units. With a fixed kernel, rewards are used as reported unless
    ``standardize=True`` (then standardized, never warped) and the first asks are
    uniformly random.

    Every call that changes the loop (``ask``, ``tell``, ``fail``, ``add_arms``,
    ``load_state_dict``...) is atomic: if it fails or is interrupted, the loop is
    exactly as it was, without any recomputation (see
    :class:`~botorch_sketch.generation.ask_tell.ArmLoop`), and the call can be
    retried. Not thread-safe: call it from
    one thread, or hold one lock around each call (``state_dict`` and
    ``load_state_dict`` included); a call made while another thread is inside one
    is refused with a RuntimeError that changes nothing (see docs/design.md,
    Conventions).

    :meth:`state_dict` holds the observations with the sizes of the ``tell`` calls,
    the pending and failed arms, the generator state, the prior weights drawn
    ahead and the learned hyperparameters; ``load_state_dict`` replays the
    observations (from the last refit on, in the same calls) and continues with the
    same choices.

    Options: the arms, ``covar_module`` and ``seed`` are arguments of the loop;
    every other setting is a field of :class:`SGPTSOptions` (:attr:`options`, saved
    by :meth:`state_dict`), given as ``options=`` or as keyword overrides of its
    fields (``SGPTS(arms, num_inducing=50)``).

    Example:
        >>> loop = SGPTS(arms, seed=0)        # learns kernel, noise and scale
        >>> running = loop.ask(8)             # one arm per free worker
        >>> loop.tell(running[:1], y0)        # outcomes in any order
        >>> loop.fail(running[1:2])           # a crashed evaluation
        >>> more = loop.ask(2)                # 6 still pending
    """

    #: The class of :attr:`options`
    options_class = SGPTSOptions

    def __init__(
        self,
        arms: Tensor,
        options: SGPTSOptions | None = None,
        *,
        covar_module: Kernel | None = None,
        seed: int = 0,
        **overrides: Any,
    ) -> None:
        r"""
        Args:
            arms: ``A x d`` arm set.
            options: The loop's settings (:class:`SGPTSOptions`, each field with
                its default and meaning); None: the defaults.
            covar_module: Fixed stationary kernel without batch shape; None
                (default) learns one on the arms mapped to the unit cube.
            seed: Seed of the (CPU) generator behind the feature basis and every
                later random choice (the same choices on every device).
            **overrides: Fields of :class:`SGPTSOptions` that replace those of
                ``options`` (e.g. ``SGPTS(arms, num_inducing=50)``).
        """
        check_matrix(arms, "arms")
        options = merged_options(SGPTSOptions, options, overrides, type(self).__name__)
        super().__init__(arms, covar_module=covar_module, options=options)
        check_int(seed, "seed", 0)
        self.seed = seed
        self.generator, self._basis_seed, self._design = self._fresh(seed)
        self.sampler = self._sampler_from(self._basis_seed)
        #: Observations the sampler was rebuilt from at the last successful refit
        #: (0: built at construction), replayed in one update by
        #: :meth:`load_state_dict` (the later ones in their ``tell`` calls);
        #: ``add_arms`` rebuilds nothing, so it leaves it
        self._rebuilt_at = 0
        self.tell_sizes: list[int] = []
        #: What a saved state must match (:meth:`load_state_dict`)
        self.fingerprint = self._fingerprint(
            alpha="schedule" if callable(options.alpha) else float(options.alpha),
            num_inducing=options.num_inducing,
            num_features=options.num_features,
            inducing_quality=options.inducing_quality,
        )

    def _fresh(self, seed: int) -> tuple[torch.Generator, int, Tensor]:
        r"""A generator seeded with ``seed`` that drew the seed of the feature basis
        (kept for every rebuild: the same frequencies, scaled by each kernel), then
        the initial design."""
        # draws on the CPU, then moved: the same choices on every device
        generator = torch.Generator().manual_seed(seed)
        basis_seed = draw_basis_seed(generator)
        return generator, basis_seed, self._space_filling_design(generator)

    def _build_sampler(self, cache: ArmFeatureCache) -> ArmThompsonSampler:
        r"""The posterior the loop samples from: S-GP-TS's sparse one (a subclass may
        return another sampler over ``cache``, e.g. the exact posterior)."""
        return CachedSparseThompson(
            cache,
            self.noise,
            self.options.num_inducing,
            inducing_quality=self.options.inducing_quality,
            prior_block=self.options.prior_block,
        )

    @property
    def observed(self) -> Tensor:
        r"""Told arm indices, in the order told (``t``)."""
        return self.sampler.observed

    @property
    def rewards(self) -> Tensor:
        r"""Their rewards as reported (``t``)."""
        return self.sampler.rewards

    def ask(self, max_arms: int | None = None, *, wait: bool = True) -> Tensor:
        r"""``max_arms`` (default 1) new arm indices, added to :attr:`pending`.

        The arms of the initial design come first; then each is the argmax of a
        fresh path (uniformly random before any outcome), so the result is never
        empty; ``max_arms=0`` is a ValueError.

        Atomic: if sampling fails or is interrupted, nothing changes (the
        generator and the prior weights drawn ahead included).

        Args:
            max_arms: The number of arms.
            wait: As for ``BBKB.ask``; S-GP-TS never waits, so it changes nothing.

        Returns:
            A LongTensor of ``max_arms`` arm indices (repeats possible).
        """
        k = self._checked_ask(max_arms, wait, 1)
        # one path per arm: a k x (arms) block of path values
        check_allocation(k * self.arms.shape[0], "`max_arms`", self.arms)
        design = self._design_left(k)
        k -= design.numel()
        indices = design[:0] if k == 0 else self._draw(k, design)
        self._design_asked += design.numel()
        indices = torch.cat([design, indices])
        self._hold(indices)
        return indices

    def ask_values(self) -> Tensor:
        r"""The ``A`` values of a fresh Thompson path (uniform draws before any
        outcome; the initial design not consulted), ``-inf`` at the arms the
        repeat rule holds (pending copies, or told arms on a deterministic
        objective, that would not pay): its argmax is the arm ``ask(1)`` would
        take after the design, with the same draw. For callers that pick an arm
        from several loops' values
        (:class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`) and
        then :meth:`ask_arms` it.

        Returns:
            ``A`` values (``-inf`` at held arms).
        """
        sampler, num_arms = self.sampler, self.arms.shape[0]
        if sampler.num_observations == 0:
            values = torch.rand(num_arms, 1, generator=self.generator).to(self.arms)
        else:
            alpha = resolve_alpha(self.options.alpha, sampler.num_observations + 1)
            values = sampler.sample_values(1, alpha, self.generator)
        values, threshold = values[:, 0], self._repeat_threshold()
        if threshold == 0:
            return values
        copies = torch.bincount(self.pending, minlength=num_arms)
        measured = copies > 0
        if holds_told_arms(threshold):
            measured[sampler.observed] = True
        held = measured.nonzero().squeeze(-1)
        spent = held[~self._repeats_pay(held, copies, threshold)]
        return values.index_fill(0, spent, -torch.inf)

    def _draw(self, k: int, design: Tensor) -> Tensor:
        r"""``k`` arms after the ``design`` arms of this ask: the argmaxes of ``k``
        fresh paths (uniformly random arms before any outcome), under the repeat
        rule when it is on (:meth:`_admitted_argmaxes`)."""
        sampler, threshold = self.sampler, self._repeat_threshold()
        num_arms = self.arms.shape[0]
        if sampler.num_observations == 0:
            if threshold == 0:
                return torch.randint(num_arms, (k,), generator=self.generator).to(
                    self.arms.device
                )
            values = torch.rand(num_arms, k, generator=self.generator).to(self.arms)
        else:
            alpha = resolve_alpha(self.options.alpha, sampler.num_observations + 1)
            if threshold == 0:
                return sampler.sample(k, alpha, self.generator).indices
            values = sampler.sample_values(k, alpha, self.generator)
        return self._admitted_argmaxes(values, torch.cat([self.pending, design]))

    def _admitted_argmaxes(self, values: Tensor, pending: Tensor) -> Tensor:
        r"""The argmax of each of ``q`` paths (``A x q`` ``values``), path after
        path, over the arms the repeat rule admits: an arm ``pending`` or taken by
        an earlier path (or told, on a deterministic objective), asked ``c`` times
        and not told yet, with ``sigma~^2`` given the told arms, counts as
        ``sigma~^2 / (1 + c sigma~^2)`` (its own copies hallucinated: Thompson
        sampling hallucinates no other arm). A path whose every arm is spent takes
        its argmax anyway."""
        threshold, num_arms = self._repeat_threshold(), values.shape[0]
        copies = torch.bincount(pending, minlength=num_arms)
        measured = copies > 0
        if holds_told_arms(threshold):
            measured[self.sampler.observed] = True
        spent = torch.zeros_like(measured)  # only grows: copies only grow
        picks = []
        for column in values.unbind(-1):
            pick = self._first_admitted(column, spent, measured, copies, threshold)
            copies[pick] += 1
            measured[pick] = True
            picks.append(pick)
        return torch.tensor(picks, dtype=torch.long, device=self.arms.device)

    def _first_admitted(
        self,
        column: Tensor,
        spent: Tensor,
        measured: Tensor,
        copies: Tensor,
        threshold: float,
    ) -> int:
        r"""The best arm of one path's ``column`` (``A``) that the repeat rule
        admits, walking the arms in decreasing value in blocks (the top 64, 256,
        ...; one batched variance per block); the arms passed over are marked
        ``spent``. The path's argmax when every arm is spent."""
        scores = column.masked_fill(spent, -torch.inf)
        seen, size = 0, WALK_BLOCK
        while seen < scores.numel():
            size = min(size, scores.numel())
            top = scores.topk(size).indices[seen:]
            top = top[scores[top] > -torch.inf]
            if top.numel() == 0:
                break
            admitted = ~measured[top]
            repeated = ~admitted
            if bool(repeated.any()):
                admitted[repeated] = self._repeats_pay(top[repeated], copies, threshold)
            if bool(admitted.any()):
                first = int(admitted.to(torch.uint8).argmax())
                spent[top[:first]] = True
                return int(top[first])
            spent[top] = True
            seen, size = size, size * 4
        return int(column.argmax())

    def _repeats_pay(self, indices: Tensor, copies: Tensor, threshold: float) -> Tensor:
        r"""Whether one more evaluation of each of ``b`` arms ``indices``, with
        ``copies[indices]`` evaluations pending, removes at least ``threshold
        k(x, x)`` of its variance
        (:func:`~botorch_sketch.generation.repeats.repeat_reduction`): ``b``
        booleans, one batched variance."""
        if threshold == torch.inf:
            return torch.zeros_like(indices, dtype=torch.bool)
        sampler = self.sampler
        prior = sampler.cache.kernel(sampler.cache.arms[indices], diag=True).detach()
        told = sampler.variance(indices) if sampler.num_observations else prior
        scaled = hallucinated_variance(told / sampler.noise, copies[indices])
        return repeat_reduction(scaled, prior, sampler.noise) >= threshold

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Report outcomes of pending arms (any non-empty sub-multiset, any order).

        Atomic: if the update fails or is interrupted, the loop is as before the
        call (the arms stay pending) and the error is raised.

        Args:
            indices: ``b`` pending arm indices.
            rewards: ``b`` (or ``b x 1``) finite rewards.
        """
        keep, indices, rewards = self._checked_outcomes(indices, rewards)
        self._observe(self.sampler, indices, rewards)
        self.tell_sizes.append(indices.shape[0])
        if self._refit_due(self.num_observations):
            sampler = self.sampler
            self._refit(sampler.observed, sampler.rewards, sampler.update_arms.unique())
        self._drop_pending(keep)

    def _observe(
        self, sampler: ArmThompsonSampler, indices: Tensor, rewards: Tensor
    ) -> None:
        r"""``sampler`` observes, conditioned on the targets of all its rewards
        (:meth:`targets_of`) in the same update."""
        told = torch.cat([sampler.rewards, rewards.reshape(-1).to(sampler.rewards)])
        sampler.observe(indices, rewards, self.targets_of(told))

    def _use_hyperparameters(self, kernel: Kernel, noise: float) -> None:
        r"""Rebuild the feature cache and the posterior once for a refitted kernel
        and ``lambda`` (the refit of :meth:`tell`, on the inducing points)."""
        self.covar_module, self.noise = kernel, noise
        sampler = self.sampler
        rebuilt = self._sampler_from(
            self._basis_seed, sampler.observed, sampler.rewards
        )
        rebuilt.prior_bank.load(sampler.prior_bank.remaining)
        self.sampler, self._rebuilt_at = rebuilt, self.num_observations

    def _sampler_from(
        self,
        basis_seed: int,
        observed: Tensor | None = None,
        rewards: Tensor | None = None,
    ) -> ArmThompsonSampler:
        r"""A sampler for the loop's kernel and ``lambda`` on the kernel inputs'
        features with the basis of ``basis_seed``, with the ``observed`` arms and
        their ``rewards`` (if any) in one update."""
        cache = ArmFeatureCache(
            self.kernel_inputs,
            self.covar_module,
            self.options.num_features,
            basis_seed=basis_seed,
            memory_budget=self.options.memory_budget,
            cache_dtype=self.options.cache_dtype,
        )
        sampler = self._build_sampler(cache)
        if observed is not None and observed.numel():
            self._observe(sampler, observed, rewards)
        return sampler

    def add_arms(self, points: Tensor) -> Tensor:
        r"""Append ``n`` arms, e.g. configurations refined near good ones
        (:func:`~botorch_sketch.generation.refinement.refinement_points`).

        Incremental: only the new arms' random features, their entries in the
        kernel columns of the ``m`` update arms and their prior values for the
        ``r`` weights drawn ahead are computed, ``O(n (M + m) d + n M r)``, plus an
        amortized copy of the cached per-arm tensors when their buffers are full
        (:meth:`~botorch_sketch.generation.thompson_arms.ArmThompsonSampler.add_arms`).
        The posterior depends on the told arms only, so it is kept: the paths, and
        the choices from then on, are those of a loop built on all arms that made
        the same calls, up to rounding (with ``inducing_quality="variance"``, also
        those of a rebuild on all arms). Told, pending and failed arms keep their
        indices. With a learned kernel the points must lie in the bounding box of
        the arms the loop was built with.

        Args:
            points: ``n x d`` new arms, in the arms' dtype.

        Returns:
            Their indices ``A, ..., A + n - 1``.
        """
        points, new_inputs = self._checked_new_arms(points)
        first = self.arms.shape[0]
        self.sampler.add_arms(new_inputs)
        self.arms = torch.cat([self.arms, points])
        self.kernel_inputs = torch.cat([self.kernel_inputs, new_inputs])
        return torch.arange(first, self.arms.shape[0], device=self.arms.device)

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume exactly, pending and failed arms included."""
        return {
            **super().state_dict(),
            "seed": self.seed,
            "tell_sizes": list(self.tell_sizes),
            "prior_weights": self.sampler.prior_bank.remaining.clone(),
            "rebuilt_at": self._rebuilt_at,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (same arms and options; any ``seed``).

        The state is validated first; then the feature basis is redrawn from the
        saved seed (and, after a refit, for the saved kernel), and the observations
        are replayed as told, ``O(A M + t m^2)``: those up to the last refit in one
        update, the later ones in the saved ``tell`` calls. Later choices equal the
        saved loop's. A state saved by a loop on other arms, another fixed kernel
        or other options is rejected (its fingerprint differs)."""
        saved = self._checked_saved(state, _STATE_KEYS)
        arms, observed, rewards = saved.arms, saved.observed, saved.rewards
        seed = check_int(state["seed"], "state['seed']", 0)
        sizes = _checked_tell_sizes(state["tell_sizes"], observed.shape[0])
        prior_weights = check_matrix(
            state["prior_weights"],
            "state['prior_weights']",
            num_cols=self.options.num_features,
            allow_empty=True,
        )
        rebuilt_at = check_int(
            state["rebuilt_at"], "state['rebuilt_at']", 0, observed.shape[0]
        )
        replayed = _replayed_chunks(sizes, rebuilt_at)
        self._restore(saved)  # the hyperparameters first (atomic: undone on error)
        self.arms, self.kernel_inputs = arms, cube_coordinates(arms, self.box)
        generator, basis_seed, design = self._fresh(seed)
        sampler = self._sampler_from(
            basis_seed, observed[:rebuilt_at], rewards[:rebuilt_at]
        )
        for chunk, values in zip(
            observed[rebuilt_at:].split(replayed),
            rewards[rebuilt_at:].split(replayed),
            strict=True,
        ):
            self._observe(sampler, chunk, values)
        sampler.prior_bank.load(prior_weights)
        generator.set_state(state["generator"])
        self.seed, self.generator, self.sampler = seed, generator, sampler
        self._basis_seed, self._design = basis_seed, design
        self._rebuilt_at = rebuilt_at
        self.tell_sizes = list(sizes)


class ExactGPTS(SGPTS):
    r"""Asynchronous exact GP-TS: the :class:`SGPTS` loop (the same seeding, feature
    basis and initial arms, one fresh path per asked arm, pending arms kept out of
    the posterior) on the exact posterior
    (:class:`~botorch_sketch.generation.thompson_arms.IncrementalExactThompson`:
    cached kernel columns of the observed arms, a Cholesky factor grown by rows,
    ``O(A (M + t) + t^2)`` per path, ``O(A t)`` memory); the exact baseline of
    asynchronous S-GP-TS. ``num_inducing`` and ``inducing_quality`` do not apply.

    Example:
        >>> loop = ExactGPTS(arms, covar_module=kernel, noise=0.01, seed=0)
        >>> running = loop.ask(4)
    """

    def _build_sampler(self, cache: ArmFeatureCache) -> ArmThompsonSampler:
        return IncrementalExactThompson(
            cache, self.noise, prior_block=self.options.prior_block
        )


def _checked_tell_sizes(sizes: object, num_observations: int) -> list[int]:
    r"""Validate ``state['tell_sizes']``: positive ints summing to the
    observations."""
    if (
        not isinstance(sizes, list)
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)
        or sum(sizes) != num_observations
    ):
        raise ValueError(
            "`state['tell_sizes']` must be a list of positive ints summing to the "
            "number of observations."
        )
    return sizes


def _replayed_chunks(sizes: list[int], rebuilt_at: int) -> list[int]:
    r"""The ``tell`` sizes after the first ``rebuilt_at`` observations (a refit
    happens at the end of a ``tell``, so ``rebuilt_at`` is a sum of the first
    sizes)."""
    told = 0
    for position, size in enumerate(sizes):
        if told == rebuilt_at:
            return sizes[position:]
        told += size
    if told == rebuilt_at:
        return []
    raise ValueError(
        "`state['rebuilt_at']` must end a `tell` call of `state['tell_sizes']`."
    )
