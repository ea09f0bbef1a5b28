r"""The closed-form refit objective against GPyTorch's autograd of the same bound
and priors (``NystromMarginalLogLikelihood``): values, gradients, and the
hyperparameters a fit ends at."""

from __future__ import annotations

import math
from copy import deepcopy

import numpy as np
import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.optim.closures import ForwardBackwardClosure
from botorch.optim.utils import get_parameters
from gpytorch.constraints import GreaterThan, Interval
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.priors import GammaPrior, LogNormalPrior

from botorch_sketch.generation.hyperparameters import (
    REFIT_FTOL,
    fit_dtc_hyperparameters,
    learnable_covar_module,
    learnable_likelihood,
    units_free,
)
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.scaled_rbf_bound import (
    ScaledRBFBound,
    is_scaled_rbf,
    supports_closed_form,
)

DTYPE = torch.float64
FIXED_NOISE = 0.05


def log_normal(loc: float, scale: float) -> LogNormalPrior:
    r"""A prior whose parameters are float64 from the start: GPyTorch evaluates a
    prior built from Python floats with float32 ``loc`` and ``scale`` (about
    1e-9 of a loss), which would blur a comparison to rounding."""
    return LogNormalPrior(
        torch.tensor(loc, dtype=DTYPE), torch.tensor(scale, dtype=DTYPE)
    )


def exact_modules(d: int) -> tuple[ScaleKernel, GaussianLikelihood]:
    r"""``learnable_covar_module(d)`` and ``learnable_likelihood()`` with float64
    priors."""
    base = RBFKernel(
        ard_num_dims=d,
        lengthscale_prior=log_normal(math.sqrt(2) + 0.5 * math.log(d), math.sqrt(3)),
        lengthscale_constraint=GreaterThan(2.5e-2, transform=None),
    )
    kernel = ScaleKernel(
        base,
        outputscale_prior=log_normal(0.0, 1.0),
        outputscale_constraint=Interval(1e-2, 1e2),
    )
    likelihood = GaussianLikelihood(
        noise_prior=log_normal(-4.0, 1.0),
        noise_constraint=GreaterThan(1e-6, transform=None),
    )
    return kernel.to(DTYPE), likelihood.to(DTYPE)


def problem(seed: int, exact_priors: bool = True, repeated_inducing: bool = False):
    r"""30 points of which 6 are repeats, 12 inducing points (two of them equal
    when ``repeated_inducing``: a jittered factor), random hyperparameters."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(24, 4, generator=generator, dtype=DTYPE)
    X = torch.cat([X, X[:6]])
    y = torch.sin(4 * X).sum(-1) + 0.1 * torch.randn(30, generator=generator)
    y = (y - y.mean()) / y.std()
    dictionary = X[:12].clone()
    if repeated_inducing:
        dictionary[1] = dictionary[0]
    if exact_priors:
        kernel, likelihood = exact_modules(4)
    else:
        kernel, likelihood = learnable_covar_module(4).to(DTYPE), learnable_likelihood()
    kernel.base_kernel.lengthscale = 0.2 + torch.rand(4, generator=generator)
    kernel.outputscale = 0.5 + float(torch.rand(1, generator=generator))
    likelihood.noise = 0.03
    return kernel, likelihood.to(DTYPE), X, y, dictionary


def gpytorch_loss_and_gradient(kernel, likelihood, X, y, dictionary):
    r"""BoTorch's closure on the ``NystromGP``'s objective (autograd)."""
    model = NystromGP(
        X,
        y.unsqueeze(-1),
        covar_module=kernel.requires_grad_(True),
        noise=FIXED_NOISE if likelihood is None else None,
        dictionary=dictionary,
    )
    if likelihood is not None:
        model.likelihood = likelihood
    mll = NystromMarginalLogLikelihood(model.likelihood, model)
    parameters = get_parameters(mll, requires_grad=True)
    loss, gradients = ForwardBackwardClosure(lambda: -mll(), parameters)()
    gradient = torch.cat([g.reshape(-1) for g in gradients])
    return float(loss.detach()), gradient.numpy()


def closed_form(kernel, likelihood, X, y, dictionary):
    noise = FIXED_NOISE if likelihood is None else None
    bound = ScaledRBFBound(kernel, likelihood, noise, X, y, dictionary)
    return bound(bound.start())


@pytest.mark.parametrize("learn_noise", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_and_gradient_are_gpytorchs(learn_noise, seed):
    kernel, likelihood, X, y, dictionary = problem(seed)
    likelihood = likelihood if learn_noise else None
    loss, gradient = closed_form(kernel, likelihood, X, y, dictionary)
    reference = gpytorch_loss_and_gradient(kernel, likelihood, X, y, dictionary)
    assert loss == pytest.approx(reference[0], rel=1e-12)
    assert gradient.shape == reference[1].shape == (5 + learn_noise,)
    np.testing.assert_allclose(gradient, reference[1], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(
    "options, tolerances",
    [
        # the jitter of 1e-8 leaves a factor of condition number ~1e8: rounding of
        # order 1e-8 relative, in another order of the inducing points
        ({"seed": 3, "repeated_inducing": True}, (1e-6, 1e-4, 1e-5)),
        # learnable_covar_module's priors: GPyTorch's float32 constants
        ({"seed": 4, "exact_priors": False}, (1e-8, 1e-6, 1e-8)),
    ],
    ids=["jittered-dictionary-factor", "default-modules"],
)
def test_loss_and_gradient_agree_to_rounding_elsewhere(options, tolerances):
    kernel, likelihood, X, y, dictionary = problem(**options)
    loss, gradient = closed_form(kernel, likelihood, X, y, dictionary)
    reference = gpytorch_loss_and_gradient(kernel, likelihood, X, y, dictionary)
    rel, rtol, atol = tolerances
    assert loss == pytest.approx(reference[0], rel=rel)
    np.testing.assert_allclose(gradient, reference[1], rtol=rtol, atol=atol)


def test_a_fit_ends_where_botorchs_fit_of_the_same_objective_ends():
    kernel, likelihood, X, y, dictionary = problem(5, exact_priors=False)
    y = units_free(y)  # as fit_dtc_hyperparameters rounds
    ours, noise = fit_dtc_hyperparameters(kernel, 0.03, X, y, dictionary)
    model = NystromGP(
        X,
        y.unsqueeze(-1),
        covar_module=deepcopy(kernel).requires_grad_(True),
        dictionary=dictionary,
    )
    model.likelihood = likelihood
    mll = NystromMarginalLogLikelihood(model.likelihood, model)
    options = {"ftol": REFIT_FTOL}
    fit_gpytorch_mll(mll, max_attempts=1, optimizer_kwargs={"options": options})
    theirs = model.covar_module
    assert noise == pytest.approx(float(model.likelihood.noise), rel=1e-4)
    lengthscale = ours.base_kernel.lengthscale
    torch.testing.assert_close(
        lengthscale, theirs.base_kernel.lengthscale, rtol=1e-4, atol=0.0
    )
    torch.testing.assert_close(
        ours.outputscale, theirs.outputscale, rtol=1e-4, atol=0.0
    )
    assert (lengthscale - kernel.base_kernel.lengthscale).abs().max() > 0.01  # moved


def test_supported_modules():
    kernel, likelihood = learnable_covar_module(3), learnable_likelihood()
    assert supports_closed_form(kernel, likelihood)
    assert supports_closed_form(kernel, None)
    # GPyTorch's default constraints (softplus) are not computed here
    assert not supports_closed_form(ScaleKernel(RBFKernel(ard_num_dims=3)), None)
    assert not supports_closed_form(ScaleKernel(MaternKernel()), None)
    assert not supports_closed_form(RBFKernel(), None)
    # GPyTorch's default likelihood: a softplus constraint and no LogNormal prior
    assert not supports_closed_form(kernel, GaussianLikelihood())
    gamma = ScaleKernel(RBFKernel(lengthscale_prior=GammaPrior(3.0, 6.0)))
    assert not supports_closed_form(gamma, None)
    assert is_scaled_rbf(ScaleKernel(RBFKernel()))
    assert not is_scaled_rbf(ScaleKernel(RBFKernel(active_dims=[0, 1])))
    assert not is_scaled_rbf(ScaleKernel(RBFKernel(batch_shape=torch.Size([2]))))


def test_unsupported_modules_and_arguments_are_refused():
    _, likelihood, X, y, dictionary = problem(0)
    with pytest.raises(TypeError, match="ScaleKernel\\(RBFKernel\\)"):
        ScaledRBFBound(ScaleKernel(MaternKernel()), None, 0.1, X, y, dictionary)
    kernel = learnable_covar_module(4).to(DTYPE)
    with pytest.raises(ValueError, match="exactly one of `likelihood` and `noise`"):
        ScaledRBFBound(kernel, likelihood, 0.1, X, y, dictionary)
    with pytest.raises(ValueError, match="exactly one of `likelihood` and `noise`"):
        ScaledRBFBound(kernel, None, None, X, y, dictionary)


def test_assign_writes_the_raw_values_in_start_order():
    kernel, likelihood, X, y, dictionary = problem(6)
    bound = ScaledRBFBound(kernel, likelihood, None, X, y, dictionary)
    raw = bound.start() + np.arange(6) * 0.01
    bound.assign(raw)
    assert float(likelihood.noise_covar.raw_noise) == pytest.approx(raw[0])
    assert float(kernel.raw_outputscale) == pytest.approx(raw[1])
    np.testing.assert_allclose(
        kernel.base_kernel.raw_lengthscale.detach().reshape(-1), raw[2:]
    )
    np.testing.assert_array_equal(bound.start(), raw)


def test_the_loss_is_the_same_in_every_bit_whatever_the_dictionarys_order():
    # a refit stopped at `maxiter` turns a rounding change of the loss into a
    # different fit; loops whose dictionaries hold the same points in another order
    # (appended arms against a rebuilt state) must fit the same hyperparameters
    kernel, likelihood, X, y, dictionary = problem(7)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    loss, gradient = closed_form(kernel, likelihood, X, y, dictionary)
    shuffled = closed_form(kernel, likelihood, X, y, dictionary[order])
    assert loss == shuffled[0]
    np.testing.assert_array_equal(gradient, shuffled[1])
