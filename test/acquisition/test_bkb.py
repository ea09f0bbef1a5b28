r"""BKB-UCB against BoTorch's UCB, a hand-computed radius and recomputation."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.models.transforms import Standardize
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BKBUpperConfidenceBound, NystromGP, TheoryRadius

DTYPE = torch.float64


@pytest.fixture
def model():
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(50, 2, generator=gen, dtype=DTYPE)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    return NystromGP(
        X,
        10 * Y + 3,
        covar_module=kernel,
        noise=0.2,
        outcome_transform=Standardize(m=1),
        generator=gen,
    )


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


def test_equals_botorch_ucb_with_rescaled_beta(model):
    # BoTorch stores UCB's beta as a float32 tensor: compare at float32 precision
    close = {"rtol": 1e-6, "atol": 1e-6}
    X = torch.rand(30, 1, 2, dtype=DTYPE)
    ours = BKBUpperConfidenceBound(model, radius=1.5)(X)
    botorch_ucb = UpperConfidenceBound(model, beta=1.5**2 / float(model.noise))(X)
    torch.testing.assert_close(ours, botorch_ucb, **close)
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=0.2)
    theory = BKBUpperConfidenceBound(model, radius=radius)(X)
    expected = UpperConfidenceBound(model, beta=radius.value**2 / 0.2)(X)
    torch.testing.assert_close(theory, expected, **close)
    minimized = BKBUpperConfidenceBound(model, radius=1.5, maximize=False)(X)
    mean = model.posterior(X).mean.squeeze()
    torch.testing.assert_close(minimized - ours, -2 * mean)


def test_x_pending_freezes_mean_and_conditions_variance(model):
    pending = torch.rand(4, 2, dtype=DTYPE)
    X = torch.rand(25, 1, 2, dtype=DTYPE)
    acqf = BKBUpperConfidenceBound(model, radius=2.0, X_pending=pending)
    conditioned = model.condition_on_observations(
        pending, torch.zeros(4, 1, dtype=DTYPE)
    )
    mean = model.posterior(X).mean.squeeze()
    sigma = conditioned.posterior(X).variance.sqrt().squeeze()
    expected = mean + 2.0 / float(model.noise) ** 0.5 * sigma
    torch.testing.assert_close(acqf(X), expected)
    assert (acqf(X) <= BKBUpperConfidenceBound(model, radius=2.0)(X) + 1e-12).all()
    acqf.set_X_pending(None)
    torch.testing.assert_close(acqf(X), BKBUpperConfidenceBound(model, radius=2.0)(X))


def test_works_with_botorch_optimizers(model):
    choices = torch.rand(300, 2, dtype=DTYPE)
    acqf = BKBUpperConfidenceBound(model, radius=1.0)
    best, value = optimize_acqf_discrete(acqf, q=1, choices=choices)
    torch.testing.assert_close(value.squeeze(), acqf(choices.unsqueeze(-2)).max())
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    candidate, box_value = optimize_acqf(
        acqf, bounds=bounds, q=1, num_restarts=2, raw_samples=64
    )
    assert candidate.shape == (1, 2)
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


def test_residual_update_adds_pending_points_to_the_dictionary():
    gen = torch.Generator().manual_seed(1)
    X = torch.rand(30, 2, generator=gen, dtype=DTYPE) * 0.3  # data in a corner
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.1
    model = NystromGP(
        X, X.sum(-1, keepdim=True), covar_module=kernel, noise=0.1, dictionary=X[:5]
    )
    pending = torch.tensor([[0.9, 0.9], [0.8, 0.1]], dtype=DTYPE)  # far away
    test_X = torch.cat([pending, torch.rand(10, 2, generator=gen, dtype=DTYPE)])
    test_X = test_X.unsqueeze(-2)
    frozen = BKBUpperConfidenceBound(model, radius=1.0, X_pending=pending)
    spread = BKBUpperConfidenceBound(
        model, radius=1.0, X_pending=pending, residual_update=True
    )
    oracle = NystromGP(
        torch.cat([X, pending]),
        torch.zeros(32, 1, dtype=DTYPE),
        covar_module=kernel,
        noise=0.1,
        dictionary=torch.cat([X[:5], pending]),
    )
    mean = model.posterior(test_X).mean.squeeze()
    sigma = oracle.posterior(test_X).variance.sqrt().squeeze()
    torch.testing.assert_close(spread(test_X), mean + sigma / 0.1**0.5)
    # at the pending points the frozen dictionary leaves the prior-level residual
    assert (spread(test_X[:2]) < frozen(test_X[:2]) - 1.0).all()


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
