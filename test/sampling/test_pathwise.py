r"""Scaled posterior sample paths (S-GP-TS), against exact posteriors."""

import copy
import math

import pytest
import torch
from botorch.models import SingleTaskGP, SingleTaskVariationalGP
from botorch.sampling.pathwise import draw_matheron_paths

from botorch_sketch.sampling.pathwise import ScaledSamplePaths, draw_scaled_paths

from ..gp_helpers import (
    DTYPE,
    WAVE_MODELS,
    assert_close,
    seeded,
    wave_data,
    wave_points,
    wave_svgp,
)

#: t-batch shapes of the evaluation points (``batch x q x d``), as in BoTorch's tests.
BATCH_SHAPES = [(), (2,), (2, 3)]


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
@pytest.mark.parametrize("name", WAVE_MODELS)
def test_alpha_zero_paths_are_the_posterior_mean(name, batch_shape, tkwargs):
    model = WAVE_MODELS[name](**tkwargs)
    X = wave_points(5 * math.prod(batch_shape), **tkwargs)
    X = X.reshape(*batch_shape, 5, 2)
    paths = draw_scaled_paths(model, 3, num_features=64, alpha=0.0, generator=seeded(0))
    with torch.no_grad():
        mean = model.posterior(X).mean.squeeze(-1)
        values = paths(X)
    assert values.shape == (3, *batch_shape, 5) and values.dtype == tkwargs["dtype"]
    assert values.device == X.device
    assert_close(values, mean.expand(3, *mean.shape))


@pytest.mark.parametrize("name", WAVE_MODELS)
def test_paths_are_affine_in_alpha(name, tkwargs):
    model = WAVE_MODELS[name](**tkwargs)
    X = wave_points(**tkwargs)
    with torch.no_grad():
        mean = model.posterior(X).mean.squeeze(-1)
        unit = draw_scaled_paths(model, 4, alpha=1.0, generator=seeded(3))(X)
        scaled = draw_scaled_paths(model, 4, alpha=2.5, generator=seeded(3))(X)
    assert (unit - mean).abs().max() > 1e-2  # the draws are not degenerate
    assert_close(scaled - mean, 2.5 * (unit - mean))


@pytest.mark.parametrize("name", WAVE_MODELS)
def test_empirical_moments_match_scaled_posterior(name, tkwargs):
    # 4000 paths over 200 independent feature bases (20 paths each): the random
    # Fourier error averages out across bases. Standard errors: mean ~ 1.6% of
    # alpha * sigma, variance ratio ~ 2.5%; tolerances are 4 standard errors, far from
    # the ratio alpha^2 = 2.89 a missing or doubled scaling would give. The same
    # tolerances hold in float32: its rounding is far below the sampling error.
    model, alpha, num_paths = WAVE_MODELS[name](**tkwargs), 1.7, 4000
    X = wave_points(**tkwargs)
    paths = draw_scaled_paths(
        model,
        num_paths,
        num_features=128,
        alpha=alpha,
        generator=seeded(5),
        paths_per_basis=20,
    )
    with torch.no_grad():
        posterior = model.posterior(X)
        values = paths(X)
    mean = posterior.mean.squeeze(-1)
    sd = posterior.variance.squeeze(-1).sqrt()
    z = (values.mean(0) - mean) / (alpha * sd / math.sqrt(num_paths))
    assert z.abs().max() < 4.0
    ratio = values.var(0) / (alpha**2 * sd**2)
    assert (ratio - 1).abs().max() < 0.1
    correlation = torch.corrcoef(values.T)
    covariance = posterior.covariance_matrix
    expected = covariance / (sd.unsqueeze(-1) * sd)
    assert (correlation - expected).abs().max() < 0.08


@pytest.mark.parametrize("batch_shape", [(4,), (2, 2)], ids=str)
def test_paired_is_the_diagonal_and_differentiable(batch_shape, tkwargs):
    model = wave_svgp(**tkwargs)
    paths = draw_scaled_paths(model, 3, num_features=128, generator=seeded(1))
    X = wave_points(3 * math.prod(batch_shape), **tkwargs)
    X = X.reshape(*batch_shape, 3, 2).requires_grad_(True)
    paired = paths.paired(X)
    full = paths(X)  # 3 x batch x 3
    assert paired.shape == (*batch_shape, 3) and full.shape == (3, *batch_shape, 3)
    expected = torch.diagonal(full, dim1=0, dim2=-1)
    assert_close(paired, expected)
    paired.sum().backward()
    assert (
        X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
    )
    with pytest.raises(ValueError, match="one point per path"):
        paths.paired(X[..., :2, :].detach())


@pytest.mark.parametrize("name", WAVE_MODELS)
def test_chunked_topk_equals_brute_force(name, tkwargs):
    model = WAVE_MODELS[name](**tkwargs)
    paths = draw_scaled_paths(model, 5, num_features=256, generator=seeded(2))
    choices = wave_points(3001, seed=12, **tkwargs)
    values, index = paths.topk(choices, k=3, chunk_size=457)
    with torch.no_grad():
        every_value = paths(choices)
    brute_values = every_value.topk(3, dim=-1).values
    assert values.dtype == tkwargs["dtype"] and index.device == choices.device
    assert_close(values, brute_values)
    # the indices point at the top values (float32 near-ties may swap on CUDA)
    assert_close(every_value.gather(-1, index), brute_values)


def test_generator_makes_draws_reproducible(tkwargs):
    # The generator lives on the CPU whatever the model's device.
    model = wave_svgp(**tkwargs)
    X = wave_points(**tkwargs)
    with torch.no_grad():
        a = draw_scaled_paths(model, 2, generator=seeded(9), paths_per_basis=1)(X)
        b = draw_scaled_paths(model, 2, generator=seeded(9), paths_per_basis=1)(X)
        c = draw_scaled_paths(model, 2, generator=seeded(10), paths_per_basis=1)(X)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_draw_returns_scaled_sample_paths():
    model = wave_svgp()
    paths = draw_scaled_paths(model, 6, num_features=64, alpha=2.0, generator=seeded(4))
    assert isinstance(paths, ScaledSamplePaths)
    assert paths.num_paths == 6 and paths.alpha == 2.0
    assert paths(wave_points()).shape == (6, 5)


def _plain_svgp(dtype=torch.float64, device=None):
    X, Y = wave_data(dtype=dtype, device=device)
    model = SingleTaskVariationalGP(X, Y, inducing_points=X[:12].clone())
    return model.eval()


@pytest.mark.parametrize("build", [wave_svgp, _plain_svgp], ids=["ours", "botorch"])
def test_paths_after_a_t_batched_posterior_call(build, tkwargs):
    # Issue 14 item 6: a posterior call on t-batched X caches a batch-shaped Cholesky
    # factor of K_ZZ in GPyTorch's VariationalStrategy, which BoTorch's own
    # draw_matheron_paths then reads (plain BoTorch fails the same way).
    # The reference is a copy taken after an unbatched call (BoTorch's strategy
    # converts q(u) to whitened form on its first call).
    model = build(**tkwargs)
    with torch.no_grad():
        model.posterior(wave_points(12, **tkwargs))
        reference = copy.deepcopy(model)
        model.posterior(wave_points(12, **tkwargs).reshape(4, 3, 2))
    reference = draw_scaled_paths(reference, 3, num_features=64, generator=seeded(5))
    paths = draw_scaled_paths(model, 3, num_features=64, generator=seeded(5))
    X = wave_points(7, **tkwargs)
    assert_close(paths(X), reference(X))


def test_batched_models_are_rejected():
    # Paths are drawn for single-output models without a batch shape; t-batched
    # evaluation points are covered above.
    X, Y = wave_data()
    batched = SingleTaskGP(torch.stack([X, X]), torch.stack([Y, -Y]))
    assert batched.batch_shape == (2,)
    with pytest.raises(ValueError, match="no batch shape"):
        draw_scaled_paths(batched, 2)


#: Malformed ``2 x 2`` evaluation points (two paths, ``d = 2``) and their errors.
BAD_POINTS = {
    "list": ([[0.5, 0.5], [1.0, 1.0]], TypeError),
    "integer": (torch.ones(2, 2, dtype=torch.long), TypeError),
    "NaN": (torch.full((2, 2), float("nan"), dtype=DTYPE), ValueError),
    "infinite": (torch.full((2, 2), float("inf"), dtype=DTYPE), ValueError),
    "huge": (torch.full((2, 2), 1e200, dtype=DTYPE), ValueError),
    "columns": (torch.ones(2, 3, dtype=DTYPE), ValueError),
    "1-d": (torch.ones(2, dtype=DTYPE), ValueError),
}


@pytest.mark.parametrize("X, error", BAD_POINTS.values(), ids=list(BAD_POINTS))
def test_malformed_points_name_X(X, error):
    # Issue 26 item 10: these gave NaN values or raw torch errors.
    paths = draw_scaled_paths(wave_svgp(), 2, num_features=64, generator=seeded(0))
    for evaluate in (paths, paths.paired):
        with pytest.raises(error, match="`X`"):
            evaluate(X)


def test_paths_without_a_dimension_check_the_rest():
    paths = draw_scaled_paths(wave_svgp(), 2, num_features=64, generator=seeded(0))
    undimensioned = ScaledSamplePaths(list(paths.blocks), alpha=1.0)
    assert torch.equal(undimensioned(wave_points()), paths(wave_points()))
    for name in ("NaN", "huge", "1-d"):
        with pytest.raises(ValueError, match="`X`"):
            undimensioned(BAD_POINTS[name][0])


@pytest.mark.parametrize("name", ["svgp", "nystrom"])
def test_botorch_matheron_paths_match_the_posterior(name):
    # Issue 27 item 3: BoTorch's own draw_matheron_paths dispatches on both models.
    # 2000 paths over 100 feature bases of BoTorch's default 1024 features, drawn
    # from the global seed as BoTorch does; 4.5 standard errors on the mean, 15% on
    # the variance (standard error ~3%) and 0.1 on the correlations.
    model = WAVE_MODELS[name]()
    X = wave_points(4)
    torch.manual_seed(0)
    with torch.no_grad():
        values = torch.cat(
            [draw_matheron_paths(model, torch.Size([20]))(X) for _ in range(100)]
        )
        posterior = model.posterior(X)
    assert values.shape == (2000, 4)
    mean = posterior.mean.squeeze(-1)
    sd = posterior.variance.squeeze(-1).sqrt()
    assert ((values.mean(0) - mean) / (sd / math.sqrt(2000))).abs().max() < 4.5
    assert (values.var(0) / sd**2 - 1).abs().max() < 0.15
    expected = posterior.covariance_matrix / (sd.unsqueeze(-1) * sd)
    assert (torch.corrcoef(values.T) - expected).abs().max() < 0.1


@pytest.mark.parametrize("name", ["svgp", "nystrom"])
def test_paths_follow_a_hyperparameter_change(name):
    # The dispatch refreshes the model for its current kernel, as its posterior
    # does: alpha = 0 paths (drawn through the dispatch) equal the posterior mean.
    model = WAVE_MODELS[name]()
    kernel = model.model.covar_module if name == "svgp" else model.covar_module
    kernel.base_kernel.lengthscale = 0.4
    X = wave_points()
    paths = draw_scaled_paths(model, 2, num_features=64, alpha=0.0, generator=seeded(0))
    with torch.no_grad():
        assert_close(paths(X), model.posterior(X).mean.squeeze(-1).expand(2, -1))
