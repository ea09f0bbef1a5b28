r"""Multi-output models against BoTorch's ``SingleTaskGP`` with an ``n x o``
``train_Y`` (issue 27 item 1).

With every observed (and fantasized) point in the dictionary (``NystromGP``) or
inducing (``DecomposedSamplingSVGP``, variational jitter 1e-12), the same kernel and
noise for every output and prior mean 0, both models are the exact GP of each output:
posteriors (``output_indices`` included), ``subset_output``, conditioned and fantasy
models and the collapsed bound must equal ``SingleTaskGP``'s to ~1e-8 in float64,
output by output, shapes included.
"""

from __future__ import annotations

import gpytorch
import pytest
import torch
from botorch import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler

from botorch_sketch.models.nystrom import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

from ..gp_helpers import DTYPE, rbf_kernel, sine_data, uniform

N, D, NUM_OUT, NOISE = 12, 2, 3, 0.05
MODELS = ["nystrom", "svgp"]


@pytest.fixture(autouse=True)
def _exact_jitter():
    with gpytorch.settings.variational_cholesky_jitter(double_value=1e-12):
        yield


def _data():
    r"""``N x D`` inputs and ``N x NUM_OUT`` targets of different scales and offsets."""
    X, Y = sine_data(N, D)
    columns = [Y, 3.0 * torch.cos(4 * X).sum(-1, keepdim=True) + 2.0, X[:, :1] ** 2]
    return X, torch.cat(columns, dim=-1)


def _fantasy_points(*shape: int):
    r"""Fantasy points (``... x D``) among the observed ones."""
    X, _ = _data()
    count = torch.Size(shape[:-1]).numel()
    index = torch.randperm(N, generator=torch.Generator().manual_seed(3))[:count]
    return X[index].reshape(shape)


def _ours(name: str, X, Y, transforms: bool = True, noise: float | None = NOISE):
    r"""A package model on ``(X, Y)``, exact (all points in the dictionary /
    inducing), with ``Normalize`` and ``Standardize(m=o)`` when ``transforms``."""
    kwargs = {
        "covar_module": rbf_kernel(0.3, 1.5),
        "noise": noise,
        "input_transform": Normalize(D) if transforms else None,
        "outcome_transform": Standardize(Y.shape[-1]) if transforms else None,
    }
    if name == "nystrom":
        return NystromGP(X, Y, dictionary=X, **kwargs)
    if Y.shape[-1] == 1 and transforms and noise is not None:
        # a single-output SVGP's noise is in the units of Y
        kwargs["noise"] = noise * float(Y.var())
    model = DecomposedSamplingSVGP(X, Y, num_inducing=N, **kwargs)
    model.model.mean_module.constant.data.fill_(0.0)  # as NystromGP's (0)
    return model


def _control(X, Y, transforms: bool = True) -> SingleTaskGP:
    r"""``SingleTaskGP`` with the same kernel (shared by the outputs), noise NOISE
    for every output and prior mean 0."""
    model = SingleTaskGP(
        X,
        Y,
        covar_module=rbf_kernel(0.3, 1.5),
        input_transform=Normalize(D) if transforms else None,
        outcome_transform=Standardize(Y.shape[-1]) if transforms else None,
    )
    model.likelihood.noise = NOISE
    model.mean_module.constant.data.fill_(0.0)
    model.eval().posterior(X)  # GPyTorch conditions only after a first prediction
    return model


def _assert_same(post, ref, rtol: float = 1e-8, atol: float = 1e-8) -> None:
    assert post.mean.shape == ref.mean.shape
    for actual, expected in [
        (post.mean, ref.mean),
        (post.distribution.covariance_matrix, ref.distribution.covariance_matrix),
    ]:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def _blocks(posterior, num_outputs: int):
    r"""The ``... x o x q x q`` covariances of each output over the ``q`` points
    (a ``MultitaskMultivariateNormal`` orders its ``q o`` variables interleaved or
    output by output)."""
    distribution = posterior.distribution
    covariance = distribution.covariance_matrix
    q = posterior.mean.shape[-2]
    if num_outputs == 1:
        return covariance.unsqueeze(-3)
    interleaved = getattr(distribution, "_interleaved", True)
    shape = (q, num_outputs) if interleaved else (num_outputs, q)
    blocks = covariance.reshape(*covariance.shape[:-2], *shape, *shape)
    if interleaved:  # ... x q x o x q x o -> ... x o x q x q
        return blocks.diagonal(dim1=-3, dim2=-1).movedim(-1, -3)
    return blocks.diagonal(dim1=-4, dim2=-2).movedim(-1, -3)


def _assert_outputs(post, ref, indices) -> None:
    r"""``post`` over the outputs ``indices`` of ``ref``: mean and per-output
    covariance over the ``q`` points."""
    assert post.mean.shape == (*ref.mean.shape[:-1], len(indices))
    torch.testing.assert_close(post.mean, ref.mean[..., indices], rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(
        _blocks(post, len(indices)),
        _blocks(ref, NUM_OUT)[..., indices, :, :],
        rtol=1e-8,
        atol=1e-8,
    )


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("transforms", [False, True])
@pytest.mark.parametrize("shape", [(5, D), (4, 1, D), (3, 2, D), (2, 3, 2, D)], ids=str)
def test_posterior_equals_exact_gp_per_output(name, transforms, shape):
    X, Y = _data()
    model, control = _ours(name, X, Y, transforms), _control(X, Y, transforms)
    assert model.num_outputs == NUM_OUT and model.batch_shape == control.batch_shape
    test_X = uniform(*shape, seed=1)
    _assert_same(model.posterior(test_X), control.posterior(test_X))
    _assert_same(
        model.posterior(test_X, observation_noise=True),
        control.posterior(test_X, observation_noise=True),
    )
    for indices in ([2, 0], [1], [0, 1, 2]):
        post = model.posterior(test_X, output_indices=indices)
        _assert_outputs(post, control.posterior(test_X), indices)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("indices", [[1], [2, 0], [0, 1, 2], [-1]], ids=str)
def test_subset_output_equals_model_on_those_columns(name, indices):
    X, Y = _data()
    model = _ours(name, X, Y)
    subset = model.subset_output(indices)
    columns = [i % NUM_OUT for i in indices]
    rebuilt = _ours(name, X, Y[:, columns])
    exact = _control(X, Y[:, columns])
    assert subset.num_outputs == len(indices) and model.num_outputs == NUM_OUT
    test_X = uniform(3, 2, D, seed=2)
    for reference in (rebuilt, exact):
        _assert_same(subset.posterior(test_X), reference.posterior(test_X))
    # the subset conditions and fantasizes like the rebuilt model
    new_X, new_Y = _fantasy_points(2, D), uniform(2, len(indices), seed=4)
    _assert_same(
        subset.condition_on_observations(new_X, new_Y).posterior(test_X),
        exact.condition_on_observations(new_X, new_Y).posterior(test_X),
    )
    _assert_same(model.posterior(test_X), _control(X, Y).posterior(test_X))


@pytest.mark.parametrize("name", MODELS)
def test_bad_output_indices_and_shapes_name_the_argument(name):
    X, Y = _data()
    model = _ours(name, X, Y)
    for bad in ([3], [], [0, 0], [-4]):
        with pytest.raises(ValueError, match="`idcs`"):
            model.subset_output(bad)
        with pytest.raises(ValueError, match="`output_indices`"):
            model.posterior(X[:2], output_indices=bad)
    with pytest.raises(TypeError, match="`idcs`"):
        model.subset_output(1)
    with pytest.raises(ValueError, match="`Y`"):
        model.condition_on_observations(X[:2], Y[:2, :2])
    with pytest.raises(ValueError, match="`train_Y`"):
        _ours(name, X, Y[:, :0])
    with pytest.raises(ValueError, match="`train_Y`"):
        _ours(name, X, Y[:-1])


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("fantasy_shape", [(3, D), (2, 2, D)], ids=str)
@pytest.mark.parametrize("test_shape", [(5, D), (3, 1, 1, 1, D)], ids=str)
def test_fantasy_posteriors_equal_exact_gp(name, fantasy_shape, test_shape):
    X, Y = _data()
    model, control = _ours(name, X, Y), _control(X, Y)
    new_X = _fantasy_points(*fantasy_shape)
    fantasies = [
        m.fantasize(new_X, SobolQMCNormalSampler(torch.Size([2]), seed=0))
        for m in (model, control)
    ]
    assert fantasies[0].batch_shape == fantasies[1].batch_shape
    assert fantasies[0].num_outputs == NUM_OUT
    test_X = uniform(*test_shape, seed=5)
    _assert_same(*(f.posterior(test_X) for f in fantasies))
    _assert_same(*(f.posterior(test_X, observation_noise=True) for f in fantasies))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(
    "x_shape, y_batch", [((3, D), ()), ((2, 3, D), (4, 2))], ids=str
)
def test_condition_on_observations_equals_exact_gp(name, x_shape, y_batch):
    X, Y = _data()
    model, control = _ours(name, X, Y), _control(X, Y)
    new_X = _fantasy_points(*x_shape)
    new_Y = uniform(*y_batch, x_shape[-2], NUM_OUT, seed=7)
    conditioned = [m.condition_on_observations(new_X, new_Y) for m in (model, control)]
    assert conditioned[0].batch_shape == conditioned[1].batch_shape
    test_X = uniform(5, D, seed=5)
    _assert_same(*(m.posterior(test_X) for m in conditioned))


@pytest.mark.parametrize("name", MODELS)
def test_collapsed_bound_is_the_sum_of_exact_marginal_likelihoods(name):
    # untransformed data: SingleTaskGP's ExactMarginalLogLikelihood per output,
    # summed, equals the collapsed bound with every point in the dictionary
    X, Y = _data()
    model, control = _ours(name, X, Y, transforms=False), _control(X, Y, False)
    control.train()  # log N(y | 0, K + noise I) per output (no priors), summed
    prior = control.likelihood(control(*control.train_inputs))
    exact = prior.log_prob(control.train_targets).sum() / N
    if name == "nystrom":
        bound = NystromMarginalLogLikelihood(model.likelihood, model)()
    else:
        bound = CollapsedTitsiasBound(model)()
    torch.testing.assert_close(bound, exact, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("name", MODELS)
def test_fit_gpytorch_mll_fits_the_shared_hyperparameters(name):
    X, Y = _data()
    model = _ours(name, X, Y, noise=None)
    mll = (
        NystromMarginalLogLikelihood(model.likelihood, model)
        if name == "nystrom"
        else CollapsedTitsiasBound(model)
    )
    before = float(mll())
    fit_gpytorch_mll(mll)
    assert float(mll()) > before
    # the fitted model's posterior is the exact GP's with the fitted values
    kernel = model.covar_module if name == "nystrom" else model.model.covar_module
    control = SingleTaskGP(
        X,
        Y,
        covar_module=kernel,
        input_transform=Normalize(D),
        outcome_transform=Standardize(NUM_OUT),
    )
    control.likelihood.noise = model.likelihood.noise.detach()
    mean = 0.0 if name == "nystrom" else model.model.mean_module.constant.detach()
    control.mean_module.constant.data.copy_(torch.as_tensor(mean, dtype=DTYPE))
    test_X = uniform(4, 1, D, seed=6)
    _assert_same(model.posterior(test_X), control.eval().posterior(test_X), 1e-7)
