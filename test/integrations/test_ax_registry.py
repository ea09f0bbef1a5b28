r"""Tests of botorch_sketch.integrations.ax_registry, one registration at a time: the
model input constructors (the box normalized, known noise, kernels and options passed
through), the fitting routines, the acquisition input constructors and the storage
registries."""

import math
from copy import deepcopy

import pytest

pytest.importorskip("ax")

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.generators.torch.botorch_modular.kernels import (
    DefaultMaternKernel,
    DefaultRBFKernel,
    ScaleMaternKernel,
)
from ax.generators.torch.botorch_modular.surrogate import (
    submodel_input_constructor,
)
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.storage.botorch_modular_registry import (
    CLASS_TO_REVERSE_REGISTRY,
)
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.acquisition.input_constructors import (
    get_acqf_input_constructor,
)
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.utils.datasets import SupervisedDataset
from gpytorch.kernels import LinearKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound
from botorch_sketch.acquisition.thompson import (
    ScaledPathThompsonSampling,
)
from botorch_sketch.integrations.ax_registry import (
    fit_decomposed_sampling_svgp,
    fit_nystrom_gp,
    known_noise_variance,
)
from botorch_sketch.models.nystrom import (
    NystromGP,
    NystromMarginalLogLikelihood,
)
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

from .ax_helpers import UserMatern

DTYPE = torch.float64
BOUNDS = [(-5.0, 10.0), (0.0, 15.0)]  # Branin's box: not the unit cube

# Ax (pandas 3) deprecation noise is not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _dataset(n=12, Yvar=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    low, high = torch.tensor(BOUNDS, dtype=DTYPE).T
    X = low + (high - low) * torch.rand(n, 2, generator=g, dtype=DTYPE)
    Y = torch.sin(X / 3).sum(-1, keepdim=True)
    return SupervisedDataset(
        X, Y, Yvar=Yvar, feature_names=["x1", "x2"], outcome_names=["y"]
    )


def _digest(**fields):
    return SearchSpaceDigest(feature_names=["x1", "x2"], bounds=BOUNDS, **fields)


def _model_inputs(model_class, config, dataset, digest=None):
    return submodel_input_constructor(
        model_class,
        model_config=config,
        dataset=dataset,
        search_space_digest=digest or _digest(),
        surrogate=None,
    )


@pytest.mark.parametrize("model_class", [NystromGP, DecomposedSamplingSVGP])
def test_model_inputs_normalize_the_box_and_build_the_model(model_class):
    dataset = _dataset()
    inputs = _model_inputs(model_class, ModelConfig(), dataset)
    assert inputs["train_X"] is dataset.X and inputs["train_Y"] is dataset.Y
    transform = inputs["input_transform"]
    assert isinstance(transform, Normalize)
    corners = torch.tensor(BOUNDS, dtype=DTYPE).T
    assert torch.allclose(
        transform(corners), torch.tensor([[0.0, 0.0], [1.0, 1.0]]).to(DTYPE)
    )
    assert "outcome_transform" not in inputs
    assert isinstance(model_class(**inputs), model_class)


def test_ax_defaults_of_nystrom_gp_leave_direct_construction_alone():
    dataset = _dataset()
    inputs = _model_inputs(NystromGP, ModelConfig(), dataset)
    assert inputs["noise"] is None  # learned on the collapsed bound
    # The kernel is BoTorch's SingleTaskGP default: RBF, dimension-scaled prior.
    kernel = inputs["covar_module"]
    reference = SingleTaskGP(dataset.X, dataset.Y).covar_module
    assert type(kernel) is type(reference) is RBFKernel
    assert kernel.ard_num_dims == reference.ard_num_dims == 2
    for name in ("loc", "scale"):
        assert torch.allclose(
            getattr(kernel.lengthscale_prior, name).double(),
            getattr(reference.lengthscale_prior, name).double(),
        )
    assert torch.allclose(
        kernel.lengthscale.double(), reference.lengthscale.double().detach()
    )
    model = NystromGP(**inputs)
    assert model.likelihood.raw_noise.requires_grad
    # Options given in the ModelConfig win.
    config = ModelConfig(
        model_options={"noise": 0.5}, covar_module_class=ScaleMaternKernel
    )
    inputs = _model_inputs(NystromGP, config, dataset)
    assert inputs["noise"] == 0.5
    assert isinstance(inputs["covar_module"], ScaleMaternKernel)
    # Direct construction and the S-GP-TS model keep their own defaults.
    assert isinstance(NystromGP(dataset.X, dataset.Y).covar_module, ScaleKernel)
    svgp = _model_inputs(DecomposedSamplingSVGP, ModelConfig(), dataset)
    assert "covar_module" not in svgp and "noise" not in svgp


def test_model_inputs_use_known_noise_unless_fixed():
    Yvar = torch.full((12, 1), 0.04, dtype=DTYPE)
    Yvar[0] = 0.08
    inputs = _model_inputs(NystromGP, ModelConfig(), _dataset(Yvar=Yvar))
    assert inputs["noise"] == pytest.approx(float(Yvar.mean()))
    fixed = ModelConfig(model_options={"noise": 0.5})
    assert _model_inputs(NystromGP, fixed, _dataset(Yvar=Yvar))["noise"] == 0.5
    svgp = _model_inputs(DecomposedSamplingSVGP, ModelConfig(), _dataset(Yvar=Yvar))
    assert svgp["noise"] == pytest.approx(float(Yvar.mean()))
    model = DecomposedSamplingSVGP(**svgp)
    assert model.likelihood.noise.item() == pytest.approx(float(Yvar.mean()))
    with pytest.raises(ValueError, match="noiseless"):
        _model_inputs(NystromGP, ModelConfig(), _dataset(Yvar=torch.zeros(12, 1)))


def test_model_inputs_pass_kernel_likelihood_and_options_through():
    config = ModelConfig(
        model_options={"num_inducing": 5},
        covar_module_class=UserMatern,
        covar_module_options={"nu": 0.5, "ard_num_dims": 2},
        likelihood_class=GaussianLikelihood,
        input_transform_classes=None,
    )
    inputs = _model_inputs(DecomposedSamplingSVGP, config, _dataset())
    assert isinstance(inputs["covar_module"], UserMatern)
    assert inputs["covar_module"].base_kernel.nu == 0.5
    assert isinstance(inputs["likelihood"], GaussianLikelihood)
    assert inputs["num_inducing"] == 5
    assert "input_transform" not in inputs
    model = DecomposedSamplingSVGP(**inputs)
    assert model.inducing_points.shape[0] <= 5


@pytest.mark.parametrize(
    "kernel_class",
    [DefaultRBFKernel, DefaultMaternKernel, ScaleMaternKernel, LinearKernel],
)
def test_model_inputs_shape_axs_own_kernels(kernel_class):
    config = ModelConfig(covar_module_class=kernel_class)
    inputs = _model_inputs(NystromGP, config, _dataset())
    kernel = inputs["covar_module"]
    assert isinstance(kernel, kernel_class)
    base = getattr(kernel, "base_kernel", kernel)
    scales = base.variance if kernel_class is LinearKernel else base.lengthscale
    assert scales.shape == (1, 2)  # one per input dimension
    model = NystromGP(**inputs)
    assert model.posterior(_dataset().X[:3]).mean.shape == (3, 1)


def test_model_inputs_reject_what_the_models_cannot_do():
    with pytest.raises(ValueError, match="likelihood"):
        _model_inputs(
            NystromGP, ModelConfig(likelihood_class=GaussianLikelihood), _dataset()
        )
    with pytest.raises(ValueError, match="task"):
        _model_inputs(NystromGP, ModelConfig(), _dataset(), _digest(task_features=[1]))
    with pytest.raises(ValueError, match="fidelity"):
        _model_inputs(
            NystromGP,
            ModelConfig(),
            _dataset(),
            _digest(fidelity_features=[1], target_values={1: 15.0}),
        )


def test_known_noise_variance_checks_its_input():
    assert known_noise_variance(torch.tensor([[0.1], [0.3]]), "M", "noise") == (
        pytest.approx(0.2)
    )
    with pytest.raises(ValueError, match="non-negative"):
        known_noise_variance(torch.tensor([[-0.1], [0.3]]), "M", "noise")
    with pytest.raises(ValueError, match="finite"):
        known_noise_variance(torch.tensor([[float("nan")]]), "M", "noise")


# ---------------------------------------------------------------- fitting
def test_ax_fit_objective_adds_the_log_priors_per_observation():
    # What fit_nystrom_gp maximizes for the Ax defaults: the collapsed bound plus the
    # log priors of the Ax kernel's lengthscales and the learned lambda, over n (MAP).
    dataset = _dataset(n=15)
    inputs = _model_inputs(NystromGP, ModelConfig(), dataset)  # priors: both
    model = NystromGP(**inputs)
    model.covar_module.lengthscale = torch.tensor([[0.3, 0.7]])
    kernel, likelihood = model.covar_module, model.likelihood
    by_hand = (
        kernel.lengthscale_prior.log_prob(kernel.lengthscale).sum()
        + likelihood.noise_covar.noise_prior.log_prob(likelihood.noise).sum()
    )
    value = NystromMarginalLogLikelihood(likelihood, model)()
    bound = model.collapsed_log_likelihood()
    assert torch.allclose(value, bound + by_hand / 15, atol=1e-12)
    # Without priors (fixed lambda, NystromGP's own kernel) nothing is added.
    plain = NystromGP(dataset.X, dataset.Y, noise=1e-2)
    assert torch.equal(
        NystromMarginalLogLikelihood(plain.likelihood, plain)(),
        plain.collapsed_log_likelihood(),
    )


@pytest.mark.parametrize(
    "mll_class", [None, ExactMarginalLogLikelihood, NystromMarginalLogLikelihood]
)
def test_fit_nystrom_gp_uses_its_own_bound_then_resparsifies(mll_class):
    # None and ExactMarginalLogLikelihood (Ax's default) mean the model's own bound.
    dataset = _dataset(n=15)
    config = ModelConfig(model_options={"noise": 1e-2})
    inputs = _model_inputs(NystromGP, config, dataset)
    torch.manual_seed(0)
    model = NystromGP(**inputs)
    reference = deepcopy(model)
    torch.manual_seed(1)
    fit_nystrom_gp(model, mll_class)
    torch.manual_seed(1)
    fit_gpytorch_mll(NystromMarginalLogLikelihood(reference.likelihood, reference))
    reference.resparsify()
    for (name, value), (_, expected) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        assert torch.allclose(value, expected), name
    assert torch.equal(model.dictionary, reference.dictionary)
    assert not model.training


def test_fit_decomposed_sampling_svgp_uses_the_collapsed_bound():
    dataset = _dataset(n=15)
    inputs = _model_inputs(
        DecomposedSamplingSVGP, ModelConfig(model_options={"num_inducing": 10}), dataset
    )
    model = DecomposedSamplingSVGP(**inputs)
    reference = deepcopy(model)
    fit_decomposed_sampling_svgp(model, ExactMarginalLogLikelihood)
    fit_gpytorch_mll(CollapsedTitsiasBound(reference))
    for (name, value), (_, expected) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        assert torch.allclose(value, expected), name
    X = dataset.X[:5]
    assert torch.allclose(
        model.posterior(X).mean, reference.posterior(X).mean, atol=1e-10
    )


# ----------------------------------------------------------- acquisitions
def _small_nystrom(n=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DTYPE)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    return NystromGP(X, Y, noise=1e-2, generator=g)


def test_bkb_input_constructor_rejects_botorchs_beta():
    # a strategy stored before the radius rename reaches BoTorch's own check
    constructor = get_acqf_input_constructor(BKBUpperConfidenceBound)
    with pytest.raises(TypeError, match="`beta`"):
        constructor(model=_small_nystrom(), beta=0.2)


def test_bkb_input_constructor():
    constructor = get_acqf_input_constructor(BKBUpperConfidenceBound)
    model = _small_nystrom()
    X_pending = torch.rand(2, 2, dtype=DTYPE)
    transform = ScalarizedPosteriorTransform(torch.tensor([-1.0], dtype=DTYPE))
    inputs = constructor(
        model=model,
        radius=0.3,
        X_pending=X_pending,
        posterior_transform=transform,
        training_data=_dataset(),  # Ax passes these; they are ignored
        X_baseline=X_pending,
        bounds=BOUNDS,
    )
    assert inputs == {
        "model": model,
        "radius": 0.3,
        "posterior_transform": transform,
        "maximize": True,
        "X_pending": X_pending,
        "residual_update": True,
    }
    acqf = BKBUpperConfidenceBound(**inputs)
    assert torch.equal(acqf.X_pending, X_pending)
    with pytest.raises(ValueError, match="outcome constraints"):
        constructor(model=model, constraints_tuple=(torch.ones(1, 1), torch.ones(1, 1)))
    with pytest.raises(TypeError, match="NystromGP"):
        constructor(model=SingleTaskGP(torch.rand(5, 2), torch.rand(5, 1)))


@pytest.mark.parametrize("noise", [1e-2, 3e-4])
def test_bkb_input_constructor_defaults_to_botorchs_ucb_index(noise):
    # mu + sqrt(0.2) sigma: what BoTorch's UpperConfidenceBound scores from Ax
    # (beta = 0.2 in its input constructor), whatever lambda is.
    g = torch.Generator().manual_seed(1)
    X = torch.rand(20, 2, generator=g, dtype=DTYPE)
    model = NystromGP(X, torch.sin(5 * X).sum(-1, keepdim=True), noise=noise)
    inputs = get_acqf_input_constructor(BKBUpperConfidenceBound)(model=model)
    assert inputs["radius"] == pytest.approx(math.sqrt(0.2 * noise), rel=1e-12)
    acqf = BKBUpperConfidenceBound(**inputs)
    test_X = torch.rand(7, 1, 2, generator=g, dtype=DTYPE)
    botorch_ucb = get_acqf_input_constructor(UpperConfidenceBound)(model=model)
    with torch.no_grad():
        posterior = model.posterior(test_X)
        expected = posterior.mean + math.sqrt(0.2) * posterior.variance.sqrt()
        assert torch.allclose(acqf(test_X), expected.reshape(7), atol=1e-12)
        reference = UpperConfidenceBound(**botorch_ucb)(test_X)
        assert torch.allclose(acqf(test_X), reference, atol=1e-12)


def _exact_gp(n=15, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DTYPE)
    Y = torch.cos(4 * X).sum(-1, keepdim=True)
    model = SingleTaskGP(X, Y)
    model.eval()
    return model


def test_thompson_input_constructors():
    model = _exact_gp()
    dataset = _dataset(n=15)
    plain = get_acqf_input_constructor(ScaledPathThompsonSampling)
    inputs = plain(
        model=model,
        training_data=dataset,
        alpha=lambda t: float(t),  # a schedule, evaluated at t = n + 1
        num_features=64,
        X_pending=torch.rand(1, 2, dtype=DTYPE),
    )
    assert inputs["alpha"] == 16.0
    acqf = ScaledPathThompsonSampling(**inputs)
    assert acqf.paths.num_paths == 1
    assert torch.equal(acqf.X_pending, inputs["X_pending"])
    # A minimized Ax objective reaches the path as its scalarization.
    minimize = ScalarizedPosteriorTransform(torch.tensor([-1.0], dtype=DTYPE))
    inputs = plain(model=model, posterior_transform=minimize, num_features=64)
    acqf = ScaledPathThompsonSampling(**inputs)
    X = torch.rand(4, 1, 2, dtype=DTYPE)
    with torch.no_grad():
        assert torch.allclose(acqf(X), -acqf.paths(X)[0, :, 0])
    with pytest.raises(ValueError, match="training_data"):
        plain(model=model, alpha=lambda t: 1.0)
    assert acqf.weight == -1.0
    with pytest.raises(ValueError, match="outcome constraints"):
        plain(model=model, constraints_tuple=(torch.ones(1, 1), torch.ones(1, 1)))


def test_storage_registries_know_the_classes():
    from botorch.acquisition.acquisition import AcquisitionFunction
    from botorch.models.model import Model
    from gpytorch.mlls import MarginalLogLikelihood

    models = CLASS_TO_REVERSE_REGISTRY[Model]
    assert models["NystromGP"] is NystromGP
    assert models["DecomposedSamplingSVGP"] is DecomposedSamplingSVGP
    mlls = CLASS_TO_REVERSE_REGISTRY[MarginalLogLikelihood]
    assert mlls["NystromMarginalLogLikelihood"] is NystromMarginalLogLikelihood
    assert mlls["CollapsedTitsiasBound"] is CollapsedTitsiasBound
    acqfs = CLASS_TO_REVERSE_REGISTRY[AcquisitionFunction]
    for acqf_class in (
        BKBUpperConfidenceBound,
        ScaledPathThompsonSampling,
    ):
        assert acqfs[acqf_class.__name__] is acqf_class
