r"""Exact GP posterior on a finite point set, conditioned one observation at a time.

For ``A`` fixed points, a fixed kernel ``k`` and noise variance ``s2``, let ``X_n`` be
the ``n`` observed points (indices into the set, repeats allowed),
``K_n + s2 I = L_n L_n^T`` and ``W_n = K(points, X_n) L_n^{-T}`` (``A x n``). With
``a_n = L_n^{-1} y_n`` the exact posterior (zero prior mean) at every point is

.. math::

    \mu(x) = W_n[x] \cdot a_n, \qquad \sigma^2(x) = k(x, x) - \|W_n[x]\|^2.

Observing point ``j`` adds the row ``[l, d]`` to ``L`` with ``l = W_n[j]`` (no
triangular solve) and ``d^2 = \sigma^2(j) + s2``, and the column
``w = (K(points, x_j) - W_n l) / d`` to ``W``; then ``\sigma^2 -= w^2``. The reward
``y`` of that observation gives ``a_{n+1} = (y - l \cdot a_n) / d = (y - \mu(j)) / d``
and ``\mu += a_{n+1} w``. One kernel column and one ``A x n`` matrix-vector product per
observation, ``O(A n)`` memory and time. The variance update needs no reward, so
observations may be appended before their rewards are known (hallucination, as in
GP-BUCB) and rewarded later, in order.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.linalg import append_pivot
from botorch_sketch.utils.validation import (
    MIN_NOISE,
    check_allocation,
    check_at_least,
    check_finite,
    check_index,
    check_int,
    check_kernel,
    check_matrix,
    check_model_dtype,
    check_scalar,
    check_tensor,
)

#: Point sets with at most this many kernel entries ``A^2`` precompute ``K`` in
#: :meth:`IncrementalExactGP.from_kernel`, so that a kernel column is a lookup.
MAX_PRECOMPUTED_ENTRIES = 2**20

#: Rows of ``W`` allocated first when no capacity is fixed (the buffer then doubles).
_INITIAL_ROWS = 16


class IncrementalExactGP:
    r"""Exact zero-mean GP posterior on ``A`` fixed points, one observation at a time.

    The kernel enters only through the prior variances ``k(x, x)`` and a callable
    returning the column ``K(points, points[j])``, so callers may supply a cached or
    closed-form kernel. ``W`` is stored transposed (one contiguous row of length ``A``
    per observation); with ``capacity`` it is preallocated and appending more raises,
    without it the buffer doubles when full. The result equals BoTorch's
    ``SingleTaskGP`` (zero mean, the same fixed kernel, fixed noise ``s2``) fitted to
    the rewarded observations, with variances conditioned on all appended ones.

    Example:
        >>> gp = IncrementalExactGP.from_kernel(points, kernel, noise=0.01)
        >>> gp.observe(7, 0.3)  # append point 7 and its reward at once
        >>> gp.append(3)  # hallucinated: the variance drops now ...
        >>> gp.set_rewards(torch.tensor([0.1], dtype=points.dtype))  # ... the mean here
        >>> gp.mean.shape, gp.variance.shape  # (A,), (A,)
    """

    def __init__(
        self,
        prior_variance: Tensor,
        kernel_column: Callable[[int], Tensor],
        noise: float,
        capacity: int | None = None,
    ) -> None:
        r"""Start from the prior.

        Args:
            prior_variance: ``A`` prior variances ``k(x, x)``.
            kernel_column: ``j -> K(points, points[j])``, a tensor of shape ``A`` on
                ``prior_variance``'s dtype and device.
            noise: Observation noise variance ``s2 >= 1e-12``.
            capacity: Maximal number of observations (``W`` is ``capacity x A``);
                None lets the buffer grow.
        """
        check_model_dtype(prior_variance, "prior_variance")
        check_finite(prior_variance, "prior_variance")
        if prior_variance.dim() != 1 or prior_variance.shape[0] == 0:
            raise ValueError(
                "`prior_variance` must be a non-empty 1-d tensor, got shape "
                f"{tuple(prior_variance.shape)}."
            )
        if (prior_variance < 0).any():
            raise ValueError("`prior_variance` must be non-negative.")
        if not callable(kernel_column):
            raise TypeError("`kernel_column` must be callable.")
        noise = check_at_least(noise, "noise", MIN_NOISE)
        if capacity is not None:
            check_int(capacity, "capacity", 1)
        num_points = prior_variance.shape[0]
        check_allocation(
            (capacity or _INITIAL_ROWS) * num_points, "`capacity` x A", prior_variance
        )
        self.prior_variance = prior_variance
        self.noise = noise
        self.fixed_capacity = capacity is not None
        self._kernel_column = kernel_column
        self._w = prior_variance.new_empty(capacity or _INITIAL_ROWS, num_points)
        # (point index, d) of the appended observations still waiting for a reward.
        self._pending: deque[tuple[int, float]] = deque()
        self.mean = torch.zeros_like(prior_variance)
        self.variance = prior_variance.clone()
        self.num_observations = 0
        self.num_rewarded = 0
        #: Floating-point work so far; each observation adds ``2 A n + 5 A`` plus
        #: ``column_flops`` for its kernel column.
        self.flops = 0.0
        self.column_flops = 0.0

    @classmethod
    def from_kernel(
        cls,
        points: Tensor,
        kernel: Kernel,
        noise: float,
        capacity: int | None = None,
    ) -> IncrementalExactGP:
        r"""Posterior on ``points`` under a GPyTorch kernel with fixed hyperparameters.

        Sets with ``A^2 <= MAX_PRECOMPUTED_ENTRIES`` evaluate ``K(points, points)``
        once; larger ones evaluate one kernel column per observation.

        Args:
            points: ``A x d`` points (the only places observed or scored).
            kernel: GPyTorch kernel, evaluated without gradients.
            noise: Observation noise variance ``s2 > 0``.
            capacity: As in the constructor.

        Returns:
            The prior posterior on ``points``.
        """
        check_model_dtype(points, "points")
        check_matrix(points, "points")
        check_kernel(kernel, "kernel")
        with torch.no_grad():
            prior_variance = kernel(points, diag=True).to(points)
            if points.shape[0] ** 2 <= MAX_PRECOMPUTED_ENTRIES:
                gram = kernel(points, points).to_dense().to(points)
                return cls(prior_variance, gram.__getitem__, noise, capacity)

        def kernel_column(index: int) -> Tensor:
            with torch.no_grad():
                column = kernel(points, points[index : index + 1]).to_dense()
            return column.squeeze(-1).to(points)

        posterior = cls(prior_variance, kernel_column, noise, capacity)
        posterior.column_flops = 3.0 * points.shape[0] * points.shape[-1]
        return posterior

    @property
    def num_points(self) -> int:
        return self.prior_variance.shape[0]

    @property
    def capacity(self) -> int:
        r"""Rows of ``W`` allocated now."""
        return self._w.shape[0]

    @property
    def num_pending(self) -> int:
        r"""Observations appended whose rewards are not known yet."""
        return len(self._pending)

    def append(self, index: int) -> float:
        r"""Condition the variance on observing point ``index`` (reward to come).

        Args:
            index: Point index in ``[0, A)``.

        Returns:
            The posterior variance of that point *before* this observation.
        """
        index = check_index(index, "index", self.num_points)
        n = self.num_observations
        if n == self.capacity and self.fixed_capacity:
            raise ValueError(
                f"`capacity` ({self.capacity}) exceeded; allocate a larger posterior."
            )
        column = self._kernel_column(index)
        if not (
            isinstance(column, Tensor)
            and column.shape == self.prior_variance.shape
            and column.dtype == self.prior_variance.dtype
            and bool(torch.isfinite(column).all())
        ):
            raise ValueError(
                f"`kernel_column` must return {self.num_points} finite values of "
                f"dtype {self.prior_variance.dtype}."
            )
        if n == self.capacity:
            grown = self._w.new_empty(2 * n, self.num_points)
            grown[:n] = self._w
            self._w = grown
        variance_before = float(self.variance[index])
        # d^2 = posterior variance of the point + noise; the clamp guards rounding only.
        pivot_variance = max(variance_before, 0.0) + self.noise
        append_pivot(
            self._w[:n], column, index, pivot_variance, self.variance, out=self._w[n]
        )
        self.variance.clamp_(min=0.0)
        self._pending.append((index, math.sqrt(pivot_variance)))
        self.num_observations = n + 1
        self.flops += 2.0 * self.num_points * n + 5.0 * self.num_points
        self.flops += self.column_flops
        return variance_before

    def set_rewards(self, rewards: Tensor) -> None:
        r"""Supply the rewards of the oldest pending observations, in order.

        Args:
            rewards: ``b`` rewards, ``1 <= b <= num_pending``.
        """
        check_tensor(rewards, "rewards")
        if rewards.dim() != 1:
            raise ValueError("`rewards` must be a 1-d tensor.")
        if not 1 <= rewards.shape[0] <= self.num_pending:
            raise ValueError(
                f"`rewards` has {rewards.shape[0]} entries but {self.num_pending} "
                "observations are pending."
            )
        if not torch.isfinite(rewards).all():
            raise ValueError("`rewards` contains NaN or infinite values.")
        for reward in rewards.tolist():
            self._condition_mean(reward)

    def observe(self, index: int, y: float) -> None:
        r"""Condition on the reward ``y`` observed at point ``index`` (nothing pending).

        Args:
            index: Point index in ``[0, A)``.
            y: The observation.
        """
        if self._pending:
            raise ValueError(
                f"{self.num_pending} observations are pending; use `append` and "
                "`set_rewards`."
            )
        y = check_scalar(y, "y")
        self.append(index)
        self._condition_mean(y)

    def discard_pending(self) -> None:
        r"""Forget the observations whose rewards never came.

        Variances are recomputed from the kept rows of ``W`` (``O(A n)``).
        """
        if not self._pending:
            return
        self._pending.clear()
        self.num_observations = self.num_rewarded
        variance = self.prior_variance.clone()
        for rows in self._w[: self.num_observations].split(256):
            variance -= rows.square().sum(dim=0)
        self.variance = variance.clamp_(min=0.0)

    def _condition_mean(self, reward: float) -> None:
        r"""Move the mean by the oldest pending observation's ``reward``."""
        index, d = self._pending.popleft()
        # The mean conditions on the rewarded observations only, so mean[index] is
        # l . a_s for this observation's row l of L.
        residual = (reward - float(self.mean[index])) / d
        self.mean.add_(self._w[self.num_rewarded], alpha=residual)
        self.num_rewarded += 1
