r"""Ask/tell BBKB (and BKB, ``ratio_threshold=1``) on a finite arm set, synchronous or
asynchronous, resumable."""

from __future__ import annotations

import math
from typing import Any

import torch
from botorch.models.transforms.input import Normalize
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.acquisition.bkb import TheoryRadius, radius_value
from botorch_sketch.generation.ask_tell import STATE_KEYS, ArmLoop
from botorch_sketch.generation.bbkb import (
    BatchGreedy,
    copies_of,
)
from botorch_sketch.generation.hyperparameters import (
    UCB_FIT_INDUCING,
    cube_coordinates,
)
from botorch_sketch.generation.options import (
    BBKBOptions,
    merged_options,
)
from botorch_sketch.generation.repeats import holds_told_arms
from botorch_sketch.generation.variance_tracking import CachedGeometry
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.dictionary import inclusion_probabilities, sample_dictionary
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.utils.atomic import reset_on_rollback
from botorch_sketch.utils.validation import (
    check_at_least,
    check_finite,
    check_indices,
    check_int,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_number,
    check_positive,
)

#: Default radius of a loop that learns its kernel, on the Bayesian scale:
#: ``mu + 2 sigma`` (``2 sqrt(lambda)`` on the papers' scale, whatever ``lambda`` is
#: learned). On Hartmann-6 (8,192 Sobol arms, 100 evaluations, seeds 0-4) it left a
#: mean simple regret of 0.37, against 0.54 for 1 and 0.50 for 3.
DEFAULT_BAYES_RADIUS = 2.0

#: The same for a batch that opens with arms pending (asynchronous asks, each
#: pick made with other trials in flight): ``mu + 0.5 sigma`` with the pending arms
#: hallucinated. On bbob in 5-D (24 functions, instances 1-3, 8 in flight) it
#: raised the fraction of targets solved after 50 / 100 / 300 trials from
#: 0.111 / 0.147 / 0.183 to 0.117 / 0.153 / 0.197; with every result in each ask
#: (``ratio_threshold=1``) 0.5 gave 0.119 / 0.154 / 0.200, 1 gave
#: 0.117 / 0.155 / 0.194 and 0 gave 0.120 / 0.153 / 0.189.
DEFAULT_PENDING_BAYES_RADIUS = 0.5

#: The keys of :meth:`BBKB.state_dict`, all required by :meth:`BBKB.load_state_dict`.
_STATE_KEYS = (
    *STATE_KEYS,
    "pending_variances",
    "incorporated",
    "batch",
    "batch_radius",
    "dictionary",
    "draws",
    "radius",
    "design",
)


class WorkerRatioThreshold:
    r"""BBKB's ratio threshold for ``W`` asynchronous workers,
    ``C~ = 1 + 0.07 W v`` with ``v = max_x k(x, x) / lambda`` read from the loop's
    kernel and ``lambda`` when each batch opens, so it follows a learned ``lambda``
    (see :func:`asynchronous_options`).

    Example:
        >>> WorkerRatioThreshold(100)(1.0)
        8.0
    """

    def __init__(self, num_workers: int) -> None:
        self.num_workers = check_int(num_workers, "num_workers", 1)

    def __call__(self, scaled_prior_variance: float) -> float:
        return 1.0 + self.num_workers * scaled_prior_variance * 7 / 100

    def __repr__(self) -> str:
        return f"WorkerRatioThreshold({self.num_workers})"


def asynchronous_options(
    num_workers: int, scaled_prior_variance: float | None = None
) -> dict[str, float | int | WorkerRatioThreshold]:
    r""":class:`BBKB` options (fields of :class:`BBKBOptions`) for ``W`` workers
    that evaluate asynchronously (``ask(free workers)`` after every completion).

    - ``ratio_threshold = 1 + 0.07 W v`` (``v = max_x k(x, x) / lambda``,
      :class:`WorkerRatioThreshold`: recomputed at each batch from the loop's
      kernel and ``lambda``, unless ``v`` is given): the
      global rule admits ``W`` pending arms once their mean start variance is 7%
      of the prior's (that of an arm after about 13 observations near it when
      ``v = 1``), so it throttles the workers only while the chosen arms are barely
      explored. On the simulated cluster with cadata and ``W = 100``
      (docs/benchmarks.md, seeds 0-7) ``C~ = 8`` kept 92-94% of the workers busy
      until the last evaluation started, ``C~ = 6`` below 90%, and ``C~ = 11``
      ended with a regret ratio 7% higher on average.
    - ``end_fraction = 0.05`` and ``max_batch_size = W + ceil(W / 20)``: a full
      batch ends once 5% of its arms are done, so one posterior update serves
      several completions; an outcome waits for at most about 5% more completions
      than the ``W`` evaluations in flight, and once the rule admits all ``W``
      workers the cap's room of ``W / 20`` arms keeps every worker busy meanwhile.

    Args:
        num_workers: The number of workers ``W >= 1``.
        scaled_prior_variance: ``v > 0``, the largest prior variance over
            ``lambda``, fixed; None (default): the loop's at each batch.

    Returns:
        ``ratio_threshold``, ``end_fraction`` and ``max_batch_size``.

    Example:
        >>> loop = BBKB(
        ...     arms, covar_module=kernel, **asynchronous_options(num_workers=100)
        ... )
        >>> options = BBKBOptions(**asynchronous_options(100), qbar=2.0)
    """
    threshold = WorkerRatioThreshold(num_workers)
    if scaled_prior_variance is not None:
        threshold = threshold(
            check_positive(scaled_prior_variance, "scaled_prior_variance")
        )
    return {
        "ratio_threshold": threshold,
        "end_fraction": 0.05,
        "max_batch_size": num_workers + math.ceil(num_workers / 20),
    }


class BBKB(ArmLoop):
    r"""The BBKB loop: ``ask()`` an adaptive batch of arm indices, evaluate them,
    ``tell(indices, Y)``; the posterior is conditioned and the dictionary resampled at
    each batch end.

    The posterior of all arms lives in a persistent
    :class:`~botorch_sketch.models.candidate_state.CandidateState`: a batch end costs
    ``O(A m)`` per distinct arm observed and per dictionary point that enters or
    leaves, never a rescoring of all arms (``O(A m^2)``). With
    ``resampling="coupled"`` (the default) each observed arm keeps one uniform draw
    and is in the dictionary iff the draw is below its inclusion probability
    ``min(1, qbar c sigma~^2_fb(x))``: the same marginals as independent resampling,
    far fewer dictionary changes (see
    :func:`~botorch_sketch.models.dictionary.sample_dictionary`).

    Asynchronous use: arms asked and not yet told are :attr:`pending`. The batch stays
    open across asks: ``ask(max_arms=k)`` continues its greedy with the pending arms
    hallucinated (variance-only update) and counted by the termination rule, so it
    fills ``k`` free workers while the rule admits arms and returns fewer, or none,
    when fresh outcomes must be waited for. ``tell`` takes any subset of the pending
    arms in any order; its outcomes enter the posterior when the batch ends (once
    the rule is full and ``end_fraction`` of its arms are done, or at once when
    nothing stays pending). ``fail`` records arms whose evaluation failed;
    ``ask_arms`` marks arms of the user's choice asked.
    :func:`asynchronous_options` gives settings for ``W`` asynchronous workers.
    Used synchronously (``ask()`` with nothing pending, then ``tell`` the whole
    batch) this is the BBKB of the paper; with one worker (``ask(1)``, ``tell``) it
    is BKB.

    Self-tuning (the default when no ``covar_module`` is given): the arms are mapped
    to the unit cube by their bounding box, the first ``num_initial`` arms asked are
    a space-filling design (the arms nearest to scrambled Sobol points), the
    posterior is conditioned on the rewards standardized and warped by a
    Yeo-Johnson power fitted at each refit
    (:mod:`~botorch_sketch.generation.reward_warping`; an ``O(A m)`` recomputation
    of the cached means at each batch end,
    :meth:`~botorch_sketch.models.candidate_state.CandidateState.set_targets`), and
    the kernel's ARD lengthscales and outputscale and ``lambda`` are refitted by MAP
    on the collapsed bound (BoTorch's default priors,
    :func:`~botorch_sketch.generation.hyperparameters.learnable_covar_module`) each time
    the observations have grown by ``refit_growth`` since the last fit, warm-started
    from it, at a batch end (then the candidate state is recomputed once). A
    ``covar_module`` given by the user stays fixed and the rewards are taken as
    reported unless ``standardize=True`` (then standardized, never warped).

    Every call that changes the loop (``ask``, ``tell``, ``fail``, ``add_arms``,
    ``load_state_dict``...) is atomic: if it fails or is interrupted, the loop is
    exactly as it was, without any recomputation (see
    :class:`~botorch_sketch.generation.ask_tell.ArmLoop`), and the call can be
    retried. Not thread-safe: call it from one thread, or hold one lock around
    each call (``state_dict`` and ``load_state_dict`` included); a call made while
    another thread is inside one is refused with a RuntimeError that changes
    nothing (see docs/design.md, Conventions).

    Everything needed to resume is in :meth:`state_dict`: observed arm indices and
    rewards, pending and failed arms, the dictionary, the persistent draws, the radius
    state, the learned hyperparameters and the generator state; ``load_state_dict``
    on a loop built with the same arms and options recomputes the posterior and
    continues with the same choices.

    Options: the arms, ``covar_module`` and ``seed`` are arguments of the loop;
    every other setting is a field of :class:`BBKBOptions` (:attr:`options`, saved
    by :meth:`state_dict`), given as ``options=`` or as keyword overrides of its
    fields (``BBKB(arms, ratio_threshold=4.0)``).

    Example:
        >>> loop = BBKB(arms, seed=0)  # learns the kernel, the noise, the scale
        >>> for _ in range(100):
        ...     indices = loop.ask()
        ...     loop.tell(indices, f(arms[indices]))
    """

    #: The class of :attr:`options`
    options_class = BBKBOptions
    #: UCB's refits use fewer inducing points than a study's
    #: (:data:`~botorch_sketch.generation.hyperparameters.UCB_FIT_INDUCING`)
    default_fit_inducing = UCB_FIT_INDUCING

    def __init__(
        self,
        arms: Tensor,
        options: BBKBOptions | None = None,
        *,
        covar_module: Kernel | None = None,
        seed: int = 0,
        **overrides: Any,
    ) -> None:
        r"""
        Args:
            arms: ``A x d`` arm set.
            options: The loop's settings (:class:`BBKBOptions`, each field with its
                default and meaning); None: the defaults.
            covar_module: Fixed kernel on the arms; None (default) learns one on the
                arms mapped to the unit cube (see above).
            seed: Seed of the (CPU) generator behind every random choice.
            **overrides: Fields of :class:`BBKBOptions` that replace those of
                ``options`` (e.g. ``BBKB(arms, qbar=2.0)``).
        """
        check_magnitude(check_matrix(check_model_dtype(arms, "arms"), "arms"), "arms")
        options = merged_options(BBKBOptions, options, overrides, "BBKB")
        super().__init__(arms, covar_module=covar_module, options=options)
        check_int(seed, "seed", 0)
        #: The papers'-scale radius option (a :class:`TheoryRadius` is updated:
        #: the loop's own copy, made by ``merged_options``)
        self.radius = options.radius
        # draws on the CPU, then moved: the same choices on every device
        self.generator = torch.Generator().manual_seed(seed)
        self._design = self._space_filling_design(self.generator)
        self.state = self._new_state()
        self.observed = torch.empty(0, dtype=torch.long, device=arms.device)
        self.rewards = torch.empty(0, dtype=arms.dtype, device=arms.device)
        self.draws = torch.full_like(self.state.counts, float("nan"))
        self.incorporated = 0  # observations in the posterior (the rest wait)
        self._pending_variances = self.rewards.clone()  # sigma~^2 when asked
        # the open batch: its arms (held and asked), in-batch radius and greedy
        self._batch: Tensor | None = None
        self._batch_radius: float | None = None
        self._greedy: BatchGreedy | None = None
        self.total_churn = 0
        self.num_batches = 0
        self._model: NystromGP | None = None
        #: What a saved state must match (:meth:`load_state_dict`)
        self.fingerprint = self._fingerprint(
            radius=type(self.radius).__name__
            if isinstance(self.radius, TheoryRadius)
            else self.radius,
        )

    @property
    def model(self) -> NystromGP | None:
        r"""The current posterior as a ``NystromGP`` on all told observations (built
        on first access after each batch, ``O(u m^2)``; the loop itself never needs
        it), on the arms' coordinates (with BoTorch's ``Normalize`` transform when
        the loop learns its kernel) and the loop's targets (:meth:`targets_of`: the
        rewards, or their standardized and warped values when the loop
        standardizes). None before any data."""
        if self._model is None and self.num_observations > 0:
            learned = self.refits is not None
            self._model = NystromGP(
                self.arms[self.observed],
                self.targets_of(self.rewards).unsqueeze(-1),
                covar_module=self.covar_module,
                noise=self.noise,
                qbar=self.options.qbar,
                dictionary=self.arms[self.state.dictionary],
                input_transform=Normalize(self.arms.shape[-1], bounds=self.box)
                if learned
                else None,
            )
        return self._model

    @property
    def ucb_radius(self) -> float:
        r"""The papers'-scale radius ``beta~`` of the open batch, or of the next
        (which opens holding the arms pending now)."""
        if self._batch_radius is not None:
            return self._batch_radius
        return self._radius_value(pending=bool(len(self.pending)))

    def ucb_scores(self) -> Tensor:
        r"""The ``A`` arms' BKB-UCB ``mu + beta~ sigma~`` on the current posterior
        (the pending arms not counted), ``O(A)``."""
        return self.state.mean + self.ucb_radius * self.state.scaled_variance.sqrt()

    def ask(self, max_arms: int | None = None, *, wait: bool = True) -> Tensor:
        r"""The next arms of the open batch, given the :attr:`pending` ones.

        The batch stays open (posterior frozen, its arms hallucinated) while its rule
        admits arms: outcomes told meanwhile wait. Once the rule is full and
        ``end_fraction`` of its arms (at least one) have been told or have failed,
        the batch ends (posterior update and dictionary resampling with those
        outcomes) and a new one opens with the still pending arms hallucinated (one
        rank-``p`` update for ``p`` distinct arms). Atomic: if the update or the
        choice of arms fails, the loop is exactly as before the call (a batch end
        made on the way included) and the call can be retried.

        Args:
            max_arms: At most this many arms (e.g. the free workers); default: as
                many as the batch rule admits (and ``max_batch_size``).
            wait: With False, an ask that would return no arm returns one: the
                in-batch UCB argmax with the pending arms hallucinated, past the
                rule (GP-BUCB's choice), for callers that cannot wait.

        Returns:
            A LongTensor of ``b`` arm indices, repeats possible. ``b >= 1`` when
            nothing is pending (the first ask, with no data, draws one arm uniformly
            at random) or ``wait`` is False; ``b = 0`` when the pending arms fill
            the batch rule: wait for their outcomes.
        """
        limit = self._checked_ask(max_arms, wait, self.options.max_batch_size)
        excluded = self._excluded()
        if excluded is not None and bool(excluded.all()):
            raise RuntimeError("Every arm has failed: nothing is left to ask.")
        if self._design_asked < self._design.numel():
            indices = self._design_left(limit)
            self._hold(indices)
            self._design_asked += indices.numel()
            return indices.clone()
        if self.num_observations == 0 and self._batch is None and not len(self.pending):
            indices = self._random_arm(excluded)
            start_variances = self.state.scaled_variance[indices]
        else:
            indices, start_variances = self._extend(limit, excluded)
            done = self._batch.numel() - self.pending.numel()  # told or failed
            fraction = self.options.end_fraction
            enough = done >= max(1.0, fraction * self._batch.numel())
            if indices.numel() == 0 and enough:
                # the rule is full and enough arms of the batch are done: end it
                self._end_batch(self.observed, self.rewards)
                indices, start_variances = self._extend(limit, excluded)
            if indices.numel() == 0 and not wait:
                indices, start_variances = self._extend(1, excluded, True)
        self.pending = torch.cat([self.pending, indices])
        self._pending_variances = torch.cat([self._pending_variances, start_variances])
        return indices.clone()

    def ask_values(self) -> Tensor:
        r"""The ``A`` values whose argmax BKB would ask next: the in-batch UCB
        ``mu + beta~ sigma~`` with every told outcome in the posterior (an open
        batch with an outcome waiting ends first) and the :attr:`pending` arms
        hallucinated, ``-inf`` at the arms a failure or the repeat rule excludes.
        With ``ratio_threshold=1`` its argmax is the arm of ``ask(1,
        wait=False)``. For callers that pick an arm from several loops' values
        (:class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`) and
        then :meth:`ask_arms` it. ``O(A m p)`` for ``p`` pending arms.

        Returns:
            ``A`` values (``-inf`` at excluded arms).
        """
        if self.incorporated < self.num_observations:
            self._end_batch(self.observed, self.rewards)
        if self._greedy is None:
            self._greedy = self._open_batch(self._excluded())
        reset_on_rollback(self, "_greedy")  # its tracker refreshes in place
        argmax = self._greedy.argmax
        every_arm = torch.arange(self.arms.shape[0], device=self.arms.device)
        variance = self._greedy.tracker.refresh(every_arm)
        return argmax.mean + argmax.radius * variance.sqrt() + argmax.floor

    def ask_arms(self, indices: Tensor) -> None:
        r"""Mark user-chosen arms asked, as if :meth:`ask` had returned them (e.g.
        configurations to evaluate first).

        They join :attr:`pending` and the open batch (or the next one, when none is
        open): the batch's greedy restarts holding them with its other arms, so they
        are hallucinated by the same variance-only update and counted by the same
        rule as asked arms, and later asks continue from there (possibly with fewer
        arms, or none). They are added whatever the rule and ``max_batch_size``
        say, and whether or not they failed before.

        Args:
            indices: ``b`` arm indices (LongTensor, repeats allowed).
        """
        super().ask_arms(indices)

    def _hold(self, indices: Tensor) -> None:
        r"""Add asked arms to :attr:`pending` and to the open batch (see
        :meth:`ask_arms`)."""
        if self.num_observations or len(self.pending) or self._batch is not None:
            self._begin_batch()  # as ask (the first ask opens no batch)
            self._batch = torch.cat([self._batch, indices])
            self._greedy = None  # reopened holding them by the next ask
        self.pending = torch.cat([self.pending, indices])
        self._pending_variances = torch.cat(
            [self._pending_variances, self.state.scaled_variance[indices]]
        )

    def _random_arm(self, excluded: Tensor | None) -> Tensor:
        allowed = torch.arange(self.arms.shape[0], device=self.arms.device)
        if excluded is not None:
            allowed = allowed[~excluded]
        pick = torch.randint(allowed.shape[0], (1,), generator=self.generator)
        return allowed[pick.to(allowed.device)]

    def _extend(
        self, limit: int, excluded: Tensor | None, past_rule: bool = False
    ) -> tuple[Tensor, Tensor]:
        r"""Up to ``limit`` more arms of the open batch (opened if none) and their
        start-of-batch variances; ``past_rule``: one arm whatever the batch rule
        and ``max_batch_size`` say."""
        if self._greedy is None:
            self._greedy = self._open_batch(excluded)
        # updated in place: a failed call drops it, the next ask reopens it
        reset_on_rollback(self, "_greedy")
        greedy = self._greedy
        room = 1 if past_rule else self.options.max_batch_size - greedy.size
        flops = greedy.tracker.flops
        chosen, _ = greedy.extend(min(limit, room), past_rule) if room > 0 else ([], [])
        self.state.flops += greedy.tracker.flops - flops
        indices = torch.tensor(chosen, dtype=torch.long, device=self.arms.device)
        self._batch = torch.cat([self._batch, indices])
        return indices, greedy.geometry.scaled_variance[indices]

    def _open_batch(self, excluded: Tensor | None) -> BatchGreedy:
        r"""The greedy of the open batch on the current posterior, holding the arms
        of :attr:`_batch` (a new batch: the pending arms)."""
        self._begin_batch()
        threshold = self._repeat_threshold()
        return BatchGreedy(
            CachedGeometry(self.state),
            radius=self._batch_radius,
            ratio_threshold=self._ratio_threshold(),
            rule=self.options.rule,
            residual_update=self.options.residual_update,
            excluded=excluded,
            held=copies_of(self._batch),
            repeat_threshold=threshold,
            observed=self.state.counts > 0 if holds_told_arms(threshold) else None,
        )

    def _ratio_threshold(self) -> float:
        r"""``C~`` now: the option, or its value for the current
        ``v = max k(x, x) / lambda`` when it is a function of ``v``."""
        threshold = self.options.ratio_threshold
        if not callable(threshold):
            return threshold
        scaled = float(self.state.prior_variance.max()) / self.noise
        return check_at_least(threshold(scaled), "ratio_threshold", 1.0)

    def _begin_batch(self) -> None:
        r"""Open a batch holding the pending arms, unless one is open."""
        if self._batch is None:
            self._batch = self.pending.clone()
            self._batch_radius = self._radius_value(pending=bool(len(self.pending)))

    def _radius_value(self, pending: bool = False) -> float:
        r"""The papers'-scale radius now (the default follows ``lambda``), of a
        batch opening with arms ``pending`` or with none."""
        if pending and self.options.pending_radius is not None:
            return self.options.pending_radius
        if self.radius is None and self.refits is not None:
            scale = DEFAULT_PENDING_BAYES_RADIUS if pending else DEFAULT_BAYES_RADIUS
            return scale * math.sqrt(self.noise)
        return radius_value(1.0 if self.radius is None else self.radius, in_batch=True)

    def _end_batch(self, observed: Tensor, rewards: Tensor) -> None:
        r"""Condition on ``observed[incorporated:]`` and resample the dictionary with
        the start-of-batch variances (the papers' ``sigma~_{t-1}``); close the open
        batch (a failure is rolled back by the atomic call that ends the batch)."""
        fresh = slice(self.incorporated, observed.shape[0])
        draws = self.draws.clone()  # drawn into in place
        self._greedy = None  # it reads the state, which the update changes
        if observed[fresh].numel():
            self._update_posterior(observed[fresh], rewards[fresh], draws)
            if self._refit_due(observed.shape[0]):
                self._refit(observed, rewards, self.state.dictionary)
            self._retarget(self.state, observed, rewards)
        self.draws = draws
        self.incorporated = observed.shape[0]
        self._batch = self._batch_radius = None
        self._model = None

    def _excluded(self) -> Tensor | None:
        r"""``A`` booleans marking the failed arms (None when retried or none)."""
        if self.options.retry_failed or self.failed.numel() == 0:
            return None
        excluded = torch.zeros(
            self.arms.shape[0], dtype=torch.bool, device=self.arms.device
        )
        excluded[self.failed] = True
        return excluded

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Report rewards of pending arms (any subset, in any order; of repeated arms,
        the earliest asked copies are the ones told).

        When no arm stays pending the batch ends here (posterior update in place and
        dictionary resampling); otherwise the outcomes wait for the batch to end
        (:meth:`ask`). Atomic: if the update fails, the loop is exactly as before
        the call and the arms stay pending, so nothing is lost and ``tell`` can be
        retried.

        Args:
            indices: ``b`` pending arm indices (LongTensor).
            rewards: ``b`` (or ``b x 1``) observed rewards.
        """
        keep, indices, rewards = self._checked_outcomes(indices, rewards)
        observed = torch.cat([self.observed, indices])
        rewards = torch.cat([self.rewards, rewards])
        if not bool(keep.any()):
            self._end_batch(observed, rewards)
        if isinstance(self.radius, TheoryRadius):
            self.radius.observe(self._pending_variances[~keep])
        self.observed, self.rewards = observed, rewards
        self._drop_pending(keep)
        self._model = None

    def fail(self, indices: Tensor) -> None:
        r"""Record pending arms whose evaluation failed: they leave :attr:`pending` for
        :attr:`failed`, never enter the posterior and are not asked again (unless
        ``retry_failed``).

        Args:
            indices: ``b`` pending arm indices (LongTensor).
        """
        super().fail(indices)
        if self._greedy is not None and not self.options.retry_failed:
            reset_on_rollback(self, "_greedy")
            self._greedy.argmax.exclude(indices)

    def _drop_pending(self, keep: Tensor) -> None:
        super()._drop_pending(keep)
        self._pending_variances = self._pending_variances[keep]

    def _update_posterior(
        self, indices: Tensor, rewards: Tensor, draws: Tensor
    ) -> None:
        r"""Observe the batch and resample the dictionary with the start-of-batch
        variances ``sigma~^2_fb`` (the papers' ``sigma~_{t-1}``), in place."""
        state = self.state
        variance = state.scaled_variance
        counts = state.counts.clone().index_add_(0, indices, torch.ones_like(rewards))
        observed = torch.nonzero(counts).squeeze(-1)
        fresh = (
            observed
            if self.options.resampling == "independent"
            else observed[draws[observed].isnan()]
        )
        draws[fresh] = torch.rand(
            fresh.shape[0], generator=self.generator, dtype=draws.dtype
        ).to(draws.device)
        probabilities = inclusion_probabilities(
            variance[observed], counts[observed], self.options.qbar
        )
        selected = sample_dictionary(probabilities, draws=draws[observed])
        added, removed = state.update(indices, rewards, observed[selected])
        self.total_churn += added + removed
        self.num_batches += 1

    def _retarget(
        self, state: CandidateState, observed: Tensor, rewards: Tensor
    ) -> None:
        r"""Condition ``state`` (whose posterior holds the ``t`` ``observed`` arms)
        on the targets of their ``rewards`` (:meth:`targets_of`), if the loop
        standardizes; else it holds the rewards themselves."""
        if self.standardize:
            state.set_targets(observed, self.targets_of(rewards))

    def _use_hyperparameters(self, kernel: Kernel, noise: float) -> None:
        r"""Recompute the candidate state once for a refitted kernel and
        ``lambda`` (the refit of :meth:`_end_batch`, on the dictionary)."""
        self.state.kernel = kernel
        self.state.refresh(noise)
        self.covar_module, self.noise = kernel, noise

    def add_arms(self, points: Tensor) -> Tensor:
        r"""Append ``n`` arms, e.g. configurations refined near good ones
        (:func:`~botorch_sketch.generation.refinement.refinement_points`).

        The new arms join the candidate state, which holds the posterior given the
        observations incorporated so far
        (:meth:`~botorch_sketch.models.candidate_state.CandidateState.append_points`,
        ``O(n m (m + d))`` and, once in ``~A / 8 n`` calls, a copy of the feature
        cache); told, pending and failed arms, the dictionary and the open batch
        keep their indices (its greedy reopens at the next ask, holding the same
        arms). With a learned kernel the points must lie in the bounding box of the
        arms the loop was built with.

        Args:
            points: ``n x d`` new arms, in the arms' dtype.

        Returns:
            Their indices ``A, ..., A + n - 1``.
        """
        points, new_inputs = self._checked_new_arms(points)
        self.state.append_points(new_inputs)
        first = self.arms.shape[0]
        self.arms = torch.cat([self.arms, points])
        self.kernel_inputs = self.state.points
        self.draws = torch.cat([self.draws, torch.full_like(points[:, 0], torch.nan)])
        self._greedy = self._model = None
        return torch.arange(first, self.arms.shape[0], device=self.arms.device)

    def _new_state(
        self,
        observed: Tensor | None = None,
        rewards: Tensor | None = None,
        dictionary: Tensor | None = None,
        hyperparameters: tuple[Kernel, float] | None = None,
        kernel_inputs: Tensor | None = None,
    ) -> CandidateState:
        r"""The prior state, or one rebuilt from scratch from observations and a
        dictionary (on their targets, :meth:`targets_of`), with the loop's
        kernel and ``lambda`` or the given ``hyperparameters``, on the loop's
        kernel inputs or the given ones."""
        kernel, noise = hyperparameters or (self.covar_module, self.noise)
        inputs = self.kernel_inputs if kernel_inputs is None else kernel_inputs
        options = {"cache_dtype": self.options.cache_dtype}
        if observed is None or observed.numel() == 0:
            return CandidateState(inputs, kernel, noise, **options)
        state = CandidateState.from_observations(
            inputs,
            kernel,
            noise,
            observed,
            rewards,
            dictionary,
            **options,
        )
        self._retarget(state, observed, rewards)
        return state

    def diagnostics(self) -> dict[str, float]:
        r"""Dictionary size, mean churn (points entering or leaving the dictionary per
        batch end), radius, ``lambda``, ``C~`` and the floating-point work so far,
        for logging."""
        return {
            "dictionary_size": self.state.size,
            "dictionary_churn": self.total_churn / max(self.num_batches, 1),
            "gflop": self.state.flops / 1e9,
            "radius": self.radius.value
            if isinstance(self.radius, TheoryRadius)
            else self._radius_value(),
            "noise": self.noise,
            "ratio_threshold": self._ratio_threshold(),
            "refit_seconds": self.refit_seconds,
        }

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume the run exactly, pending arms included."""
        return {
            **super().state_dict(),
            "pending_variances": self._pending_variances.clone(),
            "incorporated": self.incorporated,
            "batch": None if self._batch is None else self._batch.clone(),
            "batch_radius": self._batch_radius,
            "dictionary": self.state.dictionary.clone(),
            "draws": self.draws.clone(),
            "radius": self.radius.state_dict()
            if isinstance(self.radius, TheoryRadius)
            else None,
            "design": self._design.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (the loop must use the same arms/options).

        The whole state is validated before anything changes; the posterior is
        recomputed from scratch from the observations and the dictionary, and the
        open batch reopens holding the same arms. A state saved by a loop on
        other arms, another fixed kernel or ``noise``, radius, ``standardize`` or
        ``num_initial`` is rejected (its fingerprint differs)."""
        saved = self._checked_saved(state, _STATE_KEYS)
        arms, observed, rewards = saved.arms, saved.observed, saved.rewards
        dictionary, draws = _checked_state(state, arms)
        pending_variances = _checked_pending_variances(state, saved.pending, arms)
        incorporated, batch, batch_radius = _checked_batch_state(
            state, arms, observed.shape[0]
        )
        if incorporated and dictionary.numel() == 0:
            raise ValueError(
                "`state['dictionary']` must not be empty once data are in the "
                "posterior (`state['incorporated']` > 0)."
            )
        design = state["design"]  # drawn with the saved seed
        check_indices(design, "state['design']", self._given_arms.shape[0])
        if design.shape != self._design.shape:
            raise ValueError("`state['design']` must hold `num_initial` arms.")
        done = slice(0, incorporated)
        inputs = cube_coordinates(arms, self.box)
        self._restore(saved)  # the targets' power first (atomic: undone on error)
        new_state = self._new_state(
            observed[done],
            rewards[done],
            dictionary,
            (saved.kernel, saved.noise),
            inputs,
        )
        if isinstance(self.radius, TheoryRadius) and state["radius"] is not None:
            self.radius.load_state_dict(state["radius"])
        self._design = design.clone().to(self.arms.device)
        self.state, self.arms, self.kernel_inputs = new_state, arms, inputs
        self.observed, self.rewards, self.draws = observed, rewards, draws
        self.generator.set_state(state["generator"])
        self._pending_variances = pending_variances
        self.incorporated = incorporated
        self._batch, self._batch_radius, self._greedy = batch, batch_radius, None
        self._model = None


def _checked_state(state: dict[str, Any], arms: Tensor) -> tuple[Tensor, Tensor]:
    r"""Validate the posterior part of a :meth:`BBKB.state_dict` against ``arms``
    (``A x d``); return copies of its dictionary (``m``) and draws (``A``)."""
    num_arms = arms.shape[0]
    dictionary, draws = state["dictionary"], state["draws"]
    check_indices(dictionary, "state['dictionary']", num_arms)
    if state["rewards"].dim() != 1:
        raise ValueError("`state['rewards']` must match `state['observed']` in shape.")
    if not isinstance(draws, Tensor) or draws.shape != (num_arms,):
        raise ValueError(f"`state['draws']` must be a tensor of shape ({num_arms},).")
    if bool(((draws < 0) | (draws >= 1)).any()):  # NaN: not drawn yet
        raise ValueError("`state['draws']` must lie in [0, 1) (or be NaN).")
    return dictionary.clone().to(arms.device), draws.clone().to(arms)


def _checked_pending_variances(
    state: dict[str, Any], pending: Tensor, arms: Tensor
) -> Tensor:
    r"""Validate the ``p`` start variances of the ``p`` pending arms of a
    :meth:`BBKB.state_dict`; return a copy."""
    variances = state["pending_variances"]
    check_finite(variances, "state['pending_variances']")
    if variances.shape != pending.shape:
        raise ValueError(
            "`state['pending_variances']` must match `state['pending']` in shape."
        )
    return variances.clone().to(arms)


def _checked_batch_state(
    state: dict[str, Any], arms: Tensor, num_observed: int
) -> tuple[int, Tensor | None, float | None]:
    r"""Validate the incorporated count and the open batch of a
    :meth:`BBKB.state_dict`."""
    incorporated = state["incorporated"]
    check_int(incorporated, "state['incorporated']", 0)
    if incorporated > num_observed:
        raise ValueError(
            f"`state['incorporated']` must be <= the {num_observed} observations."
        )
    batch, radius = state["batch"], state["batch_radius"]
    if (batch is None) != (radius is None):
        raise ValueError("`state['batch']` and `state['batch_radius']` go together.")
    if batch is None:
        return incorporated, None, None
    check_indices(batch, "state['batch']", arms.shape[0])
    return (
        incorporated,
        batch.clone().to(arms.device),
        check_number(radius, "state['batch_radius']"),
    )
