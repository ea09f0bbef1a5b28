r"""The objective of a loop's refit in closed form: the collapsed bound of a
``NystromGP`` whose kernel is ``ScaleKernel(RBFKernel)`` (the kernel every loop
learns, :func:`~botorch_sketch.models.hyperparameters.learnable_covar_module`),
plus its priors, without GPyTorch's lazy kernel evaluation.

A refit evaluates the bound and its gradient 20-40 times on the same points. Through
the kernel modules each evaluation finds the distinct points again and builds lazy
kernel tensors; on a few dozen points that overhead is most of a fit. Here the
distinct points, their counts and target sums are found once, and each evaluation
computes

.. math::

    K_{SS} = s \exp(-\tfrac12 \lVert (x - x') / \ell \rVert^2), \quad
    K_{US}, \quad \operatorname{diag} K_{UU} = s

with GPyTorch's own squared distances (``sq_dist``, the same centring), then the
same bound (:func:`~botorch_sketch.models.dtc.collapsed_bound`) and the same prior
terms as :class:`~botorch_sketch.models.nystrom.NystromMarginalLogLikelihood`.
"""

from __future__ import annotations

from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.kernels.kernel import sq_dist
from torch import Tensor

from botorch_sketch.models.dtc import collapsed_bound, distinct_rows
from botorch_sketch.models.linalg import safe_cholesky, solve_lower
from botorch_sketch.models.nystrom import NystromMarginalLogLikelihood


def is_scaled_rbf(kernel: Kernel) -> bool:
    r"""Whether ``kernel`` is a ``ScaleKernel`` of an ``RBFKernel`` (exactly those
    classes), neither restricted to ``active_dims`` nor batched: the kernels
    :class:`ScaledRBFBound` evaluates."""
    if type(kernel) is not ScaleKernel or type(kernel.base_kernel) is not RBFKernel:
        return False
    modules = (kernel, kernel.base_kernel)
    return all(
        module.active_dims is None and module.batch_shape == () for module in modules
    )


class ScaledRBFBound:
    r"""The negative MAP objective of ``mll`` (bound plus log priors, per
    observation) for ``fit_gpytorch_mll``'s closure: equal to
    ``-mll()`` up to rounding, ``O(u m^2 + m^3)`` per call for ``u`` distinct
    observed points and ``m`` inducing points.

    Args:
        mll: The objective of an unbatched single-output ``NystromGP`` whose
            kernel passes :func:`is_scaled_rbf`.

    Example:
        >>> loss = ScaledRBFBound(mll)
        >>> closure = ForwardBackwardClosure(loss, get_parameters(mll, True))
        >>> fit_gpytorch_mll(mll, closure=closure)
    """

    def __init__(self, mll: NystromMarginalLogLikelihood) -> None:
        model = mll.model
        if not is_scaled_rbf(model.covar_module):
            raise TypeError(
                "`mll` must have a ScaleKernel(RBFKernel) kernel, got "
                f"{type(model.covar_module).__name__}."
            )
        self.model = model
        self.targets = model.train_targets
        if self.targets.dim() != 1:
            raise ValueError("`mll` must have one output and no batch.")
        X = model._unbatched_inputs("ScaledRBFBound")
        self.points, self.counts, self.target_sums = distinct_rows(X, self.targets)
        #: (prior, closure, module) of every prior of the model and likelihood
        self.priors = [
            (prior, closure, module)
            for _, module, prior, closure, _ in model.named_priors()
        ]

    def __call__(self) -> Tensor:
        r"""The loss at the modules' current hyperparameters (a scalar with
        gradients)."""
        kernel = self.model.covar_module
        lengthscale, outputscale = kernel.base_kernel.lengthscale, kernel.outputscale
        dictionary = self.model.dictionary
        scaled_dictionary = dictionary / lengthscale
        scaled_points = self.points / lengthscale
        gram = (
            outputscale * sq_dist(scaled_dictionary, scaled_dictionary).mul(-0.5).exp()
        )
        chol = safe_cholesky(gram)
        cross = outputscale * sq_dist(scaled_dictionary, scaled_points).mul(-0.5).exp()
        embedding = solve_lower(chol, cross).mT
        bound = collapsed_bound(
            dictionary,
            chol,
            embedding,
            outputscale.expand(self.points.shape[0]),
            self.counts,
            self.target_sums,
            self.targets,
            self.model.noise,
        )
        log_prior = sum(
            prior.log_prob(closure(module)).sum()
            for prior, closure, module in self.priors
        )
        return -(bound + log_prior / self.targets.shape[-1])
