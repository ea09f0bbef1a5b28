r"""BKB-UCB against BoTorch's UCB, a hand-computed radius and recomputation.

The oracle tests run for every dtype and device (the ``tkwargs`` fixture) and on
t-batches of several batch dimensions (``b1 x b2 x 1 x d``), as BoTorch's own
acquisition tests do; validation tests run once, in float64 on the CPU.
"""

from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.models.transforms import Standardize
from botorch.optim import optimize_acqf, optimize_acqf_discrete

from botorch_sketch import BKBUpperConfidenceBound, NystromGP, TheoryRadius

from ..gp_helpers import TOLERANCES, assert_close, rbf_kernel, seeded, uniform

DTYPE = torch.float64
#: t-batch shapes of the candidate sets: BoTorch's ``batch x 1 x d`` and more.
BATCH_SHAPES = [(30,), (3, 10)]


def _model(dtype: torch.dtype = DTYPE, device: torch.device | None = None):
    r"""A NystromGP on 50 points of ``[0, 1]^2``; the data, the dictionary draw and
    hence the model are the same on every device."""
    gen = seeded(0)
    X = torch.rand(50, 2, generator=gen, dtype=dtype)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    return NystromGP(
        X.to(device),
        (10 * Y + 3).to(device),
        covar_module=rbf_kernel(0.3, dtype=dtype, device=device),
        noise=0.2,
        outcome_transform=Standardize(m=1).to(X.to(device)),
        generator=gen,
    )


def _beta(radius: float, model: NystromGP) -> torch.Tensor:
    r"""BoTorch's ``beta = radius^2 / lambda``, as a float64 tensor (a float would
    become a float32 buffer and cost float64 comparisons 7 digits)."""
    return torch.tensor(radius**2 / float(model.noise), dtype=torch.float64)


@pytest.fixture
def model():
    return _model()


def test_theory_radius_by_hand():
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=2.0, delta=0.01, noise=4.0)
    radius.observe(torch.tensor([0.5, 1.0], dtype=DTYPE))
    radius.observe(torch.tensor([0.25], dtype=DTYPE))
    total = math.log(2.5) + math.log(4.0) + math.log(1.75) + math.log(100)
    expected = 2 * 0.1 * math.sqrt(total) + (1 + math.sqrt(2)) * 2.0 * 2.0
    assert radius.value == pytest.approx(expected, rel=1e-12)
    radius.ratio_threshold = 4.0
    assert radius.batch_value() == pytest.approx(2 * expected, rel=1e-12)
    restored = TheoryRadius(noise_std=0.1, rkhs_bound=2.0, delta=0.01, noise=4.0)
    restored.load_state_dict(radius.state_dict())
    assert restored.value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
def test_equals_botorch_ucb_with_rescaled_beta(tkwargs, batch_shape):
    model = _model(**tkwargs)
    X = uniform(*batch_shape, 1, 2, seed=1, **tkwargs)
    ours = BKBUpperConfidenceBound(model, radius=1.5)(X)
    assert ours.shape == batch_shape and ours.device == X.device
    assert ours.dtype == tkwargs["dtype"]
    botorch_ucb = UpperConfidenceBound(model, beta=_beta(1.5, model))(X)
    assert_close(ours, botorch_ucb)
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=0.2)
    theory = BKBUpperConfidenceBound(model, radius=radius)(X)
    expected = UpperConfidenceBound(model, beta=_beta(radius.value, model))(X)
    assert_close(theory, expected)
    minimized = BKBUpperConfidenceBound(model, radius=1.5, maximize=False)(X)
    mean = model.posterior(X).mean.squeeze(-1).squeeze(-1)
    assert_close(minimized - ours, -2 * mean)
    # A t-batch scores each point as if alone.
    flat = BKBUpperConfidenceBound(model, radius=1.5)(X.reshape(-1, 1, 2))
    assert_close(ours, flat.reshape(batch_shape))


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
def test_x_pending_freezes_mean_and_conditions_variance(tkwargs, batch_shape):
    model = _model(**tkwargs)
    pending = uniform(4, 2, seed=2, **tkwargs)
    X = uniform(*batch_shape, 1, 2, seed=3, **tkwargs)
    acqf = BKBUpperConfidenceBound(model, radius=2.0, X_pending=pending)
    conditioned = model.condition_on_observations(pending, torch.zeros(4, 1, **tkwargs))
    mean = model.posterior(X).mean.squeeze(-1).squeeze(-1)
    sigma = conditioned.posterior(X).variance.sqrt().squeeze(-1).squeeze(-1)
    expected = mean + 2.0 / float(model.noise) ** 0.5 * sigma
    assert_close(acqf(X), expected)
    plain = BKBUpperConfidenceBound(model, radius=2.0)(X)
    rtol, atol = TOLERANCES[tkwargs["dtype"]]
    assert (acqf(X) <= plain + rtol * plain.abs() + atol).all()
    acqf.set_X_pending(None)
    assert_close(acqf(X), plain)


def test_works_with_botorch_optimizers(tkwargs):
    model = _model(**tkwargs)
    choices = uniform(300, 2, seed=4, **tkwargs)
    acqf = BKBUpperConfidenceBound(model, radius=1.0)
    best, value = optimize_acqf_discrete(acqf, q=1, choices=choices)
    brute = acqf(choices.unsqueeze(-2))
    assert_close(value.squeeze(), brute.max())
    assert_close(best.squeeze(0), choices[brute.argmax()])
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], **tkwargs)
    candidate, box_value = optimize_acqf(
        acqf, bounds=bounds, q=1, num_restarts=2, raw_samples=64
    )
    assert candidate.shape == (1, 2) and candidate.device == bounds.device
    assert float(box_value) >= float(value) - 1e-3  # the box contains every choice


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"radius": -0.5}, ValueError, "radius"),
        ({"radius": "theory"}, TypeError, "radius"),
        (
            {"X_pending": torch.full((2, 2), float("nan"), dtype=DTYPE)},
            ValueError,
            "X_pending",
        ),
        ({"X_pending": torch.zeros(2, 1, 2, dtype=DTYPE)}, ValueError, "X_pending"),
    ],
)
def test_bad_inputs(model, kwargs, error, match):
    args = {"radius": 1.0}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        BKBUpperConfidenceBound(model, **args)


def test_theory_radius_bad_inputs():
    with pytest.raises(ValueError, match="delta"):
        TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=1.5, noise=1.0)
    with pytest.raises(ValueError, match="ratio_threshold"):
        TheoryRadius(
            noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=1.0, ratio_threshold=0.5
        )
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=1.0)
    with pytest.raises(ValueError, match="scaled_variances"):
        radius.observe(torch.tensor([-1.0]))


def test_residual_update_adds_pending_points_to_the_dictionary(tkwargs):
    gen = seeded(1)
    X = torch.rand(30, 2, generator=gen, dtype=tkwargs["dtype"]) * 0.3  # a corner
    pending = torch.tensor([[0.9, 0.9], [0.8, 0.1]], dtype=tkwargs["dtype"])  # far
    test_X = torch.cat([pending, torch.rand(10, 2, generator=gen, dtype=X.dtype)])
    X, pending, test_X = X.to(**tkwargs), pending.to(**tkwargs), test_X.to(**tkwargs)
    test_X = test_X.unsqueeze(-2)
    kernel = rbf_kernel(0.1, **tkwargs)
    model = NystromGP(
        X, X.sum(-1, keepdim=True), covar_module=kernel, noise=0.1, dictionary=X[:5]
    )
    frozen = BKBUpperConfidenceBound(model, radius=1.0, X_pending=pending)
    spread = BKBUpperConfidenceBound(
        model, radius=1.0, X_pending=pending, residual_update=True
    )
    oracle = NystromGP(
        torch.cat([X, pending]),
        torch.zeros(32, 1, **tkwargs),
        covar_module=kernel,
        noise=0.1,
        dictionary=torch.cat([X[:5], pending]),
    )
    mean = model.posterior(test_X).mean.squeeze()
    sigma = oracle.posterior(test_X).variance.sqrt().squeeze()
    assert_close(spread(test_X), mean + sigma / 0.1**0.5)
    # at the pending points the frozen dictionary leaves the prior-level residual
    assert (spread(test_X[:2]) < frozen(test_X[:2]) - 1.0).all()
    # the same on a 2 x 6 t-batch
    batched = spread(test_X.reshape(2, 6, 1, 2))
    assert_close(batched, (mean + sigma / 0.1**0.5).reshape(2, 6))


def test_flags_and_pending_points_are_checked_where_they_enter(model):
    # Issue 14 items 8, 9 and 11: truthy non-bools, absurd pending points and a
    # corrupt radius state raise ValueError/TypeError naming the argument.
    with pytest.raises(TypeError, match="`maximize`"):
        BKBUpperConfidenceBound(model, radius=1.0, maximize="no")
    with pytest.raises(TypeError, match="`residual_update`"):
        BKBUpperConfidenceBound(model, radius=1.0, residual_update=1)
    far = torch.tensor([[1e300, 0.0]], dtype=DTYPE)
    with pytest.raises(ValueError, match="`X_pending`"):
        BKBUpperConfidenceBound(model, radius=1.0, X_pending=far)
    with pytest.raises(TypeError, match="`X_pending`"):
        BKBUpperConfidenceBound(model, radius=1.0, X_pending=far.long())
    with pytest.raises(TypeError, match="`model`"):
        BKBUpperConfidenceBound("model", radius=1.0)
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=1.0)
    radius.observe(torch.tensor([0.5], dtype=DTYPE))
    for bad, error in (
        ({}, ValueError),
        ({"log_det_sum": float("nan")}, ValueError),
        ({"log_det_sum": -1.0}, ValueError),
        ({"log_det_sum": "1"}, TypeError),
        ({"log_det_sum": 1.0, "other": 2.0}, ValueError),
        ([1.0], TypeError),
    ):
        with pytest.raises(error, match="state"):
            radius.load_state_dict(bad)
    assert radius.state_dict() == {"log_det_sum": math.log1p(1.5)}


def test_batched_models_are_rejected(model):
    # BKB-UCB scores one unbatched NystromGP; a batched (fantasy) model is refused
    # before any state is built (t-batches of candidates are covered above).
    X = uniform(2, 3, 2, seed=5)
    fantasy = model.condition_on_observations(X, torch.zeros(2, 3, 1, dtype=DTYPE))
    assert fantasy.train_inputs[0].shape[:-2] == (2,)
    with pytest.raises(ValueError, match="`model` must be unbatched"):
        BKBUpperConfidenceBound(fantasy, radius=1.0)
