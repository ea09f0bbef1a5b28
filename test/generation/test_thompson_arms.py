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
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.models.variational import DecomposedSamplingSVGP
from botorch_sketch.sampling.arm_features import ArmFeatureCache
from botorch_sketch.sampling.pathwise import scaled_update

from ..gp_helpers import DTYPE, assert_close, rbf_kernel, seeded, uniform

NOISE = 0.3
NUM_FEATURES = 64


def _arms(n=300, d=3, seed=0, dtype=DTYPE, device=None):
    return uniform(n, d, seed=seed, dtype=dtype, device=device)


def _rewards(arms, indices, seed):
    x = arms[indices]
    noise = torch.randn(len(indices), generator=seeded(seed), dtype=x.dtype)
    return torch.sin(5 * x).sum(-1) + 0.3 * noise.to(x.device)


def _normal(*shape, seed, like):
    r"""Standard normal draws in ``like``'s dtype and device, drawn on the CPU."""
    return torch.randn(*shape, generator=seeded(seed), dtype=like.dtype).to(like)


def _cache(arms, **kwargs):
    return ArmFeatureCache(
        arms,
        rbf_kernel(0.3, 1.5, arms.dtype, arms.device),
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


@pytest.mark.parametrize("columns_stored", [True, False])
def test_exact_paths_equal_botorch_matheron_paths(columns_stored, tkwargs):
    # Without stored columns the budget fits the features, not the kernel columns
    # (recomputed per draw).
    arms = _arms(**tkwargs)
    features_bytes = arms.shape[0] * NUM_FEATURES * arms.element_size()
    budget = 2**30 if columns_stored else features_bytes + 1
    cache = _cache(arms, memory_budget=budget)
    sampler = IncrementalExactThompson(cache, NOISE)
    for indices, rewards in _observations(arms, [7, 1, 30, 1, 1]):
        sampler.observe(indices, rewards)
    assert cache.features is not None and cache.columns_stored == columns_stored
    t = sampler.num_observations
    X = arms[sampler.observed]
    model = SingleTaskGP(
        X,
        sampler.targets.unsqueeze(-1),
        train_Yvar=torch.full((t, 1), NOISE, **tkwargs),
        covar_module=cache.kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    ).eval()
    weights = _normal(4, NUM_FEATURES, seed=5, like=arms)
    device = tkwargs["device"]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(11)
        paths = _botorch_paths(model, cache, weights)
        torch.manual_seed(11)
        noise = torch.randn(4, t, **tkwargs)  # BoTorch's draw of the noise
    with torch.no_grad():
        expected = paths(arms).mT
    actual = sampler.path_values(weights, noise)
    assert_close(actual, expected)


def test_exact_scaled_paths_and_argmax(tkwargs):
    arms = _arms(**tkwargs)
    sampler = IncrementalExactThompson(_cache(arms), NOISE)
    for indices, rewards in _observations(arms, [20]):
        sampler.observe(indices, rewards)
    weights = _normal(3, NUM_FEATURES, seed=2, like=arms)
    noise = _normal(3, 20, seed=3, like=arms)
    mean = sampler.path_values(weights, noise, alpha=0.0)
    for alpha in (0.5, 2.0):
        scaled = sampler.path_values(weights, noise, alpha=alpha)
        unit = sampler.path_values(weights, noise)
        assert_close(scaled, mean + alpha * (unit - mean))
    chosen = sampler.sample(3, alpha=1.0, generator=seeded(4))
    # the sampler's draws, float64 from the CPU generator: a block of 64 weights
    # (the prior bank's), the first three used, then the noise
    g = seeded(4)
    weights = torch.randn(64, NUM_FEATURES, generator=g, dtype=DTYPE)[:3].to(arms)
    noise = torch.randn(3, 20, generator=g, dtype=DTYPE).to(arms)
    values = sampler.path_values(weights, noise)
    assert_close(chosen.values, values.max(0).values)
    assert chosen.indices.tolist() == values.argmax(0).tolist()
    assert chosen.values.dtype == arms.dtype and chosen.indices.device == arms.device


@pytest.mark.parametrize("sparse", [False, True])
def test_prior_bank_draws_equal_paths_from_scratch(sparse, tkwargs):
    # Draws of q < block paths take their weights from blocks drawn ahead; each
    # draw's values must equal the paths recomputed from scratch with the weights
    # and noise the generator gave, in the order: block, noise, (block,) noise.
    arms = _arms(**tkwargs)
    cache = _cache(arms)
    if sparse:
        sampler = CachedSparseThompson(cache, NOISE, 8, prior_block=4)
    else:
        sampler = IncrementalExactThompson(cache, NOISE, prior_block=4)
    for indices, rewards in _observations(arms, [15]):
        sampler.observe(indices, rewards)
    s = sampler.noise_size
    generator, g = seeded(7), seeded(7)

    def block(rows):
        return torch.randn(rows, NUM_FEATURES, generator=g, dtype=DTYPE).to(arms)

    def noise(q):
        return torch.randn(q, s, generator=g, dtype=DTYPE).to(arms)

    first = block(4)
    draw_3 = (first[:3], noise(3))  # 3 of the block's 4
    second = block(4)  # 1 left < 2: a fresh block of 4, the old row dropped
    draw_2 = (second[:2], noise(2))
    draw_1 = (second[2:3], noise(1))
    draw_5 = (block(5), noise(5))  # q >= block: drawn directly, the bank untouched
    expected = [draw_3, draw_2, draw_1, draw_5]
    for q, (weights, eps) in zip([3, 2, 1, 5], expected, strict=True):
        chosen = sampler.sample(q, alpha=0.7, generator=generator)
        values = sampler.path_values(weights, eps, alpha=0.7)
        assert_close(chosen.values, values.max(0).values)
        assert chosen.indices.tolist() == values.argmax(0).tolist()
    assert_close(sampler.prior_bank.remaining, second[3:])
    # a saved remainder, loaded into a fresh bank, gives the same next draw
    other = IncrementalExactThompson(cache, NOISE, prior_block=4)
    if sparse:
        other = CachedSparseThompson(cache, NOISE, 8, prior_block=4)
    for indices, rewards in _observations(arms, [15]):
        other.observe(indices, rewards)
    other.prior_bank.load(sampler.prior_bank.remaining.clone())
    after, other_after = seeded(9), seeded(9)
    chosen = sampler.sample(1, generator=after)
    assert torch.equal(other.sample(1, generator=other_after).indices, chosen.indices)
    assert sampler.memory_bytes > cache.stored_bytes + sampler.prior_bank.memory_bytes


def test_reselection_computes_only_new_inducing_columns(monkeypatch):
    arms = _arms()
    cache = _cache(arms)
    sampler = CachedSparseThompson(cache, NOISE, num_inducing=12)
    computed = []
    kernel_matrix = cache._kernel_matrix

    def recording(X, Y):
        if X.shape[0] == arms.shape[0]:  # kernel columns at all arms
            computed.append(Y.shape[0])
        return kernel_matrix(X, Y)

    monkeypatch.setattr(cache, "_kernel_matrix", recording)
    changed = 0
    for indices, rewards in _observations(arms, [15] + [1] * 30):
        before = set(sampler.inducing_arms.tolist())
        computed.clear()
        sampler.observe(indices, rewards)
        after = set(sampler.inducing_arms.tolist())
        assert sum(computed) == len(after - before)
        assert cache.num_columns == len(after)  # dropped arms' columns freed
        changed += bool(before) and after != before and bool(after & before)
    assert changed > 0  # some re-selections kept part of the set
    weights = _normal(2, NUM_FEATURES, seed=5, like=arms)
    noise = _normal(2, sampler.noise_size, seed=6, like=arms)
    fresh = ArmFeatureCache(
        arms, cache.kernel, NUM_FEATURES, generator=seeded(1)
    )  # the same basis, columns computed once for the final set
    fresh.add_columns(sampler.inducing_arms)
    V = sampler.update_weights(weights, noise, 1.0)
    assert_close(
        sampler.path_values(weights, noise),
        fresh.add_column_values(fresh.prior_values(weights), sampler.inducing_arms, V),
    )


def _svgp(arms, sampler, quality):
    return DecomposedSamplingSVGP(
        arms[sampler.observed],
        sampler.targets.unsqueeze(-1),
        num_inducing=sampler.num_inducing,
        covar_module=sampler.cache.kernel,
        mean_module=ZeroMean(),
        noise=NOISE,
        inducing_quality=quality,
    )


@pytest.mark.parametrize("quality", ["variance", "improvement"])
def test_sparse_state_equals_svgp_built_from_scratch(quality, tkwargs):
    arms = _arms(**tkwargs)
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
        assert_close(sampler.inducing_mean, q_v.variational_mean)
        assert_close(sampler.inducing_chol, q_v.chol_variational_covar)
    if quality == "variance":
        assert kept > 0  # the selection stayed put on some updates
    # Paths: the model's scaled Matheron paths with the same draws.
    m = sampler.noise_size
    weights = _normal(3, NUM_FEATURES, seed=7, like=arms)
    noise = torch.randn(3, m, generator=seeded(8), dtype=DTYPE).to(arms)
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
    assert_close(actual, expected)


def test_bad_input_names_the_argument():
    arms = _arms()
    cache = _cache(arms)
    for jitter in (float("nan"), -1.0, float("inf")):  # #26 item 9
        with pytest.raises(ValueError, match="`jitter`"):
            CachedSparseThompson(cache, NOISE, jitter=jitter)
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
    with pytest.raises(ValueError, match="block"):
        IncrementalExactThompson(cache, NOISE, prior_block=0)


@pytest.mark.parametrize("sparse", [True, False])
def test_paths_on_new_targets_equal_paths_of_a_sampler_fed_them(sparse, tkwargs):
    # set_targets (and observe's targets) re-express the posterior in other
    # targets in place; a sampler fed those targets as rewards, in the same
    # updates, is the oracle
    arms = _arms(**tkwargs)
    generator = torch.Generator().manual_seed(3)

    def sampler():
        if sparse:
            return CachedSparseThompson(_cache(arms), NOISE, num_inducing=10)
        return IncrementalExactThompson(_cache(arms), NOISE)

    updated, chunks = sampler(), list(_observations(arms, [8, 1, 5, 2]))
    for step, (indices, rewards) in enumerate(chunks):
        raw = 1000.0 * rewards + 300.0
        told = updated.num_observations + raw.numel()
        targets = torch.randn(told, generator=generator, dtype=torch.float64)
        if step % 2:
            updated.observe(indices, raw, targets.to(arms))
        else:
            updated.observe(indices, raw)
            updated.set_targets(targets.to(arms))
        reference, start = sampler(), 0
        for old_indices, _ in chunks[: step + 1]:
            stop = start + old_indices.numel()
            reference.observe(old_indices, targets[start:stop].to(arms))
            start = stop
        assert_close(updated.targets, reference.rewards)
        assert torch.equal(updated.rewards[-raw.numel() :], raw)
        weights = _normal(4, NUM_FEATURES, seed=step, like=arms)
        noise = _normal(4, updated.noise_size, seed=10 + step, like=arms)
        assert_close(
            updated.path_values(weights, noise, alpha=1.3),
            reference.path_values(weights, noise, alpha=1.3),
        )
    before = updated.targets
    for bad in (
        torch.zeros(updated.num_observations + 1).to(arms),
        torch.full((updated.num_observations,), float("nan")).to(arms),
    ):
        with pytest.raises(ValueError, match="`targets`"):
            updated.set_targets(bad)
        with pytest.raises(ValueError, match="`targets`"):
            updated.observe(indices, raw, bad)
    assert updated.targets is before
    assert updated.num_observations == sum(i.numel() for i, _ in chunks)
