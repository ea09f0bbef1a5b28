r"""BBKB adaptive batches (Calandriello, Carratino, Lazaric, Valko, Rosasco, ICML 2020).

At the start of a batch (step ``fb``) the mean ``mu_fb`` and variances
``sigma~^2_fb`` of all candidates are computed once; the batch then grows greedily by
``argmax_x mu_fb(x) + alpha~ sigma~_t(x)`` with hallucinated variance updates
(:mod:`~botorch_sketch.generation.variance_tracking`) until a termination rule fires:

- global (Lemma 1): continue while ``1 + sum_{s in batch} sigma~^2_fb(x_s) <= C~``;
- local (Lemma 3): continue while
  ``max_x 1 + sum_s k~_fb(x, x_s)^2 / sigma~^2_fb(x) <= C~``.

By Cauchy-Schwarz the local bound never exceeds the global one, so local batches are at
least as large. ``C~ = 1`` gives batches of one point: BKB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from botorch.optim import optimize_acqf
from torch import Tensor

from botorch_sketch.acquisition.bkb import (
    BKBUpperConfidenceBound,
    TheoryRadius,
    radius_value,
)
from botorch_sketch.generation.repeats import repeat_reduction
from botorch_sketch.generation.variance_tracking import (
    CachedGeometry,
    CandidateGeometry,
    FrozenDictionaryTracker,
    LazyArgmax,
    ResidualDirectionTracker,
)
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.utils.validation import (
    check_at_least,
    check_bounds,
    check_int,
    check_matrix,
    check_positive,
)

RULES = ("global", "local", "global+local")
#: Default cap on the points of one batch. The rules admit about ``(C~ - 1) / sigma~^2``
#: points, which is unbounded once some arm's variance vanishes (or with an enormous
#: ``C~`` or ``lambda``); batches are meant for parallel workers, so they stop here.
DEFAULT_MAX_BATCH_SIZE = 1000


@dataclass
class BBKBBatch:
    r"""An adaptive batch.

    Attributes:
        candidates: ``b x d`` chosen points (rows of ``choices``, repeats allowed).
        indices: ``b`` row indices into ``choices``.
        acquisition_values: ``b`` in-batch UCB values when each point was chosen
            (model outcome space).
        start_variances: ``b`` papers'-scale variances ``sigma~^2_fb`` of the points.
        bound: The termination rule's value for the accepted batch, pending points
            included (``<= C~`` unless the batch is a single point or was forced by
            ``min_batch_size``).
    """

    candidates: Tensor
    indices: Tensor
    acquisition_values: Tensor
    start_variances: Tensor
    bound: float

    @property
    def batch_size(self) -> int:
        return self.indices.shape[0]


class GlobalRule:
    r"""Lemma 1: ``1 + sum_s sigma~^2_fb(x_s)``, ``O(1)`` per step on the host (the
    start-of-batch variances are read there once per batch)."""

    def __init__(self, geometry: CandidateGeometry | CachedGeometry) -> None:
        self.total = 1.0
        self.variances = geometry.scaled_variance.detach().cpu().numpy().copy()
        self.min_variance = float(self.variances.min())

    def bound_with(self, index: int) -> float:
        return self.total + float(self.variances[index])

    def value(self) -> float:
        return self.total

    def admit_copies(self, index: int, limit: int, threshold: float) -> int:
        r"""Add copies of ``index`` while the rule admits them (at most ``limit``;
        the same float sums as adding them one at a time); return how many."""
        variance = float(self.variances[index])
        count = 0
        while count < limit and self.total + variance <= threshold:
            self.total, count = self.total + variance, count + 1
        return count

    def add(self, index: int, copies: int = 1) -> None:
        variance = float(self.variances[index])
        for _ in range(copies):
            self.total += variance


class LocalRule:
    r"""Lemma 3: ``max_x 1 + sum_s k~_fb(x, x_s)^2 / sigma~^2_fb(x)``, ``O(n (m + d))``
    per step; the sums are materialized on first use (so ``global+local`` pays only
    once the global rule has failed)."""

    def __init__(self, geometry: CandidateGeometry | CachedGeometry) -> None:
        self.geometry = geometry
        self.batch: list[int] = []
        self.sums: Tensor | None = None
        self._last: tuple[int, Tensor] | None = None  # repeats reuse their terms

    def _ratio_terms(self, index: int) -> Tensor:
        if self._last is None or self._last[0] != index:
            variance = self.geometry.scaled_variance.clamp_min(1e-300)
            terms = self.geometry.scaled_covariance(index).square() / variance
            self._last = (index, terms)
        return self._last[1]

    def value(self) -> float:
        return float((1 + self._materialize()).max())

    def _materialize(self) -> Tensor:
        if self.sums is None:
            self.sums = torch.zeros_like(self.geometry.scaled_variance)
            for index in self.batch:
                self.sums = self.sums + self._ratio_terms(index)
        return self.sums

    def per_candidate_bound_with(self, index: int) -> Tensor:
        return 1 + self._materialize() + self._ratio_terms(index)

    def bound_with(self, index: int) -> float:
        return float(self.per_candidate_bound_with(index).max())

    def add(self, index: int, copies: int = 1) -> None:
        for _ in range(copies):
            if self.sums is not None:
                self.sums = self.sums + self._ratio_terms(index)
            self.batch.append(index)


def gen_bbkb_batch(
    model: NystromGP,
    choices: Tensor,
    *,
    ratio_threshold: float = 2.0,
    rule: str = "global",
    radius: float | TheoryRadius = 1.0,
    min_batch_size: int | None = None,
    max_batch_size: int | None = DEFAULT_MAX_BATCH_SIZE,
    residual_update: bool = False,
    pending: Tensor | None = None,
    excluded: Tensor | None = None,
) -> BBKBBatch:
    r"""Select one BBKB adaptive batch from a finite candidate set.

    Costs ``O(n m^2)`` once (start-of-batch mean and variances), then per in-batch
    step ``O(k b m)`` for the ``k`` lazily refreshed candidates (frozen dictionary) or
    ``O(n (m + b))`` (``residual_update``), plus ``O(n (m + d))`` for the local rule.

    Args:
        model: A ``NystromGP`` (unbatched), conditioned on all data so far.
        choices: ``n x d`` candidates in the model's original input space.
        ratio_threshold: ``C~ >= 1``; 1 gives single-point batches (BKB).
        rule: ``"global"``, ``"local"`` or ``"global+local"`` (global while it admits
            the next point, then local; the same batches as ``"local"``).
        radius: Papers'-scale radius or a :class:`TheoryRadius` (in-batch value).
        min_batch_size: Keep adding points until the batch has this many, whatever
            the rule (see :func:`gen_uncertainty_warmup` for the guarantee-based way).
        max_batch_size: Stop at this many new points (default
            :data:`DEFAULT_MAX_BATCH_SIZE`; None means that default too).
        residual_update: Also spend the residual direction of each hallucinated
            point (:class:`ResidualDirectionTracker`), so a point far from the
            dictionary is not picked again and again within a batch.
        pending: ``p`` indices of candidates chosen earlier and not yet evaluated
            (asynchronous batches): they are hallucinated first and count towards
            the termination rule, and the new points extend them.
        excluded: ``n`` booleans marking candidates never to choose (e.g. whose
            evaluation failed); at least one candidate must stay allowed.

    Returns:
        A :class:`BBKBBatch` of the new points: at least one when nothing is
        pending; possibly none when the pending points already fill the rule
        (then wait for outcomes).

    Example:
        >>> batch = gen_bbkb_batch(model, choices, ratio_threshold=2.0, radius=1.0)
        >>> Y = f(batch.candidates)
        >>> model = model.condition_on_observations(
        ...     batch.candidates, Y, resparsify=True
        ... )
    """
    _check_model(model)
    check_matrix(choices, "choices", num_cols=model.train_inputs[0].shape[-1])
    check_at_least(ratio_threshold, "ratio_threshold", 1.0)
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}, got {rule!r}.")
    if max_batch_size is None:
        max_batch_size = DEFAULT_MAX_BATCH_SIZE
    for name, size in (
        ("min_batch_size", min_batch_size),
        ("max_batch_size", max_batch_size),
    ):
        if size is not None:
            check_int(size, name, 1)
    pending_list = _pending_list(pending, choices.shape[0])
    if excluded is not None:
        if not isinstance(excluded, Tensor) or excluded.shape != choices.shape[:1]:
            raise ValueError(
                f"`excluded` must be a tensor of {choices.shape[0]} booleans."
            )
        if excluded.dtype != torch.bool:
            raise TypeError(f"`excluded` must be boolean, got {excluded.dtype}.")
        if bool(excluded.all()):
            raise ValueError("`excluded` must leave at least one candidate.")
    with torch.no_grad():
        greedy = BatchGreedy(
            _start_of_batch_geometry(model, choices),
            radius=radius_value(radius, in_batch=True),
            ratio_threshold=ratio_threshold,
            rule=rule,
            residual_update=residual_update,
            min_batch_size=min_batch_size,
            excluded=excluded,
            held=pending_list,
        )
        chosen, values = greedy.extend(max_batch_size)
    indices = torch.tensor(chosen, dtype=torch.long, device=choices.device)
    return BBKBBatch(
        candidates=choices[indices],
        indices=indices,
        acquisition_values=torch.tensor(
            values, dtype=choices.dtype, device=choices.device
        ),
        start_variances=greedy.geometry.scaled_variance[indices],
        bound=greedy.bound(),
    )


class BatchGreedy:
    r"""The greedy of one BBKB batch, resumable.

    The batch starts from ``held`` points (chosen earlier, not evaluated yet: they
    are hallucinated and counted by the rules); :meth:`extend` adds up to ``k`` more
    points by the lazy UCB argmax until a rule stops it, and a later call goes on
    with the same batch (asynchronous asks: the posterior is frozen until the batch
    ends). A run of copies of one candidate is decided in closed form
    (:meth:`LazyArgmax.repeats`) under the global rule.

    With ``repeat_threshold = delta > 0`` the repeat rule
    (:mod:`~botorch_sketch.generation.repeats`) holds: an arm already measured
    (``observed``, held or chosen) is picked only while one more evaluation would
    remove at least ``delta k(x, x)`` of its in-batch variance; one that falls
    below is never picked again in the batch (variances only decrease), and the
    batch ends when no eligible arm is left. An empty batch still gets one arm,
    past the repeat rule, if every arm is spent.
    """

    @torch.no_grad()
    def __init__(
        self,
        geometry: CandidateGeometry | CachedGeometry,
        *,
        radius: float,
        ratio_threshold: float,
        rule: str,
        residual_update: bool = False,
        min_batch_size: int | None = None,
        excluded: Tensor | None = None,
        held: list[tuple[int, int]] | tuple = (),
        repeat_threshold: float = 0.0,
        observed: Tensor | None = None,
    ) -> None:
        r"""
        Args:
            geometry: The start-of-batch quantities of the candidates.
            radius: The in-batch UCB radius.
            ratio_threshold: ``C~ >= 1``.
            rule: ``"global"``, ``"local"`` or ``"global+local"``.
            residual_update: Residual directions too (eager tracker).
            min_batch_size: New points forced whatever the rule.
            excluded: ``n`` booleans: candidates never to choose.
            held: ``(index, copies)`` of the points the batch starts with.
            repeat_threshold: The repeat rule's ``delta >= 0`` (0: any repeat,
                the papers' batches; ``inf``: none).
            observed: ``n`` booleans marking the candidates measured before the
                batch (in the posterior), for the repeat rule.
        """
        self.geometry = geometry
        self.tracker = (
            ResidualDirectionTracker if residual_update else FrozenDictionaryTracker
        )(geometry)
        self.rules = _make_rules(rule, geometry)
        self.ratio_threshold = ratio_threshold
        self.min_batch_size = min_batch_size
        self.size = 0  # points in the batch, held ones included
        self.num_new = 0  # points chosen by `extend`
        self.repeat_threshold = repeat_threshold
        nothing = torch.zeros_like(geometry.scaled_variance, dtype=torch.bool)
        #: candidates measured so far: before the batch, held or chosen
        self.measured = nothing.clone() if observed is None else observed.clone()
        #: candidates the caller allows (the fallback of a spent arm set)
        self.allowed = ~nothing if excluded is None else ~excluded
        for index, copies in held:
            for batch_rule in self.rules:
                batch_rule.add(index, copies)
            self.size += copies
        if held:
            held_indices, held_copies = torch.tensor(
                held, dtype=torch.long, device=geometry.scaled_variance.device
            ).mT
            self.tracker.add_many(held_indices, held_copies)
            self.measured[held_indices] = True
        if repeat_threshold > 0:  # spent from the start: variances only decrease
            spent = self.measured & ~self._pays(geometry.scaled_variance)
            excluded = spent if excluded is None else excluded | spent
        self.argmax = LazyArgmax(geometry.mean, radius, self.tracker, excluded=excluded)
        self._bound: float | None = None

    @torch.no_grad()
    def extend(
        self, limit: int, past_rule: bool = False
    ) -> tuple[list[int], list[float]]:
        r"""Up to ``limit`` more points and their in-batch UCB values (at least one
        if the batch is empty or ``past_rule``, possibly none once a rule is full:
        ``past_rule`` then takes the in-batch UCB argmax anyway)."""
        rules, tracker, threshold = self.rules, self.tracker, self.ratio_threshold
        chosen: list[int] = []
        values: list[float] = []
        while len(chosen) < limit:
            started = self.size > 0
            forced = (past_rule and not chosen) or (
                self.min_batch_size is not None and self.num_new < self.min_batch_size
            )
            if started and not forced and _nothing_admissible(rules, threshold):
                break
            picked = self._eligible_argmax()
            if picked is None:  # every arm spent by the repeat rule
                if started and not (past_rule and not chosen):
                    break
                picked = self._past_repeat_rule()
            index, value = picked
            proposed = _first_admitting(rules, index, threshold)
            if started and proposed is None and not forced:
                break
            self._bound = (
                proposed if proposed is not None else rules[0].bound_with(index)
            )
            copies = 1
            if self.repeat_threshold > 0:  # the repeat rule's bookkeeping
                self.measured[index] = True
            if (
                not forced
                and self.repeat_threshold == 0
                and _repeats_in_closed_form(rules, tracker, index)
            ):
                scores = self.argmax.repeats(index, min(limit - len(chosen), 256))
                copies = rules[0].admit_copies(index, scores.shape[0], threshold)
                tracker.add_copies(copies)
                self._bound = rules[0].value()
                values.extend(scores[:copies].tolist())
            else:
                for batch_rule in rules:
                    batch_rule.add(index)
                tracker.add(index)
                values.append(value)
            chosen.extend([index] * copies)
            self.size += copies
            self.num_new += copies
        return chosen, values

    def _eligible_argmax(self) -> tuple[int, float] | None:
        r"""``(index, score)`` of the in-batch UCB argmax among the candidates the
        repeat rule admits (those it spends are excluded for good); None if none
        is left."""
        while True:
            index, value = self.argmax()
            if value == -math.inf:
                return None
            if not (self.repeat_threshold > 0 and self.measured[index]):
                return index, value
            position = torch.tensor([index], device=self.measured.device)
            if bool(self._pays(self.tracker.refresh(position), position)):
                return index, value
            self.argmax.exclude(index)

    def _pays(self, scaled_variance: Tensor, indices: Tensor | None = None) -> Tensor:
        r"""Whether a repeat at ``indices`` (default all ``n``) with in-batch
        variances ``scaled_variance`` removes at least ``delta k(x, x)``."""
        geometry = self.geometry
        prior = geometry.prior_variance
        prior = prior if indices is None else prior[indices]
        reduction = repeat_reduction(scaled_variance, prior, geometry.noise)
        return reduction >= self.repeat_threshold

    def _past_repeat_rule(self) -> tuple[int, float]:
        r"""``(index, score)`` of the in-batch UCB argmax over the allowed
        candidates, repeats included (``O(n m t)``, once the arm set is spent)."""
        allowed = torch.nonzero(self.allowed).squeeze(-1)
        variance = self.tracker.refresh(allowed)
        scores = self.argmax.mean[allowed] + self.argmax.radius * variance.sqrt()
        top = scores.max()
        return int(allowed[scores == top].min()), float(top)

    def bound(self) -> float:
        r"""The rule's value for the batch so far (its last accepted point's)."""
        if self._bound is None:
            return min(batch_rule.value() for batch_rule in self.rules)
        return self._bound


def _start_of_batch_geometry(model: NystromGP, choices: Tensor) -> CandidateGeometry:
    model.eval()
    return CandidateGeometry(
        model.covar_module, model.dtc_state, model.transform_inputs(choices)
    )


def _check_model(model: object) -> None:
    if not isinstance(model, NystromGP):
        raise TypeError(f"`model` must be a NystromGP, got {type(model).__name__}.")
    if len(model.batch_shape) > 0:
        raise ValueError(
            f"`model` must not be batched, got batch shape {tuple(model.batch_shape)}."
        )


def _pending_list(pending: Tensor | None, num_choices: int) -> list[tuple[int, int]]:
    r"""Validated pending indices as ``(index, copies)`` pairs (copies of an arm are
    one hallucinated step, :meth:`FrozenDictionaryTracker.add_copies`)."""
    if pending is None:
        return []
    if not isinstance(pending, Tensor) or pending.dtype != torch.long:
        raise TypeError("`pending` must be a LongTensor of candidate indices.")
    if pending.dim() != 1:
        raise ValueError(f"`pending` must be 1-d, got shape {tuple(pending.shape)}.")
    if pending.numel() and (pending.min() < 0 or pending.max() >= num_choices):
        raise ValueError(f"`pending` must hold indices in [0, {num_choices}).")
    return copies_of(pending)


def copies_of(indices: Tensor) -> list[tuple[int, int]]:
    r"""``(index, copies)`` pairs of a multiset of candidate indices."""
    distinct, copies = torch.unique(indices, return_counts=True)
    return list(zip(distinct.tolist(), copies.tolist(), strict=True))


def _make_rules(
    rule: str, geometry: CandidateGeometry | CachedGeometry
) -> list[GlobalRule | LocalRule]:
    if rule == "global":
        return [GlobalRule(geometry)]
    if rule == "local":
        return [LocalRule(geometry)]
    return [GlobalRule(geometry), LocalRule(geometry)]


def _repeats_in_closed_form(
    rules: list[GlobalRule | LocalRule],
    tracker: FrozenDictionaryTracker | ResidualDirectionTracker,
    index: int,
) -> bool:
    r"""Whether a pick repeats the last step's candidate under the global rule and
    the papers' tracker, so that the run of copies is decided at once
    (:meth:`LazyArgmax.repeats`)."""
    return (
        len(rules) == 1
        and isinstance(rules[0], GlobalRule)
        and isinstance(tracker, FrozenDictionaryTracker)
        and tracker.last_index == index
    )


def _nothing_admissible(rules: list[GlobalRule | LocalRule], threshold: float) -> bool:
    r"""Whether the global rule alone decides and admits no candidate at all
    (``total + min_x sigma~^2_fb(x) > C~``), so the next argmax can be skipped."""
    if len(rules) != 1 or not isinstance(rules[0], GlobalRule):
        return False
    return rules[0].total + rules[0].min_variance > threshold


def _first_admitting(
    rules: list[GlobalRule | LocalRule], index: int, threshold: float
) -> float | None:
    r"""The bound of the first rule that admits ``index`` (None if none does)."""
    for batch_rule in rules:
        bound = batch_rule.bound_with(index)
        if bound <= threshold:
            return bound
    return None


def gen_uncertainty_warmup(
    model: NystromGP,
    choices: Tensor,
    min_batch_size: int,
    *,
    ratio_threshold: float = 2.0,
    max_points: int | None = None,
) -> Tensor:
    r"""Uncertainty sampling until BBKB's batches can hold ``min_batch_size`` points.

    Greedily picks ``argmax sigma~^2_t`` with hallucinated updates (residual
    directions included) until ``max_x sigma~^2_t(x) <= (C~ - 1) / P``: once the data
    reach that level, the global rule admits at least ``P`` points per batch.

    Args:
        model: A ``NystromGP``.
        choices: ``n x d`` candidates.
        min_batch_size: The target batch size ``P >= 1``.
        ratio_threshold: ``C~ > 1``.
        max_points: Cap on the warm-up length (default ``n``).

    Returns:
        ``w x d`` points to evaluate (``w >= 0``).
    """
    _check_model(model)
    check_matrix(choices, "choices", num_cols=model.train_inputs[0].shape[-1])
    check_positive(ratio_threshold, "ratio_threshold", minimum=1.0)
    check_int(min_batch_size, "min_batch_size", 1)
    if max_points is not None:
        check_int(max_points, "max_points", 1)
    target = (ratio_threshold - 1) / min_batch_size
    limit = choices.shape[0] if max_points is None else max_points
    model.eval()
    with torch.no_grad():
        geometry = CandidateGeometry(
            model.covar_module, model.dtc_state, model.transform_inputs(choices)
        )
        tracker = ResidualDirectionTracker(geometry)
        chosen: list[int] = []
        while len(chosen) < limit and tracker.variance.max() > target:
            index = int(tracker.variance.argmax())
            tracker.add(index)
            chosen.append(index)
    return choices[torch.tensor(chosen, dtype=torch.long, device=choices.device)]


def gen_bbkb_batch_continuous(
    model: NystromGP,
    bounds: Tensor,
    *,
    ratio_threshold: float = 2.0,
    radius: float | TheoryRadius = 1.0,
    max_batch_size: int = 32,
    num_restarts: int = 8,
    raw_samples: int = 256,
    X_pending: Tensor | None = None,
) -> Tensor:
    r"""Greedy BBKB batch on a box: ``optimize_acqf`` on BKB-UCB with the batch so far
    as ``X_pending``, stopped by the global rule (the local rule's maximum over a
    continuous domain is not computable exactly).

    Args:
        model: A ``NystromGP``.
        bounds: ``2 x d`` box.
        ratio_threshold: ``C~ >= 1``.
        radius: Papers'-scale radius or a :class:`TheoryRadius`.
        max_batch_size: Stop at this many new points.
        num_restarts: Restarts of each ``optimize_acqf`` call.
        raw_samples: Raw samples of each ``optimize_acqf`` call.
        X_pending: ``p x d`` points chosen earlier and not yet evaluated
            (asynchronous batches): hallucinated, and counted by the global rule.

    Returns:
        ``b x d`` new points, ``b <= max_batch_size``; ``b >= 1`` when nothing is
        pending, ``b = 0`` when the pending points already fill the rule.
    """
    _check_model(model)
    check_bounds(bounds)
    check_at_least(ratio_threshold, "ratio_threshold", 1.0)
    check_int(max_batch_size, "max_batch_size", 1)
    d = bounds.shape[-1]
    points = []
    if X_pending is not None:
        points.append(check_matrix(X_pending, "X_pending", num_cols=d))
    total = 1.0
    if points:
        with torch.no_grad():
            start = model.scaled_variance(model.transform_inputs(X_pending))
        total += float(start.sum())
    new = 0
    while new < max_batch_size:
        acqf = BKBUpperConfidenceBound(
            model, radius=radius, X_pending=torch.cat(points) if points else None
        )
        candidate, _ = optimize_acqf(
            acqf, bounds=bounds, q=1, num_restarts=num_restarts, raw_samples=raw_samples
        )
        with torch.no_grad():
            variance = model.scaled_variance(model.transform_inputs(candidate))
        if points and total + float(variance) > ratio_threshold:
            break
        total += float(variance)
        points.append(candidate)
        new += 1
    return torch.cat(points)[-new:] if new else bounds.new_zeros(0, d)
