r"""NystromGP against exact references: BoTorch's SingleTaskGP, recomputation from
scratch, and the exact ridge leverage scores; its leverage-score sampling against
hand computations and binomial frequencies. The oracle tests run for float32 and
float64 on every device (references in float64 on the CPU) and for t-batches
``b x q x d`` of posterior points."""

from __future__ import annotations

import pickle
from copy import deepcopy

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound, qUpperConfidenceBound
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Log, Normalize, Standardize
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.means import ZeroMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import GammaPrior

from botorch_sketch import NystromGP, NystromMarginalLogLikelihood
from botorch_sketch.models.dictionary import sample_dictionary

from ..gp_helpers import assert_close, uniform

DTYPE = torch.float64


def make_kernel(
    d: int, lengthscale: float = 0.3, outputscale: float = 1.5, **tkwargs
) -> ScaleKernel:
    kernel = ScaleKernel(RBFKernel(ard_num_dims=d)).to(**{"dtype": DTYPE, **tkwargs})
    kernel.base_kernel.lengthscale = lengthscale
    kernel.outputscale = outputscale
    return kernel


def make_data(n: int, d: int, seed: int = 0, **tkwargs):
    r"""``n x d`` uniform inputs and noisy sine targets, drawn on the CPU in float64
    and moved to ``tkwargs`` (the same numbers for every dtype and device)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=gen, dtype=DTYPE)
    Y = torch.sin(6 * X).sum(-1, keepdim=True) + 0.1 * torch.randn(
        n, 1, generator=gen, dtype=DTYPE
    )
    return X.to(**tkwargs), Y.to(**tkwargs)


def exact_gp(X, Y, kernel, noise):
    r"""The zero-mean exact GP with fixed noise, in float64 on the CPU."""
    X, Y = X.cpu().double(), Y.cpu().double()
    return SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, noise),
        covar_module=deepcopy(kernel).cpu().double(),
        mean_module=ZeroMean(),
        outcome_transform=None,
    )


def assert_posterior_close(post, ref, scale: float = 1.0) -> None:
    r"""Means and joint covariances within :func:`assert_close`'s tolerances."""
    assert post.mean.shape == ref.mean.shape
    assert_close(post.mean, ref.mean, scale)
    assert_close(
        post.distribution.covariance_matrix, ref.distribution.covariance_matrix, scale
    )


def exact_scaled_variances(X, kernel, noise):
    r"""Exact posterior variances at the training points / lambda: the ridge
    leverage scores diag(K (K + lambda I)^{-1})."""
    with torch.no_grad():
        K = kernel(X).to_dense()
        eye = torch.eye(X.shape[0], dtype=X.dtype)
        return torch.linalg.solve(K + noise * eye, K).diagonal()


@pytest.mark.parametrize("batch_shape", [(), (2,), (2, 3)])
@pytest.mark.parametrize("noise", [1e-3, 0.1, 1.0])
def test_full_dictionary_equals_exact_gp(noise, batch_shape, tkwargs):
    X, Y = make_data(60, 3, **tkwargs)
    kernel = make_kernel(3, **tkwargs)
    model = NystromGP(X, Y, covar_module=kernel, noise=noise, dictionary=X)
    exact = exact_gp(X, Y, kernel, noise)
    test_X = uniform(*batch_shape, 4, 3, seed=1)
    for observation_noise in (False, True):
        post = model.posterior(
            test_X.to(**tkwargs), observation_noise=observation_noise
        )
        ref = exact.posterior(test_X, observation_noise=observation_noise)
        assert post.mean.shape == (*batch_shape, 4, 1)
        assert post.mean.dtype == X.dtype and post.mean.device == X.device
        assert_posterior_close(post, ref)


def test_repeated_observations_match_exact_gp(tkwargs):
    X, Y = make_data(30, 2, **tkwargs)
    X = torch.cat([X, X[:10]])  # repeated pulls of ten arms
    Y = torch.cat([Y, Y[:10] + 0.05])
    kernel = make_kernel(2, **tkwargs)
    model = NystromGP(X, Y, covar_module=kernel, noise=0.1, dictionary=X)
    assert model.dictionary_size == 30  # duplicates merged
    exact = exact_gp(X, Y, kernel, 0.1)
    test_X = uniform(20, 1, 2, seed=2)
    post, ref = model.posterior(test_X.to(**tkwargs)), exact.posterior(test_X)
    assert_close(post.mean, ref.mean)
    assert_close(post.variance, ref.variance)


@pytest.mark.parametrize(
    "d, n, lengthscale, qbar", [(1, 400, 0.1, 4.0), (8, 800, 1.5, 4.0)]
)
def test_sampled_dictionary_variance_within_constant_factor(d, n, lengthscale, qbar):
    X, Y = make_data(n, d, seed=1)
    kernel = make_kernel(d, lengthscale, 1.0)
    noise = 0.1
    model = NystromGP(
        X,
        Y,
        covar_module=kernel,
        noise=noise,
        qbar=qbar,
        generator=torch.Generator().manual_seed(3),
    )
    assert model.dictionary_size < n / 2
    exact = exact_gp(X, Y, kernel, noise)
    candidates = torch.rand(
        2000, 1, d, dtype=DTYPE, generator=torch.Generator().manual_seed(4)
    )
    ratio = model.posterior(candidates).variance / exact.posterior(candidates).variance
    # BKB Theorem 1: within a constant factor of the exact variance on both sides.
    assert ratio.min() >= 1 / 3
    assert ratio.max() <= 3.0
    # Far from every observation the variance is the prior one (no starvation).
    far = torch.full((1, 1, d), 10.0, dtype=DTYPE)
    torch.testing.assert_close(
        model.posterior(far).variance.squeeze(), torch.tensor(1.0, dtype=DTYPE)
    )


def test_dictionary_size_tracks_effective_dimension():
    r"""A BKB-style run to t = 2000: update, resparsify; the dictionary stays within a
    constant factor of d_eff (exact ridge leverage scores) and far below t."""
    d, t, noise, qbar = 2, 2000, 1.0, 2.0
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(t, d, generator=gen, dtype=DTYPE)
    Y = torch.sin(6 * X).sum(-1, keepdim=True)
    kernel = make_kernel(d, 0.2, 1.0)
    model = NystromGP(
        X[:50], Y[:50], covar_module=kernel, noise=noise, qbar=qbar, generator=gen
    )
    for start in range(50, t, 50):
        chunk = slice(start, start + 50)
        model = model.condition_on_observations(X[chunk], Y[chunk])
        model.resparsify(generator=gen)
    assert model.train_inputs[0].shape[0] == t
    d_eff = float(exact_scaled_variances(X, kernel, noise).sum())
    m = model.dictionary_size
    assert m <= 3 * qbar * d_eff
    assert m >= d_eff / 2
    assert m < t / 20
    assert abs(model.effective_dimension() - d_eff) <= 0.5 * d_eff


@pytest.mark.parametrize("batch_shape", [(), (2,), (2, 3)])
def test_condition_on_observations_equals_rebuild(batch_shape, tkwargs):
    X, Y = make_data(80, 3, **tkwargs)
    kernel = make_kernel(3, **tkwargs)
    model = NystromGP(
        X[:50],
        Y[:50],
        covar_module=kernel,
        noise=0.05,
        qbar=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    updated = model.condition_on_observations(X[50:], Y[50:])
    assert updated.train_inputs[0].shape[0] == 80
    assert model.train_inputs[0].shape[0] == 50  # the original is untouched
    # from scratch in float64 on the CPU, on the same dictionary
    rebuilt = NystromGP(
        X.cpu().double(),
        Y.cpu().double(),
        covar_module=deepcopy(kernel).cpu().double(),
        noise=0.05,
        dictionary=model.dictionary.cpu().double(),
    )
    test_X = uniform(*batch_shape, 2, 3, seed=3)
    post = updated.posterior(test_X.to(**tkwargs))
    assert_posterior_close(post, rebuilt.posterior(test_X))


def test_condition_then_resparsify_keeps_every_observation(tkwargs):
    X, Y = make_data(100, 2, **tkwargs)
    model = NystromGP(
        X[:60],
        Y[:60],
        covar_module=make_kernel(2, **tkwargs),
        noise=0.1,
        generator=torch.Generator().manual_seed(0),
    )
    new = model.condition_on_observations(
        X[60:], Y[60:], resparsify=True, generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(new.train_inputs[0], X)
    assert torch.equal(new.train_targets, Y.squeeze(-1))
    # the dictionary is a subset of the observed points
    assert (new.dictionary.unsqueeze(1) == X.unsqueeze(0)).all(-1).any(-1).all()


def test_resparsify_seeded_and_never_empty(tkwargs):
    X, Y = make_data(200, 2, **tkwargs)
    model = NystromGP(
        X,
        Y,
        covar_module=make_kernel(2, 5.0, **tkwargs),
        noise=100.0,
        qbar=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    # huge lambda: every probability is tiny, the dictionary must still hold a point
    for seed in range(5):
        model.resparsify(generator=torch.Generator().manual_seed(seed))
        assert model.dictionary_size >= 1
    a, b = (
        deepcopy(model).resparsify(generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    )
    assert torch.equal(a.dictionary, b.dictionary)


def test_fantasize_matches_separate_conditioning(tkwargs):
    X, Y = make_data(40, 2, **tkwargs)
    kernel = make_kernel(2, **tkwargs)
    model = NystromGP(X, Y, covar_module=kernel, noise=0.1, dictionary=X[:20])
    new_X = uniform(3, 2, seed=4, **tkwargs)
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([4]), seed=0)
    fantasy = model.fantasize(new_X, sampler)
    assert fantasy.batch_shape == torch.Size([4])
    test_X = uniform(6, 2, seed=5)
    post = fantasy.posterior(test_X.to(**tkwargs))
    assert post.mean.shape == (4, 6, 1)
    fantasy_Y = fantasy.train_targets[:, -3:]
    for i in range(4):
        # from scratch in float64 on the CPU: the data plus this fantasy
        single = NystromGP(
            torch.cat([X, new_X]).cpu().double(),
            torch.cat([Y.squeeze(-1), fantasy_Y[i]]).unsqueeze(-1).cpu().double(),
            covar_module=deepcopy(kernel).cpu().double(),
            noise=0.1,
            dictionary=X[:20].cpu().double(),
        )
        assert_close(post.mean[i], single.posterior(test_X).mean)


@pytest.mark.parametrize("fantasy_shape", [(2, 2), (2, 1, 2)])
@pytest.mark.parametrize("test_shape", [(1, 2), (2, 1, 2), (4, 1, 1, 1, 2), (5, 2)])
def test_fantasy_posterior_at_single_points_matches_exact_gp(fantasy_shape, test_shape):
    # Issue 26 item 11: fantasies at unbatched points have batched targets but an
    # unbatched V; the q = 1 fast path reshaped their batched means and raised.
    X, Y = make_data(20, 2)
    new_X = uniform(*fantasy_shape, seed=4)
    kernel = make_kernel(2)
    dictionary = torch.cat([X, new_X.reshape(-1, 2)])  # exact: every point inside
    model = NystromGP(X, Y, covar_module=kernel, noise=0.1, dictionary=dictionary)
    exact = SingleTaskGP(X, Y, covar_module=deepcopy(kernel), outcome_transform=None)
    exact.mean_module, exact.likelihood.noise = ZeroMean(), 0.1
    fantasies = [
        m.fantasize(new_X, SobolQMCNormalSampler(torch.Size([2]), seed=0))
        for m in (model, exact.eval())
    ]
    test_X = uniform(*test_shape, seed=5)
    post, ref = (fantasy.posterior(test_X) for fantasy in fantasies)
    assert post.mean.shape == ref.mean.shape
    for actual, expected in [
        (post.mean, ref.mean),
        (post.distribution.covariance_matrix, ref.distribution.covariance_matrix),
    ]:
        torch.testing.assert_close(actual, expected, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(
    "X, error",
    [
        ([[0.5, 0.5]], TypeError),
        (torch.ones(2, 2, dtype=torch.long), TypeError),
        (torch.ones(2, 2, dtype=torch.float32), TypeError),
        (torch.full((2, 2), float("nan"), dtype=DTYPE), ValueError),
        (torch.full((2, 2), float("inf"), dtype=DTYPE), ValueError),
        (torch.full((2, 2), 1e200, dtype=DTYPE), ValueError),
        (torch.ones(2, 3, dtype=DTYPE), ValueError),
        (torch.ones(2, dtype=DTYPE), ValueError),
        (torch.ones(1, 2, 2, dtype=DTYPE), ValueError),
    ],
    ids=["list", "integer", "float32", "NaN", "inf", "huge", "columns", "1-d", "3-d"],
)
def test_scaled_variance_rejects_malformed_points(X, error):
    # Issue 26 item 10: these gave NaN, raw torch errors or silent casts.
    train_X, train_Y = make_data(20, 2)
    model = NystromGP(train_X, train_Y, covar_module=make_kernel(2), noise=0.1)
    with pytest.raises(error, match="`X`"):
        model.scaled_variance(X)
    assert model.scaled_variance(train_X[:0]).shape == (0,)


def test_collapsed_bound_equals_exact_mll_with_full_dictionary(tkwargs):
    X, Y = make_data(40, 2, **tkwargs)
    kernel = make_kernel(2, **tkwargs)
    model = NystromGP(X, Y, covar_module=kernel, noise=0.1, dictionary=X)
    exact = exact_gp(X, Y, kernel, 0.1)
    exact_mll = ExactMarginalLogLikelihood(exact.likelihood, exact)
    exact.train()
    (train_X,) = exact.train_inputs
    reference = exact_mll(exact(train_X), exact.train_targets)
    bound = NystromMarginalLogLikelihood(model.likelihood, model)()
    assert bound.dtype == X.dtype and bound.device == X.device
    assert_close(bound, reference)
    # a smaller dictionary gives a lower bound
    small = NystromGP(X, Y, covar_module=kernel, noise=0.1, dictionary=X[:8])
    assert NystromMarginalLogLikelihood(small.likelihood, small)() < bound


def test_bound_adds_the_log_priors_per_observation():
    X, Y = make_data(15, 2)
    kernel = ScaleKernel(
        RBFKernel(ard_num_dims=2, lengthscale_prior=GammaPrior(3.0, 6.0)),
        outputscale_prior=GammaPrior(2.0, 0.15),
    ).to(DTYPE)
    kernel.base_kernel.lengthscale = torch.tensor([[0.3, 0.7]], dtype=DTYPE)
    model = NystromGP(X, Y, covar_module=kernel, dictionary=X[:6])  # noise prior
    likelihood = model.likelihood
    by_hand = (
        GammaPrior(3.0, 6.0).to(DTYPE).log_prob(kernel.base_kernel.lengthscale).sum()
        + GammaPrior(2.0, 0.15).to(DTYPE).log_prob(kernel.outputscale)
        + likelihood.noise_covar.noise_prior.log_prob(likelihood.noise).sum()
    )
    bound = model.collapsed_log_likelihood()
    value = NystromMarginalLogLikelihood(likelihood, model)()
    torch.testing.assert_close(value, bound + by_hand / 15, atol=1e-12, rtol=0)
    # Without priors (fixed lambda, prior-free kernel) the value is the bound.
    plain = NystromGP(X, Y, covar_module=make_kernel(2), noise=1e-2)
    assert torch.equal(
        NystromMarginalLogLikelihood(plain.likelihood, plain)(),
        plain.collapsed_log_likelihood(),
    )


def test_fit_gpytorch_mll_learns_hyperparameters_and_refreshes():
    X, Y = make_data(150, 2)
    model = NystromGP(X, Y, generator=torch.Generator().manual_seed(0))
    model.posterior(X[:2])  # build the cache with the initial hyperparameters
    mll = NystromMarginalLogLikelihood(model.likelihood, model)
    before = float(mll())
    fit_gpytorch_mll(mll)
    after = float(mll())
    assert after > before
    assert not model.training
    # the refreshed cache matches a model rebuilt with the fitted hyperparameters
    rebuilt = NystromGP(
        X,
        Y,
        covar_module=model.covar_module,
        noise=float(model.noise),
        dictionary=model.dictionary,
    )
    test_X = torch.rand(5, 1, 2, dtype=DTYPE)
    torch.testing.assert_close(
        model.posterior(test_X).mean, rebuilt.posterior(test_X).mean
    )


def test_transforms_match_exact_gp_with_transforms(tkwargs):
    X, Y = make_data(50, 2)
    X = 10 * X - 3
    Y = 5 * Y + 2
    # lengthscale 0.1 of the normalized inputs: cond(K_SS) ~ 3e4 (0.3 gives 1e10,
    # past float32: the DTC factorizes K_SS itself, which the noise does not help)
    kernel = make_kernel(2, 0.1)
    model = NystromGP(
        X.to(**tkwargs),
        Y.to(**tkwargs),
        covar_module=make_kernel(2, 0.1, **tkwargs),
        noise=0.1,
        dictionary=X.to(**tkwargs),
        input_transform=Normalize(d=2),
        outcome_transform=Standardize(m=1),
    )
    exact = SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, 0.1),
        covar_module=deepcopy(kernel),
        mean_module=ZeroMean(),
        input_transform=Normalize(d=2),
        outcome_transform=Standardize(m=1),
    )
    test_X = 10 * uniform(7, 1, 2, seed=6) - 3
    # SingleTaskGP's fixed noise is in the standardized space: match it
    exact.likelihood.noise = torch.full_like(exact.likelihood.noise, 0.1)
    a, b = model.posterior(test_X.to(**tkwargs)), exact.posterior(test_X)
    assert_close(a.mean, b.mean)
    assert_close(a.variance, b.variance)
    # conditioning applies the same (fixed) transforms to new data; the reference is
    # rebuilt in float64 on the CPU with the model's transforms
    new_X = 10 * uniform(5, 2, seed=7) - 3
    new_Y = torch.randn(5, 1, dtype=DTYPE, generator=torch.Generator().manual_seed(8))
    c = model.condition_on_observations(new_X.to(**tkwargs), new_Y.to(**tkwargs))
    rebuilt = NystromGP(
        torch.cat([X, new_X]),
        torch.cat([Y, new_Y]),
        covar_module=kernel,
        noise=0.1,
        dictionary=X,
        input_transform=deepcopy(model.input_transform).cpu().double(),
        outcome_transform=deepcopy(model.outcome_transform).cpu().double(),
    )
    assert c.train_inputs[0].shape == (55, 2)
    assert_close(c.train_inputs[0], rebuilt.train_inputs[0])
    assert_close(c.posterior(test_X.to(**tkwargs)).mean, rebuilt.posterior(test_X).mean)


def test_botorch_acquisition_interop():
    X, Y = make_data(60, 2)
    model = NystromGP(
        X,
        Y,
        covar_module=make_kernel(2),
        noise=0.1,
        generator=torch.Generator().manual_seed(0),
    )
    choices = torch.rand(500, 2, dtype=DTYPE)
    ucb = UpperConfidenceBound(model, beta=4.0)
    best, value = optimize_acqf_discrete(ucb, q=1, choices=choices)
    post = model.posterior(choices.unsqueeze(-2))
    scores = post.mean.squeeze() + 2.0 * post.variance.sqrt().squeeze()
    torch.testing.assert_close(best, choices[scores.argmax()].unsqueeze(0))
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    qucb = qUpperConfidenceBound(model, beta=4.0)
    cands, _ = optimize_acqf(qucb, bounds=bounds, q=3, num_restarts=2, raw_samples=32)
    assert cands.shape == (3, 2)


def test_state_dict_and_pickle_round_trip():
    X, Y = make_data(60, 2)
    model = NystromGP(
        X,
        Y,
        covar_module=ScaleKernel(MaternKernel(nu=2.5)),
        noise=0.1,
        generator=torch.Generator().manual_seed(0),
    )
    model.covar_module.base_kernel.lengthscale = 0.4
    test_X = torch.rand(5, 1, 2, dtype=DTYPE)
    clone = pickle.loads(pickle.dumps(model))
    torch.testing.assert_close(
        clone.posterior(test_X).mean, model.posterior(test_X).mean
    )
    # the state dict does not depend on the number of observations
    other = NystromGP(
        X[:20],
        Y[:20],
        covar_module=ScaleKernel(MaternKernel(nu=2.5)),
        noise=0.1,
        dictionary=model.dictionary,
    )
    other.load_state_dict(model.state_dict())
    other.train()
    other.eval()
    assert torch.equal(
        other.covar_module.base_kernel.lengthscale,
        model.covar_module.base_kernel.lengthscale,
    )


def test_joint_posterior_at_nearly_repeated_points_samples(tkwargs):
    X, Y = make_data(30, 2, **tkwargs)
    model = NystromGP(
        X, Y, covar_module=make_kernel(2, **tkwargs), noise=0.1, dictionary=X
    )
    test_X = torch.cat([X[:2], X[:2] + 1e-9, X[:1]]).unsqueeze(0)  # singular joint
    posterior = model.posterior(test_X)
    samples = posterior.rsample(torch.Size([8]))
    assert samples.shape == (8, 1, 5, 1)
    assert torch.isfinite(samples).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"train_X": torch.full((5, 2), float("nan"), dtype=DTYPE)}, "train_X"),
        ({"train_Y": torch.tensor([[float("inf")]] * 5, dtype=DTYPE)}, "train_Y"),
        ({"train_Y": torch.zeros(4, 1, dtype=DTYPE)}, "train_Y"),
        (
            {
                "train_X": torch.zeros(0, 2, dtype=DTYPE),
                "train_Y": torch.zeros(0, 1, dtype=DTYPE),
            },
            "train_X",
        ),
        ({"noise": 0.0}, "noise"),
        ({"noise": -1.0}, "noise"),
        ({"qbar": 0.5}, "qbar"),
        ({"dictionary": torch.zeros(3, 4, dtype=DTYPE)}, "dictionary"),
    ],
)
def test_bad_construction_inputs(kwargs, match):
    args = {
        "train_X": torch.rand(5, 2, dtype=DTYPE),
        "train_Y": torch.rand(5, 1, dtype=DTYPE),
    }
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        NystromGP(**args)


@pytest.mark.parametrize(
    "X, Y, match",
    [
        (
            torch.full((2, 2), float("nan"), dtype=DTYPE),
            torch.zeros(2, 1, dtype=DTYPE),
            "`X`",
        ),
        (
            torch.zeros(2, 2, dtype=DTYPE),
            torch.full((2, 1), float("inf"), dtype=DTYPE),
            "`Y`",
        ),
        (torch.zeros(2, 3, dtype=DTYPE), torch.zeros(2, 1, dtype=DTYPE), "`X`"),
        (torch.zeros(2, 2, dtype=DTYPE), torch.zeros(3, 1, dtype=DTYPE), "`Y`"),
    ],
)
def test_bad_conditioning_inputs_leave_model_unchanged(X, Y, match):
    train_X, train_Y = make_data(20, 2)
    model = NystromGP(train_X, train_Y, noise=0.1, dictionary=train_X[:5])
    before = model.posterior(train_X[:3]).mean.clone()
    with pytest.raises(ValueError, match=match):
        model.condition_on_observations(X, Y)
    with pytest.raises(ValueError, match="noise"):
        model.condition_on_observations(
            train_X[:2], train_Y[:2], noise=torch.ones(2, 1)
        )
    assert model.train_inputs[0].shape[0] == 20
    torch.testing.assert_close(model.posterior(train_X[:3]).mean, before)


def _model_state(model):
    r"""Data, dictionary and hyperparameters: what a rejected call must not move."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["X"] = model.train_inputs[0].clone()
    state["y"] = model.train_targets.clone()
    state["dictionary"] = model.dictionary.clone()
    return state


def _assert_same_state(before, after):
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key


@pytest.mark.parametrize("q", [1, 4])
def test_candidates_are_scored_independently(q):
    # Issue 14 item 8: one far-away candidate changed (NaN'd) every other one's mean
    # and variance, because GPyTorch centres squared distances on the batch mean.
    X, Y = make_data(30, 2)
    model = NystromGP(X, Y, covar_module=make_kernel(2), noise=0.1)
    candidates = torch.rand(
        8, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(1)
    )
    far = candidates.clone()
    far[2] = torch.tensor([1e30, -1e30], dtype=DTYPE)
    shape = (8 // q, q, 2)
    clean = model.posterior(candidates.reshape(shape))
    mixed = model.posterior(far.reshape(shape))
    keep = torch.ones(8, dtype=torch.bool)
    keep[2] = False
    for a, b in ((clean.mean, mixed.mean), (clean.variance, mixed.variance)):
        torch.testing.assert_close(
            a.reshape(-1)[keep], b.reshape(-1)[keep], rtol=1e-10, atol=1e-12
        )
    # the far candidate gets the prior (mean 0, prior variance)
    assert float(mixed.mean.reshape(-1)[2]) == 0.0
    assert float(mixed.variance.reshape(-1)[2]) == pytest.approx(1.5)


def test_absurd_inputs_are_rejected_where_they_enter():
    X, Y = make_data(20, 2)
    far = X.clone()
    far[0] = 1e300
    with pytest.raises(ValueError, match="`train_X`"):
        NystromGP(far, Y, noise=0.1)
    with pytest.raises(ValueError, match="`dictionary`"):
        NystromGP(X, Y, noise=0.1, dictionary=far[:3])
    model = NystromGP(X, Y, covar_module=make_kernel(2), noise=0.1)
    before = _model_state(model)
    with pytest.raises(ValueError, match="`X`"):
        model.condition_on_observations(far[:3], Y[:3])
    with pytest.raises(ValueError, match="`X`"):
        model.posterior(far[:3])
    with pytest.raises(ValueError, match="`dictionary`"):
        model.set_dictionary(far[:3])
    with pytest.raises(ValueError, match="`Y`"):
        model.condition_on_observations(X[:3], torch.full((3, 1), 1e300, dtype=DTYPE))
    _assert_same_state(before, _model_state(model))
    # the model still serves its posterior, as one rebuilt from scratch does
    rebuilt = NystromGP(
        X, Y, covar_module=make_kernel(2), noise=0.1, dictionary=model.dictionary
    )
    assert_close(model.posterior(X).mean, rebuilt.posterior(X).mean)


def test_one_error_vocabulary_for_bad_arguments():
    # Issue 14 items 9 and 11.
    X, Y = make_data(20, 2)
    with pytest.raises(TypeError, match="`covar_module`"):
        NystromGP(X, Y, covar_module="rbf")
    batched = ScaleKernel(RBFKernel(batch_shape=torch.Size([2]))).to(DTYPE)
    with pytest.raises(ValueError, match="`covar_module`"):
        NystromGP(X, Y, covar_module=batched)
    with pytest.raises(ValueError, match="`noise`"):
        NystromGP(X, Y, noise=1e-300)
    with pytest.raises(TypeError, match="`train_X`"):
        NystromGP(X.half(), Y.half())
    with pytest.raises(TypeError, match="`generator`"):
        NystromGP(X, Y, generator=3)
    with pytest.raises(ValueError, match="`train_Y`"):
        NystromGP(X, Y * 1e300, noise=0.1, outcome_transform=Standardize(1))
    with pytest.raises(ValueError, match="`train_Y`"):
        NystromGP(X, Y - 10.0, noise=0.1, outcome_transform=Log())
    model = NystromGP(
        X,
        Y - Y.min() + 1.0,
        noise=0.1,
        input_transform=Normalize(2),
        outcome_transform=Log(),
    )
    before = _model_state(model)
    for bad in (torch.rand(2, dtype=DTYPE), torch.rand(4, 3, dtype=DTYPE)):
        with pytest.raises(ValueError, match="`X`"):
            model.posterior(bad)
    for bad in (torch.ones(4, 2, dtype=torch.long), torch.ones(4, 2, dtype=torch.bool)):
        with pytest.raises(TypeError, match="`X`"):
            model.posterior(bad)
        with pytest.raises(TypeError, match="`X`"):
            model.condition_on_observations(bad, Y[:4])
    with pytest.raises(TypeError, match="`X`"):
        model.condition_on_observations(X[:3].half(), Y[:3].half())
    with pytest.raises(ValueError, match="`Y`"):
        model.condition_on_observations(X[:3], -torch.ones(3, 1, dtype=DTYPE))
    _assert_same_state(before, _model_state(model))


def test_batched_variance_model_is_rejected():
    # Issue 14 item 11: a batched variance_model collapsed the dictionary.
    X, Y = make_data(20, 2)
    model = NystromGP(X, Y, covar_module=make_kernel(2), noise=0.1)
    fantasy = model.condition_on_observations(
        X[:2].expand(3, 2, 2), Y[:2].expand(3, 2, 1)
    )
    before = _model_state(model)
    with pytest.raises(ValueError, match="`variance_model`"):
        model.resparsify(variance_model=fantasy)
    with pytest.raises(TypeError, match="`variance_model`"):
        model.resparsify(variance_model=exact_gp(X, Y, make_kernel(2), 0.1))
    with pytest.raises(TypeError, match="`generator`"):
        model.resparsify(generator=0)
    _assert_same_state(before, _model_state(model))


def test_dictionary_too_spread_for_the_kernel_is_rejected():
    # Found by the property suite: a dictionary point at 2**40 (lengthscale 0.3)
    # made K_SS lose all precision; the model was built and failed at first use.
    X, Y = make_data(12, 2)
    far = X[:4].clone()
    far[0, 0] = 2.0**40
    with pytest.raises(ValueError, match="`dictionary`"):
        NystromGP(X, Y, covar_module=make_kernel(2), noise=0.1, dictionary=far)
    model = NystromGP(X, Y, covar_module=make_kernel(2), noise=0.1)
    before = _model_state(model)
    with pytest.raises(ValueError, match="`dictionary`"):
        model.set_dictionary(far)
    _assert_same_state(before, _model_state(model))


def test_hyperparameters_set_after_construction_are_used(tkwargs):
    # The constructor now factorizes eagerly (to reject bad data at the door); a
    # hyperparameter set afterwards must still be used, as before.
    X, Y = make_data(20, 2, **tkwargs)
    lengthscale = torch.tensor([[0.5, 0.2]])
    model = NystromGP(
        X, Y, covar_module=make_kernel(2, **tkwargs), noise=0.1, dictionary=X
    )
    model.covar_module.base_kernel.lengthscale = lengthscale.to(**tkwargs)
    test_X = uniform(5, 1, 2, seed=2)
    reference = make_kernel(2)
    reference.base_kernel.lengthscale = lengthscale
    exact = exact_gp(X, Y, reference, 0.1).eval()
    assert_close(
        model.posterior(test_X.to(**tkwargs)).mean, exact.posterior(test_X).mean
    )


def test_cpu_generator_drives_data_on_every_device(tkwargs):
    # A CUDA run with a CPU generator (what a BoTorch user passes) failed in
    # sample_dictionary: "Expected a 'cuda' device type for generator".
    p = torch.tensor([0.1, 0.6, 0.3, 0.9, 0.5], **tkwargs)
    selected = sample_dictionary(p, torch.Generator().manual_seed(5))
    cpu = sample_dictionary(p.cpu(), torch.Generator().manual_seed(5))
    assert selected.device == p.device
    assert torch.equal(selected.cpu(), cpu)
    X, Y = (t.to(**tkwargs) for t in make_data(100, 2))
    kernel = make_kernel(2).to(**tkwargs)
    model = NystromGP(
        X, Y, covar_module=kernel, noise=0.1, generator=torch.Generator().manual_seed(0)
    )
    on_cpu = NystromGP(
        X.cpu(),
        Y.cpu(),
        covar_module=deepcopy(kernel).cpu(),
        noise=0.1,
        generator=torch.Generator().manual_seed(0),
    )
    assert model.dictionary.device == X.device
    assert torch.equal(model.dictionary.cpu(), on_cpu.dictionary)
    model.resparsify(generator=torch.Generator().manual_seed(1))
    on_cpu.resparsify(generator=torch.Generator().manual_seed(1))
    assert torch.equal(model.dictionary.cpu(), on_cpu.dictionary)
    # and the reverse: a generator on the device drives CPU data
    generator = torch.Generator(device=tkwargs["device"]).manual_seed(2)
    on_cpu.resparsify(generator=generator)
    assert on_cpu.dictionary.device.type == "cpu" and on_cpu.dictionary_size >= 1
