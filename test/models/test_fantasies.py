r"""Fantasies of both models against BoTorch's ``SingleTaskGP``: with every observed
and fantasized point in the dictionary (``NystromGP``) or among the inducing points
(``DecomposedSamplingSVGP``, whose fantasies are at observed points), their fantasy
models, conditioned models and the knowledge-gradient and integrated-variance values
built on them equal the exact GP's to 1e-8 in float64, shapes included."""

from __future__ import annotations

from copy import deepcopy

import gpytorch
import pytest
import torch
from botorch.acquisition import qKnowledgeGradient, qNegIntegratedPosteriorVariance
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler

from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.variational import DecomposedSamplingSVGP

from ..gp_helpers import DTYPE, rbf_kernel, sine_data, uniform

N, D, SCALE = 12, 2, 3.0


def _exact(model) -> SingleTaskGP:
    r"""The control: ``SingleTaskGP`` on ``model``'s data, kernel, noise and
    transforms (prior mean 0, as both models' at construction)."""
    X, Y = sine_data(N, D, scale=SCALE)
    exact = SingleTaskGP(
        X,
        Y,
        covar_module=rbf_kernel(0.3, 1.5),
        input_transform=Normalize(D),
        outcome_transform=Standardize(1),
    )
    exact.likelihood.noise = model.likelihood.noise.detach().clone()
    exact.eval().posterior(X)  # GPyTorch conditions only after a first prediction
    return exact


def _nystrom() -> NystromGP:
    X, Y = sine_data(N, D, scale=SCALE)
    return NystromGP(
        X,
        Y,
        covar_module=rbf_kernel(0.3, 1.5),
        noise=0.05,
        dictionary=X,
        input_transform=Normalize(D),
        outcome_transform=Standardize(1),
    )


def _svgp() -> DecomposedSamplingSVGP:
    X, Y = sine_data(N, D, scale=SCALE)
    return DecomposedSamplingSVGP(
        X,
        Y,
        num_inducing=N,
        covar_module=rbf_kernel(0.3, 1.5),
        noise=0.05,
        input_transform=Normalize(D),
        outcome_transform=Standardize(1),
    )


MODELS = {"nystrom": _nystrom, "svgp": _svgp}


@pytest.fixture(autouse=True)
def _exact_jitter():
    r"""The SVGP's variational jitter (1e-6 in float64 by default) at 1e-12, so that
    all points inducing is the exact GP to 1e-8."""
    with gpytorch.settings.variational_cholesky_jitter(double_value=1e-12):
        yield


def _observed(*shape: int) -> torch.Tensor:
    r"""Points of the given ``... x d`` shape taken among the observed ones."""
    X, _ = sine_data(N, D, scale=SCALE)
    count = torch.Size(shape[:-1]).numel()
    index = torch.randperm(N, generator=torch.Generator().manual_seed(3))
    return X[index[:count] % N].reshape(shape)


def _assert_same(post, ref) -> None:
    assert post.mean.shape == ref.mean.shape
    for actual, expected in [
        (post.mean, ref.mean),
        (post.distribution.covariance_matrix, ref.distribution.covariance_matrix),
    ]:
        torch.testing.assert_close(actual, expected, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("fantasy_shape", [(3, D), (2, 2, D), (2, 1, D)], ids=str)
@pytest.mark.parametrize(
    "test_shape", [(5, D), (6, 1, 1, 1, D), (3, 1, 1, 4, D)], ids=str
)
def test_fantasy_posteriors_equal_exact_gp(name, fantasy_shape, test_shape):
    model = MODELS[name]()
    exact = _exact(model)
    new_X = _observed(*fantasy_shape)
    fantasies = [
        m.fantasize(new_X, SobolQMCNormalSampler(torch.Size([2]), seed=0))
        for m in (model, exact)
    ]
    assert fantasies[0].batch_shape == fantasies[1].batch_shape
    test_X = uniform(*test_shape, seed=5, scale=SCALE)
    post, ref = (fantasy.posterior(test_X) for fantasy in fantasies)
    _assert_same(post, ref)
    noisy = (fantasy.posterior(test_X, observation_noise=True) for fantasy in fantasies)
    _assert_same(*noisy)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(
    "x_shape, y_batch",
    [((3, D), (4,)), ((2, 3, D), (2,)), ((2, 3, D), (4, 2))],
    ids=str,
)
def test_condition_on_observations_equals_exact_gp(name, x_shape, y_batch):
    model = MODELS[name]()
    exact = _exact(model)
    new_X = _observed(*x_shape)
    new_Y = uniform(*y_batch, x_shape[-2], 1, seed=7)
    conditioned = [m.condition_on_observations(new_X, new_Y) for m in (model, exact)]
    assert conditioned[0].batch_shape == conditioned[1].batch_shape
    test_X = uniform(5, D, seed=5, scale=SCALE)
    _assert_same(*(m.posterior(test_X) for m in conditioned))


@pytest.mark.parametrize("name", MODELS)
def test_knowledge_gradient_and_integrated_variance_equal_exact_gp(name):
    model = MODELS[name]()
    exact = _exact(model)
    q, num_fantasies = 2, 3
    actual = _observed(4, q, D)  # the points conditioned on: observed ones
    fantasy_points = uniform(4, num_fantasies, D, seed=8, scale=SCALE)
    X_kg = torch.cat([actual, fantasy_points], dim=-2)
    mc_points = uniform(7, D, seed=9, scale=SCALE)
    values = []
    for m in (model, exact):
        sampler = SobolQMCNormalSampler(torch.Size([num_fantasies]), seed=1)
        kg = qKnowledgeGradient(m, num_fantasies=num_fantasies, sampler=sampler)
        nipv = qNegIntegratedPosteriorVariance(m, mc_points=mc_points)
        with torch.no_grad():
            values.append(torch.stack([kg(X_kg), nipv(actual)]))
    assert values[0].shape == (2, 4)
    torch.testing.assert_close(values[0], values[1], rtol=1e-8, atol=1e-8)
    # Off the dictionary the model is no longer the exact GP, so its gradient in the
    # points conditioned on is checked by central differences along a direction.
    nipv = qNegIntegratedPosteriorVariance(model, mc_points=mc_points)
    points = actual.clone().requires_grad_(True)
    nipv(points).sum().backward()
    direction = uniform(*actual.shape, seed=10) - 0.5
    with torch.no_grad():
        step = 1e-5 * direction
        difference = (nipv(actual + step) - nipv(actual - step)).sum() / 2e-5
    torch.testing.assert_close(
        (points.grad * direction).sum(), difference, rtol=1e-5, atol=1e-8
    )


def test_svgp_conditioning_is_exact_for_fixed_inducing_points():
    # New points away from Z: q(u) is Titsias' optimum on all data for the fixed Z,
    # equal to the model rebuilt on all data with Z fixed at the old inducing points.
    X, Y = sine_data(30, D, scale=SCALE)
    kernel = rbf_kernel(0.3, 1.5)
    model = DecomposedSamplingSVGP(X[:20], Y[:20], num_inducing=8, covar_module=kernel)
    conditioned = model.condition_on_observations(X[20:], Y[20:])
    assert torch.equal(conditioned.inducing_points, model.inducing_points)
    assert conditioned.train_X.shape == (30, D)
    reference = NystromGP(
        X,
        Y,
        covar_module=deepcopy(kernel),
        noise=float(model.likelihood.noise),
        dictionary=model.inducing_points,
    )
    test_X = uniform(5, D, seed=5, scale=SCALE)
    with gpytorch.settings.variational_cholesky_jitter(double_value=0.0):
        _assert_same(conditioned.posterior(test_X), reference.posterior(test_X))


def test_svgp_fantasy_model_is_frozen_and_bad_input_changes_nothing():
    model = _svgp()
    before = deepcopy(model.state_dict()), model.train_X.clone()
    fantasy = model.fantasize(
        _observed(2, 2, D), SobolQMCNormalSampler(torch.Size([3]))
    )
    assert fantasy.batch_shape == (3, 2) and model.batch_shape == ()
    with pytest.raises(ValueError, match="unbatched"):
        fantasy.update(_observed(1, D), torch.zeros(1, 1, dtype=DTYPE))
    bad = [
        ({"X": _observed(2, D), "Y": torch.zeros(2, 2, dtype=DTYPE)}, ValueError, "Y"),
        (
            {"X": uniform(2, 3, seed=0), "Y": torch.zeros(2, 1, dtype=DTYPE)},
            ValueError,
            "X",
        ),
        ({"X": _observed(2, D).float(), "Y": torch.zeros(2, 1)}, TypeError, "X"),
        (
            {"X": _observed(2, D), "Y": torch.zeros(2, 1, dtype=DTYPE), "noise": 0.1},
            ValueError,
            "noise",
        ),
    ]
    for kwargs, error, name in bad:
        with pytest.raises(error, match=f"`{name}`"):
            model.condition_on_observations(**kwargs)
    assert all(
        torch.equal(a, b)
        for a, b in zip(before[0].values(), model.state_dict().values(), strict=True)
    )
    assert torch.equal(before[1], model.train_X)
