r"""Cached work shared by Thompson paths over a fixed finite arm set.

A path of a GP with a fixed stationary kernel over ``N`` arms ``A`` is
``f~(A) = alpha Phi_A w + K_AU v`` (Matheron's rule, Wilson et al., ICML 2020): a
random-feature prior part with ``M`` features drawn once and fresh weights ``w``, and
an update through the kernel columns of ``s`` update points ``U``.
:class:`ArmFeatureCache` stores ``Phi_A`` and the columns ``k(A, u)`` within a memory
budget; :class:`PriorPathBank` computes prior parts ``Phi_A w`` ahead for blocks of
weights. Both take appended arms at the cost of the new arms only. The samplers built
on them are in :mod:`botorch_sketch.generation.thompson_arms`.
"""

from __future__ import annotations

import torch
from gpytorch import settings
from gpytorch.kernels import Kernel
from linear_operator import to_dense
from torch import Tensor

from botorch_sketch.sampling.pathwise import seeded_features, standard_normal
from botorch_sketch.utils.atomic import Restorable, preserve
from botorch_sketch.utils.validation import (
    check_generator,
    check_indices,
    check_int,
    check_matrix,
    check_positive,
    check_same_dtype,
)

#: Kernel columns per stored block of :class:`ArmFeatureCache`.
BLOCK_COLUMNS = 64

#: Bytes of the ``n x M`` features of one chunk when :class:`ArmFeatureCache` stores
#: them (in the arms' dtype; 524 arms for ``M = 1,000`` in double precision): the
#: temporaries of the feature map (phases, sines, cosines) stay in the processor's
#: cache and are not mapped anew for each chunk, 2-3x faster for ``20,640`` arms
#: and ``M = 1,000`` than chunks of ``16,384`` arms.
FEATURE_CHUNK_BYTES = 2**22

#: Weights of a :class:`PriorPathBank` whose prior values are computed in one pass
#: over the features, when first needed: a block of 64 costs two passes, so no
#: single draw pays for all of them (on ``20,640`` arms and ``M = 1,000`` float32
#: features a pass for 64 weights took 47-55 ms, the 99th percentile of an
#: asynchronous ``ask``).
PRIOR_VALUE_ROWS = 32


def draw_basis_seed(generator: torch.Generator | None) -> int:
    r"""The seed of a feature basis, one draw from ``generator`` (what
    :class:`ArmFeatureCache` draws when given no ``basis_seed``)."""
    device = None if generator is None else generator.device
    return int(torch.randint(2**62, (1,), generator=generator, device=device))


class ArmFeatureCache(Restorable):
    r"""Random-feature prior of all ``N`` arms and kernel columns of chosen arms.

    Stores ``Phi_A`` (``N x M``) and the columns ``k(A, a)`` of the arms ``a``
    registered with :meth:`add_columns`, in blocks of :data:`BLOCK_COLUMNS` columns
    stored as rows (``BLOCK_COLUMNS x N``: the product with a block's transpose runs
    over long contiguous rows, 3x faster than ``N x BLOCK_COLUMNS`` blocks; blocks
    are never copied when the set grows and freed slots are reused), as long as they
    fit in ``memory_budget`` bytes; what does not fit is recomputed in chunks of
    ``chunk_size`` arms by :meth:`prior_values` and :meth:`add_column_values`
    (stored features are written in chunks of at most
    :data:`FEATURE_CHUNK_BYTES`).
    :meth:`add_arms` appends arms: the stored features and blocks have room for
    ``capacity >= N`` arms (exactly ``N`` at construction, a quarter more after an
    append that overflows them, within the budget), so an append computes the new
    arms' features and column entries only, ``O(n (M + s) d)``, plus an amortized
    ``O(N (M + s))`` copy when the room runs out. ``cache_dtype`` (e.g.
    ``torch.float32``) sets the storage precision; results are in the arms' dtype.

    The public methods check their arguments (``TypeError`` / ``ValueError`` naming
    the argument, before any state changes) in ``O(input size)``; the cache's own
    chunk loops and :class:`PriorPathBank` call unchecked private variants.

    Restorable (:class:`~botorch_sketch.utils.atomic.Restorable`): appended arms
    are written past the ``N`` arms in use (or into new buffers); columns are
    written into free slots only; a slot freed by :meth:`remove_columns` keeps its
    column until it is reused, and its rows are then saved for the rollback of the
    atomic call in progress (:func:`~botorch_sketch.utils.atomic.preserve`).

    Example:
        >>> cache = ArmFeatureCache(arms, kernel, 1000, generator=g)
        >>> cache.add_columns(torch.tensor([3, 7]))
        >>> prior = cache.prior_values(W)                          # N x q
        >>> values = cache.add_column_values(prior, torch.tensor([3, 7]), V)
    """

    def __init__(
        self,
        arms: Tensor,
        kernel: Kernel,
        num_features: int = 1000,
        *,
        generator: torch.Generator | None = None,
        basis_seed: int | None = None,
        memory_budget: float = 4 * 2**30,
        cache_dtype: torch.dtype | None = None,
        chunk_size: int = 16384,
    ) -> None:
        r"""
        Args:
            arms: ``N x d`` arms.
            kernel: A stationary GPyTorch kernel without batch shape (its random
                Fourier features are drawn once, from ``generator``).
            num_features: Even number ``M`` of random Fourier features.
            generator: Random number generator of the feature basis.
            basis_seed: The seed of the feature basis instead of a draw from
                ``generator`` (:func:`draw_basis_seed`): the same seed gives the
                same standard normal frequencies, scaled by each kernel.
            memory_budget: Bytes the stored features and columns may take.
            cache_dtype: Storage dtype (default the arms' dtype).
            chunk_size: Arms per chunk when recomputing.
        """
        check_matrix(arms, "arms")
        if not isinstance(kernel, Kernel) or len(kernel.batch_shape) > 0:
            raise TypeError("`kernel` must be a GPyTorch Kernel without batch shape.")
        check_int(num_features, "num_features", 2)
        if num_features % 2:
            raise ValueError(f"`num_features` must be even, got {num_features}.")
        check_generator(generator)
        check_positive(memory_budget, "memory_budget")
        if cache_dtype is not None and not (
            isinstance(cache_dtype, torch.dtype) and cache_dtype.is_floating_point
        ):
            raise TypeError(f"`cache_dtype` must be a float dtype, got {cache_dtype}.")
        self.chunk_size = check_int(chunk_size, "chunk_size", 1)
        self.arms = arms
        self.kernel = kernel.to(arms)
        self.num_features = num_features
        self.cache_dtype = arms.dtype if cache_dtype is None else cache_dtype
        self.memory_budget = float(memory_budget)
        self._itemsize = torch.finfo(self.cache_dtype).bits // 8
        seed = (
            draw_basis_seed(generator)
            if basis_seed is None
            else check_int(basis_seed, "basis_seed", 0)
        )
        dim = arms.shape[-1]
        self.feature_map = seeded_features(self.kernel, dim, num_features, seed)
        #: Arms the stored features and blocks have room for
        self._arm_capacity = arms.shape[0]
        #: ``capacity x M`` buffer of the stored features (None: recomputed)
        self._feature_rows: Tensor | None = None
        if self._bytes(num_features) <= self.memory_budget:
            self._feature_rows = arms.new_empty(
                arms.shape[0], num_features, dtype=self.cache_dtype
            )
            self._write_features(0)
        self.columns_stored = True
        self._blocks: list[Tensor] = []
        self._capacity = 0
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        #: Free slots that still hold the column of a removed arm
        self._released: set[int] = set()

    @property
    def num_arms(self) -> int:
        return self.arms.shape[0]

    @property
    def features(self) -> Tensor | None:
        r"""The stored ``N x M`` features ``Phi_A`` (storage dtype), or None when
        they are recomputed."""
        rows = self._feature_rows
        return None if rows is None else rows[: self.num_arms]

    @property
    def num_columns(self) -> int:
        r"""Registered kernel columns."""
        return len(self._slot_of)

    @property
    def stored_bytes(self) -> int:
        r"""Bytes held by the stored features and column blocks (their room for
        ``capacity`` arms included)."""
        columns = len(self._blocks) * BLOCK_COLUMNS
        features = 0 if self._feature_rows is None else self.num_features
        return int(self._bytes(columns + features))

    def _bytes(self, columns: int) -> float:
        r"""Bytes of ``columns`` stored values per arm of the capacity."""
        return float(self._arm_capacity) * columns * self._itemsize

    def _chunks(self, first: int = 0, size: int | None = None) -> list[Tensor]:
        r"""The arms from ``first`` on, in chunks of ``size`` (default
        ``chunk_size``)."""
        return list(self.arms[first:].split(size or self.chunk_size))

    def _write_features(self, first: int) -> None:
        r"""Store the features of the arms from ``first`` on, in chunks of at most
        ``chunk_size`` arms and :data:`FEATURE_CHUNK_BYTES`."""
        row_bytes = self.num_features * self.arms.element_size()
        size = min(self.chunk_size, max(1, FEATURE_CHUNK_BYTES // row_bytes))
        start = first
        for chunk in self._chunks(first, size):
            stop = start + chunk.shape[0]
            self._feature_rows[start:stop] = self._features(chunk)
            start = stop

    @torch.no_grad()
    def _features(self, X: Tensor) -> Tensor:
        return to_dense(self.feature_map(X))

    def kernel_matrix(self, X: Tensor, Y: Tensor) -> Tensor:
        r"""Dense ``k(X, Y)`` of ``n x d`` and ``n' x d`` points of the arms' dtype
        (``n x n'``, eagerly evaluated, no gradients)."""
        for points, name in ((X, "X"), (Y, "Y")):
            check_matrix(points, name, num_cols=self.arms.shape[-1], allow_empty=True)
            check_same_dtype(points, name, self.arms, "arms")
        return self._kernel_matrix(X, Y)

    @torch.no_grad()
    def _kernel_matrix(self, X: Tensor, Y: Tensor) -> Tensor:
        with settings.lazily_evaluate_kernels(False):
            return to_dense(self.kernel(X, Y))

    def features_at(self, indices: Tensor) -> Tensor:
        r"""``k x M`` features of the arms ``indices`` (a ``k`` LongTensor), in the
        arms' dtype."""
        check_indices(indices, "indices", self.num_arms)
        if self.features is not None:
            return self.features[indices].to(self.arms.dtype)
        return self._features(self.arms[indices])

    def add_columns(self, indices: Tensor) -> None:
        r"""Register the kernel columns ``k(A, a)`` of the arms ``indices``.

        Registered columns are kept; new ones take free slots. If a new block would
        exceed the memory budget, all blocks are dropped and :meth:`add_column_values`
        recomputes columns from then on.

        Args:
            indices: ``k`` arm indices (a LongTensor, repeats allowed).
        """
        check_indices(indices, "indices", self.num_arms)
        new = [i for i in dict.fromkeys(indices.tolist()) if i not in self._slot_of]
        for arm in new:
            if not self._free:
                self._grow()
            self._slot_of[arm] = self._free.pop()
        filled = [self._slot_of[a] for a in new]
        reused = self._released.intersection(filled)
        self._released.difference_update(filled)
        if not self.columns_stored or not new:
            return
        device = self.arms.device
        slots = torch.tensor(filled, device=device)
        points = self.arms[torch.tensor(new, device=device)]
        for b, block in enumerate(self._blocks):  # O(N BLOCK_COLUMNS) memory
            inside = (slots // BLOCK_COLUMNS) == b
            if not bool(inside.any()):
                continue
            rows = slots[inside] - b * BLOCK_COLUMNS
            overwritten = [
                s - b * BLOCK_COLUMNS for s in reused if s // BLOCK_COLUMNS == b
            ]
            if overwritten:
                preserve(block, torch.tensor(overwritten, device=device))
            start = 0
            for chunk in self._chunks():
                stop = start + chunk.shape[0]
                values = self._kernel_matrix(chunk, points[inside]).mT
                block[rows, start:stop] = values.to(self.cache_dtype)
                start = stop

    def multiplied_columns(self, column_arms: Tensor) -> int:
        r"""Kernel columns :meth:`add_column_values` multiplies for the registered
        ``column_arms``: whole stored blocks, or one per distinct arm when
        recomputing."""
        arms = self._registered(column_arms)
        if not self.columns_stored:
            return len(set(arms))
        return len({self._slot_of[a] // BLOCK_COLUMNS for a in arms}) * BLOCK_COLUMNS

    def _registered(self, column_arms: Tensor) -> list[int]:
        r"""``column_arms`` as a list, checked to be a LongTensor of registered arms."""
        check_indices(column_arms, "column_arms", self.num_arms)
        arms = column_arms.tolist()
        missing = set(arms).difference(self._slot_of)
        if missing:
            raise ValueError(
                "`column_arms` must be registered with `add_columns`; not registered: "
                f"{sorted(missing)[:5]}."
            )
        return arms

    def remove_columns(self, indices: Tensor) -> None:
        r"""Unregister the columns of the arms ``indices`` (a LongTensor; their slots
        are reused, arms not registered are ignored)."""
        check_indices(indices, "indices", self.num_arms)
        for arm in dict.fromkeys(indices.tolist()):
            if arm in self._slot_of:
                slot = self._slot_of.pop(arm)
                self._free.append(slot)
                self._released.add(slot)

    def _grow(self) -> None:
        start = self._capacity
        self._capacity += BLOCK_COLUMNS
        self._free.extend(range(self._capacity - 1, start - 1, -1))
        if not self.columns_stored:
            return
        features = 0 if self.features is None else self.num_features
        if self._bytes(self._capacity + features) > self.memory_budget:
            self.columns_stored = False
            self._blocks = []
            return
        self._blocks.append(
            self.arms.new_zeros(
                BLOCK_COLUMNS, self._arm_capacity, dtype=self.cache_dtype
            )
        )

    def add_arms(self, points: Tensor) -> None:
        r"""Append ``n`` arms: their features and their entries ``k(x, a)`` in the
        registered columns, ``O(n (M + s) d)`` for ``s`` registered columns.

        The new entries are written past the ``N`` arms in use while the buffers
        have room; else the stored features and blocks are first copied into
        buffers for ``max(N + n, 5 capacity / 4)`` arms (``N + n`` if that exceeds
        the memory budget; then, as at construction, the features and the columns
        that still exceed it are dropped and recomputed from then on).

        Args:
            points: ``n x d`` arms, in the arms' dtype.
        """
        check_matrix(points, "points", num_cols=self.arms.shape[-1])
        check_same_dtype(points, "points", self.arms, "arms")
        first = self.num_arms
        arms = torch.cat([self.arms, points.to(self.arms.device)])
        if arms.shape[0] > self._arm_capacity:
            self._reserve(arms.shape[0])
        self.arms = arms
        if self._feature_rows is not None:
            self._write_features(first)
        if self.columns_stored and self._slot_of:
            self._write_columns(first)

    def _reserve(self, num_arms: int) -> None:
        r"""Buffers with room for ``num_arms > capacity`` arms (see
        :meth:`add_arms`), holding the stored values of the ``N`` arms in use."""
        used = self.num_arms
        features = 0 if self._feature_rows is None else self.num_features
        self._arm_capacity = max(num_arms, self._arm_capacity * 5 // 4)
        if self._bytes(len(self._blocks) * BLOCK_COLUMNS + features) > (
            self.memory_budget
        ):
            self._arm_capacity = num_arms
        if self._feature_rows is not None:
            if self._bytes(self.num_features) > self.memory_budget:
                self._feature_rows, features = None, 0
            else:
                rows = self._feature_rows.new_empty(
                    self._arm_capacity, self.num_features
                )
                rows[:used] = self._feature_rows[:used]
                self._feature_rows = rows
        if not self.columns_stored:
            return
        if self._bytes(self._capacity + features) > self.memory_budget:
            self.columns_stored = False
            self._blocks = []
            return
        blocks = []
        for block in self._blocks:
            grown = block.new_zeros(BLOCK_COLUMNS, self._arm_capacity)
            grown[:, :used] = block[:, :used]
            blocks.append(grown)
        self._blocks = blocks

    @torch.no_grad()
    def _write_columns(self, first: int) -> None:
        r"""Store the entries of the arms from ``first`` on in every block: their
        kernel values against the registered arms, zero in free slots."""
        device = self.arms.device
        slots = torch.tensor(list(self._slot_of.values()), device=device)
        points = self.arms[torch.tensor(list(self._slot_of), device=device)]
        values = self.arms.new_zeros(
            self._capacity, self.num_arms - first, dtype=self.cache_dtype
        )
        start = 0
        for chunk in self._chunks(first):
            stop = start + chunk.shape[0]
            entries = self._kernel_matrix(chunk, points).mT
            values[slots, start:stop] = entries.to(self.cache_dtype)
            start = stop
        for b, block in enumerate(self._blocks):
            rows = values[b * BLOCK_COLUMNS : (b + 1) * BLOCK_COLUMNS]
            block[:, first : self.num_arms] = rows

    def prior_values(self, weights: Tensor) -> Tensor:
        r"""``Phi_A W^T`` in the storage dtype, ``O(N M q)``.

        Args:
            weights: ``q x M`` finite feature weights.

        Returns:
            ``N x q`` values.
        """
        check_matrix(weights, "weights", num_cols=self.num_features, allow_empty=True)
        return self._prior_values(weights)

    @torch.no_grad()
    def _prior_values(self, weights: Tensor, first: int = 0) -> Tensor:
        r"""``Phi W^T`` at the arms from ``first`` on (``(N - first) x q``)."""
        W = weights.mT.to(self.cache_dtype)
        if self._feature_rows is not None:
            return self._feature_rows[first : self.num_arms] @ W
        return torch.cat(
            [self._features(c).to(self.cache_dtype) @ W for c in self._chunks(first)]
        )

    @torch.no_grad()
    def add_column_values(
        self, values: Tensor, column_arms: Tensor, column_weights: Tensor
    ) -> Tensor:
        r"""``values + K_{A, column_arms} V``, ``O(N s q)``.

        Args:
            values: ``N x q`` finite values in the storage dtype (e.g. from
                :meth:`prior_values`); updated in place.
            column_arms: ``s`` registered arms, a LongTensor (repeats allowed: their
                weights add).
            column_weights: ``s x q`` finite column weights.

        Returns:
            ``N x q`` values in the arms' dtype.
        """
        arms = self._registered(column_arms)
        check_matrix(values, "values", allow_empty=True)
        if values.shape[0] != self.num_arms:
            raise ValueError(
                f"`values` must have one row per arm ({self.num_arms}), got shape "
                f"{tuple(values.shape)}."
            )
        if values.dtype != self.cache_dtype:
            raise TypeError(
                f"`values` must have the storage dtype {self.cache_dtype}, got "
                f"{values.dtype}."
            )
        check_matrix(
            column_weights, "column_weights", num_cols=values.shape[1], allow_empty=True
        )
        if column_weights.shape[0] != len(arms):
            raise ValueError(
                f"`column_weights` must have one row per column arm ({len(arms)}), "
                f"got shape {tuple(column_weights.shape)}."
            )
        dtype, out = self.arms.dtype, values
        if not self.columns_stored:
            out = out.to(dtype)
            points, V = self.arms[column_arms], column_weights.to(dtype)
            start = 0
            for chunk in self._chunks():
                stop = start + chunk.shape[0]
                out[start:stop] += self._kernel_matrix(chunk, points) @ V
                start = stop
            return out
        slots = torch.tensor(
            [self._slot_of[a] for a in arms], dtype=torch.long, device=self.arms.device
        )
        dense = column_weights.new_zeros(self._capacity, column_weights.shape[-1])
        dense = dense.index_add_(0, slots, column_weights).to(self.cache_dtype)
        used = torch.zeros(len(self._blocks), dtype=torch.bool)
        used[(slots // BLOCK_COLUMNS).cpu()] = True
        for b in used.nonzero().flatten().tolist():
            block = self._blocks[b][:, : self.num_arms]
            out.addmm_(block.mT, dense[b * BLOCK_COLUMNS : (b + 1) * BLOCK_COLUMNS])
        return out.to(dtype)


class PriorPathBank(Restorable):
    r"""Prior weights drawn ahead in blocks, with their prior values at all arms.

    The prior part ``Phi_A w`` of a path does not depend on the observations, so
    ``block`` weights ``w ~ N(0, I)`` are drawn at once and ``Phi_A W^T`` is computed
    in one pass over the cached features, ``O(N M block)``. Drawing ``q < block``
    paths at a time then reads the ``N x M`` features once per
    ``min(block, PRIOR_VALUE_ROWS) / q`` draws instead of at every draw (a
    memory-bound product for one path): the values of the weights held are computed
    :data:`PRIOR_VALUE_ROWS` at a time, when a draw first needs them, so the draws
    (and the random numbers) are those of whole blocks while no draw pays for more
    than one pass. Every weight is fresh, used once and independent of the data, so
    the paths keep their distribution. Memory: ``block x N`` values in the cache's
    storage dtype (with room for the cache's ``capacity`` arms). Arms appended to
    the cache get the values of the weights computed so far at :meth:`extend` (or
    the next :meth:`take`), ``O(n M r)`` for ``r`` of them.

    Example:
        >>> bank = PriorPathBank(cache, block=64)
        >>> weights, prior = bank.take(1, generator)   # 1 x M, N x 1
    """

    def __init__(self, cache: ArmFeatureCache, block: int = 64) -> None:
        r"""
        Args:
            cache: The arms and feature basis.
            block: Weights drawn per refill (``1``: none drawn ahead).
        """
        if not isinstance(cache, ArmFeatureCache):
            raise TypeError(
                f"`cache` must be an ArmFeatureCache, got {type(cache).__name__}."
            )
        self.cache = cache
        self.block = check_int(block, "block", 1)
        self._weights = cache.arms.new_empty(0, cache.num_features)
        #: ``rows x capacity`` buffer of the values ``Phi_A W^T``, of which the
        #: first ``_num_arms`` columns are in use
        self._values = cache.arms.new_empty(0, cache.num_arms, dtype=cache.cache_dtype)
        self._num_arms = cache.num_arms
        self._next = 0
        #: Rows of ``_values`` computed (at the first ``_num_arms`` arms)
        self._computed = 0

    @property
    def remaining(self) -> Tensor:
        r"""The ``r x M`` weights drawn and not yet used, in the order of use."""
        return self._weights[self._next :]

    @property
    def memory_bytes(self) -> int:
        r"""Bytes held by the weights and their values."""
        return sum(x.numel() * x.element_size() for x in (self._weights, self._values))

    def load(self, weights: Tensor) -> None:
        r"""Hold ``weights`` (``r x M``, e.g. a saved :attr:`remaining`) as the next
        ones to use, ``O(N M r)``."""
        check_matrix(
            weights, "weights", num_cols=self.cache.num_features, allow_empty=True
        )
        self._hold(weights)

    def _hold(self, weights: Tensor) -> None:
        cache = self.cache
        self._weights = weights.to(cache.arms)
        self._values = self._weights.new_empty(
            weights.shape[0], cache._arm_capacity, dtype=cache.cache_dtype
        )
        self._num_arms, self._next, self._computed = cache.num_arms, 0, 0

    def _compute_through(self, stop: int) -> None:
        r"""Compute the values of the weights up to row ``stop`` at the arms in use,
        :data:`PRIOR_VALUE_ROWS` rows per pass (written past the rows computed)."""
        while self._computed < stop:
            rows = slice(self._computed, self._computed + PRIOR_VALUE_ROWS)
            prior = self.cache._prior_values(self._weights[rows])
            self._values[rows, : self._num_arms] = prior.mT
            self._computed = min(rows.stop, self._weights.shape[0])

    def extend(self) -> None:
        r"""Compute the values of the weights left (those computed so far) at the
        arms appended to the cache since the last call, ``O(n M r)`` (written past
        the columns in use; into a buffer with the cache's ``capacity`` when it has
        no room)."""
        cache, first = self.cache, self._num_arms
        rows = slice(self._next, max(self._next, self._computed))
        if first == cache.num_arms:
            return
        values = self._values
        if values.shape[1] < cache.num_arms:
            values = values.new_empty(values.shape[0], cache._arm_capacity)
            values[rows, :first] = self._values[rows, :first]
        prior = cache._prior_values(self._weights[rows], first)
        values[rows, first : cache.num_arms] = prior.mT
        self._values, self._num_arms = values, cache.num_arms

    def take(self, q: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        r"""The next ``q`` weights and their prior values; when fewer than ``q``
        remain, ``max(q, block)`` fresh ones are drawn from ``generator`` first
        (the rest are dropped).

        Returns:
            ``q x M`` weights and ``N x q`` values ``Phi_A W^T`` (storage dtype).
        """
        check_int(q, "q", 1)
        check_generator(generator)
        if self._weights.shape[0] - self._next < q:
            shape = (max(q, self.block), self.cache.num_features)
            self._hold(standard_normal(shape, generator))
        else:
            self.extend()
        self._compute_through(self._next + q)
        rows = slice(self._next, self._next + q)
        self._next += q
        return self._weights[rows], self._values[rows, : self._num_arms].mT
