r"""In-batch (hallucinated) variance updates for BBKB on a finite candidate set.

Inside a batch the dictionary and the mean are frozen; each chosen point ``x_s`` is
added to the data without its outcome. With feature rows ``f(x)`` and a base matrix
``P`` (whitened embeddings ``a(x) = L_V^{-1} z(x)`` and ``P = I``, or the features
``z(x)`` and ``P = V^{-1}``) the papers'-scale variance is

.. math::

    \tilde\sigma^2_t(x) = r(x) / \lambda + f(x)^T H_t f(x), \qquad
    H_t = (P^{-1} + \textstyle\sum_{s} f_s f_s^T)^{-1}, \quad
    r(x) = k(x, x) - \|z(x)\|^2,

and Sherman-Morrison gives, with ``h_s = H_{s} f_s`` and ``d_s = 1 + f_s^T h_s``,
``sigma~^2_{s+1}(x) = sigma~^2_s(x) - (f(x)^T h_s)^2 / d_s``: ``O(m)`` per candidate
and step. ``k`` copies of one point are one term with ``d_s = 1 / k + f_s^T h_s``
(Sherman-Morrison on ``sqrt(k) f_s``), so a batch that picks the same arm again and
again costs one step, not ``k``. Variances only decrease, which makes stale scores
upper bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.dtc import DTCState, cross_covariance


class _Geometry:
    r"""Start-of-batch quantities of ``n`` candidates shared by both geometries.

    A geometry gives feature rows ``f(x)`` and a base solve ``P`` with
    ``sigma~^2_fb(x) = r(x) / lambda + f(x)^T P f(x)``: whitened embeddings and the
    identity (:class:`CandidateGeometry`), or the cached features and ``V^{-1}``
    (:class:`CachedGeometry`). Hallucinated points then update variances by
    Sherman-Morrison with base ``P``.

    Attributes:
        points: ``n x d`` candidates in the model's (transformed) input space.
        mean: ``n`` frozen posterior means ``mu_fb(x)`` (model outcome space).
        prior_variance: ``n`` prior variances ``k(x, x)``.
        scaled_variance: ``n`` start-of-batch variances ``sigma~^2_fb(x)``.
        noise: ``lambda``.
    """

    kernel: Kernel
    points: Tensor
    mean: Tensor
    prior_variance: Tensor
    scaled_variance: Tensor
    noise: Tensor | float
    num_features: int
    #: Whether :meth:`raw_rows` are the feature rows themselves (``R = I``).
    raw_is_feature = True

    def __len__(self) -> int:
        return self.points.shape[0]

    def feature_rows(self, indices: Tensor | int) -> Tensor:
        raise NotImplementedError

    @property
    def num_raw(self) -> int:
        r"""Entries ``s`` of a :meth:`raw_rows` row."""
        return self.num_features

    def raw_rows(self, indices: Tensor | int) -> Tensor:
        r"""Rows ``p(x)`` (``k x s``) with ``f(x)^T h = p(x)^T R h`` for the
        :meth:`to_raw` map ``R``, cheaper to read than the feature rows: the
        feature rows themselves here (``R = I``)."""
        return self.feature_rows(indices)

    def to_raw(self, directions: Tensor) -> Tensor:
        r"""``R H`` for ``m x r`` directions ``H`` (:meth:`raw_rows`)."""
        return directions

    def solve(self, vector: Tensor) -> Tensor:
        raise NotImplementedError

    def features_times(self, matrix: Tensor) -> Tensor:
        r"""``f(x)^T M`` for every candidate (``n x r`` for ``m x r``, or ``n``)."""
        return self.features @ matrix

    @cached_property
    def residual(self) -> Tensor:
        r"""``n`` residuals ``r(x) = k(x, x) - ||z(x)||^2 >= 0``."""
        return (self.prior_variance - self.embedding.square().sum(-1)).clamp_min(0.0)

    @torch.no_grad()
    def residual_covariance(self, index: int) -> Tensor:
        r"""``k(x, x_i) - z(x)^T z(x_i)`` for all candidates (``n``), ``O(n(m+d))``."""
        column = self.kernel(self.points, self.points[index : index + 1]).to_dense()
        return column.squeeze(-1) - self.embedding @ self.embedding[index]

    def scaled_covariance(self, index: int) -> Tensor:
        r"""Start-of-batch papers'-scale covariance ``k~_fb(x, x_i)`` (``n``)."""
        residual = self.residual_covariance(index) / self.noise
        return residual + self.features_times(self.solve(self.feature_rows(index)))


class CandidateGeometry(_Geometry):
    r"""Start-of-batch quantities of ``n`` candidates, scored from a
    :class:`~botorch_sketch.models.dtc.DTCState` (the stateless path).

    Construction scores the candidates in chunks (:meth:`DTCState.mean_and_variance`),
    ``O(n m^2)`` time and ``O(n)`` lasting memory; kernel rows ``k_S(x)`` and
    whitened embeddings ``a(x) = L_V^{-1} z(x)`` (the feature rows, base solve the
    identity) are recomputed per row for the lazily refreshed candidates, and formed
    in full (``n x m``) only for the local rule and the residual updates.
    """

    @torch.no_grad()
    def __init__(self, kernel: Kernel, state: DTCState, points: Tensor) -> None:
        self.kernel = kernel
        self.state = state
        self.points = points
        self.noise = state.noise
        self.num_features = state.size
        self.mean, bayes_variance = state.mean_and_variance(kernel, points)
        self.scaled_variance = bayes_variance / self.noise
        self.prior_variance = kernel(points, diag=True)
        # a(x) = L_V^{-1} L_S^{-1} k_S(x)
        self._whitening = torch.linalg.solve_triangular(
            state.chol_gram, state.inverse_chol_dictionary, upper=False
        )

    def feature_rows(self, indices: Tensor | int) -> Tensor:
        r"""Whitened embeddings ``a(x)`` of some candidates, ``O(m (m + d))`` each."""
        rows = self.points[indices]
        return cross_covariance(self.kernel, rows, self.state.dictionary) @ (
            self._whitening.mT
        )

    def solve(self, vector: Tensor) -> Tensor:
        r"""The base solve of whitened coordinates: the identity."""
        return vector

    @cached_property
    def kernel_rows(self) -> Tensor:
        r"""``n x m`` kernel block ``k_S(x)`` (formed on first use)."""
        return cross_covariance(self.kernel, self.points, self.state.dictionary)

    @cached_property
    def embedding(self) -> Tensor:
        r"""``n x m`` embeddings ``z(x) = L_S^{-1} k_S(x)`` (formed on first use)."""
        return self.kernel_rows @ self.state.inverse_chol_dictionary.mT

    @cached_property
    def features(self) -> Tensor:
        r"""``n x m`` whitened embeddings (formed on first use)."""
        return self.kernel_rows @ self._whitening.mT


class CachedGeometry(_Geometry):
    r"""Start-of-batch quantities read from a persistent
    :class:`~botorch_sketch.models.candidate_state.CandidateState`: nothing is
    recomputed; feature rows are rows of the cache (``O(m)`` each) and the base solve
    is ``V^{-1}`` (``O(m^2)`` per hallucinated point)."""

    @torch.no_grad()
    def __init__(self, state: CandidateState) -> None:
        self.state = state
        self.kernel = state.kernel
        self.points = state.points
        self.noise = state.points.new_tensor(state.noise)
        self.num_features = state.size
        self.mean = state.mean.clone()
        self.scaled_variance = state.scaled_variance
        self.prior_variance = state.prior_variance
        self._dtype = state.points.dtype

    def feature_rows(self, indices: Tensor | int) -> Tensor:
        r"""Cached features ``z(x)`` of some candidates."""
        return self.state.feature_rows(indices)

    raw_is_feature = False

    @property
    def num_raw(self) -> int:
        r"""The cache's raw columns ``s``."""
        return self.state.num_raw

    def raw_rows(self, indices: Tensor | int) -> Tensor:
        r"""Raw cache rows, ``O(s)`` each: no product with the feature basis
        (:meth:`CandidateState.raw_rows`)."""
        return self.state.raw_rows(indices)

    def to_raw(self, directions: Tensor) -> Tensor:
        r"""The basis times ``directions`` (:meth:`CandidateState.to_raw`)."""
        return self.state.to_raw(directions)

    def solve(self, vector: Tensor) -> Tensor:
        r"""``V^{-1} v``."""
        return self.state.gram_inverse @ vector

    def features_times(self, matrix: Tensor) -> Tensor:
        r"""``z(x)^T M`` for every candidate: one read of the cache, the ``n x m``
        features are never formed."""
        return self.state.features_times(matrix)

    @torch.no_grad()
    def residual_covariance(self, index: int) -> Tensor:
        r"""``k(x, x_i) - z(x)^T z(x_i)`` for all candidates (``n``), one kernel
        column and one read of the cache (the product does not depend on the
        feature basis)."""
        column = self.state.kernel_columns(
            torch.tensor([index], device=self.points.device)
        )[:, 0]
        return column - self.features_times(self.feature_rows(index))

    @cached_property
    def residual(self) -> Tensor:
        r"""``n`` residuals ``k(x, x) - ||z(x)||^2`` from the cached sums."""
        return (self.prior_variance - self.state.explained_variance).clamp_min(0.0)


class _Columns:
    r"""A growable ``rows x t`` matrix (amortized O(rows) appends), with the
    Sherman-Morrison product ``H_t v = v - sum_j h_j (h_j^T v) / d_j``."""

    def __init__(self, rows: int, like: Tensor, capacity: int = 16) -> None:
        self._data = like.new_zeros(rows, capacity)
        self._denominators = like.new_zeros(capacity)
        self.count = 0

    @property
    def matrix(self) -> Tensor:
        return self._data[:, : self.count]

    @property
    def denominators(self) -> Tensor:
        return self._denominators[: self.count]

    def grow_rows(self, rows: int) -> None:
        r"""Pad every stored column with zeros up to ``rows`` entries."""
        extra = rows - self._data.shape[0]
        if extra > 0:
            self._data = torch.cat(
                [self._data, self._data.new_zeros(extra, self._data.shape[1])]
            )

    def set_last_denominator(self, denominator: Tensor) -> None:
        self._denominators[self.count - 1] = denominator

    def append(self, column: Tensor, denominator: Tensor | None = None) -> None:
        self._reserve(1)
        self._data[: column.shape[0], self.count] = column
        if denominator is not None:
            self._denominators[self.count] = denominator
        self.count += 1

    def extend(self, columns: Tensor, denominators: Tensor | None = None) -> None:
        r"""Append the ``k`` columns of a ``rows x k`` matrix (and their
        denominators)."""
        k = columns.shape[-1]
        self._reserve(k)
        self._data[: columns.shape[0], self.count : self.count + k] = columns
        if denominators is not None:
            self._denominators[self.count : self.count + k] = denominators
        self.count += k

    def _reserve(self, extra: int) -> None:
        r"""Room for ``extra`` more columns (the capacity at least doubles)."""
        capacity = self._data.shape[1]
        if self.count + extra > capacity:
            added = max(capacity, self.count + extra - capacity)
            rows = self._data.shape[0]
            self._data = torch.cat([self._data, self._data.new_zeros(rows, added)], 1)
            self._denominators = torch.cat(
                [self._denominators, self._denominators.new_zeros(added)]
            )

    def apply_inverse(self, v: Tensor, base: Callable[[Tensor], Tensor]) -> Tensor:
        r"""``P v - H (H^T v / d)`` for ``v`` of ``rows`` entries (or ``rows x k``,
        column by column) and the base solve ``P``."""
        solved = base(v)
        if self.count == 0:
            return solved.clone()
        H = self.matrix
        denominators = self.denominators
        if v.dim() == 2:
            denominators = denominators.unsqueeze(-1)
        return solved - H @ ((H.mT @ v) / denominators)


class FrozenDictionaryTracker:
    r"""The papers' in-batch update: variances change only inside the dictionary's
    span. Candidates are refreshed lazily: a candidate last refreshed at step ``j``
    catches up with the rank-one terms of steps ``j..t-1`` in ``O((t - j) s)``,
    from its raw row (:meth:`_Geometry.raw_rows`, ``s`` entries) and the directions
    kept in raw coordinates too.

    Candidates that are looked at at every step (the lazy argmax's refreshed ones)
    are *kept* (:meth:`keep`): their raw rows and variances are held side by side,
    so :meth:`kept_variances` brings them all up to date in a few operators,
    without indexing the ``n``-long state.
    """

    eager = False

    def __init__(self, geometry: CandidateGeometry | CachedGeometry) -> None:
        self.geometry = geometry
        self.variance = geometry.scaled_variance.clone()
        self.refreshed_at = torch.zeros(
            len(geometry), dtype=torch.long, device=geometry.scaled_variance.device
        )
        self.directions = _Columns(geometry.num_features, geometry.scaled_variance)
        # the directions in the geometry's raw coordinates, for the refreshes
        self.raw_directions = (
            self.directions
            if geometry.raw_is_feature
            else _Columns(geometry.num_raw, geometry.scaled_variance)
        )
        self.flops = 0.0
        self.last_index: int | None = None  # the candidate of the last step
        self._last_copies = 0  # and how many copies of it that step holds
        # the kept candidates, their raw rows (growable columns, so keeping more
        # copies only their own rows) and variances, current at step `_kept_at`
        self.kept = self.refreshed_at[:0]
        self._kept_rows = _Columns(geometry.num_raw, geometry.scaled_variance, 0)
        self._kept_variances = geometry.scaled_variance[:0]
        self._kept_at = 0

    @property
    def step(self) -> int:
        return self.directions.count

    def refresh(self, indices: Tensor) -> Tensor:
        r"""Bring ``k`` candidates ``indices`` up to date; return their current
        variances."""
        stale = indices[self.refreshed_at[indices] < self.step]
        if stale.numel() > 0:
            # only the steps since the oldest stale refresh
            first = int(self.refreshed_at[stale].min())
            self.refresh_since(stale, self.geometry.raw_rows(stale), first)
        return self.variance[indices]

    def refresh_since(self, indices: Tensor, rows: Tensor, first: int) -> Tensor:
        r""":meth:`refresh` given a step ``first`` no later than the last refresh
        of any of the ``k`` candidates (0 always is): each candidate takes the
        steps of ``first..t-1`` after its own last refresh, with no mask indexing
        and no host synchronization, ``O(k s (t - first))``.

        Args:
            indices: ``k`` candidate indices.
            rows: ``k x s`` raw rows of ``indices`` (:meth:`_Geometry.raw_rows`).
            first: A step no later than any of their last refreshes.
        """
        if first < self.step:
            terms = self._drops(rows, first)
            steps = torch.arange(first, self.step, device=terms.device)
            terms = terms * (steps >= self.refreshed_at[indices].unsqueeze(-1))
            self.variance[indices] = (self.variance[indices] - terms.sum(-1)).clamp_min(
                0.0
            )
            self.refreshed_at[indices] = self.step
        return self.variance[indices]

    def _drops(self, rows: Tensor, first: int) -> Tensor:
        r"""``k x (t - first)`` drops ``(p(x)^T h_j)^2 / d_j`` of the variances of
        ``k`` candidates with raw rows ``rows`` at the steps ``j`` from ``first``,
        ``O(k s (t - first))``."""
        H = self.raw_directions.matrix[:, first:]
        self.flops += 2.0 * rows.shape[0] * H.shape[0] * H.shape[1]
        return (rows @ H).square_().div_(self.directions.denominators[first:])

    @property
    def kept_rows(self) -> Tensor:
        r"""``k x s`` raw rows of the :attr:`kept` candidates."""
        return self._kept_rows.matrix.mT

    def keep(self, indices: Tensor) -> Tensor:
        r"""Refresh candidates ``indices`` (not kept yet) and keep them current from
        now on (:meth:`kept_variances`); return their variances."""
        self.kept_variances()  # every kept candidate current at the same step
        rows = self.geometry.raw_rows(indices)
        variances = self.refresh_since(indices, rows, 0)
        self.kept = torch.cat([self.kept, indices])
        self._kept_rows.extend(rows.mT)
        self._kept_variances = torch.cat([self._kept_variances, variances])
        return variances

    def kept_variances(self) -> Tensor:
        r"""The current variances of the :attr:`kept` candidates, ``O(k s (t - j))``
        for ``k`` of them current at step ``j``: the drops of :meth:`refresh_since`
        without per-candidate bookkeeping."""
        if self._kept_at < self.step and self.kept.numel():
            drops = self._drops(self.kept_rows, self._kept_at).sum(-1)
            self._kept_variances = (self._kept_variances - drops).clamp_min_(0.0)
        self._kept_at = self.step
        return self._kept_variances

    def add(self, index: int, copies: int = 1) -> None:
        r"""Hallucinate ``copies`` observations at candidate ``index``, ``O(m t)``; a
        repeat of the last step's candidate raises that step's multiplicity instead,
        ``O(r m)`` for the ``r`` candidates already refreshed past it."""
        if index == self.last_index:
            self.add_copies(copies)
            return
        a = self.geometry.feature_rows(index)
        h = self.directions.apply_inverse(a, self.geometry.solve)
        self.directions.append(h, 1.0 / copies + a @ h)
        self._keep_raw(h.unsqueeze(-1))
        self.last_index, self._last_copies = index, copies
        m = a.shape[0]
        self.flops += 2.0 * m * m + 4.0 * m * self.step

    def add_many(self, indices: Tensor, copies: Tensor) -> None:
        r"""Hallucinate ``copies[j]`` observations at each of ``k`` distinct
        candidates ``indices[j]`` (none of them the last step's), in that order: the
        steps of ``k`` calls of :meth:`add` from one rank-``k`` Woodbury update,
        ``O(k m (m + t) + k^3)`` in a few matrix products instead of ``k``
        matrix-vector passes.

        With ``G = H_t F^T`` and the Cholesky factor ``L`` of
        ``K = diag(1 / copies) + F G``, column ``j`` of ``G L^{-T}`` is
        ``h_j / sqrt(d_j)`` and ``L_jj^2 = d_j`` (the Schur complement of the
        leading block): the directions and denominators of sequential
        Sherman-Morrison steps.
        """
        if indices.numel() == 0:
            return
        rows = self.geometry.feature_rows(indices).reshape(indices.shape[0], -1)
        k, m = rows.shape
        self.flops += 2.0 * k * m * (m + 2 * self.step + k) + k**3 / 3.0
        G = self.directions.apply_inverse(rows.mT, self.geometry.solve)  # m x k
        woodbury = torch.diag(copies.to(G).reciprocal()) + rows @ G
        factor = torch.linalg.cholesky(woodbury)
        pivots = factor.diagonal()
        scaled = torch.linalg.solve_triangular(factor, G.mT, upper=False).mT
        self.directions.extend(scaled * pivots, pivots.square())
        self._keep_raw(scaled * pivots)
        self.last_index, self._last_copies = int(indices[-1]), int(copies[-1])

    def _keep_raw(self, columns: Tensor) -> None:
        r"""The ``m x k`` directions just added, in raw coordinates too
        (``O(s m k)``), unless the raw rows are the feature rows."""
        if self.raw_directions is not self.directions:
            self.raw_directions.extend(self.geometry.to_raw(columns))
            self.flops += 2.0 * columns.numel() * self.geometry.num_raw

    def copy_denominators(self, copies: Tensor) -> Tensor:
        r"""The last step's denominators ``1 / (k + j) + f^T h`` with ``j`` more copies
        of its candidate (``copies`` holds the ``j``)."""
        last = self.directions.denominators[-1]
        return last - 1.0 / self._last_copies + 1.0 / (self._last_copies + copies)

    def add_copies(self, copies: int) -> None:
        r"""``copies`` more copies of the last step's candidate: ``d = 1 / k + f^T h``
        becomes ``1 / (k + copies) + f^T h``; candidates already refreshed past the
        step take the difference of the two terms (the :attr:`kept` ones too), the
        others catch up with the new one."""
        old = self.directions.denominators[-1].clone()
        new = self.copy_denominators(old.new_tensor(float(copies)))
        self.directions.set_last_denominator(new)
        self._last_copies += copies
        current = torch.nonzero(self.refreshed_at == self.step).squeeze(-1)
        if current.numel() > 0:
            rows = self.geometry.raw_rows(current)
            self.variance[current] = self._recopied(rows, self.variance[current], old)
        if self._kept_at == self.step and self.kept.numel():
            self._kept_variances = self._recopied(
                self.kept_rows, self._kept_variances, old
            )

    def _recopied(self, rows: Tensor, variances: Tensor, old: Tensor) -> Tensor:
        r"""Variances of ``k`` candidates (raw rows ``rows``) that took the last
        step's term with the denominator ``old``, with its current one, ``O(k s)``."""
        h = self.raw_directions.matrix[:, -1]
        new = self.directions.denominators[-1]
        extra = (rows @ h).square() * (1.0 / new - 1.0 / old)
        self.flops += 2.0 * rows.shape[0] * h.shape[0]
        return (variances - extra).clamp_min(0.0)


class ResidualDirectionTracker:
    r"""In-batch update that also spends the residual direction of each hallucinated
    point, as if the point joined the dictionary for the rest of the batch.

    A point ``x_s`` outside the dictionary's span adds the Gram-Schmidt coordinate
    ``e_s(x) = r_s(x, x_s) / sqrt(r_s(x_s, x_s))`` (``r_s`` the residual kernel after
    the dictionary and the earlier batch points), scaled by ``1 / sqrt(lambda)`` in the
    whitened coordinates; adding a coordinate leaves every variance unchanged, the
    hallucinated observation then lowers them by Sherman-Morrison. Earlier
    observations are not re-embedded on the new coordinates, so the variances are
    those of the DTC model on dictionary ``S + {x_s}`` whose old data have no
    component along them. Eager:
    ``O(n (m + b))`` per step for all candidates.
    """

    eager = True

    def __init__(
        self, geometry: CandidateGeometry | CachedGeometry, tolerance: float = 1e-10
    ) -> None:
        self.geometry = geometry
        self.variance = geometry.scaled_variance.clone()
        self.residual = geometry.residual.clone()
        self.extra = _Columns(
            len(geometry), geometry.scaled_variance
        )  # e_j / sqrt(lam)
        self.directions = _Columns(geometry.num_features, geometry.scaled_variance)
        self.tolerance = tolerance
        self.flops = 0.0

    def refresh(self, indices: Tensor) -> Tensor:
        return self.variance[indices]

    def add(self, index: int, copies: int = 1) -> None:
        r"""Hallucinate ``copies`` observations at candidate ``index``, ``O(n (m + t))``
        each."""
        for _ in range(copies):
            self._add_one(index)

    def add_many(self, indices: Tensor, copies: Tensor) -> None:
        r"""``copies[j]`` observations at each candidate ``indices[j]``, in order."""
        for index, count in zip(indices.tolist(), copies.tolist(), strict=True):
            self.add(index, count)

    def _add_one(self, index: int) -> None:
        geometry = self.geometry
        scale = geometry.noise.sqrt()
        residual = self.residual[index]
        if residual > self.tolerance * geometry.prior_variance[index]:
            E = self.extra.matrix * scale
            numerator = geometry.residual_covariance(index) - E @ E[index]
            e = numerator / residual.sqrt()
            self.residual = (self.residual - e.square()).clamp_min(0.0)
            self.extra.append(e / scale)
            self.directions.grow_rows(geometry.num_features + self.extra.count)
        m = geometry.num_features
        w = torch.cat([geometry.feature_rows(index), self.extra.matrix[index]])
        h = self.directions.apply_inverse(
            w, lambda v: torch.cat([geometry.solve(v[:m]), v[m:]])
        )
        den = 1 + w @ h
        products = geometry.features_times(h[:m]) + self.extra.matrix @ h[m:]
        self.variance = (self.variance - products.square() / den).clamp_min(0.0)
        self.directions.append(h, den)
        self.flops += 4.0 * len(geometry) * (w.shape[0] + self.extra.count)


class LazyArgmax:
    r"""Exact ``argmax_x mu(x) + radius sigma~_t(x)`` at every step of a batch.

    In-batch variances only decrease, so start-of-batch scores are upper bounds
    (lazy greedy evaluation, Minoux 1978). The first step is a plain argmax; then
    a step brings the candidates it refreshed before up to date (``O(r s)`` for
    ``r`` of them) and walks down the candidates in decreasing start-of-batch
    score (found by ``topk`` as far as needed, never a full sort), refreshing
    blocks of them while the next start-of-batch score can still reach the best
    refreshed score. No step touches all ``n`` candidates (except with an eager
    tracker, whose variances are all current anyway). Ties go to the lowest
    index, as ``torch.argmax`` of a full recomputation.

    The refreshed candidates are the tracker's kept ones
    (:meth:`FrozenDictionaryTracker.keep`), their ``mu + floor`` held here in the
    same order, so a step updates their scores in a few operators. A step reads
    one pair of numbers on the host (the maximizer and its score) per block it
    looks at, one block in most steps, and the start-of-batch bounds of the walk
    once per ``topk``.
    """

    def __init__(
        self,
        mean: Tensor,
        radius: float,
        tracker: FrozenDictionaryTracker | ResidualDirectionTracker,
        block_size: int = 256,
        excluded: Tensor | None = None,
    ) -> None:
        r"""
        Args:
            mean: ``n`` frozen means.
            radius: The UCB radius.
            tracker: The in-batch variances.
            block_size: Candidates refreshed at once, doubling along a step.
            excluded: ``n`` booleans: candidates never to return (their scores are
                ``-inf``), or None.
        """
        self.mean = mean
        self.radius = radius
        self.tracker = tracker
        self.block_size = block_size
        self.floor = (
            torch.zeros_like(mean)
            if excluded is None
            else torch.zeros_like(mean).masked_fill(excluded, -float("inf"))
        )
        self.bounds = mean + radius * tracker.variance.sqrt() + self.floor
        self.order: Tensor | None = None  # the largest bounds first, grown on demand
        self._ordered: Tensor | None = None  # whether a candidate is in `order`
        self._order_bounds: list[float] = []  # their bounds, on the host
        self.position = 0
        self._offset = mean[:0]  # `mean + floor` of the refreshed candidates

    def exclude(self, indices: Tensor) -> None:
        r"""Never return ``indices`` from now on (bounds already read to the host
        stay as they were: upper bounds still, so the argmax stays exact)."""
        self.floor[indices] = -float("inf")
        self.bounds[indices] = -float("inf")
        if not self.tracker.eager:
            refreshed = self.tracker.kept
            self._offset = self.mean[refreshed] + self.floor[refreshed]

    def __call__(self) -> tuple[int, float]:
        r"""``(index, score)`` of the current maximizer."""
        if self.tracker.eager:
            scores = self.mean + self.radius * self.tracker.variance.sqrt() + self.floor
            index = int(scores.argmax())
            return index, float(scores[index])
        if self.order is None:
            if self.tracker.step == 0:  # nothing hallucinated yet: all scores current
                index = int(self.bounds.argmax())
                return index, float(self.bounds[index])
            self.order = self.bounds.new_zeros(0, dtype=torch.long)
            self._ordered = torch.zeros_like(self.bounds, dtype=torch.bool)
        variances = self.tracker.kept_variances()
        scores = torch.add(self._offset, variances.sqrt(), alpha=self.radius)
        block = self.block_size
        while True:
            index, value = self._best(scores)
            if self.position >= len(self.bounds) or self._next_bound() < value:
                break
            self._extend_order(self.position + block)
            new = self.order[self.position : self.position + block]
            self.position += new.shape[0]
            scores = torch.cat([scores, self._walk_in(new)])
            block *= 2
        return index, value

    def _walk_in(self, new: Tensor) -> Tensor:
        r"""Refresh candidates ``new`` and keep them; return their scores."""
        variances = self.tracker.keep(new)
        offset = self.mean[new] + self.floor[new]
        self._offset = torch.cat([self._offset, offset])
        return torch.add(offset, variances.sqrt(), alpha=self.radius)

    def _best(self, scores: Tensor) -> tuple[int, float]:
        r"""The largest score and its candidate (the lowest index among ties), in
        one read to the host; ``(-1, -inf)`` when nothing is refreshed."""
        if scores.numel() == 0:
            return -1, -float("inf")
        top = scores.max()
        best = torch.where(scores == top, self.tracker.kept, len(self.bounds)).min()
        index, value = torch.stack([best.double(), top.double()]).tolist()
        return int(index), value

    def _extend_order(self, count: int) -> None:
        r"""Make :attr:`order` hold at least ``count`` candidates (or all): the next
        largest bounds by ``topk``, doubling, so no step sorts all ``n``."""
        n = len(self.bounds)
        if self.order.shape[0] >= min(count, n):
            return
        k = min(n, max(count, 2 * self.order.shape[0], 4 * self.block_size))
        top = torch.topk(self.bounds, k).indices
        fresh = top[~self._ordered[top]]  # ties at the boundary may differ: skip
        self._ordered[fresh] = True
        self.order = torch.cat([self.order, fresh])
        self._order_bounds.extend(self.bounds[fresh].tolist())

    def _next_bound(self) -> float:
        r"""The largest bound of a candidate not refreshed yet (``-inf`` if none)."""
        if self.position >= len(self.bounds):
            return -float("inf")
        self._extend_order(self.position + 1)
        return self._order_bounds[self.position]

    def repeats(self, index: int, limit: int) -> Tensor:
        r"""Scores of the last step's candidate ``index`` at the next picks, while the
        greedy would keep picking it (one more copy each time), at most ``limit``.

        ``index`` must be the current maximizer. With ``j`` more copies every
        refreshed candidate's variance is known in closed form
        (:meth:`FrozenDictionaryTracker.copy_denominators`), so the whole run is
        one ``r x limit`` computation; it ends where another refreshed candidate
        wins (ties to the lowest index) or where the best unrefreshed bound could.

        Returns:
            ``k >= 1`` scores; the greedy takes ``k`` copies of ``index``.
        """
        tracker = self.tracker
        refreshed = tracker.kept
        copies = torch.arange(limit, dtype=self.mean.dtype, device=self.mean.device)
        denominators = tracker.copy_denominators(copies)
        drop = 1.0 / denominators - 1.0 / denominators[0]
        products = (tracker.kept_rows @ tracker.raw_directions.matrix[:, -1]).square()
        variance = tracker.kept_variances().unsqueeze(-1)
        scores = (
            self._offset.unsqueeze(-1)
            + self.radius
            * (variance - products.unsqueeze(-1) * drop).clamp_min(0.0).sqrt()
        )
        top = scores.max(0).values
        winner = (
            torch.where(scores == top, refreshed.unsqueeze(-1), len(self.mean))
            .min(0)
            .values
        )
        keeps = (winner == index) & (top > self._next_bound())
        count = int(keeps.long().cumprod(0).sum())
        position = torch.nonzero(refreshed == index)[0, 0]
        return scores[position, : max(count, 1)]
