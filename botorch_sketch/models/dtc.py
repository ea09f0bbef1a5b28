r"""Linear algebra of the DTC (deterministic training conditional) Nystrom posterior.

With a dictionary ``S`` (``m x d``), kernel ``k`` and regularization ``lambda``:

.. math::

    z(x) = L_S^{-1} k_S(x), \quad L_S L_S^T = K_{SS} + \epsilon I, \qquad
    V = Z^T Z + \lambda I, \quad b = Z^T y, \quad w = V^{-1} b,

    \mu(x) = z(x)^T w, \qquad
    \Sigma(x, x') = k(x, x') - z(x)^T z(x') + \lambda\, z(x)^T V^{-1} z(x').

``Sigma`` is the Bayesian-scale predictive covariance (noise variance ``lambda``); the
BKB papers' variance is ``Sigma(x, x) / lambda``. The ``k - z^T z`` term keeps the
variance of points far from the dictionary at the prior level (no variance starvation).
With ``S`` equal to all distinct training points this is the exact GP posterior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from gpytorch.kernels import Kernel
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

# Relative jitter added to K_SS before its Cholesky factorization.
_RELATIVE_JITTER = {torch.float64: 1e-10, torch.float32: 1e-6, torch.float16: 1e-3}


def relative_jitter(dtype: torch.dtype) -> float:
    r"""Jitter added to ``K_SS``, relative to its mean diagonal, for ``dtype``."""
    return _RELATIVE_JITTER.get(dtype, 1e-6)


def distinct_rows(X: Tensor, y: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""Merge repeated rows of ``X``.

    Args:
        X: ``n x d`` points.
        y: Optional ``n`` targets, summed per distinct row.

    Returns:
        ``(U, counts, y_sums)``: the ``u x d`` distinct rows, their ``u``
        multiplicities and the ``u`` per-row target sums (zeros when ``y`` is None).
    """
    U, inverse, counts = torch.unique(X, dim=0, return_inverse=True, return_counts=True)
    y_sums = torch.zeros(U.shape[0], dtype=X.dtype, device=X.device)
    if y is not None:
        y_sums = y_sums.index_add(0, inverse, y)
    return U, counts.to(X.dtype), y_sums


#: Candidates scored at once by :meth:`DTCState.mean_and_variance`; bounds its
#: temporaries to a few ``SCORING_CHUNK_ROWS x m`` blocks.
SCORING_CHUNK_ROWS = 2048


def cross_covariance(kernel: Kernel, X: Tensor, S: Tensor) -> Tensor:
    r"""Dense ``k(X, S)`` for ``... x q x d`` inputs and an ``m x d`` dictionary.

    The batch dimensions of ``X`` are flattened so the kernel sees one ``(N q) x m``
    matrix instead of a broadcast ``... x q x m x d`` distance tensor. It is
    evaluated as ``k(S, X)^T``: GPyTorch centres squared distances on the mean of
    its first argument, so with the dictionary there every point is scored
    independently of the others (a far-away point cannot erase their precision).
    """
    flat = kernel(S, X.reshape(-1, X.shape[-1])).to_dense().mT
    return flat.reshape(*X.shape[:-1], S.shape[0])


def prior_covariance(kernel: Kernel, X: Tensor) -> Tensor:
    r"""Dense ``k(X, X)`` (``... x q x q``) with row ``i`` centred on ``x_i``.

    ``kernel(X)`` centres all squared distances on the mean of ``X``; one far-away
    point then erases the precision of every entry. Evaluated as ``q`` rows
    ``k(x_i, X)`` in one broadcast call (``O(q^2 d)`` memory), each entry depends on
    its own two points only.
    """
    return kernel(X.unsqueeze(-2), X.unsqueeze(-3)).to_dense().squeeze(-2)


@dataclass(frozen=True)
class DTCState:
    r"""Factorizations that define a DTC Nystrom posterior.

    Attributes:
        dictionary: ``m x d`` inducing points ``S``.
        chol_dictionary: ``m x m`` lower Cholesky factor ``L_S`` of ``K_SS + eps I``.
        noise: Scalar tensor ``lambda``.
        gram: ``batch x m x m`` matrix ``V = Z^T Z + lambda I``.
        projected_targets: ``batch x m`` vector ``b = Z^T y``.
        chol_gram: ``batch x m x m`` lower Cholesky factor ``L_V`` of ``V``.
        weights: ``batch x m`` vector ``w = V^{-1} b``.
    """

    dictionary: Tensor
    chol_dictionary: Tensor
    noise: Tensor
    gram: Tensor
    projected_targets: Tensor
    chol_gram: Tensor
    weights: Tensor

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        dictionary: Tensor,
        X: Tensor,
        y: Tensor,
        noise: Tensor,
        counts: Tensor | None = None,
    ) -> DTCState:
        r"""Factorize from scratch (differentiable in the kernel hyperparameters).

        Args:
            kernel: The GPyTorch kernel ``k``.
            dictionary: ``m x d`` inducing points.
            X: ``batch x n x d`` observed points.
            y: ``batch x n`` observed targets (per-row sums when ``counts`` is given).
            noise: Scalar tensor ``lambda > 0``.
            counts: Optional ``n`` multiplicities of the rows of an unbatched ``X``.

        Returns:
            The state, ``O(n m^2 + m^3)`` work.
        """
        chol_dictionary = dictionary_cholesky(kernel, dictionary)
        Z = _embed(kernel, dictionary, chol_dictionary, X)
        Zw = Z if counts is None else Z * counts.unsqueeze(-1)
        eye = torch.eye(Z.shape[-1], dtype=Z.dtype, device=Z.device)
        gram = Zw.transpose(-1, -2) @ Z + noise * eye
        projected_targets = (Z.transpose(-1, -2) @ y.unsqueeze(-1)).squeeze(-1)
        return cls._from_gram(
            dictionary, chol_dictionary, noise, gram, projected_targets
        )

    @classmethod
    def _from_gram(
        cls,
        dictionary: Tensor,
        chol_dictionary: Tensor,
        noise: Tensor,
        gram: Tensor,
        projected_targets: Tensor,
    ) -> DTCState:
        chol_gram = torch.linalg.cholesky(gram)
        weights = torch.cholesky_solve(
            projected_targets.unsqueeze(-1), chol_gram
        ).squeeze(-1)
        return cls(
            dictionary=dictionary,
            chol_dictionary=chol_dictionary,
            noise=noise,
            gram=gram,
            projected_targets=projected_targets,
            chol_gram=chol_gram,
            weights=weights,
        )

    @cached_property
    def mean_coefficients(self) -> Tensor:
        r"""``alpha = L_S^{-T} w`` (``batch x m``), so ``mu(x) = k_S(x)^T alpha``."""
        upper = self.chol_dictionary.mT
        return torch.linalg.solve_triangular(
            upper, self.weights.unsqueeze(-1), upper=True
        ).squeeze(-1)

    @cached_property
    def variance_factor(self) -> Tensor:
        r"""``Q`` (``batch x m x m``) with ``Sigma(x, x) = k(x, x) - ||Q k_S(x)||^2``.

        ``z^T z - lambda z^T V^{-1} z = z^T (I - lambda V^{-1}) z`` and, with
        ``V = U diag(v) U^T``, ``I - lambda V^{-1} = U diag(1 - lambda / v) U^T`` is
        PSD, so ``Q = diag(sqrt(1 - lambda / v)) U^T L_S^{-1}``: scoring ``N`` points
        is one ``N x m x m`` product.
        """
        eigenvalues, eigenvectors = torch.linalg.eigh(self.gram)
        scale = (1 - self.noise / eigenvalues).clamp_min(0.0).sqrt()
        return (scale.unsqueeze(-1) * eigenvectors.mT) @ self.inverse_chol_dictionary

    @cached_property
    def inverse_chol_dictionary(self) -> Tensor:
        r"""``L_S^{-1}`` (``m x m``), so ``z(x) = L_S^{-1} k_S(x)``."""
        eye = torch.eye(self.size, dtype=self.gram.dtype, device=self.gram.device)
        return torch.linalg.solve_triangular(self.chol_dictionary, eye, upper=False)

    @property
    def size(self) -> int:
        r"""Number of dictionary points ``m``."""
        return self.dictionary.shape[0]

    def embed(self, kernel: Kernel, X: Tensor) -> Tensor:
        r"""Embedding ``z(X) = L_S^{-1} k_S(X)`` of ``... x d`` points, ``... x m``."""
        return _embed(kernel, self.dictionary, self.chol_dictionary, X)

    def whiten(self, Z: Tensor) -> Tensor:
        r"""``L_V^{-1} z`` for embeddings ``Z`` (``... x q x m``), so that
        ``z^T V^{-1} z' = whiten(z)^T whiten(z')``."""
        if self.chol_gram.dim() == 2:
            flat = Z.reshape(-1, Z.shape[-1])
            out = torch.linalg.solve_triangular(self.chol_gram, flat.mT, upper=False)
            return out.mT.reshape(Z.shape)
        return torch.linalg.solve_triangular(self.chol_gram, Z.mT, upper=False).mT

    def mean_and_covariance(self, kernel: Kernel, X: Tensor) -> tuple[Tensor, Tensor]:
        r"""Joint DTC predictive at ``batch x q x d`` points.

        Returns:
            ``(mean, covariance)`` of shapes ``batch x q`` and ``batch x q x q``
            (Bayesian scale, without observation noise).
        """
        Z = self.embed(kernel, X)
        A = self.whiten(Z)
        mean = (Z @ self.weights.unsqueeze(-1)).squeeze(-1)
        prior = prior_covariance(kernel, X)
        covariance = prior - Z @ Z.mT + self.noise * (A @ A.mT)
        return mean, covariance

    def mean_and_variance(
        self, kernel: Kernel, X: Tensor, rows_per_chunk: int = SCORING_CHUNK_ROWS
    ) -> tuple[Tensor, Tensor]:
        r"""Marginal DTC predictive at ``N x d`` points: ``N x m`` kernel blocks and
        ``N x m x m`` products (:attr:`variance_factor`), no ``N x N`` matrix.

        The points are scored ``rows_per_chunk`` at a time, so temporaries take
        ``O(rows_per_chunk m)`` memory whatever ``N``.

        Returns:
            ``(mean, variance)``, each ``batch x N`` (Bayesian scale, no noise).
        """
        means, variances = [], []
        for rows in X.split(rows_per_chunk, dim=-2):
            K = cross_covariance(kernel, rows, self.dictionary)
            means.append((K @ self.mean_coefficients.unsqueeze(-1)).squeeze(-1))
            explained = (K @ self.variance_factor.mT).square().sum(-1)
            variances.append((kernel(rows, diag=True) - explained).clamp_min(0.0))
        return torch.cat(means, dim=-1), torch.cat(variances, dim=-1)

    def updated(self, kernel: Kernel, X: Tensor, y: Tensor) -> DTCState:
        r"""The state after appending ``batch x n' x d`` points with ``batch x n'``
        targets, dictionary frozen: ``V += Z'^T Z'``, ``b += Z'^T y'`` (``O(n' m^2 +
        m^3)``; batch shapes broadcast, which is how fantasy models arise)."""
        Z = self.embed(kernel, X)
        gram = self.gram + Z.mT @ Z
        projected = self.projected_targets + (Z.mT @ y.unsqueeze(-1)).squeeze(-1)
        return self._from_gram(
            self.dictionary, self.chol_dictionary, self.noise, gram, projected
        )

    def collapsed_log_likelihood(
        self,
        kernel: Kernel,
        X: Tensor,
        counts: Tensor,
        sum_squares: Tensor,
    ) -> Tensor:
        r"""Titsias' collapsed bound on ``log p(y)`` per observation.

        .. math::

            \log \mathcal{N}(y \mid 0, Q + \lambda I) - \frac{1}{2\lambda}
            \operatorname{tr}(K - Q), \quad Q = Z Z^T,

        evaluated by Woodbury in ``O(u m^2)`` from the ``u`` distinct rows ``X`` with
        multiplicities ``counts``; the state must be built from the same data with the
        per-row target sums. ``sum_squares`` is ``y^T y`` over all observations. The
        diagonal of ``K - Q`` is clamped at 0, its exact range: at extreme
        lengthscales GPyTorch's distances lose all precision, and a negative residual
        would inflate the bound without limit.
        """
        n = counts.sum()
        Z = self.embed(kernel, X)
        residual = (kernel(X, diag=True) - Z.square().sum(-1)).clamp_min(0.0)
        half_logdet_gram = self.chol_gram.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        quadratic = (sum_squares - self.projected_targets @ self.weights) / self.noise
        logdet = (n - self.size) * self.noise.log() + 2 * half_logdet_gram
        trace = (counts * residual).sum() / self.noise
        total = quadratic + logdet + n * math.log(2 * math.pi) + trace
        return -0.5 * total / n


def dictionary_cholesky(kernel: Kernel, dictionary: Tensor) -> Tensor:
    r"""Lower Cholesky factor of ``K_SS + eps I`` with a small relative jitter."""
    K = kernel(dictionary).to_dense()
    scale = K.diagonal().mean().detach()
    jitter = relative_jitter(K.dtype) * scale
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    return psd_safe_cholesky(K + jitter * eye)


def _embed(kernel: Kernel, dictionary: Tensor, chol: Tensor, X: Tensor) -> Tensor:
    K = cross_covariance(kernel, X, dictionary)
    flat = K.reshape(-1, K.shape[-1])
    Z = torch.linalg.solve_triangular(chol, flat.mT, upper=False).mT
    return Z.reshape(K.shape)
