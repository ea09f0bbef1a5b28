r"""What Ax needs to build, fit and store the package's models and acquisitions.

Importing this module (``botorch_sketch.integrations.ax`` does) registers, once:

- model input constructors (Ax's ``submodel_input_constructor``) for
  :class:`~botorch_sketch.models.nystrom.NystromGP` and
  :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP`: training data,
  ``ModelConfig.model_options``, the kernel, likelihood, input and outcome transforms
  of the ``ModelConfig``, and known observation noise as the fixed homoskedastic
  noise; with no options, ``NystromGP`` gets defaults for Ax's standardized outcomes
  (learned ``lambda``, :func:`ax_nystrom_kernel`) instead of its direct-construction
  ones;
- fitting routines (Ax's ``fit_botorch_model``) that fit each model on its own
  collapsed bound (Ax's default ``ExactMarginalLogLikelihood`` is replaced; for
  ``NystromGP`` :class:`~botorch_sketch.models.nystrom.NystromMarginalLogLikelihood`,
  the bound plus its hyperparameters' log priors), and resample the Nystrom
  dictionary for the fitted hyperparameters;
- BoTorch acquisition input constructors (``acqf_input_constructor``) for
  :class:`~botorch_sketch.acquisition.bkb.BKBUpperConfidenceBound`,
  :class:`~botorch_sketch.acquisition.thompson.ScaledPathThompsonSampling` (Ax's
  scalarization and pending points passed on: a fresh path for every arm);
  without a ``radius``, BKB-UCB's index is ``mu + sqrt(0.2) sigma``
  (:data:`AX_BAYES_RADIUS`);
- the classes in Ax's JSON/SQA storage registries, so experiments and generation
  strategies that use them save and load (import this module before loading).
"""

from __future__ import annotations

try:
    import ax  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ax installed
    from botorch_sketch.utils.extras import missing_dependency

    raise missing_dependency(
        "ax-platform", "ax", "botorch_sketch.integrations.ax"
    ) from error

import math
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.generators.torch.botorch_modular.input_constructors.covar_modules import (
    covar_module_argparse,
)
from ax.generators.torch.botorch_modular.kernels import (
    DefaultMaternKernel,
    DefaultRBFKernel,
    ScaleMaternKernel,
)
from ax.generators.torch.botorch_modular.surrogate import (
    Surrogate,
    _make_botorch_input_transform,
    _make_botorch_outcome_transform,
    submodel_input_constructor,
)
from ax.generators.torch.botorch_modular.utils import ModelConfig, fit_botorch_model
from ax.storage.botorch_modular_registry import (
    register_acquisition_function,
    register_mll,
    register_model,
)
from botorch.acquisition.input_constructors import acqf_input_constructor
from botorch.acquisition.objective import PosteriorTransform
from botorch.fit import fit_gpytorch_mll
from botorch.models.model import Model
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from botorch.utils.datasets import MultiTaskDataset, SupervisedDataset
from gpytorch.kernels import Kernel, LinearKernel
from gpytorch.mlls import ExactMarginalLogLikelihood, MarginalLogLikelihood
from torch import Tensor

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound
from botorch_sketch.acquisition.thompson import (
    ScaledPathThompsonSampling,
    resolve_alpha,
)
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

#: Ax's kernels whose argument parsers leave ``ard_num_dims`` and ``batch_shape`` to
#: be filled in for the model class (Ax does it for ``SingleTaskGP`` only).
AX_SHAPED_KERNELS = (
    DefaultMaternKernel,
    DefaultRBFKernel,
    LinearKernel,
    ScaleMaternKernel,
)

#: ``NystromGP``'s regularization ``lambda`` from Ax when ``ModelConfig.model_options``
#: has no ``noise``: None, learned on the collapsed bound under BoTorch's log-normal
#: noise prior (Ax standardizes the outcomes; a deterministic objective ends near the
#: bound 1e-4). A fixed ``lambda`` is a floor on the resolution of the posterior mean,
#: about ``sqrt(lambda)`` outcome standard deviations: 1e-2 lost a factor 50 in simple
#: regret on Branin (docs/ax.md).
AX_NYSTROM_NOISE: float | None = None

#: BKB-UCB's index from Ax when no ``radius`` is given: ``mu + AX_BAYES_RADIUS sigma``
#: (Bayesian-scale ``sigma``), i.e. ``radius = AX_BAYES_RADIUS sqrt(lambda)`` for the
#: fitted ``lambda``. ``sqrt(0.2)``: BoTorch's ``UpperConfidenceBound`` from Ax
#: (``beta = 0.2`` in its input constructor) scores ``mu + sqrt(0.2) sigma``. With
#: ``mu + 2 sigma`` the 30-trial runs of docs/ax.md spent their trials on the box's
#: boundary (unit-variance prior: ``sigma`` is near 1 away from the data), and an exact
#: ``SingleTaskGP`` with the same index did no better on Hartmann-6.
AX_BAYES_RADIUS = math.sqrt(0.2)


def default_bkb_radius(model: NystromGP) -> float:
    r"""BKB-UCB's radius from Ax when no ``radius`` is given:
    ``radius = AX_BAYES_RADIUS sqrt(lambda)`` for the model's (fitted) ``lambda``, so
    the index is ``mu + AX_BAYES_RADIUS sigma``.

    Example:
        >>> default_bkb_radius(NystromGP(X, Y, noise=1e-2))  # sqrt(0.2) * 0.1
        0.0447...
    """
    return AX_BAYES_RADIUS * float(model.noise.detach().sqrt())


def ax_nystrom_kernel(d: int) -> Kernel:
    r"""``NystromGP``'s kernel from Ax when the ``ModelConfig`` names none: BoTorch's
    default for ``SingleTaskGP``, an ARD RBF kernel without output scale (Ax's
    outcomes have unit variance) whose lengthscales have the dimension-scaled
    log-normal prior of Hvarfner et al. (ICML 2024), which keeps them from diverging
    on the few points of an Ax run (unregularized, ``NystromGP``'s own default
    grew lengthscales of 1e3 on 13 points of Hartmann-6).

    Args:
        d: Input dimension.

    Returns:
        An ``RBFKernel`` with ``d`` lengthscales.

    Example:
        >>> ax_nystrom_kernel(2).lengthscale.shape
        torch.Size([1, 2])
    """
    return get_covar_module_with_dim_scaled_prior(ard_num_dims=d)


#: The constructor argument that fixes each model's homoskedastic noise variance.
NOISE_ARGUMENT: dict[type[Model], str] = {
    NystromGP: "noise",
    DecomposedSamplingSVGP: "noise",
}


# ------------------------------------------------------------------------- models
def known_noise_variance(Yvar: Tensor, model_name: str, argument: str) -> float:
    r"""The homoskedastic noise variance to use for observations with known variances
    ``Yvar`` (their mean).

    Args:
        Yvar: ``n x 1`` observation variances (Ax passes them when the user reports
            a standard error).
        model_name: For the error message.
        argument: The model's noise argument, for the error message.

    Returns:
        ``mean(Yvar) > 0``.

    Example:
        >>> known_noise_variance(torch.full((5, 1), 0.01), "NystromGP", "noise")
        0.01
    """
    if not torch.isfinite(Yvar).all() or (Yvar < 0).any():
        raise ValueError("`Yvar` must be finite and non-negative.")
    variance = float(Yvar.mean())
    if variance <= 0:
        raise ValueError(
            f"{model_name} needs a positive noise variance but the observations were "
            f"reported noiseless (sem = 0); set ModelConfig.model_options"
            f"['{argument}'] to a positive value or report a positive sem."
        )
    return variance


def _sketch_model_inputs(
    botorch_model_class: type[Model],
    model_config: ModelConfig,
    dataset: SupervisedDataset,
    search_space_digest: SearchSpaceDigest,
    surrogate: Surrogate,
) -> dict[str, Any]:
    r"""Keyword arguments for ``NystromGP`` / ``DecomposedSamplingSVGP`` from Ax.

    The submodules come from the ``ModelConfig`` as for BoTorch's models (Ax's own
    transform builders, so ``input_transform_classes=DEFAULT`` adds ``Normalize`` when
    the bounds are not the unit cube). A ``NystromGP`` whose options give no
    ``noise`` gets :data:`AX_NYSTROM_NOISE` (or the reported noise), and without a
    kernel class :func:`ax_nystrom_kernel`. ``surrogate`` is unused (Ax's signature).
    """
    name = botorch_model_class.__name__
    if isinstance(dataset, MultiTaskDataset) or search_space_digest.task_features:
        raise ValueError(f"{name} is a single-task model; got task features.")
    if search_space_digest.fidelity_features:
        raise ValueError(f"{name} does not model fidelity parameters.")
    argument = NOISE_ARGUMENT[botorch_model_class]
    inputs: dict[str, Any] = {
        "train_X": dataset.X,
        "train_Y": dataset.Y,
        **model_config.model_options,
    }
    if dataset.Yvar is not None and argument not in inputs:
        inputs[argument] = known_noise_variance(dataset.Yvar, name, argument)
    if botorch_model_class is NystromGP and "noise" not in inputs:
        inputs["noise"] = AX_NYSTROM_NOISE
    if (kernel_class := model_config.covar_module_class) is not None:
        inputs["covar_module"] = _kernel(
            kernel_class, model_config, dataset, botorch_model_class
        )
    elif botorch_model_class is NystromGP:
        inputs["covar_module"] = ax_nystrom_kernel(dataset.X.shape[-1])
    if (likelihood_class := model_config.likelihood_class) is not None:
        if botorch_model_class is NystromGP:
            raise ValueError(
                "NystromGP builds its own Gaussian likelihood; set "
                "ModelConfig.model_options['noise'] to fix lambda instead of "
                "`likelihood_class`."
            )
        inputs["likelihood"] = likelihood_class(
            **deepcopy(model_config.likelihood_options)
        )
    if model_config.input_transform_classes is not None:
        input_transform = _make_botorch_input_transform(
            input_transform_classes=model_config.input_transform_classes,
            input_transform_options=model_config.input_transform_options or {},
            dataset=dataset,
            search_space_digest=search_space_digest,
        )
        if input_transform is not None:
            inputs["input_transform"] = input_transform
    if model_config.outcome_transform_classes:
        inputs["outcome_transform"] = _make_botorch_outcome_transform(
            outcome_transform_classes=model_config.outcome_transform_classes,
            outcome_transform_options=model_config.outcome_transform_options,
            dataset=dataset,
            search_space_digest=search_space_digest,
        )
    return inputs


def _kernel(
    kernel_class: type[Kernel],
    model_config: ModelConfig,
    dataset: SupervisedDataset,
    botorch_model_class: type[Model],
) -> Kernel:
    r"""The ``ModelConfig``'s kernel; Ax's own kernels get one lengthscale per input
    and no batch shape unless the options say otherwise (single-task, unbatched
    models, as Ax does for ``SingleTaskGP``)."""
    options = deepcopy(model_config.covar_module_options)
    if issubclass(kernel_class, AX_SHAPED_KERNELS):
        options.setdefault("ard_num_dims", dataset.X.shape[-1])
        options.setdefault("batch_shape", torch.Size([]))
    kernel_kwargs = covar_module_argparse(
        kernel_class,
        dataset=dataset,
        botorch_model_class=botorch_model_class,
        **options,
    )
    return kernel_class(**kernel_kwargs)


def _own_bound_or(
    mll_class: type[MarginalLogLikelihood] | None,
    own_bound: type[MarginalLogLikelihood],
) -> type[MarginalLogLikelihood]:
    r"""Ax fills ``ExactMarginalLogLikelihood`` in when no ``mll_class`` is given;
    sparse models use their own collapsed bound instead."""
    if mll_class is None or mll_class is ExactMarginalLogLikelihood:
        return own_bound
    return mll_class


def fit_nystrom_gp(
    model: NystromGP,
    mll_class: type[MarginalLogLikelihood] | None = None,
    mll_options: dict[str, Any] | None = None,
) -> None:
    r"""Fit a ``NystromGP`` from Ax: ``fit_gpytorch_mll`` on its collapsed bound with
    the hyperparameters' log priors (``NystromMarginalLogLikelihood``: MAP, as Ax fits
    ``SingleTaskGP``; another non-default ``mll_class`` is used as given), then one
    ridge-leverage-score resampling of the dictionary with the fitted
    hyperparameters (global random state: Ax's ``Client(random_seed=...)`` makes it
    reproducible).

    Args:
        model: The model Ax constructed.
        mll_class: ``ModelConfig.mll_class`` (Ax's default means "the model's own").
        mll_options: ``ModelConfig.mll_options``.

    Example:
        >>> fit_nystrom_gp(model)
    """
    mll_class = _own_bound_or(mll_class, NystromMarginalLogLikelihood)
    mll = mll_class(likelihood=model.likelihood, model=model, **(mll_options or {}))
    fit_gpytorch_mll(mll)
    model.resparsify()
    model.eval()


def fit_decomposed_sampling_svgp(
    model: DecomposedSamplingSVGP,
    mll_class: type[MarginalLogLikelihood] | None = None,
    mll_options: dict[str, Any] | None = None,
) -> None:
    r"""Fit a ``DecomposedSamplingSVGP`` from Ax: ``fit_gpytorch_mll`` on its
    collapsed Titsias bound (unless another non-default ``mll_class`` is given); the
    inducing points and ``q(u)`` follow the fitted hyperparameters on the next
    prediction.

    Args:
        model: The model Ax constructed.
        mll_class: ``ModelConfig.mll_class`` (Ax's default means "the model's own").
        mll_options: ``ModelConfig.mll_options``.

    Example:
        >>> fit_decomposed_sampling_svgp(model)
    """
    mll_class = _own_bound_or(mll_class, CollapsedTitsiasBound)
    options = mll_options or {}
    if mll_class is CollapsedTitsiasBound:
        mll = CollapsedTitsiasBound(model, **options)
    else:
        mll = mll_class(likelihood=model.likelihood, model=model, **options)
    fit_gpytorch_mll(mll)
    model.eval()


# ------------------------------------------------------------------ acquisitions
def _reject_outcome_constraints(
    constraints_tuple: tuple[Tensor, Tensor] | None, acqf_name: str
) -> None:
    if constraints_tuple is not None:
        raise ValueError(
            f"{acqf_name} optimizes a single objective; Ax passed outcome "
            "constraints, which it cannot honour. Remove them from the "
            "optimization config or use a constrained BoTorch acquisition."
        )


def construct_inputs_bkb_ucb(
    model: Model,
    posterior_transform: PosteriorTransform | None = None,
    radius: float | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
    constraints_tuple: tuple[Tensor, Tensor] | None = None,
    residual_update: bool = True,
) -> dict[str, Any]:
    r"""Keyword arguments of ``BKBUpperConfidenceBound`` (BoTorch/Ax registry).

    Pending points (Ax's running trials and the batch so far) go to ``X_pending``:
    BBKB's hallucinated variance update, by default with the pending points added to
    the hallucinated dictionary (``residual_update``), so parallel arms spread out.

    Args:
        model: A ``NystromGP``.
        posterior_transform: Ax's scalarization (sign of the objective).
        radius: The papers'-scale radius ``beta~ >= 0``; the index is
            ``mu + (radius / sqrt(lambda)) sigma``. None:
            ``radius = AX_BAYES_RADIUS sqrt(lambda)`` for the model's (fitted)
            ``lambda``, i.e. ``mu + sqrt(0.2) sigma`` whatever ``lambda`` is.
        maximize: Passed through.
        X_pending: ``p x d`` pending points.
        constraints_tuple: Outcome constraints: not supported (raises).
        residual_update: See ``BKBUpperConfidenceBound``.

    Returns:
        The constructor's keyword arguments.

    Example:
        >>> get_acqf_input_constructor(BKBUpperConfidenceBound)(model=model)
    """
    _reject_outcome_constraints(constraints_tuple, "BKBUpperConfidenceBound")
    if not isinstance(model, NystromGP):
        raise TypeError(
            "BKBUpperConfidenceBound needs a single NystromGP (one objective, no "
            f"tracked or constrained outcomes), got {type(model).__name__}."
        )
    if radius is None:
        radius = default_bkb_radius(model)
    return {
        "model": model,
        "radius": radius,
        "posterior_transform": posterior_transform,
        "maximize": maximize,
        "X_pending": X_pending,
        "residual_update": residual_update,
    }


def construct_inputs_scaled_path_ts(
    model: Model,
    training_data: SupervisedDataset | None = None,
    posterior_transform: PosteriorTransform | None = None,
    num_features: int = 1024,
    alpha: float | Callable[[int], float] = 1.0,
    generator: torch.Generator | None = None,
    paths_per_basis: int | None = None,
    X_pending: Tensor | None = None,
    constraints_tuple: tuple[Tensor, Tensor] | None = None,
) -> dict[str, Any]:
    r"""Keyword arguments of ``ScaledPathThompsonSampling`` from Ax (BoTorch/Ax
    registry): one path (``q = 1``: Ax builds batches one arm at a time, each with a
    fresh path); Ax's scalarization and the pending points are passed on.

    Args:
        model: A model supported by ``draw_scaled_paths``.
        training_data: Used to evaluate an ``alpha`` schedule at ``t = n + 1``
            for ``n`` observations.
        posterior_transform: Ax's single-output scalarization.
        num_features: Random Fourier features per path.
        alpha: Exploration scale or a schedule ``t -> alpha_t``.
        generator: Random number generator.
        paths_per_basis: See ``draw_scaled_paths``.
        X_pending: Pending points (stored; each new arm gets a fresh path).
        constraints_tuple: Outcome constraints: not supported (raises).

    Returns:
        The constructor's keyword arguments.
    """
    _reject_outcome_constraints(constraints_tuple, "ScaledPathThompsonSampling")
    if callable(alpha):
        if training_data is None:
            raise ValueError("An `alpha` schedule needs `training_data`.")
        alpha = resolve_alpha(alpha, training_data.X.shape[-2] + 1)
    return {
        "model": model,
        "posterior_transform": posterior_transform,
        "X_pending": X_pending,
        "num_features": num_features,
        "alpha": alpha,
        "generator": generator,
        "paths_per_basis": paths_per_basis,
    }


# ----------------------------------------------------------------- registration
submodel_input_constructor.register(NystromGP)(_sketch_model_inputs)
submodel_input_constructor.register(DecomposedSamplingSVGP)(_sketch_model_inputs)
fit_botorch_model.register(NystromGP)(fit_nystrom_gp)
fit_botorch_model.register(DecomposedSamplingSVGP)(fit_decomposed_sampling_svgp)
acqf_input_constructor(BKBUpperConfidenceBound)(construct_inputs_bkb_ucb)
acqf_input_constructor(ScaledPathThompsonSampling)(construct_inputs_scaled_path_ts)
for _model_class in (NystromGP, DecomposedSamplingSVGP):
    register_model(_model_class)
for _mll_class in (NystromMarginalLogLikelihood, CollapsedTitsiasBound):
    register_mll(_mll_class)
for _acqf_class in (
    BKBUpperConfidenceBound,
    ScaledPathThompsonSampling,
):
    register_acquisition_function(_acqf_class)
