r"""BoTorch conformance: the package's models work wherever ``SingleTaskGP`` does.

Every case runs the control (``SingleTaskGP``) and the package's models in the same
test; a model must pass every case the control passes. With all observed points in
the dictionary (``NystromGP``) or inducing (``DecomposedSamplingSVGP``), the same
kernel and noise and the variational jitter at 1e-12, the models are the exact GP, so
acquisition values that depend on the posterior alone (and on seeded samplers) must
also equal the control's. Tiny data, few restarts, five optimizer iterations.

Multi-output models (``n x o`` ``train_Y``) run the multi-objective acquisition
functions (``qLogNEHVI``, ``qLogNParEGO``) on one model and on a ``ModelListGP``;
with the control's per-output noise set to the shared value they equal the
control's too.

Not supported, with the reason (:data:`UNSUPPORTED`): acquisition functions that
condition on observations with their own noise (``qJointEntropySearch``,
``qPredictiveEntropySearch``): both models have one homoskedastic noise level, and
their ``condition_on_observations`` rejects ``noise`` with a ``ValueError``; and
pathwise sampling (``PathwiseThompsonSampling``, ``get_optimal_samples``) of a
multi-output model, which the models draw one output at a time
(``subset_output([i])``, a ``ValueError`` naming ``model`` otherwise).
"""

from __future__ import annotations

import gpytorch
import pytest
import torch
from botorch.acquisition import (
    ExpectedImprovement,
    LogExpectedImprovement,
    UpperConfidenceBound,
    qKnowledgeGradient,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qLowerBoundMaxValueEntropy,
    qMaxValueEntropy,
    qNegIntegratedPosteriorVariance,
    qUpperConfidenceBound,
)
from botorch.acquisition.joint_entropy_search import qJointEntropySearch
from botorch.acquisition.multi_objective import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.parego import qLogNParEGO
from botorch.acquisition.thompson_sampling import PathwiseThompsonSampling
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms import Log, Normalize, Standardize
from botorch.optim import optimize_acqf, optimize_acqf_discrete, optimize_acqf_mixed
from botorch.sampling import SobolQMCNormalSampler

from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.variational import DecomposedSamplingSVGP

from ..gp_helpers import DTYPE, NOISE, rbf_kernel, sine_data, uniform

N, D = 10, 2
BOUNDS = torch.tensor([[0.0] * D, [1.0] * D], dtype=DTYPE)

#: Acquisition functions the models do not support, and why.
UNSUPPORTED = {
    "qJointEntropySearch": "conditions on optima with its own noise; the models "
    "have one homoskedastic noise level",
    "PathwiseThompsonSampling (o > 1)": "the models' pathwise draws are "
    "single-output; draw from subset_output([i])",
}


@pytest.fixture(autouse=True)
def _exact_jitter():
    with gpytorch.settings.variational_cholesky_jitter(double_value=1e-12):
        yield


def _data(offset: float = 0.0):
    X, Y = sine_data(N, D)
    return X, Y + offset


def build(name: str, X, Y, transforms: str = "none"):
    r"""The control or a package model on ``(X, Y)`` with a fixed kernel and noise
    and the given transforms."""
    inputs = {
        "none": None,
        "normalize": Normalize(D),
        "normalize_bounds": Normalize(D, bounds=BOUNDS),
        "standardize": None,
        "log": None,
    }[transforms]
    outcome = {"standardize": Standardize(Y.shape[-1]), "log": Log()}.get(transforms)
    kwargs = {"input_transform": inputs, "outcome_transform": outcome}
    if name == "control":
        model = SingleTaskGP(X, Y, covar_module=rbf_kernel(0.3, 1.5), **kwargs)
        model.likelihood.noise = NOISE
    elif name == "nystrom":
        model = NystromGP(
            X, Y, covar_module=rbf_kernel(0.3, 1.5), noise=NOISE, dictionary=X, **kwargs
        )
    else:
        # a single output's noise is in the units of Y: give it the transformed one
        # (Log transforms no noise: set it in the model's units after construction)
        scale = Y.std() ** 2 if transforms == "standardize" else 1.0
        scale = scale if Y.shape[-1] == 1 else 1.0  # several: the model's units
        model = DecomposedSamplingSVGP(
            X,
            Y,
            num_inducing=N,
            covar_module=rbf_kernel(0.3, 1.5),
            noise=None if transforms == "log" else NOISE * float(scale),
            **kwargs,
        )
        if transforms == "log":
            model.likelihood.noise = NOISE
    return model.eval()


MODELS = ["nystrom", "svgp"]


def _acquisition(name: str, model, X, Y):
    r"""BoTorch's acquisition ``name`` on ``model``, its random parts seeded."""
    torch.manual_seed(0)
    sampler = SobolQMCNormalSampler(torch.Size([16]), seed=0)
    best = Y.max()
    candidates = uniform(30, D, seed=2)
    return {
        "EI": lambda: ExpectedImprovement(model, best_f=best),
        "LogEI": lambda: LogExpectedImprovement(model, best_f=best),
        "UCB": lambda: UpperConfidenceBound(model, beta=2.0),
        "qLogEI": lambda: qLogExpectedImprovement(model, best_f=best, sampler=sampler),
        "qUCB": lambda: qUpperConfidenceBound(model, beta=2.0, sampler=sampler),
        "qLogNEI": lambda: qLogNoisyExpectedImprovement(
            model, X_baseline=X, sampler=sampler, cache_root=False
        ),
        "qMES": lambda: qMaxValueEntropy(model, candidate_set=candidates),
        "GIBBON": lambda: qLowerBoundMaxValueEntropy(model, candidate_set=candidates),
        "qKG": lambda: qKnowledgeGradient(model, num_fantasies=4),
        "qNIPV": lambda: qNegIntegratedPosteriorVariance(
            model, mc_points=uniform(16, D, seed=3)
        ),
        "PathwiseTS": lambda: PathwiseThompsonSampling(model),
    }[name]()


#: Acquisition functions and the largest ``q`` they take.
MAX_Q = {
    "EI": 1,
    "LogEI": 1,
    "UCB": 1,
    "qLogEI": 2,
    "qUCB": 2,
    "qLogNEI": 2,
    "qMES": 1,
    "GIBBON": 1,
    "qKG": 2,
    "qNIPV": 2,
    "PathwiseTS": 1,
}
#: Those whose values depend on the posterior and seeded samplers only: equal to
#: the control's for models equal to the exact GP. (qKG and qNIPV condition on the
#: candidates, outside the dictionary / inducing set; Thompson paths and the
#: max-value samples of qMES / GIBBON draw from the global random state through
#: the posterior's root decomposition, which differs with its representation.)
EXACT = {"EI", "LogEI", "UCB", "qLogEI", "qUCB", "qLogNEI"}


def _points(name: str, acquisition, shape):
    r"""Candidates of the t-batch ``shape`` (``batch x q``), with the fantasy
    points that ``qKG``'s one-shot formulation appends."""
    extra = acquisition.num_fantasies if name == "qKG" else 0
    *batch, q = shape
    return uniform(*batch, q + extra, D, seed=4)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("acq", list(MAX_Q))
@pytest.mark.parametrize("batch", [(3,), (2, 3)], ids=str)
def test_acquisition_values_shapes_and_gradients(acq, name, batch):
    # gradients in the candidates wherever the control has them (BoTorch's qNIPV
    # has none: its fantasies are detached from the candidates)
    X, Y = _data()
    results, gradients = [], []
    for model_name in ("control", name):
        model = build(model_name, X, Y, "normalize_bounds")
        acquisition = _acquisition(acq, model, X, Y)
        points = _points(acq, acquisition, (*batch, MAX_Q[acq]))
        points.requires_grad_(True)
        value = _run(model_name, lambda a=acquisition, p=points: a(p))
        if value.requires_grad:
            value.sum().backward()
        results.append(value.detach())
        gradients.append(points.grad)
    control, ours = results
    assert ours.shape == control.shape == batch
    assert (gradients[0] is None) == (gradients[1] is None)
    assert gradients[1] is None or torch.isfinite(gradients[1]).all()
    if acq in EXACT:
        torch.testing.assert_close(ours, control, rtol=1e-6, atol=1e-8)


def _run(model_name: str, case):
    r"""``case()``; for the control, a failure skips the test (the package's models
    need only pass where the control passes)."""
    if model_name != "control":
        return case()
    try:
        return case()
    except Exception as error:  # noqa: BLE001 - any failure of the control
        pytest.skip(f"the control fails: {type(error).__name__}: {error}")


def _optimize(optimizer: str, acquisition, q: int):
    if optimizer == "discrete":
        choices = uniform(20, D, seed=6)
        return optimize_acqf_discrete(acquisition, q=q, choices=choices)
    if optimizer == "mixed":  # the first input fixed at one of two values
        return optimize_acqf_mixed(
            acquisition,
            bounds=BOUNDS,
            q=q,
            num_restarts=2,
            raw_samples=8,
            fixed_features_list=[{0: 0.2}, {0: 0.7}],
            options={"maxiter": 5, "batch_limit": 4},
        )
    return optimize_acqf(
        acquisition,
        bounds=BOUNDS,
        q=q,
        num_restarts=2,
        raw_samples=8,
        options={"maxiter": 5, "batch_limit": 4},
    )


#: Optimizer cases: (optimizer, q).
OPTIMIZERS = [
    ("continuous", 1),
    ("continuous", 2),
    ("discrete", 1),
    ("mixed", 1),
    ("mixed", 2),
]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("acq", list(MAX_Q))
@pytest.mark.parametrize("optimizer, q", OPTIMIZERS, ids=str)
def test_optimizers(acq, name, optimizer, q):
    if q > MAX_Q[acq]:
        pytest.skip(f"{acq} takes q = 1 only (the control too)")
    if optimizer == "discrete" and acq == "qKG":
        pytest.skip("one-shot qKG has no discrete optimizer (the control neither)")
    X, Y = _data()
    for model_name in ("control", name):
        model = build(model_name, X, Y, "normalize_bounds")
        acquisition = _acquisition(acq, model, X, Y)
        candidates, values = _run(
            model_name, lambda a=acquisition: _optimize(optimizer, a, q)
        )
        assert candidates.shape == (q, D) and torch.isfinite(values).all()
        assert ((candidates >= 0) & (candidates <= 1)).all()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("acq", ["qLogEI", "qKG", "qNIPV", "PathwiseTS", "UCB"])
@pytest.mark.parametrize(
    "transforms", ["none", "normalize", "normalize_bounds", "standardize", "log"]
)
def test_transforms(acq, name, transforms):
    X, Y = _data(offset=5.0)
    X = X * 3.0 if transforms == "normalize" else X  # learned bounds matter
    results = []
    for model_name in ("control", name):
        model = build(model_name, X, Y, transforms)
        acquisition = _acquisition(acq, model, X, Y)
        results.append(acquisition(_points(acq, acquisition, (3, 1))).detach())
        candidates, _ = _optimize("continuous", acquisition, 1)
        assert candidates.shape == (1, D)
    assert results[0].shape == results[1].shape == (3,)
    if acq in EXACT:
        torch.testing.assert_close(results[1], results[0], rtol=1e-6, atol=1e-8)


def _objectives():
    r"""``N x 2`` objectives: the sine data and a bowl."""
    X, Y = _data()
    return X, torch.cat([Y, -((X - 0.5) ** 2).sum(-1, keepdim=True)], dim=-1)


def _multi_objective(acq: str, model, X, Y):
    r"""BoTorch's multi-objective acquisition ``acq`` on a two-output ``model``."""
    sampler = SobolQMCNormalSampler(torch.Size([16]), seed=0)
    if acq == "qLogNEHVI":
        return qLogNoisyExpectedHypervolumeImprovement(
            model,
            ref_point=Y.min(dim=0).values.tolist(),
            X_baseline=X,
            sampler=sampler,
            cache_root=False,
        )
    weights = torch.tensor([0.3, 0.7], dtype=DTYPE)
    return qLogNParEGO(
        model,
        X_baseline=X,
        scalarization_weights=weights,
        sampler=sampler,
        cache_root=False,
    )


MULTI_OBJECTIVE = ["qLogNEHVI", "qLogNParEGO"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("acq", MULTI_OBJECTIVE)
def test_multi_objective_on_a_model_list(acq, name):
    X, Y = _objectives()
    values = []
    for model_name in ("control", name):
        models = [build(model_name, X, y, "standardize") for y in Y.split(1, dim=-1)]
        acquisition = _multi_objective(acq, ModelListGP(*models), X, Y)
        values.append(acquisition(uniform(3, 2, D, seed=7)).detach())
        candidates, _ = _optimize("continuous", acquisition, 2)
        assert candidates.shape == (2, D)
    torch.testing.assert_close(values[1], values[0], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("acq", MULTI_OBJECTIVE)
@pytest.mark.parametrize("transforms", ["none", "standardize"])
def test_multi_objective_on_one_multi_output_model(acq, name, transforms):
    # one model of both objectives: posteriors batch x q x 2, values equal to the
    # control's (the same noise for both of its outputs), gradients, optimizers
    X, Y = _objectives()
    values = []
    for model_name in ("control", name):
        model = build(model_name, X, Y, transforms)
        if model_name == "control":
            model.likelihood.noise = NOISE  # both outputs, as the shared one
        assert model.num_outputs == 2
        assert model.posterior(uniform(4, 3, D, seed=5)).mean.shape == (4, 3, 2)
        acquisition = _multi_objective(acq, model, X, Y)
        points = uniform(3, 2, D, seed=7).requires_grad_(True)
        value = acquisition(points)
        value.sum().backward()
        assert torch.isfinite(points.grad).all()
        values.append(value.detach())
        for optimizer, q in [("continuous", 2), ("discrete", 1), ("mixed", 2)]:
            candidates, _ = _optimize(optimizer, acquisition, q)
            assert candidates.shape == (q, D)
    torch.testing.assert_close(values[1], values[0], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", MODELS)
def test_multi_output_knowledge_gradient_on_a_scalarized_objective(name):
    # fantasies of a two-output model under a linear scalarization (qKG's
    # multi-output use), with shapes and values as the control's
    from botorch.acquisition.objective import ScalarizedPosteriorTransform

    X, Y = _objectives()
    new_X = X[:4].reshape(2, 2, D)  # fantasies at observed points: exact
    values = []
    for model_name in ("control", name):
        model = build(model_name, X, Y, "standardize")
        if model_name == "control":
            model.likelihood.noise = NOISE
        transform = ScalarizedPosteriorTransform(
            weights=torch.tensor([0.5, 0.5], dtype=DTYPE)
        )
        sampler = SobolQMCNormalSampler(torch.Size([3]), seed=1)
        fantasy = model.fantasize(new_X, sampler)
        assert fantasy.batch_shape == (3, 2) and fantasy.num_outputs == 2
        kg = qKnowledgeGradient(
            model,
            num_fantasies=3,
            sampler=SobolQMCNormalSampler(torch.Size([3]), seed=1),
            posterior_transform=transform,
        )
        with torch.no_grad():
            values.append(kg(torch.cat([new_X, new_X[:, :1].expand(2, 3, D)], -2)))
    assert values[0].shape == (2,)
    torch.testing.assert_close(values[1], values[0], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", MODELS)
def test_multi_output_pathwise_sampling_says_why(name):
    # UNSUPPORTED: the models' pathwise draws are single-output
    from botorch.sampling.pathwise import draw_matheron_paths

    import botorch_sketch.sampling.pathwise  # noqa: F401 - registers the dispatch

    X, Y = _objectives()
    model = build(name, X, Y)
    with pytest.raises(ValueError, match="`model`"):
        draw_matheron_paths(model, sample_shape=torch.Size([2]))
    paths = draw_matheron_paths(model.subset_output([1]), torch.Size([2]))
    assert paths(uniform(3, D, seed=1)).shape == (2, 3)
    assert "PathwiseThompsonSampling (o > 1)" in UNSUPPORTED


@pytest.mark.parametrize("name", MODELS)
def test_subset_output_and_output_index_errors(name):
    # a single-output model is its own output [0]; a two-column train_Y gives two
    # outputs (issue 27 item 1; test_multi_output.py checks the values)
    X, Y = _data()
    model = build(name, X, Y)
    assert model.subset_output([0]) is model and model.num_outputs == 1
    with pytest.raises(ValueError, match="`idcs`"):
        model.subset_output([1])
    for model_name in ("control", name):
        two = build(model_name, X, torch.cat([Y, -Y], dim=-1))
        assert two.num_outputs == 2
        assert two.posterior(uniform(3, 4, D, seed=9)).mean.shape == (3, 4, 2)


@pytest.mark.parametrize("name", MODELS)
def test_unsupported_entropy_search_says_why(name):
    # UNSUPPORTED: qJointEntropySearch conditions on sampled optima with a noise
    # of its own, which the models reject by name before any state change.
    X, Y = _data()
    model = build(name, X, Y)
    optima = uniform(2, D, seed=8)
    with pytest.raises(ValueError, match="`noise`"):
        qJointEntropySearch(model, optimal_inputs=optima, optimal_outputs=Y[:2])
    assert "qJointEntropySearch" in UNSUPPORTED
