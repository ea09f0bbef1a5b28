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

from dataclasses import dataclass

import torch
from botorch.optim import optimize_acqf
from torch import Tensor

from botorch_sketch.acquisition.bkb import (
    BKBUpperConfidenceBound,
    TheoryRadius,
    radius_value,
)
from botorch_sketch.generation.variance_tracking import (
    CachedGeometry,
    CandidateGeometry,
    FrozenDictionaryTracker,
    LazyArgmax,
    ResidualDirectionTracker,
)
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.utils.validation import check_at_least, check_bounds, check_matrix

RULES = ("global", "local", "global+local")


@dataclass
class BBKBBatch:
    r"""An adaptive batch.

    Attributes:
        candidates: ``b x d`` chosen points (rows of ``choices``, repeats allowed).
        indices: ``b`` row indices into ``choices``.
        acquisition_values: ``b`` in-batch UCB values when each point was chosen
            (model outcome space).
        start_variances: ``b`` papers'-scale variances ``sigma~^2_fb`` of the points.
        bound: The termination rule's value for the accepted batch (``<= C~``
            unless the batch is a single point or was forced by ``min_batch_size``).
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
    r"""Lemma 1: ``1 + sum_s sigma~^2_fb(x_s)``, ``O(1)`` per step."""

    def __init__(self, geometry: CandidateGeometry | CachedGeometry) -> None:
        self.geometry = geometry
        self.total = 1.0
        self.min_variance = float(geometry.scaled_variance.min())

    def bound_with(self, index: int) -> float:
        return self.total + float(self.geometry.scaled_variance[index])

    def add(self, index: int) -> None:
        self.total = self.bound_with(index)


class LocalRule:
    r"""Lemma 3: ``max_x 1 + sum_s k~_fb(x, x_s)^2 / sigma~^2_fb(x)``, ``O(n (m + d))``
    per step; the sums are materialized on first use (so ``global+local`` pays only
    once the global rule has failed)."""

    def __init__(self, geometry: CandidateGeometry | CachedGeometry) -> None:
        self.geometry = geometry
        self.batch: list[int] = []
        self.sums: Tensor | None = None

    def _ratio_terms(self, index: int) -> Tensor:
        variance = self.geometry.scaled_variance.clamp_min(1e-300)
        return self.geometry.scaled_covariance(index).square() / variance

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

    def add(self, index: int) -> None:
        if self.sums is not None:
            self.sums = self.sums + self._ratio_terms(index)
        self.batch.append(index)


def gen_bbkb_batch(
    model: NystromGP | None,
    choices: Tensor,
    *,
    state: CandidateState | None = None,
    ratio_threshold: float = 2.0,
    rule: str = "global",
    beta: float | TheoryRadius = 1.0,
    min_batch_size: int | None = None,
    max_batch_size: int | None = None,
    residual_update: bool = False,
) -> BBKBBatch:
    r"""Select one BBKB adaptive batch from a finite candidate set.

    Costs ``O(n m^2)`` once (start-of-batch mean and variances; nothing with a
    persistent ``state``), then per in-batch step ``O(k b m)`` for the ``k`` lazily
    refreshed candidates (frozen dictionary) or ``O(n (m + b))``
    (``residual_update``), plus ``O(n (m + d))`` for the local rule.

    Args:
        model: A ``NystromGP`` (unbatched), conditioned on all data so far; may be
            None when ``state`` is given.
        choices: ``n x d`` candidates in the model's original input space.
        state: A :class:`~botorch_sketch.models.candidate_state.CandidateState` of
            ``choices`` holding the current posterior (as the :class:`BBKB` loop
            keeps it): the batch is scored from its cache instead of from ``model``.
        ratio_threshold: ``C~ >= 1``; 1 gives single-point batches (BKB).
        rule: ``"global"``, ``"local"`` or ``"global+local"`` (global while it admits
            the next point, then local; the same batches as ``"local"``).
        beta: Papers'-scale radius or a :class:`TheoryRadius` (in-batch value).
        min_batch_size: Keep adding points until the batch has this many, whatever
            the rule (see :func:`gen_uncertainty_warmup` for the guarantee-based way).
        max_batch_size: Stop at this many points.
        residual_update: Also spend the residual direction of each hallucinated
            point (:class:`ResidualDirectionTracker`), so a point far from the
            dictionary is not picked again and again within a batch.

    Returns:
        A :class:`BBKBBatch` (always at least one point).

    Example:
        >>> batch = gen_bbkb_batch(model, choices, ratio_threshold=2.0, beta=1.0)
        >>> Y = f(batch.candidates)
        >>> model = update_bbkb_model(model, batch.candidates, Y)
    """
    if state is None:
        if not isinstance(model, NystromGP):
            raise TypeError(
                f"`model` must be a NystromGP (or pass `state`), got {model!r}."
            )
        check_matrix(choices, "choices", num_cols=model.train_inputs[0].shape[-1])
    else:
        if not isinstance(state, CandidateState):
            raise TypeError(f"`state` must be a CandidateState, got {state!r}.")
        if choices is not state.points:
            check_matrix(choices, "choices", num_cols=state.points.shape[-1])
        if choices.shape[0] != state.num_points:
            raise ValueError(
                f"`choices` has {choices.shape[0]} rows but `state` holds "
                f"{state.num_points} candidates."
            )
    check_at_least(ratio_threshold, "ratio_threshold", 1.0)
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}, got {rule!r}.")
    for name, size in (
        ("min_batch_size", min_batch_size),
        ("max_batch_size", max_batch_size),
    ):
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int) or size < 1
        ):
            raise ValueError(f"`{name}` must be a positive integer, got {size!r}.")
    radius = radius_value(beta, in_batch=True)
    with torch.no_grad():
        geometry = _start_of_batch_geometry(model, choices, state)
        tracker = (
            ResidualDirectionTracker if residual_update else FrozenDictionaryTracker
        )(geometry)
        rules = _make_rules(rule, geometry)
        argmax = LazyArgmax(geometry.mean, radius, tracker)
        chosen: list[int] = []
        values: list[float] = []
        bound = 1.0
        while max_batch_size is None or len(chosen) < max_batch_size:
            forced = min_batch_size is not None and len(chosen) < min_batch_size
            if chosen and not forced and _nothing_admissible(rules, ratio_threshold):
                break
            index, value = argmax()
            proposed = _first_admitting(rules, index, ratio_threshold)
            if chosen and proposed is None and not forced:
                break
            bound = proposed if proposed is not None else rules[0].bound_with(index)
            for batch_rule in rules:
                batch_rule.add(index)
            tracker.add(index)
            chosen.append(index)
            values.append(value)
    if state is not None:
        state.flops += tracker.flops
    indices = torch.tensor(chosen, dtype=torch.long, device=choices.device)
    return BBKBBatch(
        candidates=choices[indices],
        indices=indices,
        acquisition_values=torch.tensor(
            values, dtype=choices.dtype, device=choices.device
        ),
        start_variances=geometry.scaled_variance[indices],
        bound=bound,
    )


def _start_of_batch_geometry(
    model: NystromGP | None, choices: Tensor, state: CandidateState | None
) -> CandidateGeometry | CachedGeometry:
    if state is not None:
        return CachedGeometry(state)
    model.eval()
    return CandidateGeometry(
        model.covar_module, model.dtc_state, model.transform_inputs(choices)
    )


def _make_rules(
    rule: str, geometry: CandidateGeometry | CachedGeometry
) -> list[GlobalRule | LocalRule]:
    if rule == "global":
        return [GlobalRule(geometry)]
    if rule == "local":
        return [LocalRule(geometry)]
    return [GlobalRule(geometry), LocalRule(geometry)]


def _nothing_admissible(
    rules: list[GlobalRule | LocalRule], threshold: float
) -> bool:
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


def update_bbkb_model(
    model: NystromGP,
    X: Tensor,
    Y: Tensor,
    generator: torch.Generator | None = None,
) -> NystromGP:
    r"""End of a batch: append the evaluated batch and resparsify the dictionary.

    Args:
        model: The model the batch was generated from.
        X: ``b x d`` evaluated points.
        Y: ``b x 1`` observed rewards.
        generator: Random number generator for the resampling.

    Returns:
        The conditioned model with a freshly sampled dictionary.
    """
    return model.condition_on_observations(X, Y, resparsify=True, generator=generator)


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
    d = model.train_inputs[0].shape[-1]
    check_matrix(choices, "choices", num_cols=d)
    if ratio_threshold <= 1:
        raise ValueError(f"`ratio_threshold` must be > 1, got {ratio_threshold}.")
    if (
        isinstance(min_batch_size, bool)
        or not isinstance(min_batch_size, int)
        or min_batch_size < 1
    ):
        raise ValueError(
            f"`min_batch_size` must be a positive integer, got {min_batch_size!r}."
        )
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
    beta: float | TheoryRadius = 1.0,
    max_batch_size: int = 32,
    num_restarts: int = 8,
    raw_samples: int = 256,
) -> Tensor:
    r"""Greedy BBKB batch on a box: ``optimize_acqf`` on BKB-UCB with the batch so far
    as ``X_pending``, stopped by the global rule (the local rule's maximum over a
    continuous domain is not computable exactly).

    Args:
        model: A ``NystromGP``.
        bounds: ``2 x d`` box.
        ratio_threshold: ``C~ >= 1``.
        beta: Papers'-scale radius or a :class:`TheoryRadius`.
        max_batch_size: Stop at this many points.
        num_restarts: Restarts of each ``optimize_acqf`` call.
        raw_samples: Raw samples of each ``optimize_acqf`` call.

    Returns:
        ``b x d`` batch, ``1 <= b <= max_batch_size``.
    """
    check_bounds(bounds)
    check_at_least(ratio_threshold, "ratio_threshold", 1.0)
    total = 1.0
    batch: list[Tensor] = []
    while len(batch) < max_batch_size:
        pending = torch.cat(batch) if batch else None
        acqf = BKBUpperConfidenceBound(model, beta=beta, X_pending=pending)
        candidate, _ = optimize_acqf(
            acqf, bounds=bounds, q=1, num_restarts=num_restarts, raw_samples=raw_samples
        )
        with torch.no_grad():
            variance = model.scaled_variance(model.transform_inputs(candidate))
        if batch and total + float(variance) > ratio_threshold:
            break
        total += float(variance)
        batch.append(candidate)
    return torch.cat(batch)
