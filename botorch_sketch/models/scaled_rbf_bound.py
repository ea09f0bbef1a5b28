r"""The objective of a loop's refit in closed form: the collapsed bound of a
``NystromGP`` whose kernel is ``ScaleKernel(RBFKernel)`` (the kernel every loop
learns, :func:`~botorch_sketch.generation.hyperparameters.learnable_covar_module`),
plus its log-normal priors, with its gradient written out (torch, no autograd;
the hyperparameters' transforms and priors in NumPy).

A refit evaluates the bound and its gradient 20-40 times on a few dozen to a few
hundred points. Through GPyTorch and autograd each evaluation is about a hundred
small tensor operations forward and as many backward (about 1 ms on 50 points);
here it is about forty, without a graph (0.3 ms). Torch rather than NumPy for the
matrices: in one process with torch, NumPy's BLAS threads made an evaluation on
100 points 5x slower on 2 cores.

With ``m`` inducing points ``S`` (``L L^T = K_SS``), ``u`` distinct observed
points of multiplicities ``c_i`` and target sums ``s_i`` (``n`` targets ``y``),
``M = L^{-1} K_{SX}`` (``m x u``), ``A = \lambda I + M C M^T`` and ``b = M s``,
the negative bound is

.. math::

    \frac{1}{2n}\Big[\frac{y^T y - b^T A^{-1} b}{\lambda} + (n - m)\log\lambda
    + \log|A| + \frac{\sum_i c_i (k(x_i, x_i) - \lVert M_{:i} \rVert^2)_+}{\lambda}
    + n \log 2\pi\Big],

and its gradient with respect to ``M`` is back-propagated through the triangular
solve and the Cholesky factor (Murray, 2016) to ``K_SS`` and ``K_SX``, then to the
lengthscales and outputscale of
``k(x, x') = s \exp(-\tfrac12 \lVert (x - x') / \ell \rVert^2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gpytorch.constraints import Interval
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.module import Module
from gpytorch.priors import LogNormalPrior
from torch import Tensor

from botorch_sketch.models.dtc import distinct_rows
from botorch_sketch.models.linalg import safe_cholesky, solve_lower

LOG_2PI = math.log(2 * math.pi)


def is_scaled_rbf(kernel: Kernel) -> bool:
    r"""Whether ``kernel`` is a ``ScaleKernel`` of an ``RBFKernel`` (exactly those
    classes), neither restricted to ``active_dims`` nor batched."""
    if type(kernel) is not ScaleKernel or type(kernel.base_kernel) is not RBFKernel:
        return False
    modules = (kernel, kernel.base_kernel)
    return all(
        module.active_dims is None and module.batch_shape == () for module in modules
    )


@dataclass(frozen=True)
class _Hyperparameter:
    r"""One raw parameter of a module, its constraint and its prior."""

    raw: Tensor
    lower: float
    upper: float
    sigmoid: bool  # value = lower + (upper - lower) sigmoid(raw); else value = raw
    prior: tuple[np.ndarray, np.ndarray] | None  # (loc, scale) of a LogNormal

    @classmethod
    def of(cls, module: Module, name: str) -> _Hyperparameter | None:
        r"""The hyperparameter ``name`` of ``module`` (``raw_<name>``), or None
        when its constraint or prior is not one this module computes: an
        unenforced interval (bounds for the optimizer) or a sigmoid interval, and
        a ``LogNormalPrior`` or none."""
        constraint = getattr(module, f"raw_{name}_constraint")
        if not isinstance(constraint, Interval):
            return None
        lower, upper = float(constraint.lower_bound), float(constraint.upper_bound)
        sigmoid = constraint.enforced
        if sigmoid and (
            constraint._transform is not torch.sigmoid
            or type(constraint) is not Interval
            or not math.isfinite(upper - lower)
        ):
            return None
        if not set(module._priors) <= {f"{name}_prior"}:
            return None
        prior = module._priors.get(f"{name}_prior", (None,))[0]
        if prior is not None and type(prior) is not LogNormalPrior:
            return None
        raw = getattr(module, f"raw_{name}")
        loc_scale = None
        if prior is not None:
            loc_scale = tuple(
                value.detach().double().numpy() for value in (prior.loc, prior.scale)
            )
        return cls(raw, lower, upper, sigmoid, loc_scale)

    @property
    def size(self) -> int:
        return self.raw.numel()

    def bounds(self) -> list[tuple[float | None, float | None]]:
        r"""L-BFGS-B bounds of the raw values (None: unbounded)."""
        if self.sigmoid:
            return [(None, None)] * self.size
        low = self.lower if math.isfinite(self.lower) else None
        high = self.upper if math.isfinite(self.upper) else None
        return [(low, high)] * self.size

    def value_and_slope(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r"""The constrained values of ``raw`` and their derivatives."""
        if not self.sigmoid:
            return raw, np.ones_like(raw)
        logistic = 1.0 / (1.0 + np.exp(-raw))
        width = self.upper - self.lower
        return self.lower + width * logistic, width * logistic * (1.0 - logistic)

    def log_prior_and_slope(self, value: np.ndarray) -> tuple[float, np.ndarray]:
        r"""``sum log p(value)`` and its derivatives in ``value``."""
        if self.prior is None:
            return 0.0, np.zeros_like(value)
        loc, scale = self.prior
        log_value = np.log(value)
        z = (log_value - loc) / scale
        log_density = -log_value - np.log(scale) - 0.5 * LOG_2PI - 0.5 * z * z
        slope = -(1.0 + z / scale) / value
        return float(log_density.sum()), np.broadcast_to(slope, value.shape)


def _hyperparameters(
    kernel: Kernel, likelihood: GaussianLikelihood | None
) -> list[_Hyperparameter] | None:
    r"""The raw noise (when learned), outputscale and lengthscales, in the order
    of ``get_parameters`` on a ``NystromMarginalLogLikelihood``; None when the
    kernel or one of them is not supported."""
    if not is_scaled_rbf(kernel):
        return None
    modules = [(kernel, "outputscale"), (kernel.base_kernel, "lengthscale")]
    if likelihood is not None:
        if type(likelihood) is not GaussianLikelihood or likelihood._priors:
            return None
        modules.insert(0, (likelihood.noise_covar, "noise"))
    found = [_Hyperparameter.of(module, name) for module, name in modules]
    return None if any(h is None for h in found) else found


def supports_closed_form(kernel: Kernel, likelihood: GaussianLikelihood | None) -> bool:
    r"""Whether :class:`ScaledRBFBound` computes the fit of ``kernel`` (and the
    noise of ``likelihood``; None: a fixed noise): a plain ``ScaleKernel(
    RBFKernel)`` whose outputscale, lengthscales and noise have sigmoid or
    unenforced interval constraints and log-normal priors or none, as
    :func:`~botorch_sketch.generation.hyperparameters.learnable_covar_module` and
    :func:`~botorch_sketch.generation.hyperparameters.learnable_likelihood` build."""
    return _hyperparameters(kernel, likelihood) is not None


def _triangular_inverse(factor: Tensor) -> Tensor:
    r"""``L^{-1}`` of a lower triangular ``L``."""
    return solve_lower(factor, _eye(factor))


def _squared_distances(a: Tensor, b: Tensor) -> Tensor:
    r"""``|a_i - b_j|^2`` (``p x q``) by GPyTorch's ``sq_dist`` formula, on points
    the bound has centred once on the dictionary's mean (``sq_dist`` would centre
    again at every evaluation)."""
    a_norms, b_norms = a.square().sum(-1), b.square().sum(-1)
    return (a_norms[:, None] + b_norms[None, :] - 2.0 * a @ b.T).clamp_min_(0.0)


def _lengthscale_gradient(weights: Tensor, a: Tensor, b: Tensor) -> Tensor:
    r"""``sum_ij W_ij (a_ik - b_jk)^2`` for each coordinate ``k`` (``d``)."""
    return (
        a.square().T @ weights.sum(1)
        + b.square().T @ weights.sum(0)
        - 2.0 * (a * (weights @ b)).sum(0)
    )


class ScaledRBFBound:
    r"""The negative MAP objective (bound plus log priors, per observation) of a
    ``NystromGP`` with a ``ScaleKernel(RBFKernel)`` kernel on its raw
    hyperparameters, with its gradient: ``O(u m^2 + m^3 + (u + m) m d)`` per call
    for ``u`` distinct observed points and ``m`` inducing points.

    Args:
        kernel: The kernel (:func:`supports_closed_form`); its raw parameters are
            read as the start and written by :meth:`assign`.
        likelihood: The ``GaussianLikelihood`` whose noise is learned, or None.
        noise: The fixed ``lambda`` when ``likelihood`` is None.
        X: ``n x d`` observed points (repeats allowed).
        y: ``n`` targets.
        dictionary: ``m x d`` inducing points.

    Example:
        >>> bound = ScaledRBFBound(kernel, likelihood, None, X, y, S)
        >>> result = scipy.optimize.minimize(
        ...     bound, bound.start(), jac=True, bounds=bound.bounds()
        ... )
        >>> bound.assign(result.x)
    """

    def __init__(
        self,
        kernel: Kernel,
        likelihood: GaussianLikelihood | None,
        noise: float | None,
        X: Tensor,
        y: Tensor,
        dictionary: Tensor,
    ) -> None:
        hyperparameters = _hyperparameters(kernel, likelihood)
        if hyperparameters is None:
            raise TypeError(
                "`kernel` must be a ScaleKernel(RBFKernel) with sigmoid or "
                "unenforced interval constraints and LogNormal priors or none "
                "(see `supports_closed_form`)."
            )
        if (likelihood is None) == (noise is None):
            raise ValueError("Give exactly one of `likelihood` and `noise`.")
        self.hyperparameters = hyperparameters
        self.noise = noise
        points, counts, sums = distinct_rows(X.detach(), y.detach())
        # rows in lexicographic order: the loss is the same in every bit whatever
        # order the inducing points come in (as the distinct points are ordered)
        _, rank = torch.unique(dictionary.detach(), dim=0, return_inverse=True)
        dictionary = dictionary.detach()[torch.argsort(rank, stable=True)]
        center = dictionary.mean(0)
        self.dictionary = (dictionary - center).double()
        self.points = (points - center).double()
        self.counts = counts.double()
        self.target_sums = sums.double()
        self.sum_squares = float(y.double().square().sum())
        self.n = int(y.shape[-1])

    def start(self) -> np.ndarray:
        r"""The raw hyperparameters' current values, concatenated."""
        return np.concatenate(
            [h.raw.detach().double().reshape(-1).numpy() for h in self.hyperparameters]
        )

    def bounds(self) -> list[tuple[float | None, float | None]]:
        r"""L-BFGS-B bounds of :meth:`start`'s entries."""
        return [b for h in self.hyperparameters for b in h.bounds()]

    def assign(self, raw: np.ndarray) -> None:
        r"""Write raw hyperparameters (as from :meth:`start`) to the modules."""
        offset = 0
        with torch.no_grad():
            for h in self.hyperparameters:
                values = torch.as_tensor(raw[offset : offset + h.size])
                h.raw.copy_(values.reshape(h.raw.shape))
                offset += h.size

    def __call__(self, raw: np.ndarray) -> tuple[float, np.ndarray]:
        r"""The loss and its gradient at the raw hyperparameters ``raw``."""
        values, slopes, log_prior, prior_slopes = [], [], 0.0, []
        offset = 0
        for h in self.hyperparameters:
            value, slope = h.value_and_slope(raw[offset : offset + h.size])
            log_density, prior_slope = h.log_prior_and_slope(value)
            values.append(value)
            slopes.append(slope)
            prior_slopes.append(prior_slope)
            log_prior += log_density
            offset += h.size
        learned = self.noise is None
        noise = float(values[0][0]) if learned else self.noise
        outputscale, lengthscales = float(values[-2][0]), values[-1]
        loss, d_noise, d_outputscale, d_lengthscales = self._bound(
            noise, outputscale, lengthscales
        )
        gradients = [d_outputscale, d_lengthscales]
        if learned:
            gradients.insert(0, np.array([d_noise]))
        n = self.n
        gradient = np.concatenate(
            [
                (g - prior_slope / n) * slope
                for g, prior_slope, slope in zip(
                    gradients, prior_slopes, slopes, strict=True
                )
            ]
        )
        return loss - log_prior / n, gradient

    @torch.no_grad()
    def _bound(
        self, noise: float, outputscale: float, lengthscales: np.ndarray
    ) -> tuple[float, float, np.ndarray, np.ndarray]:
        r"""The negative bound per observation and its derivatives in ``lambda``,
        the outputscale and the ``d`` lengthscales."""
        n, counts, sums = self.n, self.counts, self.target_sums
        lengthscales = torch.as_tensor(lengthscales, device=counts.device)
        S = self.dictionary / lengthscales
        U = self.points / lengthscales
        K_SS = outputscale * _squared_distances(S, S).mul_(-0.5).exp_()
        K_SU = outputscale * _squared_distances(S, U).mul_(-0.5).exp_()
        L = safe_cholesky(K_SS)
        inverse_L = _triangular_inverse(L)
        M = inverse_L @ K_SU
        m = M.shape[0]
        MC = M * counts
        inverse_L_A = _triangular_inverse(
            torch.linalg.cholesky(MC @ M.T + noise * _eye(M))
        )
        inverse_A = inverse_L_A.T @ inverse_L_A
        b = M @ sums
        w = inverse_A @ b
        residual = outputscale - M.square().sum(0)
        active = (residual >= 0).to(M)
        trace = float((counts * active * residual).sum()) / noise
        misfit = (self.sum_squares - float(b @ w)) / noise
        logdet = (n - m) * math.log(noise) - 2.0 * float(
            inverse_L_A.diagonal().log().sum()
        )
        total = misfit + logdet + trace + n * LOG_2PI

        # derivatives of `total` in lambda, M, then K_SU and K_SS (through L)
        d_noise = (float(w @ w) - misfit - trace + n - m) / noise + float(
            inverse_L_A.square().sum()
        )
        G_M = 2.0 * (
            inverse_A @ MC
            - (torch.outer(w, sums - (M.T @ w) * counts) + M * (counts * active))
            / noise
        )
        G_SU = inverse_L.T @ G_M
        phi = (L.T @ (-G_SU @ M.T).tril()).tril()
        phi.diagonal().mul_(0.5)
        G_SS = inverse_L.T @ phi @ inverse_L
        G_SS = 0.5 * (G_SS + G_SS.T)
        W_SS, W_SU = G_SS * K_SS, G_SU * K_SU
        d_outputscale = (
            float(W_SS.sum() + W_SU.sum()) / outputscale
            + float((counts * active).sum()) / noise
        )
        d_lengthscales = (
            _lengthscale_gradient(W_SS, S, S) + _lengthscale_gradient(W_SU, S, U)
        ) / lengthscales
        scale = 0.5 / n
        return (
            scale * total,
            scale * d_noise,
            np.array([scale * d_outputscale]),
            scale * d_lengthscales.cpu().numpy(),
        )


def _eye(like: Tensor) -> Tensor:
    return torch.eye(like.shape[0], dtype=like.dtype, device=like.device)
