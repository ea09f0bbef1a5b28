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

The same algebra is Titsias' (AISTATS 2009) sparse variational GP with inducing points
``S``: in whitened coordinates ``u = L_S v`` the optimal ``q(v)`` is
``N(w, lambda V^{-1})`` (:meth:`DTCState.whitened_q`), and the collapsed bound on
``log p(y)`` is :func:`collapsed_log_likelihood`; ``NystromGP`` and
``DecomposedSamplingSVGP`` both use this module. ``epsilon`` is 0 unless ``K_SS`` does
not factorize (:func:`dictionary_cholesky`) or a variational strategy fixes its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.linalg import safe_cholesky, solve_lower


def distinct_rows(X: Tensor, y: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""Merge repeated rows of ``X``.

    Args:
        X: ``n x d`` points.
        y: Optional ``n`` targets, or ``o x n`` (one row per output), summed per
            distinct row.

    Returns:
        ``(U, counts, y_sums)``: the ``u x d`` distinct rows, their ``u``
        multiplicities and the ``u`` (``o x u``) per-row target sums (zeros
        when ``y`` is None).
    """
    U, inverse, counts = torch.unique(X, dim=0, return_inverse=True, return_counts=True)
    batch = () if y is None else y.shape[:-1]
    y_sums = torch.zeros(*batch, U.shape[0], dtype=X.dtype, device=X.device)
    if y is not None:
        y_sums = y_sums.index_add(-1, inverse, y)
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
        *,
        chol_dictionary: Tensor | None = None,
    ) -> DTCState:
        r"""Factorize from scratch (differentiable in the kernel hyperparameters).

        Args:
            kernel: The GPyTorch kernel ``k``.
            dictionary: ``m x d`` inducing points.
            X: ``batch x n x d`` observed points.
            y: ``batch x n`` observed targets (per-row sums when ``counts`` is given).
            noise: Scalar tensor ``lambda > 0``.
            counts: Optional ``n`` multiplicities of the rows of an unbatched ``X``.
            chol_dictionary: Optional ``m x m`` factor ``L_S`` to use (e.g. a
                variational strategy's own); default :func:`dictionary_cholesky`.
                Everything is computed in its dtype.

        Returns:
            The state, ``O(n m^2 + m^3)`` work.
        """
        if chol_dictionary is None:
            chol_dictionary = dictionary_cholesky(kernel, dictionary)
        Z = _embed(kernel, dictionary, chol_dictionary, X)
        return cls._from_embedding(dictionary, chol_dictionary, Z, y, noise, counts)

    @classmethod
    def _from_embedding(
        cls,
        dictionary: Tensor,
        chol_dictionary: Tensor,
        Z: Tensor,
        y: Tensor,
        noise: Tensor,
        counts: Tensor | None,
    ) -> DTCState:
        noise = noise.to(Z).reshape(())
        Zw = Z if counts is None else Z * counts.to(Z).unsqueeze(-1)
        eye = torch.eye(Z.shape[-1], dtype=Z.dtype, device=Z.device)
        gram = Zw.mT @ Z + noise * eye
        projected_targets = (Z.mT @ y.to(Z).unsqueeze(-1)).squeeze(-1)
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

    def whitened_q(self) -> tuple[Tensor, Tensor]:
        r"""Titsias' optimal ``q(v) = N(m_w, C_w C_w^T)`` in whitened coordinates
        ``u = L_S v``: ``m_w = w`` and ``C_w C_w^T = lambda V^{-1}``.

        Returns:
            ``(m_w, C_w)``: the ``batch x m`` mean and a ``batch x m x m`` *lower*
            triangular factor (what GPyTorch's ``CholeskyVariationalDistribution``
            stores), ``O(m^3)``; see :func:`whitened_covariance_factor`.
        """
        return self.weights, whitened_covariance_factor(self.gram, self.noise)

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
            out = solve_lower(self.chol_gram, flat.mT)
            return out.mT.reshape(Z.shape)
        return solve_lower(self.chol_gram, Z.mT).mT

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
        self, kernel: Kernel, X: Tensor, chunk_size: int = SCORING_CHUNK_ROWS
    ) -> tuple[Tensor, Tensor]:
        r"""Marginal DTC predictive at ``N x d`` points: ``N x m`` kernel blocks and
        ``N x m x m`` products (:attr:`variance_factor`), no ``N x N`` matrix.

        The points are scored ``chunk_size`` at a time, so temporaries take
        ``O(chunk_size m)`` memory whatever ``N``.

        Returns:
            ``(mean, variance)``, each ``batch x N`` (Bayesian scale, no noise).
        """
        means, variances = [], []
        for rows in X.split(chunk_size, dim=-2):
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
        projected = self.projected_targets + (Z.mT @ y.to(Z).unsqueeze(-1)).squeeze(-1)
        return self._from_gram(
            self.dictionary, self.chol_dictionary, self.noise, gram, projected
        )


def append_observations(
    X: Tensor, y: Tensor, new_X: Tensor, new_y: Tensor
) -> tuple[Tensor, Tensor]:
    r"""``batch x n x d`` inputs and ``batch x n`` targets with ``n'`` new rows
    appended, every batch shape broadcast to their common ``batch`` (fantasies:
    targets ``s x b x n'`` at points ``b x n' x d``)."""
    batch = torch.broadcast_shapes(y.shape[:-1], new_X.shape[:-2], new_y.shape[:-1])
    inputs = [t.expand(*batch, *t.shape[-2:]) for t in (X, new_X)]
    targets = [t.expand(*batch, t.shape[-1]) for t in (y, new_y)]
    return torch.cat(inputs, dim=-2), torch.cat(targets, dim=-1)


def append_outputs(
    X: Tensor, Y: Tensor, new_X: Tensor, new_Y: Tensor
) -> tuple[Tensor, Tensor]:
    r"""The multi-output form of :func:`append_observations`: ``batch x n x d``
    inputs shared by ``batch x o x n`` targets (one row per output), with ``n'``
    new inputs (``batch x n' x d``) and targets (``batch x o x n'``) appended, all
    batch shapes broadcast to their common ``batch`` (the output dimension is not
    part of it)."""
    batch = torch.broadcast_shapes(
        X.shape[:-2], Y.shape[:-2], new_X.shape[:-2], new_Y.shape[:-2]
    )
    inputs = [t.expand(*batch, *t.shape[-2:]) for t in (X, new_X)]
    targets = [t.expand(*batch, *t.shape[-2:]) for t in (Y, new_Y)]
    return torch.cat(inputs, dim=-2), torch.cat(targets, dim=-1)


def dictionary_cholesky(
    kernel: Kernel,
    dictionary: Tensor,
    jitter: float | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""Lower Cholesky factor ``L_S`` of ``K_SS + eps I`` (``m x m``).

    Args:
        kernel: The GPyTorch kernel.
        dictionary: ``m x d`` inducing points.
        jitter: A fixed ``eps`` (e.g. a variational strategy's own). Default 0,
            with GPyTorch's jitter added only if ``K_SS`` does not factorize (see
            :func:`~botorch_sketch.models.linalg.safe_cholesky`), so that a
            dictionary of all distinct points gives the exact GP posterior.
        dtype: dtype to factorize in (default that of ``K_SS``).
    """
    K = kernel(dictionary).to_dense()
    K = K if dtype is None else K.to(dtype)
    if jitter is not None:
        K = K + jitter * torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    return safe_cholesky(K)


def whitened_covariance_factor(gram: Tensor, noise: Tensor | float) -> Tensor:
    r"""Lower triangular ``C`` with ``C C^T = lambda V^{-1}`` for ``V`` (``... x m x
    m``), without inverting ``V``: ``V = U U^T`` with ``U`` *upper* triangular (the
    Cholesky factorization of ``V`` with rows and columns reversed) gives
    ``C = sqrt(lambda) U^{-T}``, ``O(m^3)``."""
    upper = torch.linalg.cholesky(gram.flip(-1, -2)).flip(-1, -2)
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    inverse = torch.linalg.solve_triangular(upper, eye, upper=True)
    return noise**0.5 * inverse.mT


def titsias_q_from_statistics(
    gram: Tensor, projected: Tensor, noise: Tensor | float
) -> tuple[Tensor, Tensor]:
    r"""Whitened Titsias ``q(v)`` (:meth:`DTCState.whitened_q`) from its sufficient
    statistics, ``O(m^3)``.

    The optimum depends on the data only through ``gram = Z^T Z = sum_i z_i z_i^T``
    and ``projected = Z^T y = sum_i z_i y_i`` (``z_i = L_S^{-1} k_S(x_i)``), which
    grow by a rank-one term per observation: ``V = gram + lambda I``.

    Args:
        gram: ``m x m`` matrix ``Z^T Z``.
        projected: ``m`` vector ``Z^T y``.
        noise: Gaussian noise variance ``lambda`` (scalar).

    Returns:
        ``(m_w, C_w)`` as :meth:`DTCState.whitened_q`.

    Example:
        >>> mean_w, chol_w = titsias_q_from_statistics(Z.T @ Z, Z.T @ y, 0.1)
    """
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    chol_w = whitened_covariance_factor(gram + noise * eye, noise)
    return chol_w @ (chol_w.mT @ projected) / noise, chol_w


def collapsed_log_likelihood(
    kernel: Kernel,
    dictionary: Tensor,
    X: Tensor,
    y: Tensor,
    noise: Tensor,
    *,
    chol_dictionary: Tensor | None = None,
) -> Tensor:
    r"""Titsias' collapsed bound on ``log p(y)`` per observation.

    .. math::

        \frac1n \Big[\log \mathcal{N}(y \mid 0, Q + \lambda I) - \frac{1}{2\lambda}
        \operatorname{tr}(K - Q)\Big], \quad Q = Z Z^T,

    evaluated by Woodbury on the ``u`` distinct rows of ``X`` (with their
    multiplicities), ``O(u m^2 + m^3)`` time and ``O(u m)`` memory, differentiable
    in the kernel hyperparameters, ``lambda`` and ``y``. It equals the exact log
    marginal likelihood per observation when the dictionary holds every distinct
    point (and ``eps -> 0``). The diagonal of ``K - Q`` is clamped at 0, its exact
    range: at extreme lengthscales GPyTorch's distances lose all precision, and a
    negative residual would inflate the bound without limit.

    With ``o x n`` targets (``o`` outputs sharing kernel, noise and dictionary)
    it is the sum of the ``o`` outputs' bounds, still divided by ``n``.

    Args:
        kernel: The GPyTorch kernel ``k``.
        dictionary: ``m x d`` inducing points.
        X: ``n x d`` observed points (repeats allowed).
        y: ``n`` (or ``o x n``) targets (minus the prior mean, if any).
        noise: Scalar tensor ``lambda > 0``.
        chol_dictionary: As in :meth:`DTCState.build`; its dtype is the one the
            bound is computed in (the result has the dtype of ``X``).

    Example:
        >>> bound = collapsed_log_likelihood(kernel, X[:20], X, y, noise)
    """
    U, counts, y_sums = distinct_rows(X, y)
    if chol_dictionary is None:
        chol_dictionary = dictionary_cholesky(kernel, dictionary)
    Z = _embed(kernel, dictionary, chol_dictionary, U)
    state = DTCState._from_embedding(
        dictionary, chol_dictionary, Z, y_sums, noise, counts
    )
    counts, noise, n = counts.to(Z), state.noise, X.shape[-2]
    residual = (kernel(U, diag=True).to(Z) - Z.square().sum(-1)).clamp_min(0.0)
    half_logdet_gram = state.chol_gram.diagonal().log().sum()
    sum_squares = y.to(Z).square().sum()
    if y.dim() == 1:
        explained = state.projected_targets @ state.weights
    else:  # one term per output; V (and so the log-determinant) is shared
        explained = (state.projected_targets * state.weights).sum()
    quadratic = (sum_squares - explained) / noise
    logdet = (n - state.size) * noise.log() + 2 * half_logdet_gram
    trace = (counts * residual).sum() / noise
    total = quadratic + logdet + n * math.log(2 * math.pi) + trace
    if y.dim() > 1:
        total = total + (y.shape[0] - 1) * (logdet + n * math.log(2 * math.pi) + trace)
    return (-0.5 * total / n).to(X.dtype)


def _embed(kernel: Kernel, dictionary: Tensor, chol: Tensor, X: Tensor) -> Tensor:
    K = cross_covariance(kernel, X, dictionary).to(chol)
    flat = K.reshape(-1, K.shape[-1])
    Z = solve_lower(chol, flat.mT).mT
    return Z.reshape(K.shape)
