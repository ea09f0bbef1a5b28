r"""Oracles for the cached finite-arm Thompson samplers.

Exact GP-TS paths are checked against BoTorch's ``draw_matheron_paths`` on a
zero-mean ``SingleTaskGP`` with the same feature basis, prior weights and noise draws;
S-GP-TS's inducing points, ``q(u)`` and paths against a ``DecomposedSamplingSVGP``
built from scratch on the same data (closed-form ``q(u)``) and its Matheron paths.
"""

from functools import partial

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from gpytorch.means import ZeroMean

from botorch_sketch.generation.thompson_arms import (
    BLOCK_COLUMNS,
    ArmFeatureCache,
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.models.variational import DecomposedSamplingSVGP
from botorch_sketch.sampling.pathwise import scaled_update

from ..gp_helpers import DTYPE, rbf_kernel, seeded

NOISE = 0.3
NUM_FEATURES = 64


def _arms(n=300, d=3, seed=0, dtype=DTYPE):
    return torch.rand(n, d, generator=seeded(seed), dtype=dtype)


def _rewards(arms, indices, seed):
    x = arms[indices]
    clean = torch.sin(5 * x).sum(-1)
    return clean + 0.3 * torch.randn(
        len(indices), generator=seeded(seed), dtype=x.dtype
    )


def _cache(arms, **kwargs):
    return ArmFeatureCache(
        arms,
        rbf_kernel(0.3, 1.5, arms.dtype),
        NUM_FEATURES,
        generator=seeded(1),
        **kwargs,
    )


def _botorch_paths(model, cache, weights, update_strategy=None):
    r"""BoTorch's Matheron paths of ``model`` on the cache's feature basis."""
    kwargs = {} if update_strategy is None else {"update_strategy": update_strategy}
    return draw_matheron_paths(
        model,
        sample_shape=torch.Size([weights.shape[0]]),
        prior_sampler=partial(
            draw_kernel_feature_paths,
            num_features=cache.num_features,
            map_generator=lambda **_: cache.feature_map,
            weight_generator=lambda shape: weights.reshape(shape),
        ),
        **kwargs,
    )


def _observations(arms, sizes, seed=3):
    g = seeded(seed)
    for k, size in enumerate(sizes):
        indices = torch.randint(arms.shape[0], (size,), generator=g)
        yield indices, _rewards(arms, indices, seed + k)


@pytest.mark.parametrize("budget", [2**30, 300 * 8 * NUM_FEATURES + 1])
def test_exact_paths_equal_botorch_matheron_paths(budget):
    # Second budget: features fit, kernel columns do not (recomputed per draw).
    arms = _arms()
    cache = _cache(arms, memory_budget=budget)
    sampler = IncrementalExactThompson(cache, NOISE)
    for indices, rewards in _observations(arms, [7, 1, 30, 1, 1]):
        sampler.observe(indices, rewards)
    assert cache.columns_stored == (budget == 2**30)
    t = sampler.num_observations
    X = arms[sampler.observed]
    model = SingleTaskGP(
        X,
        sampler.targets.unsqueeze(-1),
        train_Yvar=torch.full((t, 1), NOISE, dtype=DTYPE),
        covar_module=cache.kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    ).eval()
    weights = torch.randn(4, NUM_FEATURES, generator=seeded(5), dtype=DTYPE)
    with torch.random.fork_rng():
        torch.manual_seed(11)
        paths = _botorch_paths(model, cache, weights)
        torch.manual_seed(11)
        noise = torch.randn(4, t, dtype=DTYPE)  # BoTorch's draw of the noise
    with torch.no_grad():
        expected = paths(arms).mT
    actual = sampler.path_values(weights, noise)
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9)


def test_exact_scaled_paths_and_argmax():
    arms = _arms()
    sampler = IncrementalExactThompson(_cache(arms), NOISE)
    for indices, rewards in _observations(arms, [20]):
        sampler.observe(indices, rewards)
    weights = torch.randn(3, NUM_FEATURES, generator=seeded(2), dtype=DTYPE)
    noise = torch.randn(3, 20, generator=seeded(3), dtype=DTYPE)
    mean = sampler.path_values(weights, noise, alpha=0.0)
    for alpha in (0.5, 2.0):
        scaled = sampler.path_values(weights, noise, alpha=alpha)
        unit = sampler.path_values(weights, noise)
        torch.testing.assert_close(scaled, mean + alpha * (unit - mean))
    g = seeded(4)
    chosen = sampler.sample(3, alpha=1.0, generator=g)
    g = seeded(4)
    weights = torch.randn(3, NUM_FEATURES, generator=g, dtype=DTYPE)
    values = sampler.path_values(weights, torch.randn(3, 20, generator=g, dtype=DTYPE))
    torch.testing.assert_close(chosen.values, values.max(0).values)
    assert chosen.indices.tolist() == values.argmax(0).tolist()


def _svgp(arms, sampler, quality):
    return DecomposedSamplingSVGP(
        arms[sampler.observed],
        sampler.targets.unsqueeze(-1),
        num_inducing=sampler.num_inducing,
        covar_module=sampler.cache.kernel,
        mean_module=ZeroMean(),
        noise_variance=NOISE,
        inducing_quality=quality,
    )


@pytest.mark.parametrize("quality", ["variance", "improvement"])
def test_sparse_state_equals_svgp_built_from_scratch(quality):
    arms = _arms()
    sampler = CachedSparseThompson(
        _cache(arms), NOISE, num_inducing=12, inducing_quality=quality
    )
    reference = None
    kept = 0
    for indices, rewards in _observations(arms, [15] + [1] * 25 + [6]):
        before = sampler.reselections
        sampler.observe(indices, rewards)
        kept += sampler.reselections == before
        X, Y = arms[indices], rewards.unsqueeze(-1)
        if reference is None:
            reference = _svgp(arms, sampler, quality)
        else:
            reference.update(X, Y)
        strategy = reference.model.variational_strategy
        q_v = strategy._variational_distribution
        assert torch.equal(arms[sampler.inducing_arms], reference.inducing_points)
        torch.testing.assert_close(
            sampler.inducing_mean, q_v.variational_mean, rtol=1e-8, atol=1e-9
        )
        torch.testing.assert_close(
            sampler.inducing_chol, q_v.chol_variational_covar, rtol=1e-8, atol=1e-9
        )
    if quality == "variance":
        assert kept > 0  # the selection stayed put on some updates
    # Paths: the model's scaled Matheron paths with the same draws.
    m = sampler.noise_size
    weights = torch.randn(3, NUM_FEATURES, generator=seeded(7), dtype=DTYPE)
    noise = torch.randn(3, m, generator=seeded(8), dtype=DTYPE)
    alpha = 1.7
    paths = _botorch_paths(
        reference,
        sampler.cache,
        alpha * weights,
        update_strategy=partial(scaled_update, alpha=alpha, generator=seeded(8)),
    )
    with torch.no_grad():
        expected = paths(arms).mT
    actual = sampler.path_values(weights, noise, alpha=alpha)
    torch.testing.assert_close(actual, expected, rtol=1e-8, atol=1e-8)


def test_cache_stores_features_columns_and_recomputes_past_budget():
    arms = _arms(n=200)
    kernel = rbf_kernel(0.3, 1.5)
    full = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), chunk_size=37
    )
    with torch.no_grad():
        expected_features = full.feature_map(arms).to_dense()
    torch.testing.assert_close(full.features, expected_features)
    column_arms = torch.arange(BLOCK_COLUMNS + 5)
    full.add_columns(column_arms)
    assert full.num_columns == BLOCK_COLUMNS + 5
    assert full.stored_bytes == 200 * (NUM_FEATURES + 2 * BLOCK_COLUMNS) * 8
    W = torch.randn(2, NUM_FEATURES, generator=seeded(2), dtype=DTYPE)
    V = torch.randn(len(column_arms), 2, generator=seeded(3), dtype=DTYPE)
    with torch.no_grad():
        expected = (
            expected_features @ W.T + kernel(arms, arms[column_arms]).to_dense() @ V
        )
    torch.testing.assert_close(full.evaluate(W, column_arms, V), expected)
    # Freed slots are reused; repeats add their weights.
    full.remove_columns(column_arms[:3])
    full.add_columns(torch.tensor([150, 151, 150]))
    assert full.num_columns == BLOCK_COLUMNS + 4 and full.stored_bytes == (
        200 * (NUM_FEATURES + 2 * BLOCK_COLUMNS) * 8
    )
    twice = torch.tensor([150, 150])
    torch.testing.assert_close(
        full.evaluate(W, twice, V[:2]),
        full.evaluate(W, twice[:1], V[:1] + V[1:2]),
    )
    # Nothing stored: same values from chunked recomputation.
    none = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), memory_budget=8, chunk_size=37
    )
    none.add_columns(column_arms)
    assert none.features is None and not none.columns_stored
    assert none.stored_bytes == 0
    torch.testing.assert_close(
        none.evaluate(W, column_arms, V), expected, rtol=1e-12, atol=1e-12
    )
    # float32 storage: float64 results within float32 precision.
    low = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), cache_dtype=torch.float32
    )
    low.add_columns(column_arms)
    result = low.evaluate(W, column_arms, V)
    assert result.dtype == DTYPE
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)


def test_float32_arms_run():
    arms = _arms(dtype=torch.float32)
    for sampler in (
        IncrementalExactThompson(_cache(arms), NOISE),
        CachedSparseThompson(_cache(arms), NOISE, 8),
    ):
        for indices, rewards in _observations(arms, [10, 1]):
            sampler.observe(indices, rewards)
        chosen = sampler.sample(2, generator=seeded(0))
        assert chosen.values.dtype == torch.float32 and chosen.indices.shape == (2,)


def test_bad_input_names_the_argument():
    arms = _arms()
    kernel = rbf_kernel(0.3, 1.5)
    with pytest.raises(ValueError, match="num_features"):
        ArmFeatureCache(arms, kernel, 63)
    with pytest.raises(ValueError, match="memory_budget"):
        ArmFeatureCache(arms, kernel, 64, memory_budget=0)
    with pytest.raises(TypeError, match="cache_dtype"):
        ArmFeatureCache(arms, kernel, 64, cache_dtype=torch.int64)
    with pytest.raises(TypeError, match="generator"):
        ArmFeatureCache(arms, kernel, 64, generator=0)
    cache = _cache(arms)
    with pytest.raises(ValueError, match="`noise`"):
        IncrementalExactThompson(cache, 0.0)
    with pytest.raises(ValueError, match="inducing_quality"):
        CachedSparseThompson(cache, NOISE, 5, inducing_quality="ei")
    sampler = IncrementalExactThompson(cache, NOISE)
    with pytest.raises(ValueError, match="Observe"):
        sampler.sample(1)
    with pytest.raises(TypeError, match="indices"):
        sampler.observe(torch.tensor([0.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="indices"):
        sampler.observe(torch.tensor([300]), torch.tensor([1.0], dtype=DTYPE))
    with pytest.raises(ValueError, match="rewards"):
        sampler.observe(torch.tensor([0, 1]), torch.tensor([1.0], dtype=DTYPE))
    with pytest.raises(ValueError, match="rewards"):
        sampler.observe(torch.tensor([0]), torch.tensor([float("nan")], dtype=DTYPE))
    assert sampler.num_observations == 0  # nothing stored by a rejected call
    sampler.observe(torch.tensor([0]), torch.tensor([1.0], dtype=DTYPE))
    with pytest.raises(ValueError, match="q"):
        sampler.sample(0)
    with pytest.raises(ValueError, match="alpha"):
        sampler.sample(1, alpha=-1.0)
    with pytest.raises(TypeError, match="generator"):
        sampler.sample(1, generator=1)
