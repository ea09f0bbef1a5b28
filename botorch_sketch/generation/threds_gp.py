r"""The local GP of a GP-ThreDS test: an exact GP on a fixed grid, updated in O(A n).

A local test only ever queries points of its own grid, so its posterior is needed on
that grid alone. With a fixed kernel ``k``, noise variance ``s2``, the ``n`` observed
grid indices ``X_n`` (repeats allowed), ``K_n + s2 I = L_n L_n^T`` and
``W_n = K(grid, X_n) L_n^{-T}`` (``A x n``), the exact posterior (zero prior mean) is

    mean(x) = W_n[x] . (L_n^{-1} y_n),      variance(x) = k(x, x) - ||W_n[x]||^2.

Observing grid point ``j`` adds the row ``[l, r]`` to ``L`` with ``l = W_n[j]`` (no
triangular solve) and ``r^2 = variance(j) + s2``, and the column
``w = (K(grid, x_j) - W_n l) / r`` to ``W``; then ``variance -= w^2`` and
``mean += w (y - mean(j)) / r``. One kernel column and one ``A x n`` matrix-vector
product per observation; ``W`` is stored transposed (one row per observation) in a
buffer that doubles when full. Small grids (``A^2 <= 2^20``) evaluate the whole grid
kernel matrix once, so that a kernel column is a lookup instead of a kernel call.
"""

from __future__ import annotations

import math

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

#: Grids with at most this many kernel entries ``A^2`` precompute ``K(grid, grid)``.
MAX_PRECOMPUTED_ENTRIES = 2**20


class IncrementalGridGP:
    r"""Exact zero-mean GP posterior on a grid, conditioned one observation at a time.

    Equals BoTorch's ``SingleTaskGP`` (zero mean, the same fixed kernel, fixed noise
    ``noise``) fitted to the same observations, at every grid point.

    Example:
        >>> gp = IncrementalGridGP(grid, kernel, noise=0.01)
        >>> gp.observe(7, 0.3)
        >>> mean, variance = gp.posterior()  # both of shape A
    """

    def __init__(self, grid: Tensor, kernel: Kernel, noise: float) -> None:
        r"""Start from the prior.

        Args:
            grid: ``A x d`` candidate points (the only places observed or scored).
            kernel: GPyTorch kernel with fixed hyperparameters, on ``grid``'s dtype.
            noise: Observation noise variance ``s2 > 0``.
        """
        self.grid = grid
        self.kernel = kernel
        self.noise = float(noise)
        with torch.no_grad():
            self.variance = kernel(grid, diag=True).to(grid).clone()
            self._gram = None
            if grid.shape[0] ** 2 <= MAX_PRECOMPUTED_ENTRIES:
                self._gram = kernel(grid, grid).to_dense().to(grid)
        self.mean = torch.zeros_like(self.variance)
        self._w = grid.new_empty(16, grid.shape[0])
        self.num_observations = 0

    def observe(self, index: int, y: float) -> None:
        r"""Condition on the noisy value ``y`` observed at grid point ``index``.

        Args:
            index: Row of ``grid`` that was queried.
            y: The observation.
        """
        n = self.num_observations
        if n == self._w.shape[0]:
            grown = self._w.new_empty(2 * n, self._w.shape[1])
            grown[:n] = self._w
            self._w = grown
        if self._gram is not None:
            column = self._gram[index]
        else:
            with torch.no_grad():
                point = self.grid[index : index + 1]
                column = self.kernel(self.grid, point).to_dense().squeeze(-1)
            column = column.to(self.grid)
        if n > 0:
            column = column - self._w[:n, index] @ self._w[:n]
        # r^2 = posterior variance at the point + noise; the clamp guards rounding only.
        r = math.sqrt(max(float(self.variance[index]), 0.0) + self.noise)
        residual = (y - float(self.mean[index])) / r
        w = torch.div(column, r, out=self._w[n])
        self.mean.add_(w, alpha=residual)
        self.variance.sub_(w * w).clamp_(min=0.0)
        self.num_observations = n + 1

    def posterior(self) -> tuple[Tensor, Tensor]:
        r"""Posterior mean and variance of the latent function on the whole grid.

        Returns:
            ``(mean, variance)``, each of shape ``A`` (read-only views of the state).
        """
        return self.mean, self.variance
