r"""The ``A x m`` features of a finite candidate set, stored as raw columns and a basis.

:class:`~botorch_sketch.models.candidate_state.CandidateState` changes its
dictionary one point at a time; rotating every candidate's features at each removal
would cost ``O(A m^2)``. The store keeps instead ``s >= m`` raw columns ``P`` and a
basis ``B`` (``s x m``, orthonormal columns) with the features

.. math::

    \Phi = P^T B,

so a rotation of the feature coordinates is a product with ``B`` (``O(s m)``), an
appended feature column is a raw column (the basis grows by an identity block), and
a product ``Phi H`` is one pass over the used raw columns, ``P^T (B H)``. Once the
raw columns outnumber the features enough, :meth:`FeatureStore.compact` replaces
them by the features (``P <- B^T P``, one ``A x s x m`` product).

The buffer holds ``P^T``, one contiguous row of raw entries per candidate, so a few
candidates' rows are cheap to read, with spare columns for appended features and,
after :meth:`FeatureStore.with_candidates`, spare rows for appended candidates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor

from botorch_sketch.utils.atomic import Restorable

#: Feature columns allocated first; a full buffer grows by half (a smaller transient
#: than doubling when ``A`` is large).
_INITIAL_CAPACITY = 32

#: Candidates per chunk when the raw columns are compacted or rebuilt.
_CHUNK = 8192

#: The raw columns are read with a multiple of this many right-hand sides
#: (zero-padded) when there are several: a CPU BLAS (MKL, measured at 20,000
#: candidates) runs other widths up to 3x slower on the row-major buffer.
_READ_WIDTH = 4

#: A buffer too short for appended candidates grows to ``A + A / 8`` rows, so that
#: appends of ``n`` candidates copy it once every ``~A / 8 n``.
_SPARE_WIDTH = 8


class FeatureStore(Restorable):
    r"""Features ``Phi = P^T B`` of ``A`` candidates (see the module docstring).

    Restorable: a change replaces the basis and the counts, and writes the buffer
    only past its used columns or rows, or into a new buffer (:meth:`compact`,
    :meth:`rebuild`, a growth), so a checkpoint records the store by reference.

    Example:
        >>> store = FeatureStore(4, torch.zeros(0, dtype=torch.float64))
        >>> store.append(torch.randn(4, 2, dtype=torch.float64))
        >>> store.read(torch.eye(2, dtype=torch.float64)).shape  # P^T I
        torch.Size([4, 2])
    """

    def __init__(
        self,
        num_points: int,
        like: Tensor,
        dtype: torch.dtype | None = None,
        memory_budget: int | None = None,
    ) -> None:
        r"""An empty store (no feature yet).

        Args:
            num_points: The number of candidates ``A``.
            like: A tensor of the candidates' dtype and device: the basis and
                every result follow it.
            dtype: The dtype of the raw columns (default: ``like``'s), e.g.
                ``torch.float32`` to halve the buffer.
            memory_budget: Bytes the buffer may take; growing past them raises a
                ``MemoryError`` naming the budget (default: no budget).
        """
        self.num_points = num_points
        self.like = like.new_empty(0)
        self.dtype = dtype or like.dtype
        self.memory_budget = memory_budget
        self.buffer = self._allocate(_INITIAL_CAPACITY, num_points)
        self.num_raw = 0
        self.basis = like.new_zeros(0, 0)

    # ------------------------------------------------------------------ views
    @property
    def size(self) -> int:
        r"""The number of features ``m``."""
        return self.basis.shape[-1]

    @property
    def raw(self) -> Tensor:
        r"""The ``A x capacity`` rows of the candidates (the first :attr:`num_raw`
        columns used), a view of the buffer."""
        return self.buffer[: self.num_points]

    @property
    def features(self) -> Tensor:
        r"""All ``A x m`` features (:attr:`dtype`), one ``A x s x m`` product."""
        return self.raw[:, : self.num_raw] @ self.basis.to(self.dtype)

    def raw_rows(self, indices: Tensor | int) -> Tensor:
        r"""Raw rows ``p(x)`` of some candidates (``k x s``, or ``s`` for one
        index; the candidates' dtype), with ``z(x) = B^T p(x)``."""
        return self.raw[indices, : self.num_raw].to(self.like)

    def feature_rows(self, indices: Tensor | int) -> Tensor:
        r"""Features ``z(x)`` of some candidates (``k x m``, or ``m``),
        ``O(k s m)``."""
        return self.raw_rows(indices) @ self.basis

    def to_raw(self, directions: Tensor) -> Tensor:
        r"""``B H``: feature-space directions (``m x r``, or ``m``) in raw
        coordinates (``s x r``, or ``s``), ``O(s m r)``."""
        return self.basis @ directions

    def read(self, rhs: Tensor) -> Tensor:
        r"""``P^T rhs`` (``A x r``, candidates' dtype) for ``s x r`` right-hand
        sides in raw coordinates: one pass over the used raw columns."""
        if self.num_raw == 0:
            return rhs.new_zeros(self.num_points, rhs.shape[-1])
        raw, rhs = self.raw[:, : self.num_raw], rhs.to(self.dtype)
        width = rhs.shape[-1]
        if width == 1:
            return (raw @ rhs).to(self.like)
        padding = rhs.new_zeros(rhs.shape[0], -width % _READ_WIDTH)
        product = torch.cat([rhs, padding], dim=-1).mT @ raw.mT
        return product[:width].to(self.like).mT

    def times(self, matrix: Tensor) -> Tensor:
        r"""``Phi M`` (``A x r`` for ``m x r``, or ``A`` for ``m``): one
        :meth:`read`, without forming ``Phi``."""
        product = self.read(self.basis @ matrix.reshape(self.size, -1))
        return product if matrix.dim() == 2 else product.squeeze(-1)

    # ---------------------------------------------------------------- changes
    def fits(self, count: int) -> bool:
        r"""Whether ``count`` more raw columns fit in the buffer."""
        return self.num_raw + count <= self.buffer.shape[1]

    def append(self, features: Tensor) -> None:
        r"""Append ``k`` feature columns (``A x k``) as raw columns, growing the
        buffer by half when they do not fit; the basis grows by an identity
        block."""
        s, k, m = self.num_raw, features.shape[-1], self.size
        if not self.fits(k):
            self.buffer = self._holding_used(self._allocate(self._capacity_for(s + k)))
        self.raw[:, s : s + k] = features.to(self.dtype)
        basis = self.basis.new_zeros(s + k, m + k)
        basis[:s, :m] = self.basis
        basis[s:, m:] = torch.eye(k, dtype=basis.dtype, device=basis.device)
        self.basis, self.num_raw = basis, s + k

    def rotate_and_drop_last(self, reflector: Tensor | None) -> None:
        r"""Reflect the feature coordinates by ``I - 2 h h^T`` (skipped for None)
        and drop the last one, ``O(s m)``."""
        basis = self.basis
        if reflector is not None:  # (I - 2 h h^T) B^T, transposed
            basis = (basis.mT - 2 * torch.outer(reflector, reflector @ basis.mT)).mT
        self.basis = basis[:, :-1]

    def compact(self) -> None:
        r"""Replace the raw columns by the features (``P <- B^T P``), into a new
        buffer of the same capacity, in chunks of candidates."""
        held, basis = self.raw[:, : self.num_raw], self.basis.to(self.dtype)
        self.rebuild(self.size, lambda rows: held[rows] @ basis)

    def rebuild(self, size: int, features: Callable[[slice], Tensor]) -> None:
        r"""Hold ``size`` features given in chunks of candidates
        (``features(rows)``, ``len(rows) x size``), in a new buffer (grown by
        half if they do not fit the held one's capacity); none is allocated for
        ``size = 0``."""
        if size > 0:
            buffer = self._allocate(self._capacity_for(size))
            raw = buffer[: self.num_points]
            for start in range(0, self.num_points, _CHUNK):
                rows = slice(start, start + _CHUNK)
                raw[rows, :size] = features(rows).to(self.dtype)
            self.buffer = buffer
        self.basis = torch.eye(size, dtype=self.like.dtype, device=self.like.device)
        self.num_raw = size

    def with_candidates(self, features: Tensor) -> FeatureStore:
        r"""A store that also holds ``n`` appended candidates with features
        ``features`` (``n x m``), leaving this one as it was: their raw rows
        ``B z(x)`` (``B^T B = I``) go to spare rows of the held buffer, or to a
        new buffer with ``(A + n) / 8`` spare rows (within the memory budget),
        ``O(A s)``."""
        width = self.num_points + features.shape[0]
        buffer = self.buffer
        if width > buffer.shape[0]:
            columns = buffer.shape[1]
            grown = width + width // _SPARE_WIDTH
            if self.memory_budget is not None:
                fits = self.memory_budget // (columns * self._itemsize)
                grown = max(width, min(grown, fits))
            buffer = self._holding_used(self._allocate(columns, grown))
        buffer[self.num_points : width, : self.num_raw] = (features @ self.basis.mT).to(
            self.dtype
        )
        store = copy.copy(self)
        store.num_points, store.buffer = width, buffer
        return store

    # ---------------------------------------------------------------- buffers
    def _capacity_for(self, columns: int) -> int:
        r"""The columns of a buffer that holds ``columns``: the held buffer's, or
        grown by half (at least to ``columns``)."""
        capacity = self.buffer.shape[1]
        return (
            capacity if columns <= capacity else max(columns, capacity + capacity // 2)
        )

    @property
    def _itemsize(self) -> int:
        r"""Bytes per raw entry."""
        return torch.empty(0, dtype=self.dtype).element_size()

    def _allocate(self, columns: int, width: int | None = None) -> Tensor:
        r"""An uninitialized ``width x columns`` buffer (default width: the held
        buffer's, spare rows included); only its used part is ever read, so it is
        not zeroed; a ``MemoryError`` past the memory budget."""
        width = self.buffer.shape[0] if width is None else width
        needed = width * columns * self._itemsize
        if self.memory_budget is not None and needed > self.memory_budget:
            raise MemoryError(
                f"The feature cache needs {needed / 2**30:.2f} GiB for {columns} "
                f"columns of {width} candidates, over `memory_budget` = "
                f"{self.memory_budget / 2**30:.2f} GiB; use "
                "cache_dtype=torch.float32 or the stateless scoring path."
            )
        return torch.empty(width, columns, dtype=self.dtype, device=self.like.device)

    def _holding_used(self, buffer: Tensor) -> Tensor:
        r"""``buffer`` (at least as large as the held one in both dimensions) with
        the used part copied in, ``O(A s)``."""
        buffer[: self.num_points, : self.num_raw] = self.raw[:, : self.num_raw]
        return buffer
