r"""DecomposedSamplingSVGP against exact references: the Titsias/DTC predictive and
collapsed bound written out densely, GPyTorch's natural-gradient step, BoTorch's
SingleTaskGP and from-scratch rebuilds. The oracle tests run for float32 and float64
on every device (dense references in float64 on the CPU, with the model's own
jitter) and for t-batches ``b x q x d`` of posterior points."""

import copy

import gpytorch
import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Log, Normalize, Standardize
from botorch.models.utils.inducing_point_allocators import (
    ExpectedImprovementQualityFunction,
)
from gpytorch.kernels import ScaleKernel
from gpytorch.likelihoods import BernoulliLikelihood, GaussianLikelihood
from gpytorch.means import ConstantMean
from gpytorch.mlls import ExactMarginalLogLikelihood, VariationalELBO

from botorch_sketch.models import inducing
from botorch_sketch.models.dtc import (
    DTCState,
    collapsed_log_likelihood,
    dictionary_cholesky,
)
from botorch_sketch.models.inducing import select_inducing_indices
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

from ..gp_helpers import (
    DTYPE,
    NOISE,
    ShapeRecordingRBF,
    assert_close,
    rbf_kernel,
    sine_data,
    transformed_svgp,
    uniform,
)


def _kernel(lengthscale=0.3, dtype=DTYPE, device=None):
    return rbf_kernel(lengthscale, 1.5, dtype, device)


def _cpu64(*tensors):
    return tuple(t.detach().cpu().double() for t in tensors)


#: Variational jitter of the "all points are inducing points" oracles per dtype: it
#: perturbs the predictive by about ``jitter / noise``, below the tolerances of
#: :func:`assert_close`.
EXACT_JITTER = {"float_value": 1e-6, "double_value": 1e-12}


def _dense(kernel, A, B=None):
    with torch.no_grad():
        return kernel(A, A if B is None else B).to_dense()


def _dtc_reference(model, X_test):
    r"""Analytic Titsias/DTC predictive at ``N x d`` points from the model's Z,
    kernel, mean, noise and jitter, dense in float64 on the CPU."""
    inner = model.model
    jitter = inner.variational_strategy.jitter_val
    kernel = copy.deepcopy(inner.covar_module).cpu().double()
    mean_module = copy.deepcopy(inner.mean_module).cpu().double()
    X, y, Z = _cpu64(inner.train_inputs[0], inner.train_targets, model.inducing_points)
    X_test = X_test.cpu().double()
    noise = float(model.likelihood.noise)
    with torch.no_grad():
        residual = y - mean_module(X)
        test_mean = mean_module(X_test)
    K_zz = _dense(kernel, Z) + jitter * torch.eye(Z.shape[0], dtype=DTYPE)
    K_zx, K_zt = _dense(kernel, Z, X), _dense(kernel, Z, X_test)
    sigma = torch.linalg.inv(K_zz + K_zx @ K_zx.T / noise)
    mean = test_mean + K_zt.T @ sigma @ K_zx @ residual / noise
    covariance = (
        _dense(kernel, X_test)
        + jitter * torch.eye(X_test.shape[0], dtype=DTYPE)
        - K_zt.T @ torch.linalg.solve(K_zz, K_zt)
        + K_zt.T @ sigma @ K_zt
    )
    return mean, covariance


def test_titsias_whitened_q_matches_unwhitened_formula(tkwargs):
    g = torch.Generator().manual_seed(1)
    Z, X = torch.rand(6, 2, generator=g, dtype=DTYPE), torch.rand(30, 2, generator=g)
    X = X.to(DTYPE)
    residual = torch.randn(30, generator=g, dtype=DTYPE)
    kernel = _kernel()
    K_zz = _dense(kernel, Z) + 1e-6 * torch.eye(6, dtype=DTYPE)
    K_zx = _dense(kernel, Z, X)
    L = torch.linalg.cholesky(K_zz)
    # Titsias (2009): S = K (K + K_zx K_xz / s2)^{-1} K, m = S K^{-1} K_zx r / s2.
    inner = torch.linalg.inv(K_zz + K_zx @ K_zx.T / NOISE)
    S = K_zz @ inner @ K_zz
    m = K_zz @ inner @ K_zx @ residual / NOISE
    Z_, X_, residual_, L_ = (t.to(**tkwargs) for t in (Z, X, residual, L))
    noise = torch.tensor(NOISE, **tkwargs)
    with torch.no_grad():
        state = DTCState.build(
            _kernel(**tkwargs), Z_, X_, residual_, noise, chol_dictionary=L_
        )
    mean_w, chol_w = state.whitened_q()
    assert_close(L_ @ mean_w, m)
    assert_close(L_ @ chol_w @ chol_w.T @ L_.T, S)
    assert torch.equal(chol_w, chol_w.tril()) and bool((chol_w.diagonal() > 0).all())


@pytest.mark.parametrize("batch_shape", [(), (2,), (2, 3)])
def test_posterior_equals_titsias_dtc_predictive(batch_shape, tkwargs):
    X, Y = sine_data(n=80, **tkwargs)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=15, covar_module=_kernel(**tkwargs), noise=NOISE
    )
    assert model.inducing_points.shape == (15, 2)
    X_test = uniform(*batch_shape, 3, 2, seed=3)
    posterior = model.posterior(X_test.to(**tkwargs))
    assert posterior.mean.shape == (*batch_shape, 3, 1)
    assert posterior.mean.dtype == X.dtype and posterior.mean.device == X.device
    mean, covariance = _dtc_reference(model, X_test.reshape(-1, 2))
    # the joint predictive of each t-batch is its block of the flat one
    blocks = covariance.reshape(-1, 3, covariance.shape[-1] // 3, 3)
    blocks = blocks.diagonal(dim1=0, dim2=2).permute(2, 0, 1)
    assert_close(posterior.mean.reshape(-1), mean)
    assert_close(posterior.covariance_matrix.reshape(-1, 3, 3), blocks)


def test_closed_form_q_equals_one_natural_gradient_step(tkwargs):
    X, Y = sine_data(n=40, **tkwargs)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=12, covar_module=_kernel(**tkwargs), noise=NOISE
    )
    # GPyTorch's natural-gradient SVGP in float64 on the CPU, with the model's Z
    # and jitter
    (Z,) = _cpu64(model.inducing_points)
    jitter = model.model.variational_strategy.jitter_val

    class NaturalSVGP(gpytorch.models.ApproximateGP):
        def __init__(self):
            distribution = gpytorch.variational.NaturalVariationalDistribution(
                Z.shape[0]
            ).to(Z)
            super().__init__(
                gpytorch.variational.VariationalStrategy(
                    self,
                    Z,
                    distribution,
                    learn_inducing_locations=False,
                    jitter_val=jitter,
                )
            )
            self.mean_module = copy.deepcopy(model.model.mean_module).cpu().double()
            self.covar_module = _kernel()

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    natural = NaturalSVGP()
    likelihood = GaussianLikelihood().to(Z)
    likelihood.noise = NOISE
    elbo = VariationalELBO(likelihood, natural, num_data=40)
    optimizer = gpytorch.optim.NGD(
        natural.variational_parameters(), num_data=40, lr=1.0
    )
    natural.train()
    optimizer.zero_grad()
    X64, Y64 = _cpu64(X, Y)
    (-elbo(natural(X64), Y64.squeeze(-1))).backward()
    optimizer.step()
    natural.eval()
    X_test = uniform(9, 2, seed=4)
    expected = natural(X_test)
    posterior = model.posterior(X_test.to(**tkwargs))
    assert_close(posterior.mean.squeeze(-1), expected.mean)
    assert_close(posterior.covariance_matrix, expected.covariance_matrix)


@pytest.mark.parametrize("transforms", [False, True])
def test_all_distinct_points_recover_exact_gp(transforms, tkwargs):
    X, Y = sine_data(n=25, scale=3.0 if transforms else 1.0)
    kwargs = {}
    if transforms:
        kwargs = {"input_transform": Normalize(2), "outcome_transform": Standardize(1)}
    with gpytorch.settings.variational_cholesky_jitter(**EXACT_JITTER):
        model = DecomposedSamplingSVGP(
            X.to(**tkwargs),
            Y.to(**tkwargs),
            num_inducing=40,
            covar_module=_kernel(**tkwargs),
            noise=NOISE,
            **copy.deepcopy(kwargs),
        )
        assert model.inducing_points.shape[0] == 25
        exact = SingleTaskGP(
            X,
            Y,
            train_Yvar=torch.full_like(Y, NOISE),
            covar_module=_kernel(),
            mean_module=ConstantMean().to(DTYPE),
            outcome_transform=kwargs.get("outcome_transform"),
            input_transform=kwargs.get("input_transform"),
        ).eval()
        X_test = uniform(8, 2, seed=5) * (3.0 if transforms else 1.0)
        ours = model.posterior(X_test.to(**tkwargs))
        theirs = exact.posterior(X_test)
    assert_close(ours.mean, theirs.mean)
    assert_close(ours.covariance_matrix, theirs.covariance_matrix)


def test_collapsed_bound_matches_dense_formula_and_elbo(tkwargs):
    X, Y = sine_data(n=30, **tkwargs)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=8, covar_module=_kernel(**tkwargs), noise=NOISE
    )
    inner = model.model
    Z, jitter = model.inducing_points, inner.variational_strategy.jitter_val
    y = inner.train_targets
    with torch.no_grad():
        mean = inner.mean_module(X)
        chol = dictionary_cholesky(inner.covar_module, Z, jitter)
        bound = collapsed_log_likelihood(
            inner.covar_module,
            Z,
            X,
            y - mean,
            model.likelihood.noise,
            chol_dictionary=chol,
        )
    # dense in float64 on the CPU
    kernel = _kernel()
    Z64, X64, y64, mean64 = _cpu64(Z, X, y, mean)
    K_zz = _dense(kernel, Z64) + jitter * torch.eye(8, dtype=DTYPE)
    K_zx, K_xx = _dense(kernel, Z64, X64), _dense(kernel, X64)
    Q = K_zx.T @ torch.linalg.solve(K_zz, K_zx)
    gaussian = torch.distributions.MultivariateNormal(
        mean64, Q + NOISE * torch.eye(30, dtype=DTYPE)
    )
    expected = (gaussian.log_prob(y64) - (K_xx - Q).trace() / (2 * NOISE)) / 30
    assert bound.dtype == X.dtype and bound.device == X.device
    assert_close(bound, expected)
    # The uncollapsed ELBO at the closed-form q(u) attains the collapsed bound; GPyTorch
    # adds the strategy's jitter to every predictive variance: -n jitter / (2 noise).
    inner.train()
    likelihood = model.likelihood.train()
    with torch.no_grad():
        elbo = VariationalELBO(likelihood, inner, num_data=30)(inner(X), y)
    assert_close(elbo, expected - jitter / (2 * NOISE))


def test_collapsed_bound_with_all_points_is_exact_marginal_likelihood(tkwargs):
    X, Y = sine_data(n=20)
    with gpytorch.settings.variational_cholesky_jitter(**EXACT_JITTER):
        model = DecomposedSamplingSVGP(
            X.to(**tkwargs),
            Y.to(**tkwargs),
            num_inducing=20,
            covar_module=_kernel(**tkwargs),
            noise=NOISE,
        )
        bound = CollapsedTitsiasBound(model)()
    exact = SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, NOISE),
        covar_module=_kernel(),
        mean_module=ConstantMean().to(DTYPE),
        outcome_transform=None,
    )
    mll = ExactMarginalLogLikelihood(exact.likelihood, exact)
    value = mll(exact(X), Y.squeeze(-1))  # per data point, no priors in either model
    assert bound.dtype == tkwargs["dtype"]
    assert_close(bound, value)


def test_fit_gpytorch_mll_on_collapsed_bound_then_refresh():
    X, Y = sine_data(n=60, seed=2)
    model = DecomposedSamplingSVGP(X, Y, num_inducing=10, covar_module=_kernel(1.0))
    mll = CollapsedTitsiasBound(model)
    with torch.no_grad():
        before = float(mll())
    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": 30}})
    with torch.no_grad():
        after = float(mll())
    assert after > before + 0.1
    assert not any(p.requires_grad for p in model.model.variational_parameters())
    X_test = torch.rand(5, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(6))
    posterior = model.posterior(X_test)
    # A fresh model with the fitted hyperparameters: Z and q(u) must have been redone.
    fresh = DecomposedSamplingSVGP(
        X,
        Y,
        num_inducing=10,
        covar_module=copy.deepcopy(model.model.covar_module),
        mean_module=copy.deepcopy(model.model.mean_module),
        likelihood=copy.deepcopy(model.likelihood),
    )
    torch.testing.assert_close(model.inducing_points, fresh.inducing_points)
    torch.testing.assert_close(posterior.mean, fresh.posterior(X_test).mean)


def test_fixed_noise_is_not_fitted():
    X, Y = sine_data(n=30, seed=3)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=8, covar_module=_kernel(), noise=NOISE
    )
    fit_gpytorch_mll(
        CollapsedTitsiasBound(model), optimizer_kwargs={"options": {"maxiter": 10}}
    )
    assert float(model.likelihood.noise) == pytest.approx(NOISE, rel=1e-12)


def test_update_equals_model_built_on_all_data(tkwargs):
    X, Y = sine_data(n=70, seed=4, scale=2.0, **tkwargs)

    def build(X_, Y_):
        return transformed_svgp(X_, Y_, 12, _kernel(0.2, **tkwargs))

    model = build(X[:50], Y[:50])
    model.update(X[50:], Y[50:])
    fresh = build(X, Y)  # from scratch
    assert model.train_X.shape == (70, 2)
    assert torch.equal(model.inducing_points, fresh.inducing_points)
    X_test = uniform(2, 3, 2, seed=7, scale=2.0, **tkwargs)
    a, b = model.posterior(X_test), fresh.posterior(X_test)
    assert a.mean.shape == (2, 3, 1)
    assert_close(a.mean, b.mean)
    assert_close(a.variance, b.variance)


def _transformed_model(X, Y, lengthscale, mean_constant=0.0, num_inducing=40):
    model = transformed_svgp(X, Y, num_inducing, _kernel(lengthscale))
    model.model.mean_module.constant = mean_constant
    return model


def test_state_dict_does_not_depend_on_the_number_of_observations():
    X, Y = sine_data(n=70, seed=9, scale=2.0)
    full = _transformed_model(X, Y, 0.17, mean_constant=0.3, num_inducing=12)
    small = _transformed_model(X[:20], Y[:20], 0.5)
    shapes = {key: value.shape for key, value in full.state_dict().items()}
    assert shapes == {key: value.shape for key, value in small.state_dict().items()}
    assert not any("variational" in key for key in shapes)
    X_test = 2 * torch.rand(
        6, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(10)
    )
    with gpytorch.settings.variational_cholesky_jitter(double_value=1e-10):
        assert not small.load_state_dict(full.state_dict()).missing_keys
        ours = small.posterior(X_test)
    # Oracle: the exact GP (m = n = 20) on the small data, transformed with the
    # full-data transforms, with the full model's hyperparameters.
    transform_X = full.input_transform.eval()
    offset, scale = full.outcome_transform.means, full.outcome_transform.stdvs
    exact = SingleTaskGP(
        transform_X(X[:20]),
        (Y[:20] - offset) / scale,
        train_Yvar=torch.full_like(Y[:20], NOISE) / scale**2,
        covar_module=_kernel(0.17),
        mean_module=ConstantMean().to(DTYPE),
        outcome_transform=None,
    ).eval()
    exact.mean_module.constant = 0.3
    with torch.no_grad():
        theirs = exact.posterior(transform_X(X_test))
    torch.testing.assert_close(
        ours.mean, theirs.mean * scale + offset, atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        ours.variance, theirs.variance * scale**2, atol=1e-6, rtol=0
    )

    small.load_state_dict(full.state_dict(), keep_transforms=False)
    fresh = _transformed_model(X[:20], Y[:20], 0.17, mean_constant=0.3)
    torch.testing.assert_close(
        small.posterior(X_test).mean, fresh.posterior(X_test).mean
    )


def test_hyperparameter_change_triggers_refresh(tkwargs):
    X, Y = sine_data(n=40, seed=5, **tkwargs)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=10, covar_module=_kernel(0.3, **tkwargs)
    )
    X_test = uniform(4, 2, seed=8, **tkwargs)
    model.posterior(X_test)
    model.model.covar_module.base_kernel.lengthscale = 0.15
    fresh = DecomposedSamplingSVGP(
        X, Y, num_inducing=10, covar_module=_kernel(0.15, **tkwargs)
    )
    assert_close(model.posterior(X_test).mean, fresh.posterior(X_test).mean)
    assert torch.equal(model.inducing_points, fresh.inducing_points)


def test_improvement_quality_uses_the_model_before_the_update():
    X, Y = sine_data(n=80, seed=8)
    model = DecomposedSamplingSVGP(
        X[:50],
        Y[:50],
        num_inducing=10,
        covar_module=_kernel(0.2),
        noise=NOISE,
        inducing_quality="improvement",
        outcome_transform=Standardize(1),
    )
    with torch.no_grad():
        quality = ExpectedImprovementQualityFunction(model, maximize=True)(X)
    model.update(X[50:], Y[50:])
    expected = select_inducing_indices(X, model.model.covar_module, 10, quality=quality)
    torch.testing.assert_close(model.inducing_points, X[expected])
    plain = DecomposedSamplingSVGP(
        X, Y, num_inducing=10, covar_module=_kernel(0.2), noise=NOISE
    )
    assert not torch.equal(plain.inducing_points, model.inducing_points)


def test_fresh_improvement_model_weights_by_the_variance_models_ei():
    X, Y = sine_data(n=60, seed=11)
    options = {
        "num_inducing": 10,
        "covar_module": _kernel(0.2),
        "noise": NOISE,
    }
    plain = DecomposedSamplingSVGP(X, Y, **copy.deepcopy(options))
    with torch.no_grad():
        quality = ExpectedImprovementQualityFunction(plain, maximize=True)(X)
    model = DecomposedSamplingSVGP(
        X, Y, inducing_quality="improvement", **copy.deepcopy(options)
    )
    expected = select_inducing_indices(X, model.model.covar_module, 10, quality=quality)
    torch.testing.assert_close(model.inducing_points, X[expected])
    assert not torch.equal(plain.inducing_points, model.inducing_points)
    single = DecomposedSamplingSVGP(
        X[:1], Y[:1], inducing_quality="improvement", **copy.deepcopy(options)
    )
    torch.testing.assert_close(single.inducing_points, X[:1])


@pytest.mark.parametrize("quality", ["variance", "improvement"])
def test_updates_and_variances_never_build_n_by_n_blocks(quality, monkeypatch):
    # the selection forms K_XX below FULL_KERNEL_ROWS by design; nothing else does
    monkeypatch.setattr(inducing, "FULL_KERNEL_ROWS", 0)
    X, Y = sine_data(n=400, seed=9)
    base = ShapeRecordingRBF()
    kernel = ScaleKernel(base).to(DTYPE)
    model = DecomposedSamplingSVGP(
        X[:300], Y[:300], num_inducing=20, covar_module=kernel, inducing_quality=quality
    )
    base.blocks.clear()
    model.update(X[300:], Y[300:])
    variance = model.posterior(X).variance
    assert torch.isfinite(variance).all()
    assert max(rows * cols for rows, cols in base.blocks) == 20 * 400


def test_repeated_points_give_distinct_inducing_points(tkwargs):
    X, Y = sine_data(n=10, seed=6, **tkwargs)
    X, Y = X.repeat(5, 1), Y.repeat(5, 1)
    model = DecomposedSamplingSVGP(
        X, Y, num_inducing=30, covar_module=_kernel(0.2, **tkwargs)
    )
    Z = model.inducing_points
    assert Z.shape[0] == 10
    assert len(torch.unique(Z, dim=0)) == 10
    assert torch.isfinite(model.posterior(X[:3]).variance).all()


def test_randomized_selection_is_reproducible_with_a_cpu_generator(tkwargs):
    X, Y = sine_data(n=50, seed=7)

    def build(seed, **kwargs):
        return DecomposedSamplingSVGP(
            X.to(**kwargs),
            Y.to(**kwargs),
            num_inducing=10,
            covar_module=_kernel(**kwargs),
            randomized_selection=True,
            generator=torch.Generator().manual_seed(seed),
        ).inducing_points.cpu()

    first = build(0, **tkwargs)
    assert torch.equal(first, build(0, **tkwargs))
    assert torch.equal(first, build(0, dtype=tkwargs["dtype"]))  # as on the CPU
    assert not torch.equal(first, build(1, **tkwargs))


def test_bad_inputs_raise_before_state_changes():
    X, Y = sine_data(n=20)
    bad = X.clone()
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match="train_X"):
        DecomposedSamplingSVGP(bad, Y)
    with pytest.raises(ValueError, match="train_Y"):
        DecomposedSamplingSVGP(X, Y.squeeze(-1))
    with pytest.raises(ValueError, match="same number of rows"):
        DecomposedSamplingSVGP(X, Y[:-1])
    with pytest.raises(ValueError, match="num_inducing"):
        DecomposedSamplingSVGP(X, Y, num_inducing=0)
    with pytest.raises(TypeError, match="likelihood"):
        DecomposedSamplingSVGP(X, Y, likelihood=BernoulliLikelihood())
    with pytest.raises(ValueError, match="noise"):
        DecomposedSamplingSVGP(X, Y, noise=-1.0)
    with pytest.raises(ValueError, match="inducing_quality"):
        DecomposedSamplingSVGP(X, Y, inducing_quality="ei")
    with pytest.raises(TypeError, match="CollapsedTitsiasBound|DecomposedSamplingSVGP"):
        CollapsedTitsiasBound(SingleTaskGP(X, Y))
    model = DecomposedSamplingSVGP(X, Y, num_inducing=5, covar_module=_kernel())
    Z = model.inducing_points.clone()
    with pytest.raises(ValueError, match="X"):
        model.update(torch.rand(3, 3, dtype=DTYPE), torch.rand(3, 1, dtype=DTYPE))
    with pytest.raises(ValueError, match="Y"):
        model.update(torch.rand(3, 2, dtype=DTYPE), torch.full((3, 1), float("nan")))
    with pytest.raises(TypeError, match="dtype"):
        model.update(torch.rand(3, 2), torch.rand(3, 1))
    assert model.train_X.shape == (20, 2)
    assert torch.equal(model.inducing_points, Z)


def _state_tensors(model):
    r"""Everything a rejected call must leave alone: the state dict, the data, the
    inducing points and q(u)."""
    strategy = model.model.variational_strategy
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["train_X"], state["train_Y"] = model.train_X.clone(), model.train_Y.clone()
    state["Z"] = strategy.inducing_points.clone()
    state["q_mean"] = strategy.variational_distribution.mean.clone()
    return state


def _assert_same_state(before, after):
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key


def test_rejected_update_changes_nothing():
    # Issue 14 item 7: ``update`` grew train_X before q(u) failed; huge targets with
    # Standardize gave a silent NaN posterior.
    X, Y = sine_data(n=20)
    model = transformed_svgp(X, Y, 6, _kernel())
    before = _state_tensors(model)
    X_new = torch.rand(3, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="`Y`"):
        model.update(X_new, torch.full((3, 1), 1e300, dtype=DTYPE))
    _assert_same_state(before, _state_tensors(model))
    far = X_new.clone()
    far[1, 0] = 1e300
    with pytest.raises(ValueError, match="`X`"):
        model.update(far, Y[:3])
    _assert_same_state(before, _state_tensors(model))
    # the model still works and a valid update goes through
    model.update(X_new, Y[:3])
    assert model.train_X.shape == (23, 2)
    assert torch.isfinite(model.posterior(X_new).variance).all()


def test_outcome_transform_overflow_or_domain_error_is_rejected():
    X, Y = sine_data(n=20)
    for bad_Y, transform in ((Y * 1e300, Standardize(1)), (Y - 10.0, Log())):
        with pytest.raises(ValueError, match="`train_Y`"):
            DecomposedSamplingSVGP(X, bad_Y, outcome_transform=transform)
    positive = Y - Y.min() + 1.0
    model = DecomposedSamplingSVGP(X, positive, outcome_transform=Log(), num_inducing=5)
    before = _state_tensors(model)
    with pytest.raises(ValueError, match="`Y`"):
        model.update(X[:2] + 0.01, -Y[:2].abs() - 1.0)
    _assert_same_state(before, _state_tensors(model))


def test_one_error_vocabulary_for_bad_arguments():
    # Issue 14 items 9 and 11: each bad argument raises ValueError/TypeError naming it.
    X, Y = sine_data(n=20)
    with pytest.raises(TypeError, match="`train_Y`"):
        DecomposedSamplingSVGP(X, Y.half())
    with pytest.raises(TypeError, match="`train_X`"):
        DecomposedSamplingSVGP(X.half(), Y.half())
    with pytest.raises(TypeError, match="`covar_module`"):
        DecomposedSamplingSVGP(X, Y, covar_module="rbf")
    batched = ScaleKernel(gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2])))
    with pytest.raises(ValueError, match="`covar_module`"):
        DecomposedSamplingSVGP(X, Y, covar_module=batched)
    with pytest.raises(TypeError, match="`randomized_selection`"):
        DecomposedSamplingSVGP(X, Y, randomized_selection="no")
    with pytest.raises(TypeError, match="`generator`"):
        DecomposedSamplingSVGP(X, Y, generator=0)
    with pytest.raises(ValueError, match="`noise`"):
        DecomposedSamplingSVGP(X, Y, noise=1e-300)
    model = DecomposedSamplingSVGP(X, Y, num_inducing=5)
    for bad in (torch.rand(2, dtype=DTYPE), torch.rand(4, 3, dtype=DTYPE)):
        with pytest.raises(ValueError, match="`X`"):
            model.posterior(bad)
    with pytest.raises(TypeError, match="`X`"):
        model.posterior(torch.ones(4, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="`X`"):
        model.update(X[:2].half(), Y[:2].half())


def test_integer_inputs_leave_transform_buffers_alone():
    X, Y = sine_data(n=20)
    model = transformed_svgp(X, Y, 6, _kernel())
    before = {k: v.clone() for k, v in model.input_transform.state_dict().items()}
    with pytest.raises(TypeError, match="`X`"):
        model.update(torch.ones(2, 2, dtype=torch.long), Y[:2])
    with pytest.raises(TypeError, match="`X`"):
        model.posterior(torch.ones(2, 2, dtype=torch.bool))
    for key, value in model.input_transform.state_dict().items():
        assert torch.equal(value, before[key]), key


class _FaultyRBF(gpytorch.kernels.RBFKernel):
    r"""RBF kernel that raises once, at its ``fail_at``-th evaluation (a fault
    inside the model update)."""

    def __init__(self, fail_at, **kwargs):
        super().__init__(**kwargs)
        self.calls, self.fail_at = 0, fail_at

    def forward(self, x1, x2, diag=False, **params):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected fault")
        return super().forward(x1, x2, diag=diag, **params)


def test_fault_injection_update_retry_round_trip_loses_no_observation():
    # Issue 14 Deliver: an exception inside update, a retry, then state_dict /
    # load_state_dict: every observation is kept, and the model equals one built
    # from scratch on all data.
    X, Y = sine_data(n=30)
    kernel = ScaleKernel(_FaultyRBF(fail_at=0)).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    model = transformed_svgp(X[:10], Y[:10], 8, kernel)
    faults = 0
    for start in range(10, 30, 4):
        batch_X, batch_Y = X[start : start + 4], Y[start : start + 4]
        kernel.base_kernel.fail_at = kernel.base_kernel.calls + 3
        before = _state_tensors(model)
        try:
            model.update(batch_X, batch_Y)
        except RuntimeError:
            faults += 1
            _assert_same_state(before, _state_tensors(model))
            model.update(batch_X, batch_Y)  # the retry
    assert faults == 5
    assert torch.equal(model.train_X, X) and torch.equal(model.train_Y, Y)
    restored = transformed_svgp(X, Y, 8, copy.deepcopy(kernel))
    restored.load_state_dict(model.state_dict())
    test_X = torch.rand(6, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(4))
    a, b = model.posterior(test_X), restored.posterior(test_X)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(a.variance, b.variance, rtol=1e-10, atol=1e-10)
    scratch = transformed_svgp(X, Y, 8, copy.deepcopy(kernel))
    torch.testing.assert_close(scratch.posterior(test_X).mean, a.mean)
