import math

import pytest
import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.models import (
    GenericDeterministicModel,
    SingleTaskGP,
)
from botorch.optim import optimize_acqf

from botorch_sketch.acquisition.thompson import (
    AlphaSchedule,
    ScaledPathThompsonSampling,
    resolve_alpha,
)
from botorch_sketch.models.variational import DecomposedSamplingSVGP
from botorch_sketch.sampling.pathwise import draw_scaled_paths

from ..gp_helpers import (
    DTYPE,
    NOISE,
    assert_close,
    rbf_kernel,
    seeded,
    wave_data,
    wave_exact_gp,
    wave_points,
    wave_svgp,
)


def test_alpha_schedule_hand_computed():
    schedule = AlphaSchedule(
        scale=0.5, rkhs_bound=2.0, noise_std=0.3, noise=0.25, offset=0.1
    )
    # 1 + 0.5 * (2 + 0.3 * sqrt(2 * ln(100) / 0.25) + 0.1) = 2.960456...
    assert schedule(10) == pytest.approx(2.960456, abs=1e-6)
    assert schedule(1) == pytest.approx(1 + 0.5 * 2.1)
    assert schedule(1000) > schedule(10)
    assert AlphaSchedule(scale=0.0)(50) == 1.0
    for bad, error in ((0, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="`t`"):
            schedule(bad)
    with pytest.raises(ValueError, match="`noise`"):
        AlphaSchedule(noise=0.0)
    with pytest.raises(ValueError, match="scale"):
        AlphaSchedule(scale=-1.0)


def test_resolve_alpha():
    assert resolve_alpha(1.5, 7) == 1.5
    assert resolve_alpha(lambda t: 0.1 * t, 7) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="alpha"):
        resolve_alpha(-0.1, 1)
    with pytest.raises(ValueError, match="alpha"):
        resolve_alpha(lambda t: float("nan"), 1)


@pytest.mark.parametrize("batch_shape", [(4,), (2, 3)], ids=str)
def test_acquisition_sums_paths_over_the_q_batch(tkwargs, batch_shape):
    model = wave_svgp(**tkwargs)
    acqf = ScaledPathThompsonSampling(model, num_paths=3, generator=seeded(6))
    size = math.prod(batch_shape) * 3
    X = wave_points(size, **tkwargs).reshape(*batch_shape, 3, 2)
    with torch.no_grad():
        values = acqf(X)
        assert values.shape == batch_shape and values.dtype == tkwargs["dtype"]
        # brute force: every path at every point (3 x batch x 3), the diagonal summed
        full = acqf.paths(X)
        expected = torch.diagonal(full, dim1=0, dim2=-1).sum(-1)
        assert_close(values, expected)
        assert acqf(X.reshape(-1, 3, 2)[0]).shape == (1,)
    with pytest.raises(ValueError, match="one point per path"):
        acqf(X[..., :2, :])


def test_acquisition_with_optimize_acqf_finds_the_path_maximum(tkwargs):
    X, Y = wave_data(n=40, d=1, scale=1.0, **tkwargs)
    model = DecomposedSamplingSVGP(
        X,
        Y,
        num_inducing=10,
        covar_module=rbf_kernel(0.1, 1.2, **tkwargs),
        noise=NOISE,
    )
    acqf = ScaledPathThompsonSampling(model, num_features=512, generator=seeded(7))
    bounds = torch.tensor([[0.0], [1.0]], **tkwargs)
    candidate, value = optimize_acqf(acqf, bounds, q=1, num_restarts=6, raw_samples=256)
    assert candidate.dtype == tkwargs["dtype"] and candidate.device == X.device
    grid = torch.linspace(0, 1, 20001, **tkwargs).unsqueeze(-1)
    with torch.no_grad():
        grid_values = acqf.paths(grid).squeeze(0)
    # L-BFGS-B reaches the path's grid maximum up to 1e-6 plus a few roundings of
    # the values (~3, so ~1e-6 in float32); the grid spacing is 5e-5.
    best = float(grid_values.max())
    eps = torch.finfo(tkwargs["dtype"]).eps
    assert float(value) >= best - 1e-6 - 10 * eps * abs(best)
    assert abs(float(candidate) - float(grid[grid_values.argmax()])) < 1e-3
    before = acqf.paths(grid[:50])
    acqf.redraw()
    assert not torch.allclose(before, acqf.paths(grid[:50]))


def test_scalarization_applies_to_every_path(tkwargs):
    model = wave_exact_gp(**tkwargs)
    transform = ScalarizedPosteriorTransform(
        torch.tensor([-2.0], **tkwargs), offset=0.5
    )
    acqf = ScaledPathThompsonSampling(
        model,
        posterior_transform=transform,
        num_paths=2,
        num_features=128,
        generator=seeded(0),
    )
    X = wave_points(14, **tkwargs).reshape(7, 2, 2)
    with torch.no_grad():
        # brute force: path j at point j, scalarized, summed over the q-batch
        full = acqf.paths(X)
        paired = torch.diagonal(full, dim1=0, dim2=-1)
        assert_close(acqf(X), (-2.0 * paired + 0.5).sum(-1))
    # one path, minimized: the best grid point is the path's minimizer
    acqf = ScaledPathThompsonSampling(
        model,
        posterior_transform=ScalarizedPosteriorTransform(
            torch.tensor([-1.0], **tkwargs)
        ),
        num_features=128,
        generator=seeded(1),
    )
    grid = wave_points(400, **tkwargs).unsqueeze(-2)
    with torch.no_grad():
        assert int(acqf(grid).argmax()) == int(acqf.paths(grid)[0, :, 0].argmin())
    with pytest.raises(ValueError, match="single outcome"):
        ScaledPathThompsonSampling(
            model,
            posterior_transform=ScalarizedPosteriorTransform(torch.ones(2, **tkwargs)),
        )
    with pytest.raises(TypeError, match="posterior_transform"):
        ScaledPathThompsonSampling(model, posterior_transform="minimize")


def test_pending_points_draw_a_fresh_path_per_sequential_candidate():
    model = wave_exact_gp()
    bounds = torch.tensor([[0.0, 0.0], [2.0, 2.0]], dtype=DTYPE)
    acqf = ScaledPathThompsonSampling(model, num_features=128, generator=seeded(0))
    X = wave_points(5).unsqueeze(-2)
    with torch.no_grad():
        before = acqf(X)
        acqf.set_X_pending(X[0])
        after = acqf(X)
    assert torch.equal(acqf.X_pending, X[0])
    assert not torch.allclose(before, after)
    options = {"num_restarts": 2, "raw_samples": 64}
    torch.manual_seed(0)
    fresh, _ = optimize_acqf(acqf, bounds, q=3, sequential=True, **options)
    assert torch.pdist(fresh).min() > 1e-4
    # Without a redraw, one fixed path gives its maximizer again.
    plain = ScaledPathThompsonSampling(model, num_features=128, generator=seeded(0))
    repeated = []
    for _ in range(2):
        torch.manual_seed(0)  # the same restarts: only a redrawn path could differ
        repeated.append(optimize_acqf(plain, bounds, q=1, **options)[0])
    assert torch.equal(repeated[0], repeated[1])
    stored = ScaledPathThompsonSampling(model, num_features=64, X_pending=X[1])
    assert torch.equal(stored.X_pending, X[1])


def test_bad_inputs_raise():
    model = wave_svgp()
    with pytest.raises(ValueError, match="num_features"):
        draw_scaled_paths(model, 2, num_features=63)
    with pytest.raises(ValueError, match="num_paths"):
        draw_scaled_paths(model, 0)
    with pytest.raises(TypeError, match="num_paths"):
        draw_scaled_paths(model, 2.0)
    with pytest.raises(ValueError, match="alpha"):
        draw_scaled_paths(model, 2, alpha=-1.0)
    with pytest.raises(ValueError, match="paths_per_basis"):
        draw_scaled_paths(model, 2, paths_per_basis=0)
    with pytest.raises(TypeError, match="generator"):
        draw_scaled_paths(model, 2, generator=0)
    deterministic = GenericDeterministicModel(lambda X: X.sum(-1, keepdim=True))
    with pytest.raises(TypeError, match="model"):
        draw_scaled_paths(deterministic, 2)
    X, Y = wave_data()
    two_outputs = SingleTaskGP(X, torch.cat([Y, -Y], dim=-1))
    with pytest.raises(ValueError, match="single output"):
        draw_scaled_paths(two_outputs, 2)
    paths = draw_scaled_paths(model, 2, num_features=64)
    with pytest.raises(ValueError, match="k"):
        paths.topk(wave_points(3), k=4)
    with pytest.raises(ValueError, match="choices"):
        paths.topk(torch.full((3, 2), float("nan"), dtype=DTYPE))
    with pytest.raises(TypeError, match="paths"):
        ScaledPathThompsonSampling(model, paths="not paths")


def test_alpha_schedule_that_overflows_is_rejected():
    # Found by the property suite: a subnormal noise gave alpha_t = inf for t > 1.
    with pytest.raises(ValueError, match="`noise`"):
        AlphaSchedule(noise=5e-324)
    with pytest.raises(ValueError, match="scale"):
        AlphaSchedule(scale=1e300, rkhs_bound=1e300)


@pytest.mark.parametrize(
    "X, error",
    [
        ([[0.5, 0.5]], TypeError),
        (torch.ones(3, 1, 2, dtype=torch.long), TypeError),
        (torch.full((3, 1, 2), float("nan"), dtype=DTYPE), ValueError),
        (torch.full((3, 1, 2), 1e200, dtype=DTYPE), ValueError),
        (torch.ones(3, 1, 3, dtype=DTYPE), ValueError),
    ],
    ids=["list", "integer", "NaN", "huge", "columns"],
)
def test_malformed_points_name_X(X, error):
    # Issue 26 item 10: these gave NaN values or raw torch errors.
    acqf = ScaledPathThompsonSampling(wave_svgp(), num_features=64)
    with pytest.raises(error, match="`X`"):
        acqf(X)


def test_malformed_pending_points_change_nothing():
    model = wave_svgp()
    with pytest.raises(TypeError, match="`X_pending`"):
        ScaledPathThompsonSampling(model, num_features=64, X_pending=[[0.5, 0.5]])
    acqf = ScaledPathThompsonSampling(model, num_features=64, generator=seeded(0))
    X = wave_points(4).unsqueeze(-2)
    before = acqf(X)
    for bad, error in [
        (torch.full((1, 2), float("nan"), dtype=DTYPE), ValueError),
        (torch.ones(1, 3, dtype=DTYPE), ValueError),
        ([[0.5, 0.5]], TypeError),
    ]:
        with pytest.raises(error, match="`X_pending`"):
            acqf.set_X_pending(bad)
    assert acqf.X_pending is None and torch.equal(acqf(X), before)  # not redrawn
