r"""Decomposed-sampling SVGP: the model behind S-GP-TS (Vakili et al., NeurIPS 2021).

:class:`DecomposedSamplingSVGP` is a BoTorch ``SingleTaskVariationalGP`` (whitened
``VariationalStrategy``) that is never trained by SGD:

- inducing points ``Z`` (at most ``m``) are re-selected from the observed points at
  every update by conditional-variance selection
  (:mod:`botorch_sketch.models.inducing`);
- ``q(u)`` is the optimum of Titsias' bound in closed form
  (:meth:`botorch_sketch.models.dtc.DTCState.whitened_q`);
- kernel, mean and noise hyperparameters are fitted with ``fit_gpytorch_mll`` on the
  collapsed bound (:class:`CollapsedTitsiasBound`), ``O(n m^2)`` per evaluation; the
  next prediction re-selects ``Z`` and recomputes ``q(u)`` for the new values.

Its posterior is the Titsias/DTC predictive. Posterior sample paths, optionally with
exploration scaling ``f~ = mu + alpha (f - mu)``, come from
:func:`botorch_sketch.sampling.pathwise.draw_scaled_paths`.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.warnings import UserInputWarning
from botorch.models import SingleTaskVariationalGP
from botorch.models.gpytorch import BatchedMultiOutputGPyTorchModel
from botorch.models.model import FantasizeMixin
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
    get_gaussian_likelihood_with_lognormal_prior,
)
from botorch.models.utils.inducing_point_allocators import (
    ExpectedImprovementQualityFunction,
)
from botorch.posteriors import Posterior
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import Kernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ConstantMean, Mean
from gpytorch.mlls import MarginalLogLikelihood
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    VariationalStrategy,
    _VariationalDistribution,
)
from linear_operator.operators import CholLinearOperator, TriangularLinearOperator
from linear_operator.utils.errors import NanError, NotPSDError
from torch import Tensor
from torch.nn import Module

from botorch_sketch.models.dtc import (
    DTCState,
    append_observations,
    append_outputs,
    collapsed_log_likelihood,
    dictionary_cholesky,
)
from botorch_sketch.models.inducing import select_inducing_indices
from botorch_sketch.models.multi_output import multi_output_posterior, output_rows
from botorch_sketch.utils.validation import (
    MIN_NOISE,
    check_at_least,
    check_bool,
    check_generator,
    check_int,
    check_kernel,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_observations,
    check_output_indices,
    check_points,
    check_same_dtype,
    fitted_outcome_transform,
)

#: SingleTaskVariationalGP warns that learnable transforms drift under minibatch
#: training; this model always works on the full data set, so the warning is moot.
_MINIBATCH_TRANSFORM_WARNING = r"Using an (input|outcome) transform with"


class DecomposedSamplingSVGP(SingleTaskVariationalGP, FantasizeMixin):
    r"""Sparse variational GP with data-selected inducing points and closed-form q(u).

    At construction and at every :meth:`update`, the inducing points are re-selected
    from the (transformed) observed inputs by greedy or randomized conditional-variance
    selection (``m_t <= num_inducing``; fewer when the data hold fewer distinct points)
    and the whitened ``q(u)`` is set to Titsias' optimum. :meth:`posterior` is then the
    Titsias/DTC predictive

        mean(x) = m(x) + K_xZ (noise K_ZZ + K_ZX K_XZ)^{-1} K_ZX (y - m(X)),
        var(x)  = k(x, x) - Q_xx + K_xZ (K_ZZ + K_ZX K_XZ / noise)^{-1} K_Zx,

    (with GPyTorch's jitter on ``K_ZZ``). With ``m_t = n`` distinct points it is the
    exact GP posterior. Whenever the kernel, mean or likelihood parameters change
    (e.g. after ``fit_gpytorch_mll(CollapsedTitsiasBound(model))``), the next call to
    :meth:`posterior` or a path draw re-selects ``Z`` and recomputes ``q(u)``.

    ``state_dict()`` holds the hyperparameters and transforms only (``Z`` and ``q(u)``
    are functions of the data), so it loads into a model on any data set.

    A ``n x o`` ``train_Y`` gives ``o`` independent outputs sharing the inputs, the
    kernel and the noise, and so the inducing points (conditional-variance
    selection does not look at the targets): ``V`` is factorized once and ``q(u)``
    has an ``o x m`` mean and one shared covariance; the prior mean is per output
    (BoTorch's default ``ConstantMean(batch_shape=[o])``). Posteriors are ``batch x
    q x o`` (BoTorch's batched multi-output convention, as ``SingleTaskGP``'s).

    The model is not batched (``train_X`` is ``n x d``). ``update`` is equivalent to
    building a new model on all observations with the current hyperparameters: the
    input and outcome transforms are re-fitted on all data.

    Example:
        >>> model = DecomposedSamplingSVGP(train_X, train_Y, num_inducing=100,
        ...                                outcome_transform=Standardize(m=1))
        >>> fit_gpytorch_mll(CollapsedTitsiasBound(model))
        >>> model.update(new_X, new_Y)
        >>> paths = draw_scaled_paths(model, 16, num_features=1024, alpha=1.0)
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        num_inducing: int = 100,
        *,
        covar_module: Kernel | None = None,
        mean_module: Mean | None = None,
        likelihood: GaussianLikelihood | None = None,
        noise: float | None = None,
        randomized_selection: bool = False,
        inducing_quality: str = "variance",
        generator: torch.Generator | None = None,
        outcome_transform: OutcomeTransform | None = None,
        input_transform: InputTransform | None = None,
    ) -> None:
        r"""
        Args:
            train_X: ``n x d`` training inputs.
            train_Y: ``n x o`` training targets (``o >= 1`` outputs).
            num_inducing: Maximal number ``m`` of inducing points.
            covar_module: Kernel; default BoTorch's RBF kernel with dimension-scaled
                lengthscale prior (one, shared by all outputs).
            mean_module: Prior mean; default ``ConstantMean`` (one constant per
                output).
            likelihood: A ``GaussianLikelihood``; default BoTorch's (LogNormal prior on
                the noise), or an unconstrained one if ``noise`` is given.
            noise: Fixed observation noise variance ``>= 1e-12`` in the
                units of ``train_Y`` (converted by the outcome transform); None to
                learn it. With ``o > 1`` outputs it is the one noise variance the
                outputs share, in the units the model sees (after the outcome
                transform), as ``NystromGP``'s ``noise``.
            randomized_selection: Draw inducing points with probability proportional
                to their conditional variance instead of greedily.
            inducing_quality: ``"variance"``: pure conditional-variance selection
                (Burt et al.); ``"improvement"``: weight each point by its expected
                improvement (for maximization) under the model before the update, or
                at construction under the conditional-variance model of the same data
                (quality-diversity DPP of Moss et al., AISTATS 2023, via BoTorch's
                ``ExpectedImprovementQualityFunction``), which keeps inducing points
                where the search concentrates; regions left without inducing points
                revert to the prior mean and variance. Single output only.
            generator: Random number generator of the randomized selection.
            outcome_transform: E.g. ``Standardize(m=o)``, re-fitted at each update.
            input_transform: E.g. ``Normalize(d)``, re-fitted at each update.
        """
        _check_data(train_X, train_Y, "train_X", "train_Y")
        check_int(num_inducing, "num_inducing", 1)
        if covar_module is not None:
            check_kernel(covar_module, "covar_module")
        if likelihood is not None and not isinstance(likelihood, GaussianLikelihood):
            raise TypeError(
                "`likelihood` must be a GaussianLikelihood (closed-form q(u))."
            )
        if noise is not None:
            noise = check_at_least(noise, "noise", MIN_NOISE)
            if likelihood is None:
                likelihood = GaussianLikelihood(noise_constraint=GreaterThan(0.0))
        check_bool(randomized_selection, "randomized_selection")
        if inducing_quality not in ("variance", "improvement"):
            raise ValueError(
                "`inducing_quality` must be 'variance' or 'improvement', got "
                f"{inducing_quality!r}."
            )
        check_generator(generator)
        num_outputs = train_Y.shape[-1]
        if num_outputs > 1:
            if inducing_quality != "variance":
                raise ValueError(
                    "`inducing_quality`: 'improvement' needs a single output (the "
                    f"expected improvement of which of {num_outputs}?)."
                )
            # shared kernel and noise (BoTorch's defaults would be per output)
            if covar_module is None:
                covar_module = get_covar_module_with_dim_scaled_prior(
                    ard_num_dims=train_X.shape[-1]
                ).to(train_X)
            if likelihood is None:
                likelihood = get_gaussian_likelihood_with_lognormal_prior().to(train_X)
        if outcome_transform is not None:
            # BoTorch's constructor below fits the transform: reject bad targets first.
            fitted_outcome_transform(outcome_transform, train_Y, "train_Y", fit=True)
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=_MINIBATCH_TRANSFORM_WARNING,
                category=UserInputWarning,
            )
            super().__init__(
                train_X,
                train_Y,
                likelihood=likelihood,
                covar_module=covar_module,
                mean_module=mean_module,
                learn_inducing_points=False,
                inducing_points=train_X[:1].clone(),  # placeholder, replaced below
                outcome_transform=outcome_transform,
                input_transform=input_transform,
            )
        self.num_inducing = num_inducing
        self.randomized_selection = randomized_selection
        self.inducing_quality = inducing_quality
        self._quality: Tensor | None = None  # weights of the current data, if any
        self._generator = generator
        self._noise = noise
        if noise is not None:
            if num_outputs > 1:  # in the model's units (see `noise`)
                self.likelihood.noise = torch.tensor(
                    noise, dtype=train_X.dtype, device=train_X.device
                )
            self.likelihood.raw_noise.requires_grad_(False)
        self.register_state_dict_post_hook(_drop_data_state)
        self.register_load_state_dict_pre_hook(_keep_data_state)
        self._set_data(train_X, train_Y)
        if inducing_quality == "improvement":
            # No model before this one: weight by the conditional-variance model's EI.
            self._set_data(
                train_X, train_Y, quality=self._expected_improvement(train_X)
            )

    @property
    def inducing_points(self) -> Tensor:
        r"""The current ``m_t x d`` inducing points (transformed input space)."""
        return self.model.variational_strategy.inducing_points

    @property
    def train_X(self) -> Tensor:
        r"""All ``n x d`` observed inputs (untransformed)."""
        return self._train_X

    @property
    def train_Y(self) -> Tensor:
        r"""All ``n x o`` observed targets (untransformed)."""
        return self._train_Y

    #: BoTorch's batched multi-output noise (the shared Gaussian likelihood's).
    _apply_noise = BatchedMultiOutputGPyTorchModel._apply_noise

    def update(self, X: Tensor, Y: Tensor) -> None:
        r"""Append observations, re-select the inducing points and recompute ``q(u)``.

        Cost ``O(n m^2)`` (selection and ``q(u)``), memory ``O(n m)``.

        Atomic: inputs or targets that give no finite posterior (e.g. targets that
        overflow the outcome transform) raise ``ValueError`` and change nothing.

        Args:
            X: ``b x d`` new inputs (same dtype and device as the training data).
            Y: ``b x o`` new targets.
        """
        self._unbatched_inputs("`update`")
        _check_data(X, Y, "X", "Y", like=self._train_X, num_outputs=self.num_outputs)
        X_all = torch.cat([self._train_X, X])
        quality = None
        if self.inducing_quality == "improvement":
            quality = self._expected_improvement(X_all)
        self._set_data(X_all, torch.cat([self._train_Y, Y]), quality=quality)

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        keep_transforms: bool = True,
        assign: bool = False,
    ) -> Any:
        r"""Load hyperparameters (and transforms) fitted on any data set.

        The state dict holds no data-derived state (``Z`` and ``q(u)`` are left out),
        so one saved from a model on ``n`` points loads into a model on fewer, as
        Ax's cross-validation does. This model's data are then re-transformed and
        ``Z`` and ``q(u)`` recomputed.

        Args:
            state_dict: As returned by ``state_dict()`` (no keys of the variational
                strategy).
            strict: Enforce that the keys match.
            keep_transforms: If True, apply the loaded input and outcome transforms to
                this model's data as they are; if False, re-fit them on this data.
            assign: See ``torch.nn.Module.load_state_dict``.
        """
        previous = copy.deepcopy(self.state_dict())
        result = Module.load_state_dict(self, state_dict, strict=strict, assign=assign)
        try:
            self._set_data(
                self._train_X,
                self._train_Y,
                fit_transforms=not keep_transforms,
                quality=self._quality,
            )
        except Exception:
            Module.load_state_dict(self, previous)  # all or nothing
            raise
        return result

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool = False,
        posterior_transform: PosteriorTransform | None = None,
    ) -> Posterior:
        r"""Titsias/DTC posterior at ``X`` (``batch_shape x q x d``) over ``batch_shape
        x q x o`` outputs (``o = len(output_indices)``, default all); see the class."""
        check_model_dtype(X, "X")
        check_points(X, "X", self._train_X.shape[-1])
        check_magnitude(self.transform_inputs(X), "X")
        self._ensure_current()
        if output_indices is not None:
            output_indices = check_output_indices(
                output_indices, self.num_outputs, "output_indices"
            )
        if self.num_outputs > 1:
            return multi_output_posterior(
                self, X, output_indices, observation_noise, posterior_transform
            )
        output_indices = None  # [0]: the only output
        return super().posterior(
            X,
            output_indices=output_indices,
            observation_noise=observation_noise,
            posterior_transform=posterior_transform,
        )

    def subset_output(self, idcs: list[int]) -> DecomposedSamplingSVGP:
        r"""The model of the outputs ``idcs`` (a list of distinct indices).

        A single-output model returns itself for ``[0]`` (as ``ModelListGP``
        returns a member). Otherwise a copy keeps the rows of ``idcs`` of the
        targets, of a per-output ``ConstantMean`` and of ``q(u)``'s mean (and the
        outcome transform's statistics, through its ``subset_output``); ``Z`` and
        ``V`` are shared by all outputs and kept. Bad indices raise ``TypeError`` /
        ``ValueError`` naming ``idcs``; a per-output prior mean other than
        ``ConstantMean`` raises ``NotImplementedError``.
        """
        indices = check_output_indices(idcs, self.num_outputs)
        if self.num_outputs == 1:
            return self
        self._ensure_current()
        strategy = self.model.variational_strategy
        self.model.variational_strategy = None  # its caches may hold graphs
        try:
            model = copy.deepcopy(self)
        finally:
            self.model.variational_strategy = strategy
        model._keep_outputs(indices)
        return model

    def _keep_outputs(self, indices: list[int]) -> None:
        r"""Keep the outputs ``indices`` (checked) of this copy, in place."""
        rows, keep = partial(output_rows, indices), len(indices) > 1
        inner, state = self.model, self._dtc_state
        mean = inner.mean_module
        if mean.batch_shape[-1:] == torch.Size([self.num_outputs]):
            if not isinstance(mean, ConstantMean):
                raise NotImplementedError(
                    "`subset_output` subsets a per-output ConstantMean only, got "
                    f"{type(mean).__name__}."
                )
            constant = mean.raw_constant.data
            picked = constant[..., indices] if keep else constant[..., indices[0]]
            mean.raw_constant.data = picked
            mean.batch_shape = picked.shape
        gram, chol_gram = state.gram, state.chol_gram
        if not keep and gram.dim() > 2:  # drop V's size-one output dimension
            gram, chol_gram = gram.squeeze(-3), chol_gram.squeeze(-3)
        state = replace(
            state,
            gram=gram,
            chol_gram=chol_gram,
            projected_targets=rows(state.projected_targets),
            weights=rows(state.weights),
        )
        self._num_outputs = self._desired_num_outputs = len(indices)
        if not keep:  # a fixed noise stays in the model's units, as it was
            self._noise = None
        self._train_Y = self._train_Y[..., indices]
        inner.train_targets = rows(inner.train_targets)
        if hasattr(self, "outcome_transform"):
            self.outcome_transform = self.outcome_transform.subset_output(indices)
        mean_w, chol_w = state.whitened_q()
        Z = state.dictionary
        distribution = FixedVariationalDistribution(mean_w.to(Z), chol_w.to(Z))
        self._commit_strategy(self._strategy(Z, distribution), state)

    def condition_on_observations(
        self, X: Tensor, Y: Tensor, noise: Tensor | None = None, **kwargs: Any
    ) -> DecomposedSamplingSVGP:
        r"""A copy conditioned on ``(X, Y)`` with ``Z`` and the transforms fixed.

        Titsias' ``q(u)`` depends on the data only through ``V = Z_X^T Z_X +
        lambda I`` and ``Z_X^T (y - m(X))`` (:class:`DTCState`), so the copy's
        ``q(u)`` is the exact optimum on all observations for the fixed ``Z``,
        ``O(n' m^2 + m^3)`` per batch. Batch dimensions of ``Y`` (fantasies) and
        ``X`` broadcast into the copy's ``batch_shape``, as for ``SingleTaskGP``;
        ``V`` is stored once per batch of ``X``, not per fantasy. A batched copy
        keeps ``Z``: it has no :meth:`update` and no refresh after a
        hyperparameter change. :meth:`update` is the unbatched alternative that
        re-selects ``Z`` and re-fits the transforms.

        Args:
            X: ``batch x n' x d`` new inputs (original input space).
            Y: ``batch' x n' x o`` new targets (original outcome space).
            noise: Heteroskedastic observation noise, not supported (None).
            kwargs: Ignored (BoTorch's ``fantasize`` passes its options through).

        Returns:
            The conditioned model.
        """
        if noise is not None:
            raise ValueError(
                "`noise`: DecomposedSamplingSVGP has one homoskedastic noise level; "
                "per-observation noise is not supported."
            )
        check_observations(
            X, Y, self._train_X.shape[-1], self._train_X, self.num_outputs
        )
        self._ensure_current()
        # differentiable in X and Y, as BoTorch's fantasies are
        X_t = self.transform_inputs(X)
        check_magnitude(X_t, "X")
        Y_t = Y
        if hasattr(self, "outcome_transform"):
            _, Y_t, _ = fitted_outcome_transform(
                self.outcome_transform, Y, "Y", fit=False, X=X_t
            )
        if self.num_outputs > 1:  # outputs as a batch dimension, V shared
            X_t, y_t = X_t.unsqueeze(-3), Y_t.mT
        else:
            y_t = Y_t.squeeze(-1)
        residual = y_t - self.model.mean_module(X_t)
        try:
            state = self._dtc_state.updated(self.model.covar_module, X_t, residual)
        except (torch.linalg.LinAlgError, NanError, NotPSDError) as error:
            message = f"`X` gives no factorizable posterior: {error}"
            raise ValueError(message) from error
        if not torch.isfinite(state.weights).all():
            raise ValueError("`Y` gives a non-finite q(u); standardize the targets.")
        # the copy gets a new strategy: the old one's caches may hold graphs
        strategy = self.model.variational_strategy
        self.model.variational_strategy = None
        try:
            model = copy.deepcopy(self)
        finally:
            self.model.variational_strategy = strategy
        if self.num_outputs > 1:
            X_t = X_t.squeeze(-3)
        model._condition(X, Y, X_t, y_t, state)
        return model

    def _condition(
        self, X: Tensor, Y: Tensor, X_t: Tensor, y_t: Tensor, state: DTCState
    ) -> None:
        r"""Append the checked observations (transformed targets ``y_t``: ``batch
        x n'``, or ``batch x o x n'``) and set ``q(u)`` from ``state``."""
        if self.num_outputs == 1:
            self._train_X, train_Y = append_observations(
                self._train_X, self._train_Y.squeeze(-1), X, Y.squeeze(-1)
            )
            self._train_Y = train_Y.unsqueeze(-1)
            train_X_t, self.model.train_targets = append_observations(
                self.model.train_inputs[0], self.model.train_targets, X_t, y_t
            )
        else:
            self._train_X, train_Y = append_outputs(
                self._train_X, self._train_Y.mT, X, Y.mT
            )
            self._train_Y = train_Y.mT
            train_X_t, self.model.train_targets = append_outputs(
                self.model.train_inputs[0], self.model.train_targets, X_t, y_t
            )
        self.model.train_inputs = [train_X_t]
        self._input_batch_shape = self._train_Y.shape[:-2]
        mean_w, chol_w = state.whitened_q()
        Z = state.dictionary
        distribution = FixedVariationalDistribution(mean_w.to(Z), chol_w.to(Z))
        self._commit_strategy(self._strategy(Z, distribution), state)

    @torch.no_grad()
    def _expected_improvement(self, X: Tensor) -> Tensor:
        r"""Expected improvement of the ``n x d`` points ``X`` under the current
        model (the inducing quality weights), ``O(n m^2)``."""
        quality = ExpectedImprovementQualityFunction(self, maximize=True)(X)
        return quality.reshape(X.shape[:-1])  # BoTorch squeezes a single point

    def _set_data(
        self,
        X: Tensor,
        Y: Tensor,
        fit_transforms: bool = True,
        quality: Tensor | None = None,
    ) -> None:
        r"""Store all data, transform it (re-fitting the transforms unless
        ``fit_transforms`` is False), refresh ``Z`` and ``q(u)``.

        Everything is computed on copies of the transforms first; nothing is
        changed unless it all succeeds (``ValueError`` otherwise).
        """
        updating = hasattr(self, "_train_X")
        x_name, y_name = ("X", "Y") if updating else ("train_X", "train_Y")
        with torch.no_grad():
            X_t = X
            input_transform = getattr(self, "input_transform", None)
            if input_transform is not None:
                input_transform = copy.deepcopy(input_transform)
                input_transform.train(fit_transforms)
                X_t = input_transform(X)
                input_transform.eval()
            check_magnitude(X_t, x_name)
            Y_var = None
            if self._noise is not None and self.num_outputs == 1:
                Y_var = torch.full_like(Y, self._noise)
            Y_t = Y
            outcome_transform = getattr(self, "outcome_transform", None)
            if outcome_transform is not None:
                outcome_transform, Y_t, Y_var = fitted_outcome_transform(
                    outcome_transform, Y, y_name, fit=fit_transforms, Yvar=Y_var, X=X_t
                )
            noise = self.likelihood.noise if Y_var is None else Y_var.mean()
            if not (torch.isfinite(noise).all() and (noise > 0).all()):
                raise ValueError(
                    f"`{y_name}`: the outcome transform turns the noise variance "
                    f"into {noise.tolist()}."
                )
            strategy, state = self._fitted_strategy(
                X_t, Y_t.mT.squeeze(-2), noise, quality
            )
        # Commit: nothing below can fail.
        if input_transform is not None:
            self.input_transform = input_transform
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform
        if Y_var is not None:
            self.likelihood.noise = noise
        self._quality = quality
        self._train_X = X
        self._train_Y = Y
        self.model.train_inputs = [X_t]
        self.model.train_targets = Y_t.mT.squeeze(-2)  # n, or o x n for o > 1
        self._commit_strategy(strategy, state)

    def _hyperparameters(self) -> list[Tensor]:
        modules = (self.model.covar_module, self.model.mean_module, self.likelihood)
        return [p for module in modules for p in module.parameters()]

    def _ensure_current(self) -> None:
        r"""Refresh ``Z`` and ``q(u)`` if a hyperparameter changed since last time."""
        current = self._hyperparameters()
        stale = len(current) != len(self._snapshot) or any(
            a.dtype != b.dtype or a.device != b.device or not torch.equal(a, b)
            for a, b in zip(current, self._snapshot, strict=True)
        )
        if stale:
            self._refresh()

    def _refresh(self) -> None:
        r"""Re-select ``Z`` and recompute ``q(u)`` for the current hyperparameters."""
        (X,) = self._unbatched_inputs("a hyperparameter change")
        with torch.no_grad():
            strategy, state = self._fitted_strategy(
                X, self.model.train_targets, self.likelihood.noise, self._quality
            )
        self._commit_strategy(strategy, state)

    def _commit_strategy(self, strategy: VariationalStrategy, state: DTCState) -> None:
        self.eval()
        self.model.variational_strategy = strategy
        self._dtc_state = state
        self._snapshot = [p.detach().clone() for p in self._hyperparameters()]

    def _unbatched_inputs(self, caller: str) -> tuple[Tensor]:
        r"""The transformed training inputs; ``ValueError`` for a batched (e.g.
        fantasy) model, whose inducing points stay fixed."""
        (X,) = self.model.train_inputs
        if X.dim() != 2:
            raise ValueError(
                f"{caller} needs an unbatched model: a batched (fantasy) model keeps "
                "its inducing points; condition the unbatched model instead."
            )
        return (X,)

    def _fitted_strategy(
        self, X: Tensor, y: Tensor, noise: Tensor, quality: Tensor | None
    ) -> tuple[VariationalStrategy, DTCState]:
        r"""A new strategy on transformed ``n x d`` inputs and ``n`` (``o x n``)
        targets: ``Z``
        selected with the current kernel, ``q(u)`` set to its optimum; with the DTC
        state it comes from (targets minus the prior mean).

        The strategy is put in eval mode *before* its Cholesky factor of
        ``K_ZZ + jitter I`` is cached (GPyTorch clears caches on the train -> eval
        switch), and the variational parameters are marked initialized (else GPyTorch
        resets ``q(u)`` to the prior). Raises ``ValueError`` (nothing changed) when
        the factorizations fail or ``q(u)`` is not finite.
        """
        kernel = self.model.covar_module
        try:
            self.model.eval()
            index = select_inducing_indices(
                X,
                kernel,
                self.num_inducing,
                randomized=self.randomized_selection,
                generator=self._generator,
                quality=quality,
            )
            Z = X[index]
            if y.dim() == 1:
                distribution = CholeskyVariationalDistribution(Z.shape[-2]).to(Z)
            else:  # an o x m mean, one shared factor
                m = Z.shape[-2]
                distribution = FixedVariationalDistribution(
                    Z.new_zeros(y.shape[0], m), torch.eye(m).to(Z)
                )
            strategy = self._strategy(Z, distribution)
            chol = strategy._cholesky_factor(kernel(Z).add_jitter(strategy.jitter_val))
            residual = y - self.model.mean_module(X)
            state = DTCState.build(
                kernel, Z, X, residual, noise, chol_dictionary=chol.to_dense()
            )
            mean_w, chol_w = state.whitened_q()
        except (torch.linalg.LinAlgError, NanError, NotPSDError) as error:
            raise ValueError(
                "`X` and `Y` (with the current hyperparameters) give no factorizable "
                f"posterior: {error}"
            ) from error
        if not (torch.isfinite(mean_w).all() and torch.isfinite(chol_w).all()):
            raise ValueError(
                "`Y` gives a non-finite q(u) (targets too large for the noise level; "
                "standardize them, e.g. outcome_transform=Standardize(m=1))."
            )
        if y.dim() == 1:
            distribution.variational_mean.copy_(mean_w)
            distribution.chol_variational_covar.copy_(chol_w)
        else:
            distribution.mean.copy_(mean_w)
            distribution.scale_tril.copy_(chol_w)
        distribution.requires_grad_(False)
        return strategy, state

    def _strategy(
        self, Z: Tensor, distribution: _VariationalDistribution
    ) -> VariationalStrategy:
        r"""A whitened strategy on fixed inducing points ``Z`` with ``q(v)`` given by
        ``distribution`` (marked initialized, else GPyTorch resets it to the prior),
        in eval mode."""
        strategy = VariationalStrategy(
            self.model, Z, distribution, learn_inducing_locations=False
        )
        strategy.variational_params_initialized.fill_(1)
        return strategy.eval()


class FixedVariationalDistribution(_VariationalDistribution):
    r"""A fixed whitened ``q(v) = N(m_w, C_w C_w^T)`` (buffers, nothing to learn).

    The mean (``batch' x m``) may carry more batch dimensions than the lower
    factor ``C_w`` (``batch x m x m``): the fantasies of a batch of points share
    ``V`` and so ``C_w``, which is then stored once, not once per fantasy.
    """

    def __init__(self, mean: Tensor, scale_tril: Tensor) -> None:
        r"""
        Args:
            mean: ``batch' x m`` whitened mean ``m_w``.
            scale_tril: ``batch x m x m`` lower factor ``C_w`` (``batch``
                broadcastable to ``batch'``).
        """
        super().__init__(mean.shape[-1], batch_shape=scale_tril.shape[:-2])
        self.register_buffer("mean", mean)
        self.register_buffer("scale_tril", scale_tril)

    @property
    def dtype(self) -> torch.dtype:
        r"""The dtype of ``q(v)`` (GPyTorch's reads a parameter; there is none)."""
        return self.mean.dtype

    @property
    def device(self) -> torch.device:
        r"""The device of ``q(v)``."""
        return self.mean.device

    def forward(self) -> MultivariateNormal:
        r"""``q(v)`` with the factor as a lazy ``C_w C_w^T``, broadcast (a view) to
        the mean's batch, as posteriors and outcome transforms expect."""
        shape = self.mean.shape[:-1] + self.scale_tril.shape[-2:]
        root = TriangularLinearOperator(self.scale_tril.expand(shape))
        return MultivariateNormal(self.mean, CholLinearOperator(root))

    def initialize_variational_distribution(self, prior_dist: Any) -> None:
        r"""Nothing to initialize: ``q(v)`` is given."""


class CollapsedTitsiasBound(MarginalLogLikelihood):
    r"""Titsias' collapsed bound of a :class:`DecomposedSamplingSVGP`, per data point.

    The value is ``(bound + log priors) / n`` for the model's current inducing points
    (:func:`~botorch_sketch.models.dtc.collapsed_log_likelihood`, in float64 with the
    strategy's jitter), in ``O(n m^2)``. BoTorch's ``get_loss_closure`` uses
    :meth:`compute_custom_loss`, so ``fit_gpytorch_mll`` fits the kernel, mean and
    (unless fixed) noise on it; ``q(u)`` is not a free parameter.

    Example:
        >>> mll = CollapsedTitsiasBound(model)
        >>> fit_gpytorch_mll(mll)
        >>> model.posterior(X_test)  # Z and q(u) refreshed for the fitted kernel
    """

    def __init__(self, model: DecomposedSamplingSVGP) -> None:
        r"""
        Args:
            model: The model whose hyperparameters are to be fitted.
        """
        if not isinstance(model, DecomposedSamplingSVGP):
            raise TypeError(
                f"`model` must be a DecomposedSamplingSVGP, got {type(model).__name__}."
            )
        super().__init__(model.likelihood, model.model)
        object.__setattr__(self, "_svgp", model)  # not a submodule: no duplicate state

    def forward(self) -> Tensor:
        r"""Return the bound per data point, log priors included."""
        inner = self._svgp.model
        (X,) = inner.train_inputs
        strategy = inner.variational_strategy
        Z, kernel = strategy.inducing_points, inner.covar_module
        # the strategy's own (absolute) jitter, factorized in float64
        chol = dictionary_cholesky(kernel, Z, strategy.jitter_val, torch.float64)
        bound = collapsed_log_likelihood(
            kernel,
            Z,
            X,
            inner.train_targets - inner.mean_module(X),
            self.likelihood.noise,
            chol_dictionary=chol,
        )
        log_prior = sum(
            prior.log_prob(closure(module)).sum()
            for _, module, prior, closure, _ in self.named_priors()
        )
        return bound + log_prior / X.shape[-2]

    def compute_custom_loss(self, **kwargs) -> Tensor:
        r"""Negative bound per data point (the loss BoTorch minimizes)."""
        return -self.forward()


def _drop_data_state(
    module: DecomposedSamplingSVGP,
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: dict[str, Any],
) -> None:
    r"""State-dict post-hook: drop ``Z`` and ``q(u)``, which are recomputed from the
    data, so the state dict's shapes do not depend on the number of observations."""
    strategy_prefix = prefix + "model.variational_strategy."
    for key in [k for k in state_dict if k.startswith(strategy_prefix)]:
        del state_dict[key]


def _keep_data_state(
    module: DecomposedSamplingSVGP,
    state_dict: dict[str, Any],
    prefix: str,
    *args: Any,
) -> None:
    r"""Load pre-hook: the variational strategy keeps its current ``Z`` and ``q(u)``,
    which :meth:`load_state_dict` then recomputes."""
    strategy_prefix = prefix + "model.variational_strategy."
    strategy = module.model.variational_strategy
    for name, value in strategy.state_dict().items():
        state_dict[strategy_prefix + name] = value


def _check_data(
    X: Tensor,
    Y: Tensor,
    x_name: str,
    y_name: str,
    like: Tensor | None = None,
    num_outputs: int | None = None,
) -> None:
    r"""Check ``n x d`` inputs and ``n x o`` targets of one float dtype (that of
    ``like``, the stored inputs, when given; ``o = num_outputs`` when given)."""
    check_model_dtype(X, x_name)
    check_model_dtype(Y, y_name)
    check_matrix(X, x_name, num_cols=None if like is None else like.shape[-1])
    check_magnitude(X, x_name)
    check_matrix(Y, y_name, num_cols=num_outputs)
    if Y.shape[-1] == 0:
        raise ValueError(f"`{y_name}` must have at least one column (output).")
    check_magnitude(Y, y_name)
    check_same_dtype(Y, y_name, X, x_name)
    if like is not None:
        check_same_dtype(X, x_name, like, "train_X")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"`{x_name}` and `{y_name}` must have the same number of rows, got "
            f"{X.shape[0]} and {Y.shape[0]}."
        )
