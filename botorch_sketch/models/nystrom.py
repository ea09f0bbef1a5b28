r"""``NystromGP``: the BKB model (Calandriello, Carratino, Lazaric, Valko, Rosasco,
COLT 2019), a GP whose posterior is the DTC Nystrom approximation on a dictionary of
inducing points resampled by ridge leverage scores.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.gpytorch import BatchedMultiOutputGPyTorchModel, GPyTorchModel
from botorch.models.model import FantasizeMixin
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.models.utils.gpytorch_modules import (
    get_gaussian_likelihood_with_lognormal_prior,
)
from botorch.posteriors import Posterior
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.mlls import MarginalLogLikelihood
from gpytorch.models import GP
from linear_operator.operators import DenseLinearOperator, DiagLinearOperator
from linear_operator.utils.errors import NanError, NotPSDError
from torch import Tensor

from botorch_sketch.models.dictionary import (
    inclusion_probabilities,
    sample_dictionary,
)
from botorch_sketch.models.dtc import (
    DTCState,
    append_observations,
    append_outputs,
    collapsed_log_likelihood,
    distinct_rows,
)
from botorch_sketch.models.multi_output import multi_output_posterior, output_rows
from botorch_sketch.utils.validation import (
    MIN_NOISE,
    check_at_least,
    check_finite,
    check_generator,
    check_kernel,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_observations,
    check_output_indices,
    check_points,
    check_same_dtype,
    check_tensor,
    fitted_outcome_transform,
)

# Size of the first data prefix used to grow an initial dictionary.
_INITIAL_PREFIX = 64

#: Default dictionary oversampling: the papers use 2, which lost up to a factor 2 in
#: regret against exact GP-UCB in our benchmarks, where 10 matched it
#: (docs/benchmarks.md).
DEFAULT_QBAR = 10.0


def default_covar_module(d: int) -> ScaleKernel:
    r"""NystromGP's default kernel: ``ScaleKernel(RBFKernel(ard_num_dims=d))``."""
    return ScaleKernel(RBFKernel(ard_num_dims=d))


class NystromGP(GPyTorchModel, GP, FantasizeMixin):
    r"""GP with the DTC Nystrom posterior of BKB.

    The posterior at ``x`` uses the embedding ``z(x) = K_SS^{-1/2} k_S(x)`` of a
    dictionary ``S`` (``m x d``) and ``V = Z^T Z + lambda I`` (``m x m``):

    .. math::

        \mu(x) = z(x)^T V^{-1} Z^T y, \qquad
        \Sigma(x, x') = k(x, x') - z(x)^T z(x') + \lambda z(x)^T V^{-1} z(x').

    ``lambda`` is the Gaussian noise variance of the likelihood (the papers'
    regularization). ``posterior()`` returns this Bayesian-scale predictive; the BKB
    papers' variance is ``sigma~^2(x) = Sigma(x, x) / lambda``. With ``S`` equal to all
    distinct training points the posterior is the exact GP posterior (zero prior mean).
    Scoring ``N`` candidates costs ``O(N m^2)``, conditioning on ``n'`` new points
    ``O(n' m^2 + m^3)``, and resparsifying ``O(u m^2 + u m'^2)`` for ``u`` distinct
    observed points.

    A ``n x o`` ``train_Y`` gives ``o`` independent outputs sharing the inputs, the
    kernel, the noise ``lambda`` and so the dictionary (its ridge leverage scores do
    not depend on the targets): ``V`` is factorized once, ``b`` and ``w`` are
    ``o x m``, posteriors ``batch x q x o`` (BoTorch's batched multi-output
    convention, as ``SingleTaskGP``'s, through BoTorch's
    ``BatchedMultiOutputGPyTorchModel.posterior``). Internally the targets are
    ``batch x o x n`` and a batched ``V`` carries a size-one output dimension. The
    class does not derive from ``BatchedMultiOutputGPyTorchModel``: Ax would then
    model several metrics with one such model (one shared kernel) instead of a
    ``ModelListGP`` of independent ones.

    Training data, dictionary and factorizations are plain attributes, not part of
    ``state_dict()`` (as for GPyTorch's exact GPs), so a state dict fits any data set.
    Inputs and dictionary are stored in the transformed input space. After changing
    hyperparameters by hand, call ``model.train()`` then ``model.eval()`` to refresh the
    cached factorizations (``fit_gpytorch_mll`` does this).

    Example:
        >>> train_X = torch.rand(200, 3, dtype=torch.float64)
        >>> train_Y = torch.sin(6 * train_X).sum(-1, keepdim=True)
        >>> model = NystromGP(train_X, train_Y, noise=1e-2)
        >>> posterior = model.posterior(torch.rand(10, 1, 3, dtype=torch.float64))
        >>> model.dictionary_size <= 200
        True
    """

    _num_outputs = 1

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        *,
        covar_module: Kernel | None = None,
        noise: float | None = None,
        dictionary: Tensor | None = None,
        qbar: float = DEFAULT_QBAR,
        input_transform: InputTransform | None = None,
        outcome_transform: OutcomeTransform | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        r"""
        Args:
            train_X: ``n x d`` training inputs (repeated rows are repeated pulls).
            train_Y: ``n x o`` training targets (``o >= 1`` outputs).
            covar_module: Kernel; default ``ScaleKernel(RBFKernel(ard_num_dims=d))``
                (shared by all outputs).
            noise: Fixed regularization / noise variance ``lambda >= 1e-12``; None
                learns it
                (BoTorch's log-normal noise prior) with ``fit_gpytorch_mll``.
            dictionary: Optional ``m x d`` inducing points in the input space of
                ``train_X``; None draws one by ridge-leverage-score sampling.
            qbar: Oversampling factor ``>= 1`` of the leverage-score sampling. The
                default 10 gave regret on par with exact GP-UCB in our benchmarks,
                where the papers' 2 lost up to a factor 2 (docs/benchmarks.md).
            input_transform: Applied to inputs (its parameters are fixed at
                construction, from ``train_X``).
            outcome_transform: Applied to ``train_Y`` (its statistics are fixed at
                construction), e.g. ``Standardize(m=o)``; posteriors are
                untransformed.
            generator: Random number generator for the initial dictionary.
        """
        check_model_dtype(train_X, "train_X")
        check_matrix(train_X, "train_X")
        check_magnitude(train_X, "train_X")
        d = train_X.shape[-1]
        check_finite(train_Y, "train_Y")
        check_magnitude(train_Y, "train_Y")
        if train_Y.dim() != 2 or train_Y.shape[0] != train_X.shape[0]:
            raise ValueError(
                f"`train_Y` must have shape ({train_X.shape[0]}, o) (n x o, n the "
                f"rows of `train_X`, o >= 1 outputs), got {tuple(train_Y.shape)}."
            )
        if train_Y.shape[1] == 0:
            raise ValueError("`train_Y` must have at least one column (output).")
        check_same_dtype(train_Y, "train_Y", train_X, "train_X")
        if covar_module is not None:
            check_kernel(covar_module, "covar_module")
        if noise is not None:
            check_at_least(noise, "noise", MIN_NOISE)
        qbar = check_at_least(qbar, "qbar", 1.0)
        if dictionary is not None:
            check_model_dtype(dictionary, "dictionary")
            check_matrix(dictionary, "dictionary")
            if dictionary.shape[-1] != d:
                raise ValueError(
                    f"`dictionary` must have the {d} columns of `train_X`, got shape "
                    f"{tuple(dictionary.shape)}."
                )
            check_magnitude(dictionary, "dictionary")
            check_same_dtype(dictionary, "dictionary", train_X, "train_X")
        check_generator(generator)
        # Transforms are fitted on copies, so a rejected call leaves the caller's alone.
        if input_transform is not None:
            input_transform = deepcopy(input_transform)
            with torch.no_grad():  # fitted unless the caller put it in eval mode
                train_X = input_transform(train_X)
            input_transform.eval()
            check_magnitude(train_X, "train_X")
            if dictionary is not None:
                dictionary = input_transform(dictionary)
                check_magnitude(dictionary, "dictionary")
        if outcome_transform is not None:
            outcome_transform, train_Y, _ = fitted_outcome_transform(
                outcome_transform, train_Y, "train_Y", fit=None, X=train_X
            )
        super().__init__()
        tkwargs = {"dtype": train_X.dtype, "device": train_X.device}
        if input_transform is not None:
            self.input_transform = input_transform
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform
        self.covar_module = (
            covar_module if covar_module is not None else default_covar_module(d)
        ).to(**tkwargs)
        if noise is None:
            self.likelihood = get_gaussian_likelihood_with_lognormal_prior().to(
                **tkwargs
            )
        else:
            # set the value in the target dtype: a float32 round trip perturbs it
            likelihood = GaussianLikelihood(noise_constraint=GreaterThan(MIN_NOISE))
            likelihood = likelihood.to(**tkwargs)
            likelihood.noise = torch.tensor(noise, **tkwargs)
            likelihood.raw_noise.requires_grad_(False)
            self.likelihood = likelihood
        self.qbar = qbar
        self._num_outputs = train_Y.shape[-1]
        self.train_inputs = (train_X,)
        # one row of targets per output (BoTorch's batched multi-output layout)
        self.train_targets = train_Y.mT.squeeze(-2)  # n, or o x n for o > 1
        self._state: DTCState | None = None
        if dictionary is None:
            self._dictionary = self._initial_dictionary(generator)
            self._set_state(self._checked_state(self._dictionary, "train_X"))
        else:
            self._dictionary = torch.unique(dictionary, dim=0)
            self._set_state(self._checked_state(self._dictionary, "dictionary"))

    # ------------------------------------------------------------------ state
    @property
    def noise(self) -> Tensor:
        r"""The regularization ``lambda`` (the likelihood's noise variance)."""
        return self.likelihood.noise.squeeze()

    @property
    def _input_batch_shape(self) -> torch.Size:
        r"""The batch shape of the inputs (BoTorch's multi-output posterior inserts
        the output dimension after it)."""
        return self.train_inputs[0].shape[:-2]

    #: BoTorch's batched multi-output observation noise (a shared noise level).
    _apply_noise = BatchedMultiOutputGPyTorchModel._apply_noise

    @property
    def dictionary(self) -> Tensor:
        r"""``m x d`` dictionary (inducing points) in the transformed input space."""
        return self._dictionary

    @property
    def dictionary_size(self) -> int:
        r"""Number of dictionary points ``m``."""
        return self._dictionary.shape[0]

    @property
    def dtc_state(self) -> DTCState:
        r"""Cached factorizations of the current posterior (built on first use, and
        rebuilt when a kernel or noise hyperparameter changed since)."""
        if self._state is None or self._hyperparameters_changed():
            with torch.no_grad():
                self._set_state(self._build_state(self._dictionary))
        return self._state

    def _set_state(self, state: DTCState | None) -> None:
        r"""Cache ``state`` with the hyperparameters it was built with."""
        self._state = state
        self._state_hyperparameters = [p.detach().clone() for p in self.parameters()]

    def _hyperparameters_changed(self) -> bool:
        current = list(self.parameters())
        saved = getattr(self, "_state_hyperparameters", [])
        return len(current) != len(saved) or any(
            a.shape != b.shape or not torch.equal(a.detach(), b)
            for a, b in zip(current, saved, strict=True)
        )

    def _checked_state(self, dictionary: Tensor, name: str) -> DTCState:
        r"""The state on ``dictionary``; ``ValueError`` naming ``name`` if it cannot
        be factorized or is not finite (e.g. points so far apart that the kernel's
        squared distances lose all precision)."""
        try:
            with torch.no_grad():
                state = self._build_state(dictionary)
        except (torch.linalg.LinAlgError, NanError, NotPSDError) as error:
            raise ValueError(
                f"`{name}` gives no factorizable posterior (points too far apart or "
                f"too close for the kernel): {error}"
            ) from error
        if not torch.isfinite(state.weights).all():
            raise ValueError(f"`{name}` gives a non-finite posterior mean.")
        return state

    def _build_state(self, dictionary: Tensor) -> DTCState:
        X, y = self.train_inputs[0], self.train_targets
        if X.dim() == 2:
            U, counts, y_sums = distinct_rows(X, y)
            return DTCState.build(
                self.covar_module, dictionary, U, y_sums, self.noise, counts
            )
        return DTCState.build(
            self.covar_module, dictionary, self._with_output_dim(X), y, self.noise
        )

    def _with_output_dim(self, X: Tensor) -> Tensor:
        r"""``batch x n x d`` points as ``batch x 1 x n x d`` for a multi-output
        model (``V`` then broadcasts over the ``o`` target rows), else as given."""
        return X if self._num_outputs == 1 else X.unsqueeze(-3)

    def train(self, mode: bool = True) -> NystromGP:
        r"""Set the training mode; entering it drops the cached factorizations."""
        if mode:
            self._state = None
        return super().train(mode=mode)

    def _set_transformed_inputs(self) -> None:
        r"""Inputs are stored transformed at construction; nothing to do."""

    def _revert_to_original_inputs(self) -> None:
        r"""Inputs are stored transformed at construction; nothing to do."""

    def _apply(self, fn: Any, recurse: bool = True) -> NystromGP:
        super()._apply(fn, recurse)
        self.train_inputs = tuple(fn(t) for t in self.train_inputs)
        self.train_targets = fn(self.train_targets)
        self._dictionary = fn(self._dictionary)
        self._state = None
        return self

    # -------------------------------------------------------------- predictive
    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""DTC posterior at ``batch x q x d`` points (original input space), over
        ``batch x q x o`` outputs (``o`` = ``len(output_indices)``, default all).

        Each point's marginal depends on that point only (see
        :func:`~botorch_sketch.models.dtc.cross_covariance`). Points must be finite
        and within ``finfo.max ** (1/4)`` in magnitude (``ValueError`` naming
        ``X``); non-floating points raise ``TypeError``. Other keyword arguments
        are ignored.
        """
        self._check_points(X, "X")
        self._transformed_points(X, "X")
        if output_indices is not None:
            output_indices = check_output_indices(
                output_indices, self._num_outputs, "output_indices"
            )
        if self._num_outputs == 1:
            return super().posterior(
                X,
                observation_noise=observation_noise,
                posterior_transform=posterior_transform,
            )
        return multi_output_posterior(
            self, X, output_indices, observation_noise, posterior_transform
        )

    def _check_points(self, X: Tensor, name: str) -> Tensor:
        r"""Check finite ``batch x n x d`` points of the model's dtype."""
        check_model_dtype(X, name)
        check_points(X, name, self.train_inputs[0].shape[-1])
        check_magnitude(X, name)
        check_same_dtype(X, name, self.train_inputs[0], "train_X")
        return X

    def _transformed_points(self, X: Tensor, name: str) -> Tensor:
        r"""Checked points (:meth:`_check_points`) in the transformed input space."""
        self.eval()
        X_tf = self.transform_inputs(X)
        check_magnitude(X_tf, name)
        return X_tf

    def forward(self, X: Tensor) -> MultivariateNormal:
        r"""DTC predictive at transformed ``batch x q x d`` inputs (no noise); for
        ``o > 1`` outputs, ``batch x 1 x q x d`` inputs (the output dimension that
        BoTorch's multi-output posterior inserts) give a ``batch x o`` batch of
        ``q``-dimensional normals.

        Single-point t-batches (``q = 1``, how BoTorch scores candidate sets) of an
        unbatched model take the ``O(N m^2)`` marginal path of
        :meth:`DTCState.mean_and_variance`; a batched model (e.g. fantasies, whose
        targets are batched even where ``V`` is not) broadcasts its batch with ``X``'s
        on the joint path."""
        state = self.dtc_state
        if self._num_outputs > 1:
            return self._multi_output_forward(state, X)
        if X.shape[-2] == 1 and self.train_targets.dim() == 1:
            mean, variance = state.mean_and_variance(
                self.covar_module, X.reshape(-1, X.shape[-1])
            )
            shape = X.shape[:-1]
            return MultivariateNormal(
                mean.reshape(shape), DiagLinearOperator(variance.reshape(shape))
            )
        mean, covariance = state.mean_and_covariance(self.covar_module, X)
        # the covariance lacks the batch of targets that V does not depend on
        covariance = covariance.expand(*mean.shape, mean.shape[-1])
        # lazy: factorized on demand with jitter (nearly repeated points are singular)
        return MultivariateNormal(mean, DenseLinearOperator(covariance))

    def _multi_output_forward(self, state: DTCState, X: Tensor) -> MultivariateNormal:
        r""":meth:`forward` of a model with ``o > 1`` outputs at ``batch x 1 x q x
        d`` inputs: mean ``batch x o x q``, covariance shared by the outputs."""
        o = self._num_outputs
        if X.shape[-2] == 1 and X.shape[-3] == 1 and self.train_inputs[0].dim() == 2:
            mean, variance = state.mean_and_variance(
                self.covar_module, X.reshape(-1, X.shape[-1])
            )  # o x N and N
            batch = X.shape[:-3]
            mean = mean.mT.reshape(*batch, o, 1)
            variance = variance.reshape(*batch, 1, 1).expand(*batch, o, 1)
            return MultivariateNormal(mean, DiagLinearOperator(variance))
        mean, covariance = state.mean_and_covariance(self.covar_module, X)
        covariance = covariance.expand(*mean.shape, mean.shape[-1])
        return MultivariateNormal(mean, DenseLinearOperator(covariance))

    def scaled_variance(self, X: Tensor) -> Tensor:
        r"""The BKB papers' variance ``sigma~^2(x) = Sigma(x, x) / lambda``.

        Args:
            X: ``N x d`` points in the transformed input space, checked as in
                :meth:`posterior` (``N = 0`` allowed).

        Returns:
            ``batch x N`` variances, ``O(N m^2)`` (no ``N x N`` matrix).
        """
        if check_tensor(X, "X").dim() != 2:
            raise ValueError(f"`X` must be N x d, got shape {tuple(X.shape)}.")
        return self._scaled_variance(self._check_points(X, "X"))

    def _scaled_variance(self, X: Tensor) -> Tensor:
        self.eval()
        _, variance = self.dtc_state.mean_and_variance(self.covar_module, X)
        return variance / self.noise

    def effective_dimension(self) -> float:
        r"""Estimate of ``d_eff = sum_i sigma~^2_t(x_i)`` over all observations (the
        sum of the ridge leverage scores of the observed points)."""
        U, counts, _ = distinct_rows(self._unbatched_inputs("effective_dimension"))
        with torch.no_grad():
            return float((counts * self._scaled_variance(U)).sum())

    def subset_output(self, idcs: list[int]) -> NystromGP:
        r"""The model of the outputs ``idcs`` (a list of distinct indices).

        A single-output model returns itself for ``[0]`` (as ``ModelListGP``
        returns a member). Otherwise a copy keeps the rows of ``idcs`` of the
        targets, ``b`` and ``w`` (and the outcome transform's statistics, through
        its ``subset_output``); the dictionary and ``V`` are shared by all outputs,
        so nothing is refactorized. Bad indices raise ``TypeError`` /
        ``ValueError`` naming ``idcs``.
        """
        indices = check_output_indices(idcs, self._num_outputs)
        if self._num_outputs == 1:
            return self
        state = self.dtc_state
        model = deepcopy(self)
        rows = partial(output_rows, indices)
        gram, chol_gram = state.gram, state.chol_gram
        if len(indices) == 1 and gram.dim() > 2:  # drop V's size-one output dimension
            gram, chol_gram = gram.squeeze(-3), chol_gram.squeeze(-3)
        model._num_outputs = len(indices)
        model.train_targets = rows(self.train_targets)
        model._state = replace(
            state,
            gram=gram,
            chol_gram=chol_gram,
            projected_targets=rows(state.projected_targets),
            weights=rows(state.weights),
        )
        model._state_hyperparameters = [p.detach().clone() for p in model.parameters()]
        if hasattr(model, "outcome_transform"):
            model.outcome_transform = model.outcome_transform.subset_output(indices)
        return model

    # ---------------------------------------------------------------- updates
    def condition_on_observations(
        self,
        X: Tensor,
        Y: Tensor,
        *,
        resparsify: bool = False,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> NystromGP:
        r"""A copy of the model with ``(X, Y)`` appended, the dictionary frozen.

        ``V`` and ``Z^T y`` are updated in ``O(n' m^2 + m^3)``; nothing is recomputed
        from the earlier observations. Batch dimensions of ``Y`` (fantasies) broadcast
        into the copy's ``batch_shape``.

        Args:
            X: ``batch x n' x d`` new inputs (in the original input space).
            Y: ``batch' x n' x o`` new targets (original outcome space).
            resparsify: Resample the copy's dictionary afterwards with this model's
                (pre-update) variances, as BKB/BBKB do (unbatched only).
            generator: Random number generator for the resampling.
            kwargs: ``noise`` (heteroskedastic observation noise) is not supported.

        Returns:
            The conditioned model.
        """
        if kwargs.get("noise") is not None:
            raise ValueError(
                "`noise`: NystromGP has one homoskedastic noise level (lambda); "
                "per-observation noise is not supported."
            )
        X_tf, y_tf = self._transform_new_data(X, Y)
        model = deepcopy(self)
        model._append(X_tf, y_tf)
        if resparsify:
            model.resparsify(generator=generator, variance_model=self)
        return model

    def _transform_new_data(self, X: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
        r"""Checked, transformed ``batch x n' x d`` inputs and targets, ``batch' x
        n'`` (one output) or ``batch' x o x n'`` (one row per output)."""
        train_X = self.train_inputs[0]
        check_observations(X, Y, train_X.shape[-1], train_X, self._num_outputs)
        X_tf = self._transformed_points(X, "X")
        if hasattr(self, "outcome_transform"):
            Y, _ = self.outcome_transform(Y, X=X_tf)
            if not torch.isfinite(Y).all():
                raise ValueError(
                    "`Y` gives non-finite values under the outcome transform "
                    "(overflow, or values outside its domain)."
                )
        return X_tf, (Y.squeeze(-1) if self._num_outputs == 1 else Y.mT)

    def _append(self, X: Tensor, y: Tensor) -> None:
        try:  # differentiable in X and y, as BoTorch's fantasies are
            state = self.dtc_state.updated(
                self.covar_module, self._with_output_dim(X), y
            )
        except (torch.linalg.LinAlgError, NanError, NotPSDError) as error:
            raise ValueError(f"`X` gives no factorizable posterior: {error}") from error
        if not torch.isfinite(state.weights).all():
            raise ValueError(
                "`Y` gives a non-finite posterior mean (targets too large for the "
                "noise level; standardize them)."
            )
        append = append_observations if self._num_outputs == 1 else append_outputs
        train_X, self.train_targets = append(
            self.train_inputs[0], self.train_targets, X, y
        )
        self.train_inputs = (train_X,)
        self._state = state

    def resparsify(
        self,
        generator: torch.Generator | None = None,
        variance_model: NystromGP | None = None,
    ) -> NystromGP:
        r"""Redraw the dictionary from all observed points, in place.

        Each distinct observed point with ``c`` pulls is kept with probability
        ``min(1, qbar c sigma~^2(x))``; at least one point is kept. No
        observation is dropped: only the dictionary changes.

        Args:
            generator: Random number generator for the Bernoulli draws.
            variance_model: The model whose variances ``sigma~^2`` drive the draw:
                by default this one; BKB/BBKB pass the model from before the last
                update (``sigma~_{t-1}``, the start-of-batch ``sigma~_fb``).

        Returns:
            The model itself.
        """
        check_generator(generator)
        reference = self if variance_model is None else variance_model
        if not isinstance(reference, NystromGP):
            raise TypeError(
                f"`variance_model` must be a NystromGP, got {type(reference).__name__}."
            )
        if reference.train_inputs[0].dim() != 2:
            raise ValueError(
                "`variance_model` must be unbatched (one variance per point), got "
                f"batch inputs of shape {tuple(reference.train_inputs[0].shape)}."
            )
        U, counts, _ = distinct_rows(self._unbatched_inputs("resparsify"))
        with torch.no_grad():
            probabilities = inclusion_probabilities(
                reference._scaled_variance(U), counts, self.qbar
            )
        self.set_dictionary(U[sample_dictionary(probabilities, generator)])
        return self

    def set_dictionary(self, dictionary: Tensor) -> None:
        r"""Replace the dictionary by ``m' x d`` points of the transformed input space
        (duplicates merged) and refactorize, ``O(u m'^2 + m'^3)``; a dictionary that
        cannot be factorized raises ``ValueError`` and changes nothing."""
        check_model_dtype(dictionary, "dictionary")
        check_matrix(dictionary, "dictionary", num_cols=self.train_inputs[0].shape[-1])
        check_magnitude(dictionary, "dictionary")
        check_same_dtype(dictionary, "dictionary", self.train_inputs[0], "train_X")
        dictionary = torch.unique(dictionary, dim=0)
        state = self._checked_state(dictionary, "dictionary")
        self._dictionary = dictionary
        self._set_state(state)

    def _unbatched_inputs(self, caller: str) -> Tensor:
        X = self.train_inputs[0]
        if X.dim() != 2:
            raise ValueError(f"`{caller}` needs an unbatched model, got batch inputs.")
        return X

    def _initial_dictionary(self, generator: torch.Generator | None) -> Tensor:
        r"""Grow a dictionary over data prefixes of doubling size in a random order:
        each pass resamples from the prefix with variances computed on the previous
        dictionary, so the largest factorization has the final dictionary's size."""
        X, y = self.train_inputs[0], self.train_targets
        device = "cpu" if generator is None else generator.device
        order = torch.randperm(X.shape[0], generator=generator, device=device)
        order = order.to(X.device)
        X, y = X[order], y[..., order]
        prefix = min(_INITIAL_PREFIX, X.shape[0])
        U, counts, _ = distinct_rows(X[:prefix])
        with torch.no_grad():
            prior = self.covar_module(U, diag=True) / self.noise
            probabilities = inclusion_probabilities(prior, counts, self.qbar)
        dictionary = U[sample_dictionary(probabilities, generator)]
        while prefix < X.shape[0]:
            prefix = min(2 * prefix, X.shape[0])
            U, counts, y_sums = distinct_rows(X[:prefix], y[..., :prefix])
            with torch.no_grad():
                state = DTCState.build(
                    self.covar_module, dictionary, U, y_sums, self.noise, counts
                )
                _, variance = state.mean_and_variance(self.covar_module, U)
                probabilities = inclusion_probabilities(
                    variance / self.noise, counts, self.qbar
                )
            dictionary = U[sample_dictionary(probabilities, generator)]
        return dictionary

    # ---------------------------------------------------------------- fitting
    def collapsed_log_likelihood(self) -> Tensor:
        r"""Titsias' collapsed bound on the log marginal likelihood per observation,
        on the current dictionary, differentiable in the kernel hyperparameters and
        ``lambda``; ``O(u m^2 + m^3)`` for ``u`` distinct observed points."""
        X = self._unbatched_inputs("collapsed_log_likelihood")
        return collapsed_log_likelihood(
            self.covar_module, self._dictionary, X, self.train_targets, self.noise
        )


class NystromMarginalLogLikelihood(MarginalLogLikelihood):
    r"""The collapsed (Titsias) bound of a ``NystromGP`` plus the log densities of
    the priors registered on its kernel and likelihood, per observation, for
    ``fit_gpytorch_mll``: as GPyTorch's ``ExactMarginalLogLikelihood`` adds them for
    ``SingleTaskGP``, maximizing it fits the hyperparameters by MAP (without priors,
    by maximizing the bound).

    Example:
        >>> mll = NystromMarginalLogLikelihood(model.likelihood, model)
        >>> fit_gpytorch_mll(mll)
    """

    def __init__(self, likelihood: GaussianLikelihood, model: NystromGP) -> None:
        if not isinstance(model, NystromGP):
            raise TypeError(f"`model` must be a NystromGP, got {type(model).__name__}.")
        super().__init__(likelihood, model)

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        r"""``bound / n + (sum of log priors) / n`` on the model's own ``n``
        observations (arguments ignored)."""
        log_prior = sum(  # the model's priors, its likelihood's included
            prior.log_prob(closure(module)).sum()
            for _, module, prior, closure, _ in self.model.named_priors()
        )
        num_data = self.model.train_targets.shape[-1]
        return self.model.collapsed_log_likelihood() + log_prior / num_data

    def compute_custom_loss(self, **kwargs: Any) -> Tensor:
        r"""Negative bound; BoTorch's ``get_loss_closure`` uses this hook."""
        return -self.forward()
