r"""The closed-form refit objective against GPyTorch's evaluation of the same
bound and priors (``NystromMarginalLogLikelihood``): values, gradients, and the
hyperparameters a fit ends at."""

from __future__ import annotations

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.optim.closures import ForwardBackwardClosure
from botorch.optim.utils import get_parameters
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

from botorch_sketch.models.hyperparameters import (
    learnable_covar_module,
    learnable_likelihood,
)
from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.scaled_rbf_bound import ScaledRBFBound, is_scaled_rbf

DTYPE = torch.float64


def objective(learn_noise: bool, seed: int = 0) -> NystromMarginalLogLikelihood:
    r"""A MAP objective on 30 points of which 6 are repeats, 12 inducing points,
    at random hyperparameters."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(24, 4, generator=generator, dtype=DTYPE)
    X = torch.cat([X, X[:6]])
    y = torch.sin(4 * X).sum(-1) + 0.1 * torch.randn(30, generator=generator)
    y = ((y - y.mean()) / y.std()).to(DTYPE)
    kernel = learnable_covar_module(4).to(DTYPE).requires_grad_(True)
    kernel.base_kernel.lengthscale = 0.2 + torch.rand(4, generator=generator)
    kernel.outputscale = 0.5 + float(torch.rand(1, generator=generator))
    model = NystromGP(
        X,
        y.unsqueeze(-1),
        covar_module=kernel,
        noise=None if learn_noise else 0.05,
        dictionary=X[:12],
    )
    if learn_noise:
        model.likelihood = learnable_likelihood().to(DTYPE)
        model.likelihood.noise = 0.03
    return NystromMarginalLogLikelihood(model.likelihood, model)


@pytest.mark.parametrize("learn_noise", [True, False])
def test_loss_and_gradients_are_gpytorchs(learn_noise):
    mll = objective(learn_noise)
    parameters = get_parameters(mll, requires_grad=True)
    assert ("likelihood.noise_covar.raw_noise" in parameters) == learn_noise
    ours = ForwardBackwardClosure(ScaledRBFBound(mll), parameters)()
    reference = ForwardBackwardClosure(lambda: -mll(), parameters)()
    assert float(ours[0].detach()) == pytest.approx(float(reference[0]), rel=1e-12)
    for mine, theirs in zip(ours[1], reference[1], strict=True):
        assert torch.allclose(mine, theirs, rtol=1e-9, atol=1e-12)


def test_a_fit_ends_at_the_hyperparameters_of_botorchs_closure():
    fitted = []
    for closed_form in (True, False):
        mll = objective(learn_noise=True, seed=1)
        parameters = get_parameters(mll, requires_grad=True)
        start = torch.cat([p.detach().reshape(-1) for p in parameters.values()])
        closure = (
            ForwardBackwardClosure(ScaledRBFBound(mll), parameters)
            if closed_form
            else None
        )
        fit_gpytorch_mll(mll, closure=closure, max_attempts=1)
        fitted.append(torch.cat([p.detach().reshape(-1) for p in parameters.values()]))
        assert (fitted[-1] - start).abs().max() > 0.01  # the fit moved
    assert torch.allclose(fitted[0], fitted[1], rtol=1e-6, atol=1e-8)


def test_only_a_plain_scaled_rbf_kernel_qualifies():
    assert is_scaled_rbf(learnable_covar_module(3))
    assert is_scaled_rbf(ScaleKernel(RBFKernel()))
    assert not is_scaled_rbf(RBFKernel())
    assert not is_scaled_rbf(ScaleKernel(MaternKernel()))
    assert not is_scaled_rbf(ScaleKernel(RBFKernel(active_dims=[0, 1])))
    assert not is_scaled_rbf(ScaleKernel(RBFKernel(batch_shape=torch.Size([2]))))
    model = objective(learn_noise=False).model
    model.covar_module = ScaleKernel(MaternKernel()).to(DTYPE)
    with pytest.raises(TypeError, match="ScaleKernel\\(RBFKernel\\)"):
        ScaledRBFBound(NystromMarginalLogLikelihood(model.likelihood, model))
