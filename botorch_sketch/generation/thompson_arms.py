r"""Thompson sampling over a fixed finite arm set with cached work.

Both samplers here draw scaled paths ``f~ = mu + alpha (f - mu)`` of a zero-mean GP
with a fixed kernel and Gaussian noise of variance ``noise`` over ``N`` fixed arms
``A``. The prior part of every path is ``alpha phi(x)^T w`` with ``M`` random Fourier
features ``phi`` (BoTorch's ``gen_kernel_features``) drawn *once* per sampler and fresh
weights ``w ~ N(0, I)`` at every draw, so the ``N x M`` prior features of all arms are
computed once (:class:`ArmFeatureCache`). The update part is Matheron's rule (Wilson
et al., ICML 2020) through ``s`` update points ``U`` with weights ``v``:

    f~(A) = alpha Phi_A w + K_AU v,

evaluated for ``q`` paths at once as two matrix products, ``O(N (M + s) q)``. The
prior part does not depend on the data: for draws of a few paths at a time (an
asynchronous loop asks for one arm per free worker) it is computed ahead for a block
of weights in one pass over the features (:class:`PriorPathBank`).

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
from gpytorch.kernels import Kernel
from linear_operator import to_dense
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from botorch_sketch.models.dtc import titsias_q_from_statistics
from botorch_sketch.models.inducing import conditional_variance_factor
from botorch_sketch.sampling.pathwise import seeded_features, standard_normal
from botorch_sketch.utils.validation import (
    check_at_least,
    check_finite,
    check_int,
    check_matrix,
    check_positive,
)

#: Kernel columns per stored block of :class:`ArmFeatureCache`.
BLOCK_COLUMNS = 64


class ThompsonArms(NamedTuple):
    r"""Arms chosen by ``q`` paths.

    Attributes:
        indices: ``q`` arm indices, the argmax of each path.
        values: ``q`` path values there.
    """

    indices: Tensor
    values: Tensor


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"`generator` must be a torch.Generator, got {type(generator)}."
        )


class ArmFeatureCache:
    r"""Random-feature prior of all ``N`` arms and kernel columns of chosen arms.

    Stores ``Phi_A`` (``N x M``) and the columns ``k(A, a)`` of the arms ``a``
    registered with :meth:`add_columns`, in blocks of :data:`BLOCK_COLUMNS` columns
    stored as rows (``BLOCK_COLUMNS x N``: the product with a block's transpose runs
    over long contiguous rows, 3x faster than ``N x BLOCK_COLUMNS`` blocks; blocks
    are never copied when the set grows and freed slots are reused), as long as they
    fit in ``memory_budget`` bytes; what does not fit is recomputed in chunks of
    ``chunk_size`` arms by :meth:`prior_values` and :meth:`add_column_values`.
    ``cache_dtype`` (e.g. ``torch.float32``) sets the storage precision; results are
    in the arms' dtype.

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
        _check_generator(generator)
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
        device = None if generator is None else generator.device
        seed = int(torch.randint(2**62, (1,), generator=generator, device=device))
        dim = arms.shape[-1]
        self.feature_map = seeded_features(self.kernel, dim, num_features, seed)
        self.features: Tensor | None = None
        if self._bytes(num_features) <= self.memory_budget:
            self.features = arms.new_empty(
                arms.shape[0], num_features, dtype=self.cache_dtype
            )
            for start, chunk in zip(
                range(0, arms.shape[0], chunk_size), self._chunks(), strict=True
            ):
                self.features[start : start + chunk.shape[0]] = self._features(chunk)
        self.columns_stored = True
        self._blocks: list[Tensor] = []
        self._capacity = 0
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []

    @property
    def num_arms(self) -> int:
        return self.arms.shape[0]

    @property
    def num_columns(self) -> int:
        r"""Registered kernel columns."""
        return len(self._slot_of)

    @property
    def stored_bytes(self) -> int:
        r"""Bytes held by the stored features and column blocks."""
        columns = len(self._blocks) * BLOCK_COLUMNS
        features = 0 if self.features is None else self.num_features
        return int(self._bytes(columns + features))

    def _bytes(self, columns: int) -> float:
        return float(self.num_arms) * columns * self._itemsize

    def _chunks(self) -> list[Tensor]:
        return list(self.arms.split(self.chunk_size))

    @torch.no_grad()
    def _features(self, X: Tensor) -> Tensor:
        return to_dense(self.feature_map(X))

    @torch.no_grad()
    def kernel_matrix(self, X: Tensor, Y: Tensor) -> Tensor:
        r"""Dense ``k(X, Y)`` (eagerly evaluated, no gradients)."""
        with settings.lazily_evaluate_kernels(False):
            return to_dense(self.kernel(X, Y))

    def features_at(self, indices: Tensor) -> Tensor:
        r"""``k x M`` features of the arms ``indices``, in the arms' dtype."""
        if self.features is not None:
            return self.features[indices].to(self.arms.dtype)
        return self._features(self.arms[indices])

    def add_columns(self, indices: Tensor) -> None:
        r"""Register the kernel columns ``k(A, a)`` of the arms ``indices``.

        Registered columns are kept; new ones take free slots. If a new block would
        exceed the memory budget, all blocks are dropped and :meth:`evaluate`
        recomputes columns from then on.
        """
        new = [i for i in dict.fromkeys(indices.tolist()) if i not in self._slot_of]
        for arm in new:
            if not self._free:
                self._grow()
            self._slot_of[arm] = self._free.pop()
        if not self.columns_stored or not new:
            return
        device = self.arms.device
        slots = torch.tensor([self._slot_of[a] for a in new], device=device)
        points = self.arms[torch.tensor(new, device=device)]
        for b, block in enumerate(self._blocks):  # O(N BLOCK_COLUMNS) memory
            inside = (slots // BLOCK_COLUMNS) == b
            if not bool(inside.any()):
                continue
            rows = slots[inside] - b * BLOCK_COLUMNS
            start = 0
            for chunk in self._chunks():
                stop = start + chunk.shape[0]
                values = self.kernel_matrix(chunk, points[inside]).mT
                block[rows, start:stop] = values.to(self.cache_dtype)
                start = stop

    def multiplied_columns(self, column_arms: Tensor) -> int:
        r"""Kernel columns :meth:`add_column_values` multiplies for
        ``column_arms``: whole stored blocks, or one per distinct arm when
        recomputing."""
        if not self.columns_stored:
            return int(column_arms.unique().numel())
        blocks = {self._slot_of[a] // BLOCK_COLUMNS for a in column_arms.tolist()}
        return len(blocks) * BLOCK_COLUMNS

    def remove_columns(self, indices: Tensor) -> None:
        r"""Unregister the columns of the arms ``indices`` (their slots are reused)."""
        for arm in dict.fromkeys(indices.tolist()):
            if arm in self._slot_of:
                self._free.append(self._slot_of.pop(arm))

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
            self.arms.new_zeros(BLOCK_COLUMNS, self.num_arms, dtype=self.cache_dtype)
        )

    @torch.no_grad()
    def prior_values(self, weights: Tensor) -> Tensor:
        r"""``Phi_A W^T`` in the storage dtype, ``O(N M q)``.

        Args:
            weights: ``q x M`` feature weights.

        Returns:
            ``N x q`` values.
        """
        W = weights.mT.to(self.cache_dtype)
        if self.features is not None:
            return self.features @ W
        return torch.cat(
            [self._features(c).to(self.cache_dtype) @ W for c in self._chunks()]
        )

    @torch.no_grad()
    def add_column_values(
        self, values: Tensor, column_arms: Tensor, column_weights: Tensor
    ) -> Tensor:
        r"""``values + K_{A, column_arms} V``, ``O(N s q)``.

        Args:
            values: ``N x q`` values in the storage dtype (e.g. from
                :meth:`prior_values`); updated in place.
            column_arms: ``s`` registered arms (repeats allowed: their weights add).
            column_weights: ``s x q`` column weights.

        Returns:
            ``N x q`` values in the arms' dtype.
        """
        dtype, out = self.arms.dtype, values
        if not self.columns_stored:
            out = out.to(dtype)
            points, V = self.arms[column_arms], column_weights.to(dtype)
            start = 0
            for chunk in self._chunks():
                stop = start + chunk.shape[0]
                out[start:stop] += self.kernel_matrix(chunk, points) @ V
                start = stop
            return out
        slots = torch.tensor(
            [self._slot_of[a] for a in column_arms.tolist()], device=self.arms.device
        )
        dense = column_weights.new_zeros(self._capacity, column_weights.shape[-1])
        dense = dense.index_add_(0, slots, column_weights).to(self.cache_dtype)
        used = torch.zeros(len(self._blocks), dtype=torch.bool)
        used[(slots // BLOCK_COLUMNS).cpu()] = True
        for b in used.nonzero().flatten().tolist():
            out.addmm_(
                self._blocks[b].mT, dense[b * BLOCK_COLUMNS : (b + 1) * BLOCK_COLUMNS]
            )
        return out.to(dtype)


class PriorPathBank:
    r"""Prior weights drawn ahead in blocks, with their prior values at all arms.

    The prior part ``Phi_A w`` of a path does not depend on the observations, so
    ``block`` weights ``w ~ N(0, I)`` are drawn at once and ``Phi_A W^T`` is computed
    in one pass over the cached features, ``O(N M block)``. Drawing ``q < block``
    paths at a time then reads the ``N x M`` features once per ``block / q`` draws
    instead of at every draw (a memory-bound product for one path). Every weight is
    fresh, used once and independent of the data, so the paths keep their
    distribution. Memory: ``block x N`` values in the cache's storage dtype.

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
        self.cache = cache
        self.block = check_int(block, "block", 1)
        self._weights = cache.arms.new_empty(0, cache.num_features)
        self._values = cache.arms.new_empty(0, cache.num_arms, dtype=cache.cache_dtype)
        self._next = 0

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
        self._weights = weights.to(self.cache.arms)
        self._values = self.cache.prior_values(self._weights).mT.contiguous()
        self._next = 0

    def take(self, q: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        r"""The next ``q`` weights and their prior values; when fewer than ``q``
        remain, ``max(q, block)`` fresh ones are drawn from ``generator`` first
        (the rest are dropped).

        Returns:
            ``q x M`` weights and ``N x q`` values ``Phi_A W^T`` (storage dtype).
        """
        check_int(q, "q", 1)
        _check_generator(generator)
        if self._weights.shape[0] - self._next < q:
            shape = (max(q, self.block), self.cache.num_features)
            self.load(standard_normal(shape, generator))
        rows = slice(self._next, self._next + q)
        self._next += q
        return self._weights[rows], self._values[rows].mT


class ArmThompsonSampler(ABC):
    r"""Observations and path draws shared by the finite-arm samplers.

    Draws of fewer than ``prior_block`` paths take their prior weights from a
    :class:`PriorPathBank`; larger draws compute their prior part directly.
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
        self.targets = arms.new_empty(0)

    @property
    def num_observations(self) -> int:
        return self.observed.shape[0]

    @property
    @abstractmethod
    def noise_size(self) -> int:
        r"""Length of the standard normal vector each path draws for its update."""

    @property
    def memory_bytes(self) -> int:
        r"""Bytes held: the cache's stored tensors and the sampler's state."""
        held = [self.observed, self.targets, *self._state()]
        own = sum(x.numel() * x.element_size() for x in held)
        return self.cache.stored_bytes + self.prior_bank.memory_bytes + own

    @abstractmethod
    def _state(self) -> list[Tensor]:
        r"""The sampler's own tensors (for :attr:`memory_bytes`)."""

    @property
    @abstractmethod
    def update_arms(self) -> Tensor:
        r"""Arms whose kernel columns enter the paths (observed or inducing)."""

    def _append(self, indices: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
        r"""Check and store observations; return them as arm indices and targets."""
        if not isinstance(indices, Tensor) or indices.dtype != torch.long:
            raise TypeError("`indices` must be a LongTensor of arm indices.")
        indices = indices.reshape(-1).to(self.observed.device)
        if indices.numel() == 0:
            raise ValueError("`indices` must hold at least one arm index.")
        if bool((indices < 0).any()) or bool((indices >= self.cache.num_arms).any()):
            raise ValueError(f"`indices` must lie in [0, {self.cache.num_arms}).")
        check_finite(rewards, "rewards")
        rewards = rewards.reshape(-1).to(self.targets)
        if rewards.shape != indices.shape:
            raise ValueError(
                f"`rewards` must hold {indices.numel()} values, got {rewards.numel()}."
            )
        self.observed = torch.cat([self.observed, indices])
        self.targets = torch.cat([self.targets, rewards])
        return indices, rewards

    def sample(
        self, q: int = 1, alpha: float = 1.0, generator: torch.Generator | None = None
    ) -> ThompsonArms:
        r"""Draw ``q`` paths and return each path's argmax over the arms.

        From ``generator``: the prior weights (for ``q < prior_block``, a block of
        them when the :attr:`prior_bank` runs out), then the update noise. Cost
        ``O(N (M + s) q)``, of which ``O(N M q)`` is paid ahead by the bank for
        ``q < prior_block``.
        """
        check_int(q, "q", 1)
        alpha = check_at_least(alpha, "alpha", 0.0)
        _check_generator(generator)
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
        values = cache.add_column_values(alpha * prior, self.update_arms, V)
        best, indices = values.max(dim=0)
        return ThompsonArms(indices, best)

    def path_values(self, weights: Tensor, noise: Tensor, alpha: float = 1.0) -> Tensor:
        r"""``N x q`` values of the paths with prior weights ``weights`` (``q x M``)
        and standard normal update draws ``noise`` (``q x noise_size``)."""
        V = self.update_weights(weights, noise, alpha)
        prior = alpha * self.cache.prior_values(weights)
        return self.cache.add_column_values(prior, self.update_arms, V)

    @abstractmethod
    def observe(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Append ``b`` observations: arm ``indices`` (``b``) with ``rewards``."""

    @abstractmethod
    def update_weights(self, weights: Tensor, noise: Tensor, alpha: float) -> Tensor:
        r"""``s x q`` weights ``V`` of the update columns ``K_{A, update_arms}`` of
        the paths with prior weights ``weights`` (``q x M``) and update draws
        ``noise`` (``q x noise_size``)."""


class _GrowingCholesky:
    r"""Lower Cholesky factor ``L`` of a growing SPD matrix, grown by rows.

    ``L`` lives in the top-left corner of a square buffer grown by >= 25% when full.
    Solves run by row blocks of ``block`` rows: matrix products on strided views plus
    triangular solves with contiguous copies of the diagonal blocks, since torch's
    triangular solvers copy a strided ``t x t`` view (measured 30x slower).
    """

    def __init__(self, like: Tensor, block: int = 256) -> None:
        self._buffer = like.new_zeros(0, 0)
        self.size = 0
        self.block = block

    def _blocks(self) -> list[tuple[int, int]]:
        return [
            (s, min(s + self.block, self.size)) for s in range(0, self.size, self.block)
        ]

    def forward(self, R: Tensor) -> Tensor:
        r"""``L^{-1} R`` for ``R`` of shape ``t x q``, ``O(t^2 q)``."""
        L, out = self._buffer, torch.empty_like(R)
        for s, e in self._blocks():
            rhs = R[s:e] - L[s:e, :s] @ out[:s] if s else R[s:e]
            out[s:e] = torch.linalg.solve_triangular(
                L[s:e, s:e].contiguous(), rhs, upper=False
            )
        return out

    def solve(self, R: Tensor) -> Tensor:
        r"""``(L L^T)^{-1} R`` for ``R`` of shape ``t x q``, ``O(t^2 q)``."""
        L, out = self._buffer, self.forward(R)
        for s, e in reversed(self._blocks()):
            out[s:e] = torch.linalg.solve_triangular(
                L[s:e, s:e].contiguous().mT, out[s:e], upper=True
            )
            if s:
                out[:s] -= L[s:e, :s].mT @ out[s:e]
        return out

    def append(self, cross: Tensor, corner: Tensor) -> None:
        r"""Grow the factored matrix ``K`` to ``[[K, cross], [cross^T, corner]]``.

        Args:
            cross: ``t x b`` new off-diagonal block.
            corner: ``b x b`` new diagonal block.
        """
        t, b = self.size, corner.shape[0]
        below = self.forward(cross).mT if t else cross.mT
        if t:
            corner = corner - below @ below.mT
        diagonal = torch.linalg.cholesky(corner)
        if t + b > self._buffer.shape[0]:
            capacity = max(t + b, self._buffer.shape[0] * 5 // 4)
            grown = self._buffer.new_zeros(capacity, capacity)
            grown[:t, :t] = self._buffer[:t, :t]
            self._buffer = grown
        self._buffer[t : t + b, :t] = below
        self._buffer[t : t + b, t : t + b] = diagonal
        self.size = t + b


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
            prior_block: Prior weights drawn ahead (:class:`PriorPathBank`).
        """
        super().__init__(cache, noise, prior_block)
        self._chol = _GrowingCholesky(cache.arms)
        self._features = cache.arms.new_zeros(0, cache.num_features)

    @property
    def noise_size(self) -> int:
        return self.num_observations

    def _state(self) -> list[Tensor]:
        return [self._chol._buffer, self._features]

    @property
    def update_arms(self) -> Tensor:
        return self.observed

    def observe(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Append ``b`` observations: arm ``indices`` (``b``) with ``rewards``."""
        old = self.num_observations
        indices, _ = self._append(indices, rewards)
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
    data, and ``q(v) = N(m_w, C_w C_w^T)`` is Titsias' optimum, kept as the statistics
    ``sum_i phi_i phi_i^T`` and ``sum_i phi_i y_i`` with
    ``phi_i = L^{-1} k(Z, x_i)``, ``L L^T = K_ZZ + jitter I``
    (:func:`~botorch_sketch.models.dtc.titsias_q_from_statistics`). Path ``j``
    is the model's scaled Matheron path

        f~_j(A) = alpha Phi_A w_j + K_AZ (L L^T)^{-1}
                  (L (m_w + alpha C_w eps_j) - alpha Phi_Z w_j).

    With ``inducing_quality="variance"`` :meth:`observe` checks in ``O(m^2 b)``
    whether greedy selection on all data would still pick the same pivots (a new
    point must beat a pivot's residual variance at its stage); if so, ``Z`` is kept
    and the statistics get ``b`` rank-one terms, ``O(m^2 b + m^3)``; else ``Z`` is
    re-selected and the statistics rebuilt, ``O(n m^2)``, and only the kernel columns
    of new inducing arms are computed, ``O(N d)`` each. With ``"improvement"`` the
    quality weights (expected improvement of every observed point under the model
    before the update) change at every update, so each update re-selects,
    ``O(n m^2)``. A draw costs ``O(N (M + m) q + m^2 q)``, memory ``O(N (M + m))``.

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
            prior_block: Prior weights drawn ahead (:class:`PriorPathBank`).
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
        self.jitter = float(jitter)
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
        return [self._chol, self._phi_z, self._gram, self._pivot_chol, self._chol_w]

    def observe(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Append ``b`` observations and update ``Z`` and ``q(u)`` (see the class)."""
        first = self.num_observations == 0
        indices, rewards = self._append(indices, rewards)
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
            self._gram += phi @ phi.mT
            self._projected += phi @ rewards
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
        phi = torch.linalg.solve_triangular(
            self._chol, cache.kernel_matrix(Z, X), upper=False
        )
        self._gram = phi @ phi.mT
        self._projected = phi @ self.targets
        self.reselections += 1
        self._refresh_q()

    def _refresh_q(self) -> None:
        self._mean_w, self._chol_w = titsias_q_from_statistics(
            self._gram, self._projected, self.noise
        )

    @torch.no_grad()
    def _expected_improvement(self) -> Tensor:
        r"""Expected improvement of every observed arm under the current model
        (BoTorch's ``ExpectedImprovementQualityFunction``), ``O(n m^2)``."""
        cache = self.cache
        X = cache.arms[self.observed]
        phi = torch.linalg.solve_triangular(
            self._chol,
            cache.kernel_matrix(cache.arms[self.inducing_arms], X),
            upper=False,
        )
        mean = phi.mT @ self._mean_w
        prior = cache.kernel(X, diag=True).detach() + self.jitter
        variance = prior - phi.square().sum(0) + (self._chol_w.mT @ phi).square().sum(0)
        sigma = variance.clamp_min(1e-12).sqrt()
        u = (mean - mean.max()) / sigma
        return sigma * (phi_density(u) + u * normal_cdf(u))

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
