r"""The cached prior features and kernel columns of a finite arm set, and prior
path values drawn ahead, against dense features and kernel matrices."""

import pytest
import torch

from botorch_sketch.sampling.arm_features import (
    BLOCK_COLUMNS,
    ArmFeatureCache,
    PriorPathBank,
)

from ..gp_helpers import DTYPE, assert_close, rbf_kernel, seeded, uniform

NUM_FEATURES = 64


def _arms(n=300, d=3, seed=0, dtype=DTYPE, device=None):
    return uniform(n, d, seed=seed, dtype=dtype, device=device)


def _normal(*shape, seed, like):
    r"""Standard normal draws in ``like``'s dtype and device, drawn on the CPU."""
    return torch.randn(*shape, generator=seeded(seed), dtype=like.dtype).to(like)


def _evaluate(cache, W, column_arms, V):
    r"""``Phi_A W^T + K_{A, column_arms} V`` through the cache's two parts."""
    return cache.add_column_values(cache.prior_values(W), column_arms, V)


def test_cache_stores_features_columns_and_recomputes_past_budget(tkwargs):
    arms = _arms(n=200, **tkwargs)
    kernel = rbf_kernel(0.3, 1.5, **tkwargs)
    itemsize = arms.element_size()
    full = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), chunk_size=37
    )
    with torch.no_grad():
        expected_features = full.feature_map(arms).to_dense()
    assert_close(full.features, expected_features)
    column_arms = torch.arange(BLOCK_COLUMNS + 5, device=arms.device)
    full.add_columns(column_arms)
    assert full.num_columns == BLOCK_COLUMNS + 5
    assert full.stored_bytes == 200 * (NUM_FEATURES + 2 * BLOCK_COLUMNS) * itemsize
    W = _normal(2, NUM_FEATURES, seed=2, like=arms)
    V = _normal(len(column_arms), 2, seed=3, like=arms)
    with torch.no_grad():
        expected = (
            expected_features @ W.T + kernel(arms, arms[column_arms]).to_dense() @ V
        )
    assert_close(_evaluate(full, W, column_arms, V), expected)
    # Freed slots are reused; repeats add their weights.
    full.remove_columns(column_arms[:3])
    full.add_columns(torch.tensor([150, 151, 150], device=arms.device))
    assert full.num_columns == BLOCK_COLUMNS + 4 and full.stored_bytes == (
        200 * (NUM_FEATURES + 2 * BLOCK_COLUMNS) * itemsize
    )
    twice = torch.tensor([150, 150], device=arms.device)
    assert_close(
        _evaluate(full, W, twice, V[:2]),
        _evaluate(full, W, twice[:1], V[:1] + V[1:2]),
    )
    # Nothing stored: same values from chunked recomputation.
    none = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), memory_budget=8, chunk_size=37
    )
    none.add_columns(column_arms)
    assert none.features is None and not none.columns_stored
    assert none.stored_bytes == 0
    assert_close(_evaluate(none, W, column_arms, V), expected)


def test_float32_storage_of_float64_arms(device):
    # float32 storage: float64 results within float32 precision.
    arms = _arms(n=200, device=device)
    kernel = rbf_kernel(0.3, 1.5, device=device)
    column_arms = torch.arange(BLOCK_COLUMNS + 5, device=device)
    W = _normal(2, NUM_FEATURES, seed=2, like=arms)
    V = _normal(len(column_arms), 2, seed=3, like=arms)
    exact = ArmFeatureCache(arms, kernel, NUM_FEATURES, generator=seeded(1))
    low = ArmFeatureCache(
        arms, kernel, NUM_FEATURES, generator=seeded(1), cache_dtype=torch.float32
    )
    exact.add_columns(column_arms)
    low.add_columns(column_arms)
    result = _evaluate(low, W, column_arms, V)
    assert result.dtype == DTYPE and low.stored_bytes * 2 == exact.stored_bytes
    expected = _evaluate(exact, W, column_arms, V)
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)


def test_prior_bank_takes_fresh_weights_and_their_prior_values(tkwargs):
    arms = _arms(n=50, **tkwargs)
    cache = ArmFeatureCache(
        arms, rbf_kernel(0.3, 1.5, **tkwargs), NUM_FEATURES, generator=seeded(1)
    )
    with torch.no_grad():
        features = cache.feature_map(arms).to_dense()
    bank = PriorPathBank(cache, block=4)
    generator, g = seeded(7), seeded(7)

    def block(rows):
        return torch.randn(rows, NUM_FEATURES, generator=g, dtype=DTYPE).to(arms)

    first, second, large = block(4), block(4), block(5)
    # 3 of a block of 4; then 1 left < 2: a fresh block, the old row dropped; then
    # 5 >= 4: a block of 5 drawn and taken whole
    for q, expected in ((3, first[:3]), (2, second[:2]), (1, second[2:3]), (5, large)):
        weights, values = bank.take(q, generator)
        assert_close(weights, expected)
        assert values.shape == (50, q)
        assert_close(values, features @ expected.mT)
    assert bank.remaining.shape == (0, NUM_FEATURES)
    # loaded weights are the next ones taken, without drawing
    saved = _normal(3, NUM_FEATURES, seed=4, like=arms)
    bank.load(saved)
    state = generator.get_state()
    weights, values = bank.take(2, generator)
    assert torch.equal(generator.get_state(), state)
    assert_close(weights, saved[:2])
    assert_close(values, features @ saved[:2].mT)
    assert_close(bank.remaining, saved[2:])
    assert bank.memory_bytes == 3 * (NUM_FEATURES + 50) * arms.element_size()


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
    bank = PriorPathBank(ArmFeatureCache(arms, kernel, NUM_FEATURES))
    with pytest.raises(ValueError, match="block"):
        PriorPathBank(bank.cache, block=0)
    with pytest.raises(ValueError, match="weights"):
        bank.load(torch.zeros(2, NUM_FEATURES + 2, dtype=DTYPE))
    with pytest.raises(ValueError, match="weights"):
        bank.load(torch.full((2, NUM_FEATURES), float("nan")))
    with pytest.raises(ValueError, match="q"):
        bank.take(0, None)
    with pytest.raises(TypeError, match="generator"):
        bank.take(1, 1)
