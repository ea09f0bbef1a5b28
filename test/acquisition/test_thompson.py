import pytest
import torch
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
    rbf_kernel,
    seeded,
    wave_data,
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
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="t"):
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


def test_acquisition_sums_paths_over_the_q_batch():
    model = wave_svgp()
    acqf = ScaledPathThompsonSampling(model, num_paths=3, generator=seeded(6))
    X = wave_points(12).reshape(4, 3, 2)
    with torch.no_grad():
        values = acqf(X)
        assert values.shape == (4,)
        torch.testing.assert_close(values, acqf.paths.paired(X).sum(-1))
        assert acqf(X[0]).shape == (1,)
    with pytest.raises(ValueError, match="one point per path"):
        acqf(X[:, :2])


def test_acquisition_with_optimize_acqf_finds_the_path_maximum():
    X, Y = wave_data(n=40, d=1, scale=1.0)
    model = DecomposedSamplingSVGP(
        X,
        Y,
        num_inducing=10,
        covar_module=rbf_kernel(0.1, 1.2),
        noise_variance=NOISE,
    )
    acqf = ScaledPathThompsonSampling(model, num_features=512, generator=seeded(7))
    bounds = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
    candidate, value = optimize_acqf(acqf, bounds, q=1, num_restarts=6, raw_samples=256)
    grid = torch.linspace(0, 1, 20001, dtype=DTYPE).unsqueeze(-1)
    with torch.no_grad():
        grid_values = acqf.paths(grid).squeeze(0)
    assert float(value) >= float(grid_values.max()) - 1e-6
    assert abs(float(candidate) - float(grid[grid_values.argmax()])) < 1e-3
    before = acqf.paths(grid[:50])
    acqf.redraw()
    assert not torch.allclose(before, acqf.paths(grid[:50]))


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
