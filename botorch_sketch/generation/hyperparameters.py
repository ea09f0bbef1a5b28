r"""Hyperparameters learned as a loop runs: the reward statistics, the unit-cube
inputs and default priors of a learned kernel, and its MAP fit on the collapsed
bound of the DTC posterior (``NystromMarginalLogLikelihood``).

The loops (``BBKB``) standardize the rewards with :func:`reward_statistics`, map
their arms to the unit cube with :func:`unit_cube`, and refit
:func:`learnable_covar_module`'s hyperparameters and ``lambda`` with
:func:`fit_dtc_hyperparameters` on a geometric schedule (:class:`RefitSchedule`).
"""

from __future__ import annotations

import math
import warnings
from copy import deepcopy
from typing import Any

import numpy as np
import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.constraints import GreaterThan, Interval
from gpytorch.kernels import Kernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.priors import LogNormalPrior
from linear_operator.utils.errors import NanError, NotPSDError
from scipy.optimize import minimize
from torch import Tensor

from botorch_sketch.models.inducing import select_inducing_indices
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.scaled_rbf_bound import (
    ScaledRBFBound,
    supports_closed_form,
)
from botorch_sketch.utils.atomic import Restorable
from botorch_sketch.utils.blas import one_blas_thread
from botorch_sketch.utils.validation import (
    MIN_NOISE,
    check_at_least,
    check_int,
    check_positive,
)

#: The smallest learned ``lambda`` (on the standardized rewards), Optuna's
#: ``GPSampler``'s floor; BoTorch's (``1e-4``) caps the precision near an optimum
#: at about ``1e-2`` of the rewards' spread. On Branin (BBKBSampler, 300 trials,
#: seeds 0-2) the lower floor took the mean simple regret from 2.3e-4 to 2.3e-6.
MIN_LEARNED_NOISE = 1e-6

#: Range of a learned outputscale (standardized rewards have variance 1).
OUTPUTSCALE_RANGE = (1e-2, 1e2)

#: ``lambda`` before the first fit: the mode of BoTorch's ``LogNormal(-4, 1)`` noise
#: prior.
INITIAL_LEARNED_NOISE = math.exp(-5.0)

#: Observations between refits of learned hyperparameters grow by this factor.
DEFAULT_REFIT_GROWTH = 1.5

#: While the last fit saw fewer than :data:`EARLY_REFIT_UNTIL` observations, they
#: grow by at most :data:`EARLY_REFIT_GROWTH` between refits: hyperparameters fitted
#: on a few dozen points go stale fastest, and such a fit costs milliseconds. With 1
#: trial in flight and 100 trials (5 seeds; docs/benchmarks.md) this took BBKB's
#: simple regret on Hartmann-6 from 0.20 to 0.056 and on the mixed space from 0.015
#: to 0.0043 (with :data:`REFIT_FTOL`).
EARLY_REFIT_GROWTH = 1.1
EARLY_REFIT_UNTIL = 200

#: Relative tolerance on the objective (scipy's L-BFGS-B ``ftol``) of a refit: a
#: warm-started refit stops once a step improves the bound by less than this, where
#: scipy's default (about 2e-9) let refits run 100-400 evaluations on cadata.
REFIT_FTOL = 1e-6

#: Most L-BFGS-B iterations of a loop's fit. Warm-started, the hyperparameters
#: then move a bounded way per fit and settle over the geometric schedule of fits
#: rather than jumping to each new optimum of a few dozen points. Three seeds, 500
#: trials, 1 in flight (BBKBSampler / SGPTSSampler, mean simple regret, against no
#: cap): Branin 1.9e-6 / 9.8e-7 (2.3e-5 / 1.5e-5), Levy-10 1.7 / 6.4 (3.3 / 5.3),
#: the mixed space 0.017 / 0.0067 (0.020 / 0.020), Hartmann-6 0.080 / 9.6e-5
#: (0.080 / 2.2e-4), at 30-55% less optimizer time per trial.
REFIT_MAX_ITERATIONS = 20

#: Most inducing points a refit uses in a study (the Optuna samplers' and the Ray
#: Tune searchers' loops; ``fit_dtc_hyperparameters``'s default). The collapsed
#: bound on a few inducing points favours the smoother hyperparameters that these
#: points can explain, and keeps a fit ``O(n m^2)`` with ``m`` fixed. On cadata
#: (sequential BKB, 1,000 evaluations) fitting on the whole dictionary (about 500
#: points) learned lengthscales of 0.03-0.2 of the unit cube and ``lambda``
#: 1.5e-3, and UCB kept exploring (regret ratio 0.29 against uniform sampling); on
#: 100 points the fit left 0.09 at a third of the CPU time (50 points: 0.04; 200:
#: 0.14). A study is judged by the best value it finds: with 50 points the
#: samplers' simple regret after 100 trials rose from 0.052 to 0.126 on Hartmann-6
#: and from 7.4 to 20.7 on Levy-10 (5 seeds, docs/benchmarks.md).
FIT_INDUCING = 100

#: Most inducing points a refit of ``BBKB`` used directly uses: a bandit, judged
#: by its cumulative regret. Fewer points keep the fitted lengthscales longer and
#: UCB's exploration in check. Asynchronous BBKB, ``W = 100``, 8 seeds
#: (docs/benchmarks.md): on cadata (``T = 10^4``) the mean regret ratio is 0.018
#: with 50 points, the papers' fixed kernel's, against 0.041 with 100; on
#: Rosenbrock-8, Levy-8, Hartmann-6 and abalone (``T = 2,000``) the two are within
#: the seeds' spread, and on Ackley-8 50 points cost 1.22x (0.77 against 0.63).
#: S-GP-TS keeps :data:`FIT_INDUCING`: on Rosenbrock-8 its regret ratio rose from
#: 0.11 to 0.17 with 50 points (4 seeds).
UCB_FIT_INDUCING = 50


def learnable_covar_module(d: int) -> ScaleKernel:
    r"""The kernel a loop learns when the user gives none: BoTorch's default RBF
    kernel with the dimension-scaled log-normal lengthscale prior (Hvarfner et al.,
    ICML 2024; ``get_covar_module_with_dim_scaled_prior``), for inputs in the unit
    cube, inside a ``ScaleKernel`` whose outputscale has a ``LogNormal(0, 1)``
    prior: the rewards are standardized, so their variance is about 1. The
    outputscale is kept in :data:`OUTPUTSCALE_RANGE` (a bounded parametrization:
    a line search of the fit cannot drive it to 0).

    Args:
        d: The input dimension.

    Returns:
        ``ScaleKernel(RBFKernel(ard_num_dims=d))`` with those priors, at their modes
        (lengthscales) and 1 (outputscale).
    """
    check_int(d, "d", 1)
    kernel = ScaleKernel(
        get_covar_module_with_dim_scaled_prior(ard_num_dims=d),
        outputscale_prior=LogNormalPrior(0.0, 1.0),
        outputscale_constraint=Interval(*OUTPUTSCALE_RANGE),
    )
    kernel.outputscale = 1.0
    return kernel


def learnable_likelihood() -> GaussianLikelihood:
    r"""The likelihood whose noise a loop learns: BoTorch's ``LogNormal(-4, 1)``
    noise prior, floored at :data:`MIN_LEARNED_NOISE`."""
    return GaussianLikelihood(
        noise_prior=LogNormalPrior(-4.0, 1.0),
        noise_constraint=GreaterThan(
            MIN_LEARNED_NOISE, transform=None, initial_value=INITIAL_LEARNED_NOISE
        ),
    )


def bounding_box(points: Tensor) -> Tensor:
    r"""``2 x d`` lower and upper bounds of ``points`` (``n x d``); a coordinate that
    does not vary gets the upper bound ``lower + 1``, so it maps to 0 in the cube."""
    low, high = points.min(dim=0).values, points.max(dim=0).values
    return torch.stack([low, torch.where(high > low, high, low + 1)])


def unit_cube(points: Tensor) -> Tensor:
    r"""``points`` mapped affinely to the unit cube by their :func:`bounding_box`, as
    BoTorch's ``Normalize`` maps inputs: the learned kernel's priors assume that
    cube.

    Args:
        points: ``n x d`` points.

    Returns:
        ``n x d`` points in ``[0, 1]^d``.
    """
    return cube_coordinates(points, bounding_box(points))


def cube_coordinates(points: Tensor, box: Tensor | None) -> Tensor:
    r"""``points`` (``n x d``) in the unit cube of ``box`` (``2 x d`` lower and
    upper bounds; None: unchanged), the inputs of a learned kernel."""
    if box is None:
        return points
    low, high = box
    return (points - low) / (high - low)


def reward_statistics(rewards: Tensor) -> tuple[float, float]:
    r"""Center and scale of the rewards for standardization, ``(y - c) / s``: their
    mean and standard deviation (unbiased), with ``s = 1`` when fewer than two
    rewards or no spread (as BoTorch's ``Standardize``), ``c = 0`` with no reward.

    Args:
        rewards: ``n`` rewards.

    Returns:
        ``(c, s)`` as floats.
    """
    if rewards.numel() == 0:
        return 0.0, 1.0
    center = float(rewards.mean())
    if rewards.numel() < 2:
        return center, 1.0
    scale = float(rewards.std())
    tiny = 1e-8 * max(abs(center), 1.0)
    return center, scale if scale > tiny and math.isfinite(scale) else 1.0


#: Standardized rewards enter a fit rounded to multiples of this (about 2e-10 of
#: their spread): see :func:`units_free`.
TARGET_GRID = 2.0**-24


def units_free(y: Tensor) -> Tensor:
    r"""Standardized rewards rounded to multiples of :data:`TARGET_GRID`.

    Rewards in other units, ``a r + b``, standardize to the same values up to the
    last bits of the floating-point format, and a refit's L-BFGS-B path, stopped
    at a relative ``ftol``, turns a change of ``1e-16`` in ``y`` into one of about
    ``1e-3`` in the lengthscales. Rounded, the targets are bit-identical in any
    units (unless one sits within ``1e-16`` of a rounding boundary), so are the
    fitted hyperparameters and the choices they lead to.

    Args:
        y: ``n`` standardized rewards.
    """
    return torch.round(y / TARGET_GRID) * TARGET_GRID


def fit_dtc_hyperparameters(
    kernel: Kernel,
    noise: float,
    X: Tensor,
    y: Tensor,
    dictionary: Tensor,
    learn_noise: bool = True,
    max_inducing: int | None = FIT_INDUCING,
    max_iterations: int | None = None,
    restart: tuple[Kernel, float] | None = None,
) -> tuple[Kernel, float] | None:
    r"""MAP of the kernel hyperparameters and ``lambda`` on the collapsed (Titsias)
    bound of the DTC posterior on ``dictionary``, plus the log densities of the
    kernel's priors and the noise prior of :func:`learnable_likelihood`,
    warm-started at ``kernel`` and ``noise`` and, given ``restart``, started
    again there, keeping the better of the two optima (L-BFGS-B runs from fixed
    starts, no random restart: the fit is reproducible; in closed form,
    :class:`~botorch_sketch.models.scaled_rbf_bound.ScaledRBFBound`, for the
    kernel of :func:`learnable_covar_module`, else BoTorch's
    ``fit_gpytorch_mll``). ``O(u m^2 + m^3)`` per iteration for ``u`` distinct
    points and ``m`` inducing points: the dictionary, or, past ``max_inducing``
    points, its ``max_inducing`` points chosen greedily by conditional variance
    under ``kernel`` (:func:`select_inducing_indices`).

    Args:
        kernel: The current kernel (not modified; a fitted copy is returned).
        noise: The current ``lambda``.
        X: ``n x d`` observed points (repeats allowed).
        y: ``n`` standardized rewards.
        dictionary: ``m x d`` dictionary points.
        learn_noise: Whether ``lambda`` is fitted too (else it stays ``noise``).
        max_inducing: Most inducing points the fit uses (None: the whole
            dictionary); default :data:`FIT_INDUCING`.
        max_iterations: Most L-BFGS-B iterations of each start (None: until
            converged; the loops pass :data:`REFIT_MAX_ITERATIONS`).
        restart: A second start, a kernel like ``kernel`` and its ``lambda``
            (the loops pass their hyperparameters before any fit): a warm start
            whose early fits found the flat basin (long lengthscales, a large
            ``lambda``) stays in it, capped fit after capped fit.

    Returns:
        The fitted kernel and ``lambda`` of the start that ends with the larger
        objective (the warm one on a tie), or None if every start failed (keep
        the current ones).
    """
    y = units_free(y)
    options: dict[str, float] = {"ftol": REFIT_FTOL}
    if max_iterations is not None:
        options["maxiter"] = check_int(max_iterations, "max_iterations", 1)
    if max_inducing is not None:
        check_int(max_inducing, "max_inducing", 1)
        if len(dictionary) > max_inducing:
            chosen = select_inducing_indices(dictionary, kernel, max_inducing)
            dictionary = dictionary[chosen]
    starts = [(kernel, noise)] + ([] if restart is None else [restart])
    fits = [
        _fit_from(*start, learn_noise, X, y, dictionary, options) for start in starts
    ]
    fits = [fit for fit in fits if fit is not None]
    if not fits:
        return None
    best = min(fits, key=lambda fit: fit[2])  # the first of equal losses
    return best[0], best[1]


def _fit_from(
    kernel: Kernel,
    noise: float,
    learn_noise: bool,
    X: Tensor,
    y: Tensor,
    dictionary: Tensor,
    options: dict[str, float],
) -> tuple[Kernel, float, float] | None:
    r"""One start of :func:`fit_dtc_hyperparameters`: the fitted copy of
    ``kernel``, ``lambda`` and the negative objective at the end, or None if the
    fit failed."""
    kernel = deepcopy(kernel)
    likelihood = None
    if learn_noise:
        likelihood = learnable_likelihood().to(X)
        likelihood.noise = max(noise, MIN_LEARNED_NOISE)
    fit = _fit_closed_form if supports_closed_form(kernel, likelihood) else _fit_mll
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fitted = fit(kernel, likelihood, noise, X, y, dictionary, options)
        except (ModelFittingError, NotPSDError, NanError, ValueError, RuntimeError):
            return None
    if fitted is None or not all(map(math.isfinite, fitted)) or fitted[0] < MIN_NOISE:
        return None
    fitted_noise, loss = fitted
    kernel.requires_grad_(False)
    return kernel, fitted_noise, loss


def _fit_closed_form(
    kernel: Kernel,
    likelihood: GaussianLikelihood | None,
    noise: float,
    X: Tensor,
    y: Tensor,
    dictionary: Tensor,
    options: dict[str, float],
) -> tuple[float, float] | None:
    r"""L-BFGS-B on :class:`ScaledRBFBound` (the same objective, bounds and start
    as BoTorch's ``fit_gpytorch_mll`` on the ``NystromGP``; a fit on 20-100 points
    is 3-4x cheaper: docs/benchmark-history.md). Writes the fit into ``kernel`` and
    ``likelihood`` and returns ``lambda`` and the loss; None if L-BFGS-B failed
    (neither converged nor stopped at ``maxiter``)."""
    bound = ScaledRBFBound(
        kernel, likelihood, None if likelihood is not None else noise, X, y, dictionary
    )

    def loss(raw: np.ndarray) -> tuple[float, np.ndarray]:
        try:  # as BoTorch's closures: NaN, so that L-BFGS-B stops and fails
            return bound(raw)
        except (torch.linalg.LinAlgError, NotPSDError, NanError):
            return math.nan, np.full_like(raw, math.nan)

    with one_blas_thread():
        result = minimize(
            loss,
            bound.start(),
            jac=True,
            method="L-BFGS-B",
            bounds=bound.bounds(),
            options=options,
        )
    if result.status not in (0, 1):  # 1: stopped at maxiter
        return None
    bound.assign(result.x)
    return noise if likelihood is None else float(likelihood.noise), float(result.fun)


def _fit_mll(
    kernel: Kernel,
    likelihood: GaussianLikelihood | None,
    noise: float,
    X: Tensor,
    y: Tensor,
    dictionary: Tensor,
    options: dict[str, float],
) -> tuple[float, float]:
    r"""BoTorch's ``fit_gpytorch_mll`` on a ``NystromGP`` with ``kernel`` (any
    kernel), one attempt; writes the fit into ``kernel`` and ``likelihood`` and
    returns ``lambda`` and the loss (the negative objective)."""
    model = NystromGP(
        X,
        y.unsqueeze(-1),
        covar_module=kernel.requires_grad_(True),
        noise=noise if likelihood is None else None,
        dictionary=dictionary,
    )
    if likelihood is not None:
        model.likelihood = likelihood
    mll = NystromMarginalLogLikelihood(model.likelihood, model)
    fit_gpytorch_mll(mll, max_attempts=1, optimizer_kwargs={"options": options})
    with torch.no_grad():
        loss = float(mll.compute_custom_loss())
    return float(model.noise.detach()), loss


class RefitSchedule(Restorable):
    r"""When a loop refits: at ``first`` observations, then each time the
    observations have grown by ``g`` since the last fit, ``g = min(growth,
    early_growth)`` while the last fit saw fewer than ``early_until`` observations and
    ``growth`` after (so ``O(log T)`` fits in ``T`` observations, whose cost past
    ``early_until`` adds up to ``growth / (growth - 1)`` times that of the last one).

    Example:
        >>> schedule = RefitSchedule(first=10, growth=1.5, early_until=20)
        >>> for n in range(1, 60):
        ...     if schedule.due(n):
        ...         schedule.done(n)
        >>> schedule.last  # fits at 10, 11, 13, 15, 17, 19, 21, 32 and 48 observations
        48
    """

    def __init__(
        self,
        first: int,
        growth: float,
        early_growth: float = EARLY_REFIT_GROWTH,
        early_until: int = EARLY_REFIT_UNTIL,
    ) -> None:
        r"""
        Args:
            first: Observations before the first fit (``>= 2``).
            growth: Factor ``> 1`` of observations between fits.
            early_growth: Factor ``> 1`` between fits while fewer than
                ``early_until`` observations (``>= 0``) were seen at the last fit.
        """
        check_int(first, "first", 2)
        for value, name in ((growth, "growth"), (early_growth, "early_growth")):
            check_at_least(value, name, 1.0)
            if value <= 1.0:
                raise ValueError(f"`{name}` must be > 1, got {value}.")
        check_int(early_until, "early_until", 0)
        self.first, self.growth = first, float(growth)
        self.early_growth, self.early_until = float(early_growth), early_until
        self.last: int | None = None

    def due(self, num_observations: int) -> bool:
        r"""Whether ``num_observations`` call for a fit."""
        if self.last is None:
            return num_observations >= self.first
        growth = self.growth
        if self.last < self.early_until:
            growth = min(growth, self.early_growth)
        return num_observations >= math.ceil(growth * self.last)

    def done(self, num_observations: int) -> None:
        r"""Record a fit at ``num_observations``."""
        self.last = num_observations


def restart_due(last_fit: int | None, num_observations: int) -> bool:
    r"""Whether a loop's refit at ``num_observations`` also restarts at the
    loop's initial hyperparameters (``restart`` of
    :func:`fit_dtc_hyperparameters`): at the first refit after the observations
    pass a power of two since the last fit (``last_fit``; None: this is the
    first fit, which starts there anyway). ``O(log T)`` restarts in ``T``
    observations, whose cost adds up to about twice the last one's, where a
    restart at every refit doubled the cost of all of them.

    Example:
        >>> fits = ((12, 11), (16, 15), (17, 16), (33, 30))
        >>> [n for n, last in fits if restart_due(last, n)]
        [16, 33]
    """
    return (
        last_fit is not None and num_observations.bit_length() > last_fit.bit_length()
    )


def hyperparameter_state(
    kernel: Kernel, noise: float, last_fit: int | None
) -> dict[str, Any]:
    r"""The learned hyperparameters of a loop for its ``state_dict``: the kernel's
    state, ``lambda`` and the observations at the last fit (None: none yet)."""
    return {
        "covar_module": {k: v.clone() for k, v in kernel.state_dict().items()},
        "noise": noise,
        "last_fit": last_fit,
    }


def checked_hyperparameters(
    saved: object, kernel: Kernel, noise: float, *, learned: bool, has_data: bool
) -> tuple[Kernel, float, int | None]:
    r"""Validate the :func:`hyperparameter_state` of a saved loop against a loop
    with ``kernel`` and ``noise``, before anything changes.

    Args:
        saved: ``state['hyperparameters']`` (None for a loop with a fixed kernel).
        kernel: The loop's kernel (a copy loads the saved state).
        noise: The loop's ``lambda``.
        learned: Whether the loop learns its hyperparameters.
        has_data: Whether the saved loop had observations (a fixed-kernel state is
            then foreign to a learning loop).

    Returns:
        The kernel, ``lambda`` and last fit to resume with (the loop's own and
        None when the loop does not learn or nothing was saved).
    """
    if not learned or saved is None:
        if learned and has_data:
            raise ValueError(
                "`state['hyperparameters']` is missing: the state comes from a "
                "loop with a fixed kernel, this one learns it."
            )
        return kernel, noise, None
    keys = {"covar_module", "noise", "last_fit"}
    if not isinstance(saved, dict) or set(saved) != keys:
        raise ValueError(
            "`state['hyperparameters']` must hold 'covar_module', 'noise', 'last_fit'."
        )
    loaded = deepcopy(kernel)
    try:
        loaded.load_state_dict(saved["covar_module"])
    except (RuntimeError, TypeError, KeyError) as error:
        raise ValueError(
            "`state['hyperparameters']['covar_module']` does not fit the kernel: "
            f"{error}"
        ) from None
    noise = check_positive(saved["noise"], "state['hyperparameters']['noise']")
    last_fit = saved["last_fit"]
    if last_fit is not None:
        check_int(last_fit, "state['hyperparameters']['last_fit']", 0)
    return loaded, noise, last_fit
