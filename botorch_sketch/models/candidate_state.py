r"""The DTC Nystrom posterior of a finite candidate set, updated in place.

For ``A`` candidates, a fixed kernel ``k``, the regularization ``lambda`` and a
dictionary ``S`` of ``m`` candidates, pick any factor ``F`` with
``F F^T = K_SS + eps I`` and the features ``z(x) = F^{-1} k_S(x)``. With the observed
candidates ``X`` (multiplicities ``C``, per-candidate reward sums ``s``):

.. math::

    V = Z_X^T C Z_X + \lambda I, \quad b = Z_X^T s, \quad w = V^{-1} b, \qquad
    \mu(x) = z(x)^T w, \quad
    \Sigma(x) = k(x, x) - \|z(x)\|^2 + \lambda\, z(x)^T V^{-1} z(x),

the same posterior as :class:`~botorch_sketch.models.dtc.DTCState` (which takes the
Cholesky factor for ``F``). :class:`CandidateState` caches the ``A x m`` features
``Phi`` and, per candidate, ``mu``, ``||z||^2`` and ``z^T V^{-1} z``, next to the
``m x m`` matrices ``F^{-1}`` and ``V^{-1}``. Every change then costs ``O(A m)``:

- ``b`` new observations (Woodbury with ``G = V^{-1} Z_b^T`` and
  ``K = C_b^{-1} + Z_b G``): ``z^T V^{-1} z`` drops by the row sums of
  ``(Phi G) K^{-1} (Phi G)^T`` and ``mu`` moves by ``Phi G K^{-1} (ybar_b - mu_b)``,
  ``O(A m b)``;
- a dictionary point ``s`` appended (bordered factor): ``l = F^{-1} k_S(s)``,
  ``rho^2 = k(s, s) - ||l||^2``, and every candidate gains the feature
  ``c(x) = (k(x, s) - z(x)^T l) / rho`` from one kernel column; ``V`` is bordered by
  ``v = Z_X^T C c_X`` and ``c_X^T C c_X + lambda``, so with ``e = V^{-1} v`` and the
  Schur complement ``sigma = c_X^T C c_X + lambda - v^T e``, ``z^T V^{-1} z`` gains
  ``(c - z^T e)^2 / sigma`` and ``mu`` gains ``(c - z^T e)(c_X^T s - e^T b) / sigma``;
- a dictionary point removed: its direction ``u = F^{-1} e_i / ||F^{-1} e_i||`` is
  the feature-space direction no other dictionary point spans; dropping it takes
  ``(z^T u)^2`` from ``||z||^2``, ``(z^T V^{-1} u)^2 / u^T V^{-1} u`` from
  ``z^T V^{-1} z`` and ``(z^T V^{-1} u)(u^T w) / u^T V^{-1} u`` from ``mu``
  (inverse of a principal submatrix); one Householder reflection of the ``m x m``
  quantities then rotates ``u`` onto the last coordinate, which is dropped;
- ``n`` candidates appended: ``F^{-1}`` is kept in the rotated coordinates, so
  ``z(x) = F^{-1} k_S(x)`` gives their features, ``||z||^2``, ``z^T V^{-1} z``
  and ``mu``, ``O(n m (m + d))``; nothing changes for the others.

The posterior is invariant under the rotation, so ``F`` need not stay triangular,
and the cached features need not be rotated at all: a
:class:`~botorch_sketch.models.feature_store.FeatureStore` holds ``s >= m`` raw
columns ``P`` and a basis ``B`` (``s x m``, orthonormal columns) with
``Phi = P^T B``; a removal reflects ``B`` (``O(s m)``), an append adds raw columns, and
``P`` is compacted to ``B^T P`` (one ``A x s x m`` product) once ``s > 5m/4 + 32``.
All the per-candidate updates of one batch end read the store once, in one product
``P^T [B r_1, ..., B r_j]``. When the dictionary holds every observed candidate this
is the incremental exact GP (noise ``lambda``): a step costs ``O(A t)`` and never
``O(A m^2)``. :meth:`refresh` recomputes everything from scratch (``O(A m^2)``), e.g.
after a hyperparameter change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from gpytorch import settings
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.dtc import dictionary_cholesky
from botorch_sketch.models.feature_store import FeatureStore
from botorch_sketch.models.kernel_columns import KernelColumns
from botorch_sketch.models.linalg import append_pivot, safe_cholesky, solve_lower
from botorch_sketch.utils.atomic import Restorable
from botorch_sketch.utils.validation import (
    check_int,
    check_kernel,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_positive,
)

#: Distinct observed candidates folded into one Woodbury update (bounds the
#: ``A x block`` temporaries of :meth:`CandidateState.observe`).
OBSERVATION_BLOCK = 64


class _AppendPlan(NamedTuple):
    r"""A planned append: the number of points appended, right-hand sides for the
    cache product, the new feature coordinates of given candidates, and the update
    from the products."""

    size: int
    right: list[Tensor]
    new_features: Callable[[Tensor, Tensor], Tensor]
    apply: Callable[[Tensor], Tensor]


class _ObservePlan(NamedTuple):
    r"""A planned observation: right-hand sides and the update from the products
    (and the appended features, if any)."""

    right: list[Tensor]
    apply: Callable[[Tensor, Tensor | None], None]


class CandidateState(Restorable):
    r"""DTC posterior of ``A`` fixed candidates with ``O(A m)`` in-place updates.

    Observations and dictionary points are candidate indices. The features may be
    stored in a lower precision than the candidates (``cache_dtype=torch.float32``
    halves the memory of the ``A x m`` cache); the ``m x m`` matrices and the
    per-candidate sums stay in the candidates' dtype. The state follows the
    candidates' device. ``flops`` counts the floating-point work done so far
    (kernel entries at ``3 d`` flops each, products and factorizations).

    Restorable (:class:`~botorch_sketch.utils.atomic.Restorable`): an update
    replaces the per-candidate sums and the ``m x m`` matrices instead of changing
    them, and writes the ``A x m`` cache only past its used feature columns or
    candidates, or into a new buffer (a compaction, a :meth:`refresh`, a growth),
    so a checkpoint records the state by reference and a failed update leaves it
    as it was.

    Example:
        >>> state = CandidateState(arms, kernel, noise=1.0)
        >>> state.observe(torch.tensor([3, 3, 8]), torch.tensor([0.1, 0.3, -0.2]))
        >>> state.set_dictionary(torch.tensor([3, 8]))
        >>> state.mean.shape, state.scaled_variance.shape  # (A,), (A,)
    """

    def __init__(
        self,
        points: Tensor,
        kernel: Kernel,
        noise: float,
        *,
        cache_dtype: torch.dtype | None = None,
        memory_budget: int | None = None,
    ) -> None:
        r"""Start from the prior, with no observation and an empty dictionary.

        Args:
            points: ``A x d`` candidates (in the kernel's input space).
            kernel: GPyTorch kernel with fixed hyperparameters (call :meth:`refresh`
                after changing them).
            noise: The regularization ``lambda > 0``.
            cache_dtype: dtype of the cached ``A x m`` features (default: the
                candidates'); ``torch.float32`` for the low-precision scoring path.
            memory_budget: Memory budget of the feature cache; growing past it
                raises a ``MemoryError`` naming the budget (default: no budget).
        """
        check_magnitude(
            check_matrix(check_model_dtype(points, "points"), "points"), "points"
        )
        check_kernel(kernel, "kernel")
        noise = check_positive(noise, "noise")
        if cache_dtype is not None and not (
            isinstance(cache_dtype, torch.dtype) and cache_dtype.is_floating_point
        ):
            raise TypeError(
                f"`cache_dtype` must be a floating dtype, got {cache_dtype!r}."
            )
        if memory_budget is not None:
            check_int(memory_budget, "memory_budget", 1)
        self.points = points
        self.kernel = kernel
        self.noise = noise
        self.flops = 0.0
        num_points = points.shape[0]
        with torch.no_grad():
            self.prior_variance = kernel(points, diag=True).detach().to(points)
        self._columns = KernelColumns(kernel, points)
        self._store = FeatureStore(num_points, points, cache_dtype, memory_budget)
        self.counts = points.new_zeros(num_points)
        self.target_sums = points.new_zeros(num_points)
        self._reset_dictionary(points.new_empty(0, dtype=torch.long))

    @classmethod
    @torch.no_grad()
    def from_observations(
        cls,
        points: Tensor,
        kernel: Kernel,
        noise: float,
        indices: Tensor,
        rewards: Tensor,
        dictionary: Tensor,
        **kwargs: object,
    ) -> CandidateState:
        r"""Build a state from scratch (``O(A m (m + d) + n m^2)``).

        Args:
            points: ``A x d`` candidates.
            kernel: The kernel.
            noise: ``lambda``.
            indices: ``n`` observed candidate indices (repeats allowed).
            rewards: ``n`` rewards.
            dictionary: ``m >= 1`` dictionary candidate indices.
            kwargs: ``cache_dtype``, ``memory_budget``.

        Returns:
            The state.
        """
        state = cls(points, kernel, noise, **kwargs)
        indices = state._check_indices(indices, "indices")
        state._check_rewards(rewards, indices)
        state.counts.index_add_(0, indices, torch.ones_like(rewards).to(points))
        state.target_sums.index_add_(0, indices, rewards.detach().to(points))
        dictionary = torch.unique(state._check_indices(dictionary, "dictionary"))
        if dictionary.numel() == 0:
            raise ValueError("`dictionary` must not be empty.")
        state._reset_dictionary(dictionary)
        return state

    # ------------------------------------------------------------------ views
    @property
    def num_points(self) -> int:
        r"""Number of candidates ``A``."""
        return self.points.shape[0]

    @property
    def size(self) -> int:
        r"""Number of dictionary points ``m``."""
        return self.dictionary.shape[0]

    @property
    def cache_dtype(self) -> torch.dtype:
        r"""The dtype of the cached features."""
        return self._store.dtype

    @property
    def features(self) -> Tensor:
        r"""``A x m`` features ``z(x)`` (``cache_dtype``), formed from the cache by
        one ``A x s x m`` product; :meth:`feature_rows` reads a few rows."""
        return self._store.features

    @property
    def num_raw(self) -> int:
        r"""Number of raw feature columns ``s >= m`` the cache holds."""
        return self._store.num_raw

    def raw_rows(self, indices: Tensor | int) -> Tensor:
        r"""Raw cache rows ``p(x)`` of some candidates (``k x s``, or ``s`` for one
        index; candidates' dtype), with ``z(x) = B^T p(x)``: a read without the
        ``O(k s m)`` product of :meth:`feature_rows`. Inner products with
        directions ``h`` need only ``z(x)^T h = p(x)^T (B h)`` (:meth:`to_raw`)."""
        return self._store.raw_rows(indices)

    def to_raw(self, directions: Tensor) -> Tensor:
        r"""``B H``: feature-space directions (``m x r``, or ``m``) in the raw
        coordinates of :meth:`raw_rows` (``s x r``, or ``s``), ``O(s m r)``."""
        return self._store.to_raw(directions)

    def feature_rows(self, indices: Tensor | int) -> Tensor:
        r"""Features ``z(x)`` of some candidates (``k x m``, or ``m`` for one index;
        candidates' dtype), ``O(k s m)``."""
        return self._store.feature_rows(indices)

    def features_times(self, matrix: Tensor) -> Tensor:
        r"""``Phi M`` (``A x r`` for ``m x r``, or ``A`` for ``m``; candidates'
        dtype): one read of the cache, without forming ``Phi``."""
        return self._store.times(matrix)

    def kernel_columns(self, indices: Tensor) -> Tensor:
        r"""``A x k`` kernel block ``K(points, points[indices])``."""
        return self._columns(indices.to(self.points.device))

    @property
    def gram_inverse(self) -> Tensor:
        r"""``m x m`` matrix ``V^{-1}``."""
        return self._gram_inverse

    @property
    def observed(self) -> Tensor:
        r"""Sorted LongTensor of the distinct observed candidates."""
        return torch.nonzero(self.counts).squeeze(-1)

    @property
    def explained_variance(self) -> Tensor:
        r"""``A`` values ``||z(x)||^2`` (the Nystrom part of ``k(x, x)``)."""
        return self._explained

    @property
    def variance(self) -> Tensor:
        r"""``A`` Bayesian-scale DTC variances ``Sigma(x)`` (no noise)."""
        return (
            self.prior_variance - self._explained + self.noise * self._quadratic
        ).clamp_min(0.0)

    @property
    def scaled_variance(self) -> Tensor:
        r"""``A`` papers'-scale variances ``sigma~^2(x) = Sigma(x) / lambda``."""
        return self.variance / self.noise

    @property
    def mean(self) -> Tensor:
        r"""``A`` posterior means of the rewards (or of the targets set by
        :meth:`set_targets`), ``O(A)``."""
        return self._means[:, 0]

    @torch.no_grad()
    def set_targets(self, indices: Tensor, targets: Tensor) -> None:
        r"""Condition on ``targets`` instead of the rewards observed so far (e.g.
        the rewards standardized, or warped by a loop), from now on: the DTC mean
        is linear in the per-candidate sums of the targets, so this recomputes
        their projection and the means from the cached raw features,
        ``O((u + A) s + s m + m^2)`` for ``u`` distinct observed candidates and
        ``s`` stored columns; the variances do not depend on the targets. Later
        observations add their own rewards to the sums.

        Args:
            indices: ``n`` candidate indices: the observations so far, as a
                multiset (each candidate as often as it was observed).
            targets: Their ``n`` targets, in any order matching ``indices``.
        """
        indices = self._check_indices(indices, "indices")
        self._check_rewards(targets, indices, "targets")
        targets = targets.detach().to(self.points)
        counts = torch.zeros_like(self.counts).index_add_(
            0, indices, torch.ones_like(targets)
        )
        if not torch.equal(counts, self.counts):
            raise ValueError(
                "`indices` must hold the observed candidates, each as often as it "
                "was observed."
            )
        self.target_sums = torch.zeros_like(self.target_sums).index_add_(
            0, indices, targets
        )
        observed, m = self.observed, self.size
        if m == 0:
            return
        # Z_X^T y = B^T (R_X y) for the raw columns R_X of the observed candidates
        raw = self._store.raw_rows(observed)
        projected = self._store.basis.mT @ (raw.mT @ self._targets(observed))
        self._projected_targets = projected
        self._weights = self._gram_inverse @ projected
        self._means = self.features_times(self._weights)
        s = self.num_raw
        self.flops += 2.0 * ((observed.numel() + self.num_points) * s + s * m + m * m)

    # ---------------------------------------------------------------- updates
    @torch.no_grad()
    def observe(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Condition on rewards observed at candidates (repeats allowed).

        Repeated indices are merged into one update with their multiplicity, so a
        batch of ``k`` copies of one candidate costs one rank-one update.

        Args:
            indices: ``b`` candidate indices.
            rewards: ``b`` rewards.
        """
        self.update(indices, rewards, None)

    @torch.no_grad()
    def set_dictionary(self, indices: Tensor) -> tuple[int, int]:
        r"""Make the dictionary the given candidates (see :meth:`update`).

        Args:
            indices: ``m'`` candidate indices (duplicates merged), ``m' >= 1``.

        Returns:
            ``(added, removed)`` counts.
        """
        if isinstance(indices, Tensor) and indices.numel() == 0:
            raise ValueError("`indices` must not be empty.")
        empty = self.dictionary.new_empty(0)
        return self.update(empty, self.points.new_empty(0), indices)

    @torch.no_grad()
    def add_to_dictionary(self, indices: Tensor | int) -> None:
        r"""Append candidates to the dictionary; points already in it are skipped.

        Args:
            indices: Candidate index or ``k`` indices.
        """
        if not isinstance(indices, Tensor):
            indices = torch.tensor(
                [self._check_index(indices)], device=self.points.device
            )
        indices = torch.unique(self._check_indices(indices.reshape(-1), "indices"))
        entering = indices[~torch.isin(indices, self.dictionary)]
        none = self.points.new_empty(0)
        self._execute([self._plan_append_observe(entering, indices[:0], none, none)])
        self._compact_if_sparse()

    @torch.no_grad()
    def update(
        self, indices: Tensor, rewards: Tensor, dictionary: Tensor | None
    ) -> tuple[int, int]:
        r"""A batch end: observe rewards and make the dictionary ``dictionary``.

        Everything is validated first. The points leaving the dictionary, those
        entering it and the observations (blocks of :data:`OBSERVATION_BLOCK`
        distinct candidates) are planned on the ``m x m`` quantities, then the cache
        is read once for all of them: ``O(A s (2 r + 2 k + b))`` for ``r`` leaving
        and ``k`` entering points and ``b`` distinct observed candidates.

        Args:
            indices: ``b`` observed candidate indices (repeats allowed, may be
                empty).
            rewards: ``b`` rewards.
            dictionary: The new dictionary (``m' >= 1`` candidate indices,
                duplicates merged), or None to keep it.

        Returns:
            ``(added, removed)`` dictionary counts.
        """
        indices = self._check_indices(indices, "indices")
        self._check_rewards(rewards, indices)
        before = self.dictionary
        entering = self.dictionary.new_empty(0)
        leaving: list[int] = []
        if dictionary is not None:
            dictionary = torch.unique(self._check_indices(dictionary, "dictionary"))
            if dictionary.numel() == 0:
                raise ValueError("`dictionary` must not be empty.")
            entering = dictionary[~torch.isin(dictionary, self.dictionary)]
            leaving = self.dictionary[~torch.isin(self.dictionary, dictionary)].tolist()
        rewards = rewards.detach().to(self.points)
        distinct, inverse = torch.unique(indices, return_inverse=True)
        counts = torch.zeros_like(distinct, dtype=self.points.dtype).index_add_(
            0, inverse, torch.ones_like(rewards)
        )
        sums = torch.zeros_like(counts).index_add_(0, inverse, rewards)
        # remove first (a smaller cache to read); when every point leaves, the
        # last one goes after the appends, and stays unless every entering point
        # was appended (a skipped one may lie in the span only with it)
        held = leaving[-1:] if len(leaving) == self.size else []
        plans = [self._plan_removal(i) for i in leaving[: len(leaving) - len(held)]]
        for start in range(0, max(distinct.numel(), 1), OBSERVATION_BLOCK):
            rows = slice(start, start + OBSERVATION_BLOCK)
            plans.append(
                self._plan_append_observe(
                    entering if start == 0 else entering[:0],
                    distinct[rows],
                    counts[rows],
                    sums[rows],
                )
            )
            self._execute(plans)
            plans = []
        if held and bool(torch.isin(entering, self.dictionary).all()):
            self._execute([self._plan_removal(held[0])])
        self._compact_if_sparse()
        added = int((~torch.isin(self.dictionary, before)).sum())
        return added, int((~torch.isin(before, self.dictionary)).sum())

    def _execute(self, plans: list[tuple[Tensor, Callable[[Tensor], None]]]) -> None:
        r"""One read of the cache for every plan's right-hand sides (stored
        coordinates, ``s x r_j``), then each plan's per-candidate update."""
        if not plans:
            return
        products = self._store.read(torch.cat([rhs for rhs, _ in plans], dim=-1))
        start = 0
        for rhs, apply in plans:
            apply(products[:, start : start + rhs.shape[-1]])
            start += rhs.shape[-1]

    def _plan_removal(self, index: int) -> tuple[Tensor, Callable[[Tensor], None]]:
        r"""Drop ``index`` from the ``m x m`` quantities and the basis now; return the
        right-hand sides ``B [u, V^{-1} u]`` and the per-candidate update."""
        position = int(torch.nonzero(self.dictionary == index).squeeze(-1)[0])
        direction = self._factor_inverse[:, position]
        direction = direction / direction.norm()
        solved = self._gram_inverse @ direction
        curvature = float(direction @ solved)
        along_weights = direction @ self._weights  # 1
        rhs = self.to_raw(torch.stack([direction, solved], dim=-1))
        last = torch.zeros_like(direction)
        last[-1] = 1.0
        reflector = direction - last
        norm = float(reflector.norm())
        self._remove_last_coordinate(
            reflector / norm if norm > 1e-12 else None, position
        )
        m, s = self.size + 1, self.num_raw
        self.flops += 4.0 * self.num_points * s + 14.0 * m * m + 4.0 * s * m

        def apply(products: Tensor) -> None:
            along, coupled = products[:, 0], products[:, 1]
            self._explained = self._explained - along.square()
            self._quadratic = self._quadratic - coupled.square() / curvature
            self._means = self._means - torch.outer(coupled, along_weights / curvature)

        return rhs, apply

    def _remove_last_coordinate(self, reflector: Tensor | None, position: int) -> None:
        r"""Reflect the ``m x m`` matrices and the basis by ``H = I - 2 h h^T``
        (``O((m + s) m)``) and drop the last feature coordinate (and row
        ``position`` of ``F``)."""
        factor_inverse, gram_inverse = self._factor_inverse, self._gram_inverse
        projected = self._projected_targets
        if reflector is not None:
            factor_inverse = _reflect(factor_inverse, reflector)
            gram_inverse = _reflect(_reflect(gram_inverse, reflector).mT, reflector)
            projected = projected - 2 * torch.outer(reflector, reflector @ projected)
        self._store.rotate_and_drop_last(reflector)
        keep = torch.arange(self.size, device=self.dictionary.device) != position
        self._factor_inverse = factor_inverse[:-1][:, keep]
        corner = gram_inverse[-1, -1]
        edge = gram_inverse[:-1, -1]
        self._gram_inverse = _symmetric(
            gram_inverse[:-1, :-1] - torch.outer(edge, edge) / corner
        )
        self._projected_targets = projected[:-1]
        self._weights = self._gram_inverse @ self._projected_targets
        self.dictionary = self.dictionary[keep]

    def _plan_append_observe(
        self,
        entering: Tensor,
        indices: Tensor,
        counts: Tensor,
        sums: Tensor,
    ) -> tuple[Tensor, Callable[[Tensor], None]]:
        r"""Append ``k`` dictionary points, then observe ``b`` distinct candidates
        (multiplicities ``counts``, reward sums ``sums``): the ``m x m`` quantities
        now (:meth:`_plan_append`, then :meth:`_plan_observe` on the appended
        features), the per-candidate update from one read of the cache.

        Returns:
            The ``A x r`` right-hand sides ``B [L R^{-T}, V^{-1} B_V, G]`` (only the
            parts that apply) and the update that takes their products with the
            candidates' features.
        """
        m, b = self.size, indices.numel()
        append = self._plan_append(entering) if entering.numel() else None
        if append is None and (b == 0 or m == 0):
            return self._store.basis[:, :0], lambda products: self._record(
                indices, counts, sums
            )
        k = append.size if append is not None else 0
        observe = self._plan_observe(indices, counts, sums, m, append) if b else None
        right = [*(append.right if append else []), *(observe.right if observe else [])]
        rhs = self.to_raw(torch.cat(right, dim=-1))
        A, r = self.num_points, rhs.shape[-1]
        self.flops += 2.0 * A * self.num_raw * r + A * (k + b) * (k + b + 6)

        def apply(products: Tensor) -> None:
            feature = None
            if append is not None:
                feature = append.apply(products[:, : 2 * k])
            if observe is not None:
                observe.apply(products[:, 2 * k :], feature)
            self._record(indices, counts, sums)

        return rhs, apply

    def _plan_append(self, entering: Tensor) -> _AppendPlan | None:
        r"""Append ``k`` dictionary points (block-bordered factor), or None when
        none of them adds to the dictionary's span.

        With ``L = F^{-1} K_SE`` and ``R R^T = K_EE - L^T L`` the new features are
        ``c(x) = R^{-1} (k_E(x) - L^T z(x))``; ``V`` is bordered by
        ``B_V = Z_X^T C c_X`` and ``c_X^T C c_X + lambda I`` (``X`` the candidates
        observed so far, ``C`` their counts). Only observed rows of the cache are
        read; the ``m x m`` state is updated now, the candidates' by ``apply``.
        Entering points that the span already holds (copies of dictionary points,
        or points the kernel cannot tell from it) are skipped
        (:func:`_spanning_subset`): they would not change the posterior.
        """
        block = self._columns(entering)  # A x k
        link = self._factor_inverse @ block[self.dictionary]  # m x k
        residual = block[entering] - link.mT @ link
        kept = _spanning_subset(residual, self.prior_variance[entering])
        if kept.numel() == 0:
            return None
        if kept.numel() < entering.numel():
            entering, block, link = entering[kept], block[:, kept], link[:, kept]
            residual = residual[kept][:, kept]
        k, m, basis = entering.numel(), self.size, self._store.basis
        eye = torch.eye(k, dtype=self.points.dtype, device=self.points.device)
        corner = safe_cholesky(residual)
        scaled_link = _right_solve_lower_t(link, corner)
        observed = self.observed
        weights = self.counts[observed].unsqueeze(-1)
        raw_X = self._store.raw_rows(observed)  # n x s
        C_X = _right_solve_lower_t(block[observed], corner) - raw_X @ (
            basis @ scaled_link
        )
        border = basis.mT @ (raw_X.mT @ (weights * C_X))  # m x k
        extension = self._gram_inverse @ border
        schur = safe_cholesky(
            C_X.mT @ (weights * C_X) + self.noise * eye - border.mT @ extension
        )
        target = C_X.mT @ self._targets(observed)  # k x 1
        step = torch.cholesky_solve(
            target - extension.mT @ self._projected_targets, schur
        )
        self._gram_inverse = _bordered_inverse(
            self._gram_inverse, extension, torch.cholesky_inverse(schur)
        )
        self._projected_targets = torch.cat([self._projected_targets, target])
        self._weights = torch.cat([self._weights - extension @ step, step])
        corner_inverse = torch.linalg.solve_triangular(corner, eye, upper=False)
        self._factor_inverse = torch.cat(
            [
                torch.cat([self._factor_inverse, link.new_zeros(m, k)], dim=1),
                torch.cat(
                    [-corner_inverse @ link.mT @ self._factor_inverse, corner_inverse],
                    dim=1,
                ),
            ]
        )
        self.dictionary = torch.cat([self.dictionary, entering])
        self.flops += (
            k * self._columns.flops_per_column
            + 4.0 * self.num_raw * (observed.numel() + m) * k
        )

        def new_features(rows: Tensor, Z_rows: Tensor) -> Tensor:
            r"""``c`` at candidates ``rows`` with old features ``Z_rows``."""
            return _right_solve_lower_t(block[rows], corner) - Z_rows @ scaled_link

        def apply(products: Tensor) -> Tensor:
            feature = _right_solve_lower_t(block, corner) - products[:, :k]
            direction = feature - products[:, k:]
            quadratic = _right_solve_lower_t(direction, schur).square().sum(-1)
            self._quadratic = self._quadratic + quadratic
            self._means = self._means + direction @ step
            self._explained = self._explained + feature.square().sum(-1)
            self._append_raw(feature)
            return feature

        return _AppendPlan(k, [scaled_link, extension], new_features, apply)

    def _plan_observe(
        self,
        indices: Tensor,
        counts: Tensor,
        sums: Tensor,
        old_size: int,
        append: _AppendPlan | None,
    ) -> _ObservePlan:
        r"""Observe ``b`` distinct candidates (Woodbury): ``G = V^{-1} Z_b^T`` and
        ``K = C_b^{-1} + Z_b G`` on the features after ``append`` (``old_size`` of
        them before it); the ``m x m`` state is updated now, the candidates' by
        ``apply``."""
        m, b = old_size, indices.numel()
        Z_b = self.feature_rows(indices)
        if append is not None:
            Z_b = torch.cat([Z_b, append.new_features(indices, Z_b)], dim=-1)
        # the mean at the observed rows, after the planned removals and append
        mean_b = Z_b @ self._weights  # b x 1
        G = self._gram_inverse @ Z_b.mT  # (m + k) x b
        woodbury = safe_cholesky(torch.diag(counts.reciprocal()) + Z_b @ G)
        averages = (sums / counts).unsqueeze(-1)
        residuals = averages - mean_b
        coefficients = torch.cholesky_solve(residuals, woodbury)
        # with K = L L^T: G K^{-1} G^T = W W^T and G K^{-1} r = W L^{-1} r for
        # W = G L^{-T}, so the candidates need only their products with W
        W = torch.linalg.solve_triangular(woodbury, G.mT, upper=False).mT
        whitened_residuals = torch.linalg.solve_triangular(
            woodbury, residuals, upper=False
        )
        self._gram_inverse = _symmetric(self._gram_inverse - W @ W.mT)
        self._projected_targets = self._projected_targets + Z_b.mT @ (
            counts.unsqueeze(-1) * averages
        )
        self._weights = self._weights + G @ coefficients
        self.flops += 2.0 * b * self.num_raw * m + 4.0 * G.shape[0] ** 2 * b

        def apply(products: Tensor, feature: Tensor | None) -> None:
            U = products
            if feature is not None:  # in place: the products are this update's own
                U.mT.addmm_(W[m:].mT, feature.mT)
            self._quadratic = self._quadratic - U.square().sum(-1)
            self._means = self._means + U @ whitened_residuals

        return _ObservePlan([W[:m]], apply)

    def _append_raw(self, feature: Tensor) -> None:
        r"""Store ``k`` new feature columns, compacting the store first when they
        do not fit and it is sparse."""
        if not self._store.fits(feature.shape[-1]):
            self._compact_if_sparse()  # before growing the buffer, when sparse
        self._store.append(feature)

    def _compact_if_sparse(self) -> None:
        r"""Replace the raw columns by the features (``P <- B^T P``, into a new
        buffer of the same capacity) once ``s > 5 m / 4 + 32``: one ``A x s x m``
        product every ``~m / 4 + 32`` appended columns. A full buffer grows
        rather than being compacted earlier, since a compaction that frees only a
        few columns would cost as much as one that frees ``m / 4``. Every read of
        the cache costs ``O(A s)`` per vector: the default command
        (docs/benchmarks.md) ran fastest at this threshold, against ``2 m + 32``,
        ``3 m / 2 + 32`` and ``m + 32``."""
        s, m = self.num_raw, self._store.size
        if s <= m + m // 4 + 32:
            return
        self._store.compact()
        self.flops += 2.0 * self.num_points * s * m

    def _targets(self, indices: Tensor) -> Tensor:
        r"""``n x 1`` target sums of candidates: the right-hand side of the mean."""
        return self.target_sums[indices].unsqueeze(-1)

    def _record(self, indices: Tensor, counts: Tensor, sums: Tensor) -> None:
        self.counts = self.counts.index_add(0, indices, counts)
        self.target_sums = self.target_sums.index_add(0, indices, sums)

    @torch.no_grad()
    def append_points(self, points: Tensor) -> None:
        r"""Append ``n`` candidates ``x`` (indices ``A, ..., A + n - 1``), neither
        observed nor in the dictionary: ``O(n m (m + d + s))``, without a pass
        over the cache but a copy of it (``O(A s)``) when its buffer has no spare
        rows left; the new buffer has ``(A + n) / 8`` spare rows, so the copy is
        amortized over appends.

        In the current (rotated) coordinates ``z(x) = F^{-1} k_S(x)``, stored as
        the raw column ``B z(x)`` (``B^T B = I``); the candidates then have
        ``||z||^2``, ``z^T V^{-1} z``, the means ``z^T w`` and ``k(x, x)``. The
        state's tensors are replaced only once everything is computed, so a
        failed call leaves it as it was (the new raw columns go past the held
        buffer's used columns, or into a new buffer).

        Args:
            points: ``n x d`` candidates, of the dtype of :attr:`points`.
        """
        check_magnitude(
            check_matrix(
                check_model_dtype(points, "points"),
                "points",
                num_cols=self.points.shape[-1],
            ),
            "points",
        )
        if points.dtype != self.points.dtype:
            raise TypeError(
                f"`points` must have the candidates' dtype {self.points.dtype}, "
                f"got {points.dtype}."
            )
        points = points.detach().to(self.points.device)
        n, m, s = points.shape[0], self.size, self.num_raw
        prior_variance = self.kernel(points, diag=True).detach().to(self.points)
        features = points.new_zeros(n, m)  # n x m
        if m:
            block = self.kernel(points, self.points[self.dictionary]).to_dense()
            features = block.to(self.points) @ self._factor_inverse.mT
        store = self._store.with_candidates(features)
        columns = self._columns.extended(points)
        zeros = points.new_zeros(n)
        explained = torch.cat([self._explained, features.square().sum(-1)])
        quadratic = torch.cat(
            [self._quadratic, ((features @ self._gram_inverse) * features).sum(-1)]
        )
        means = torch.cat([self._means, features @ self._weights])
        counts = torch.cat([self.counts, zeros])
        target_sums = torch.cat([self.target_sums, zeros])
        prior_variance = torch.cat([self.prior_variance, prior_variance])
        # nothing below can fail
        self._explained, self._quadratic, self._means = explained, quadratic, means
        self.counts, self.target_sums = counts, target_sums
        self.points, self.prior_variance = columns.points, prior_variance  # A + n
        self._store, self._columns = store, columns
        d = points.shape[-1]
        self.flops += n * (3.0 * m * d + 4.0 * m * m + 2.0 * s * m + 6.0 * m)

    @torch.no_grad()
    def remove_from_dictionary(self, index: int) -> None:
        r"""Drop candidate ``index`` from the dictionary, ``O(A s)`` (one read of the
        cache). A point not in it is left alone; the last dictionary point cannot be
        removed."""
        index = self._check_index(index)
        if not bool((self.dictionary == index).any()):
            return
        if self.size == 1:
            raise ValueError("The dictionary must keep at least one point.")
        self._execute([self._plan_removal(index)])
        self._compact_if_sparse()

    @torch.no_grad()
    def refresh(self, noise: float | None = None) -> None:
        r"""Recompute every cached quantity from the observations and the dictionary
        (``O(A m (m + d))``): after a change of the kernel's hyperparameters, or to
        shed the rounding accumulated by many updates.

        Args:
            noise: A new ``lambda > 0`` (default: keep it).
        """
        if noise is not None:
            self.noise = check_positive(noise, "noise")
        with torch.no_grad():
            self.prior_variance = self.kernel(self.points, diag=True).to(self.points)
        self._columns = KernelColumns(self.kernel, self.points)
        self._reset_dictionary(self.dictionary)

    def _reset_dictionary(self, dictionary: Tensor) -> None:
        r"""Recompute every cached quantity for ``dictionary``; the features go to
        a new buffer (the one held is only read)."""
        m = dictionary.shape[0]
        self.dictionary = dictionary
        eye = torch.eye(m, dtype=self.points.dtype, device=self.points.device)
        if m > 0:
            chol = dictionary_cholesky(
                self.kernel, self.points[dictionary], dtype=self.points.dtype
            )
            self._factor_inverse = torch.linalg.solve_triangular(chol, eye, upper=False)
        else:
            self._factor_inverse = eye

        def features_of(rows: slice) -> Tensor:
            block = self.kernel(self.points[rows], self.points[dictionary])
            return block.to_dense().to(self.points) @ self._factor_inverse.mT

        self._store.rebuild(m, features_of)
        observed = self.observed
        Z = self.feature_rows(observed)
        gram = Z.mT @ (self.counts[observed].unsqueeze(-1) * Z) + self.noise * eye
        chol_gram = torch.linalg.cholesky(gram)
        self._gram_inverse = torch.cholesky_inverse(chol_gram)
        self._projected_targets = Z.mT @ self._targets(observed)
        self._weights = torch.cholesky_solve(self._projected_targets, chol_gram)
        features = self._store.raw[:, :m].to(self.points)  # the basis is I
        self._explained = features.square().sum(-1)
        self._means = features @ self._weights
        self._quadratic = solve_lower(chol_gram, features.mT).square().sum(0)
        A, d = self.num_points, self.points.shape[-1]
        self.flops += (
            3 * A * m * d + 2 * A * m * m + m**3 + 2 * observed.numel() * m * m
        )

    # ---------------------------------------------------------------- helpers
    def _check_index(self, index: object) -> int:
        if isinstance(index, Tensor) and index.numel() == 1:
            index = index.item()
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"`index` must be an int, got {index!r}.")
        if not 0 <= index < self.num_points:
            raise ValueError(
                f"`index` must lie in [0, {self.num_points}), got {index}."
            )
        return index

    def _check_rewards(
        self, rewards: object, indices: Tensor, name: str = "rewards"
    ) -> None:
        if not isinstance(rewards, Tensor) or rewards.shape != indices.shape:
            raise ValueError(
                f"`{name}` must be a tensor of the shape of `indices`, "
                f"{tuple(indices.shape)}."
            )
        if not torch.isfinite(rewards).all():
            raise ValueError(f"`{name}` contains NaN or infinite values.")

    def _check_indices(self, indices: object, name: str) -> Tensor:
        if not isinstance(indices, Tensor) or indices.dtype != torch.long:
            raise TypeError(f"`{name}` must be a LongTensor.")
        if indices.dim() != 1:
            raise ValueError(f"`{name}` must be 1-dimensional, got {indices.dim()}.")
        if indices.numel() and (indices.min() < 0 or indices.max() >= self.num_points):
            raise ValueError(
                f"`{name}` must lie in [0, {self.num_points}) (the rows of `points`)."
            )
        return indices.to(self.points.device)


def _reflect(matrix: Tensor, reflector: Tensor) -> Tensor:
    r"""``(I - 2 h h^T) M`` for a unit vector ``h``, ``O(m^2)``."""
    return matrix - 2 * torch.outer(reflector, reflector @ matrix)


def _spanning_subset(residual: Tensor, prior_variance: Tensor) -> Tensor:
    r"""Positions of the entering points that add to the dictionary's span, in order.

    ``residual`` is the ``k x k`` covariance ``K_EE - L^T L`` of the entering points
    given the dictionary. A Cholesky factorization in the given order skips a point
    whose variance given the dictionary and the points kept before it is at most
    GPyTorch's ``cholesky_jitter`` (for the dtype) times its prior variance
    ``k(x, x)``: a copy of a dictionary point, or a point the kernel cannot tell
    from the span. ``O(k^3)``.

    Args:
        residual: ``k x k`` residual covariance.
        prior_variance: ``k`` prior variances ``k(x, x)``.

    Returns:
        A LongTensor of the kept positions.
    """
    tolerance = settings.cholesky_jitter.value(residual.dtype) * prior_variance
    remaining = residual.diagonal().clone()
    rows = residual.new_zeros(0, residual.shape[-1])
    kept = []
    for position in range(residual.shape[-1]):
        variance = float(remaining[position])
        if variance > float(tolerance[position]):
            row = append_pivot(rows, residual[position], position, variance, remaining)
            rows = torch.cat([rows, row.unsqueeze(0)])
            kept.append(position)
    return torch.tensor(kept, dtype=torch.long, device=residual.device)


def _symmetric(matrix: Tensor) -> Tensor:
    return (matrix + matrix.mT) / 2


def _bordered_inverse(
    inverse: Tensor, extension: Tensor, schur_inverse: Tensor
) -> Tensor:
    r"""Inverse of ``[[V, B], [B^T, C]]`` from ``V^{-1}``, ``E = V^{-1} B`` and the
    inverse of the Schur complement ``C - B^T E``."""
    side = -extension @ schur_inverse
    top = inverse - side @ extension.mT
    return torch.cat(
        [torch.cat([top, side], 1), torch.cat([side.mT, schur_inverse], 1)], 0
    )


def _right_solve_lower_t(matrix: Tensor, lower: Tensor) -> Tensor:
    r"""``M L^{-T}`` for a lower-triangular ``L``."""
    return solve_lower(lower, matrix.mT).mT
