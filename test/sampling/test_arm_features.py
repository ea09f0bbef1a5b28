r"""The cached prior features and kernel columns of a finite arm set, and prior
path values drawn ahead, against dense features and kernel matrices; appended arms
against a cache built on all arms."""

import pytest
import torch

from botorch_sketch.sampling import arm_features
from botorch_sketch.sampling.arm_features import (
    BLOCK_COLUMNS,
    PRIOR_VALUE_ROWS,
    ArmFeatureCache,
    PriorPathBank,
)
from botorch_sketch.utils.atomic import rolled_back_on_failure

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


@pytest.mark.parametrize("cache_dtype", [None, torch.float32])
def test_stored_features_are_written_in_chunks_of_feature_chunk_bytes(
    cache_dtype, tkwargs, monkeypatch
):
    # at most 7 arms' features per chunk (or chunk_size arms, if fewer): the
    # stored rows equal the feature map evaluated on all arms at once, at
    # construction and after appends that start and end inside a chunk
    arms = _arms(n=150, **tkwargs)
    kernel = rbf_kernel(0.3, 1.5, **tkwargs)
    row_bytes = NUM_FEATURES * arms.element_size()
    monkeypatch.setattr(arm_features, "FEATURE_CHUNK_BYTES", 8 * row_bytes - 1)
    sizes = []
    features = ArmFeatureCache._features
    monkeypatch.setattr(
        ArmFeatureCache,
        "_features",
        lambda self, X: sizes.append(X.shape[0]) or features(self, X),
    )
    for chunk_size, expected_sizes in ((16384, [7] * 14 + [2]), (5, [5] * 20)):
        sizes.clear()
        cache = ArmFeatureCache(
            arms[:100],
            kernel,
            NUM_FEATURES,
            basis_seed=4,
            cache_dtype=cache_dtype,
            chunk_size=chunk_size,
        )
        assert sizes == expected_sizes
    sizes.clear()
    cache.add_arms(arms[100:103])
    cache.add_arms(arms[103:])
    assert sizes == [3] + [5] * 9 + [2]
    with torch.no_grad():
        expected = cache.feature_map(arms).to_dense()
    assert cache.features.dtype == (cache_dtype or arms.dtype)
    assert_close(cache.features, expected)


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


def _registered_cache(stored: bool) -> ArmFeatureCache:
    r"""A cache of 50 arms in 2-d with the columns of arms 1 and 2 registered,
    stored or (a budget of 8 bytes) recomputed."""
    budget = 2.0**30 if stored else 8
    cache = ArmFeatureCache(
        _arms(n=50, d=2), rbf_kernel(0.3, 1.5), NUM_FEATURES, memory_budget=budget
    )
    cache.add_columns(torch.tensor([1, 2]))
    return cache


def _values(cache: ArmFeatureCache) -> torch.Tensor:
    r"""Fresh ``N x 2`` prior values of the cache (storage dtype)."""
    return cache.prior_values(torch.ones(2, NUM_FEATURES, dtype=DTYPE))


_NAN = float("nan")
_V = torch.ones(2, 2, dtype=DTYPE)

#: ``(method, arguments from the cache, error, message)`` of malformed calls.
BAD_CALLS = {
    "indices list": ("add_columns", lambda c: ([3],), TypeError, "`indices`"),
    "indices float": (
        "add_columns",
        lambda c: (torch.tensor([3.0]),),
        TypeError,
        "`indices`",
    ),
    "indices negative": (
        "add_columns",
        lambda c: (torch.tensor([-1]),),
        ValueError,
        "`indices`",
    ),
    "indices too large": (
        "add_columns",
        lambda c: (torch.tensor([3, 50]),),
        ValueError,
        "`indices`",
    ),
    "indices 2-d": (
        "add_columns",
        lambda c: (torch.tensor([[3]]),),
        ValueError,
        "`indices`",
    ),
    "remove negative": (
        "remove_columns",
        lambda c: (torch.tensor([-1]),),
        ValueError,
        "`indices`",
    ),
    "features too large": (
        "features_at",
        lambda c: (torch.tensor([50]),),
        ValueError,
        "`indices`",
    ),
    "features 0-d": (
        "features_at",
        lambda c: (torch.tensor(1),),
        ValueError,
        "`indices`",
    ),
    "multiplied unregistered": (
        "multiplied_columns",
        lambda c: (torch.tensor([3]),),
        ValueError,
        "`column_arms`",
    ),
    "kernel NaN": (
        "kernel_matrix",
        lambda c: (torch.full((1, 2), _NAN, dtype=DTYPE), c.arms),
        ValueError,
        "`X`",
    ),
    "kernel columns": (
        "kernel_matrix",
        lambda c: (c.arms, torch.zeros(2, 3, dtype=DTYPE)),
        ValueError,
        "`Y`",
    ),
    "kernel 1-d": ("kernel_matrix", lambda c: (c.arms[0], c.arms), ValueError, "`X`"),
    "kernel dtype": (
        "kernel_matrix",
        lambda c: (c.arms.float(), c.arms),
        TypeError,
        "`X`",
    ),
    "weights NaN": (
        "prior_values",
        lambda c: (torch.full((2, NUM_FEATURES), _NAN, dtype=DTYPE),),
        ValueError,
        "`weights`",
    ),
    "weights columns": (
        "prior_values",
        lambda c: (torch.zeros(2, NUM_FEATURES - 2, dtype=DTYPE),),
        ValueError,
        "`weights`",
    ),
    "weights 1-d": (
        "prior_values",
        lambda c: (torch.zeros(NUM_FEATURES, dtype=DTYPE),),
        ValueError,
        "`weights`",
    ),
    "weights integer": (
        "prior_values",
        lambda c: (torch.zeros(2, NUM_FEATURES, dtype=torch.long),),
        TypeError,
        "`weights`",
    ),
    "column arm unregistered": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1, 3]), _V),
        ValueError,
        "`column_arms`",
    ),
    "column arm too large": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1, 99]), _V),
        ValueError,
        "`column_arms`",
    ),
    "column arms float": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1.0, 2.0]), _V),
        TypeError,
        "`column_arms`",
    ),
    "column weight rows": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1, 2]), torch.ones(3, 2, dtype=DTYPE)),
        ValueError,
        "`column_weights`",
    ),
    "column weight columns": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1, 2]), torch.ones(2, 3, dtype=DTYPE)),
        ValueError,
        "`column_weights`",
    ),
    "column weights NaN": (
        "add_column_values",
        lambda c: (_values(c), torch.tensor([1, 2]), torch.full_like(_V, _NAN)),
        ValueError,
        "`column_weights`",
    ),
    "values NaN": (
        "add_column_values",
        lambda c: (torch.full_like(_values(c), _NAN), torch.tensor([1, 2]), _V),
        ValueError,
        "`values`",
    ),
    "values rows": (
        "add_column_values",
        lambda c: (_values(c)[:3], torch.tensor([1, 2]), _V),
        ValueError,
        "`values`",
    ),
    "values dtype": (
        "add_column_values",
        lambda c: (_values(c).float(), torch.tensor([1, 2]), _V),
        TypeError,
        "`values`",
    ),
    "points NaN": (
        "add_arms",
        lambda c: (torch.full((1, 2), _NAN, dtype=DTYPE),),
        ValueError,
        "`points`",
    ),
    "points columns": (
        "add_arms",
        lambda c: (torch.zeros(1, 3, dtype=DTYPE),),
        ValueError,
        "`points`",
    ),
    "points 1-d": (
        "add_arms",
        lambda c: (torch.zeros(2, dtype=DTYPE),),
        ValueError,
        "`points`",
    ),
    "points empty": (
        "add_arms",
        lambda c: (torch.zeros(0, 2, dtype=DTYPE),),
        ValueError,
        "`points`",
    ),
    "points dtype": (
        "add_arms",
        lambda c: (torch.zeros(1, 2, dtype=torch.float32),),
        TypeError,
        "`points`",
    ),
}


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "recomputed"])
@pytest.mark.parametrize(
    "method, arguments, error, match", BAD_CALLS.values(), ids=list(BAD_CALLS)
)
def test_malformed_arguments_are_rejected_before_any_change(
    stored, method, arguments, error, match
):
    # Issue 26 item 10: these gave silent NaN or raw torch errors, and
    # add_columns registered a bad index before it failed.
    cache = _registered_cache(stored)
    W = torch.ones(2, NUM_FEATURES, dtype=DTYPE)

    def state():
        values = _evaluate(cache, W, torch.tensor([1, 2]), _V)
        return cache.num_columns, cache.stored_bytes, cache.columns_stored, values

    before = state()
    args = arguments(cache)
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(error, match=match):
        getattr(cache, method)(*args)
    after = state()
    assert after[:3] == before[:3] and torch.equal(after[3], before[3])
    for arg, copy in zip(args, copies, strict=True):  # nothing updated in place
        if isinstance(arg, torch.Tensor):
            torch.testing.assert_close(arg, copy, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "recomputed"])
def test_empty_arguments_are_accepted(stored):
    cache = _registered_cache(stored)
    none = torch.tensor([], dtype=torch.long)
    cache.add_columns(none)
    cache.remove_columns(none)
    assert cache.num_columns == 2
    assert cache.features_at(none).shape == (0, NUM_FEATURES)
    assert cache.multiplied_columns(none) == 0
    assert cache.kernel_matrix(cache.arms[:0], cache.arms).shape == (0, 50)
    assert cache.prior_values(torch.zeros(0, NUM_FEATURES, dtype=DTYPE)).shape == (
        50,
        0,
    )
    values = _values(cache)
    expected = values.clone()
    result = cache.add_column_values(values, none, torch.zeros(0, 2, dtype=DTYPE))
    assert torch.equal(result, expected)


def test_prior_bank_needs_a_cache():
    with pytest.raises(TypeError, match="`cache`"):
        PriorPathBank("not a cache")


def _grown_and_scratch(stored, tkwargs):
    r"""A cache of 60 arms with the columns of the even ones registered (the odd
    ones' registered, then removed: free slots), grown by 3, 1, 40 and 7 arms
    (the columns of arms 60 to 99 registered before the last append: two
    blocks), and a cache built on all 111 arms with the same basis and columns;
    chunks of 7 arms."""
    arms = _arms(n=111, **tkwargs)
    kernel = rbf_kernel(0.3, 1.5, **tkwargs)
    budget = 2.0**30 if stored else 8

    def cache(points):
        return ArmFeatureCache(
            points, kernel, NUM_FEATURES, basis_seed=3, memory_budget=budget,
            chunk_size=7,
        )  # fmt: skip

    def indices(*args):
        return torch.arange(*args, device=arms.device)

    grown = cache(arms[:60])
    grown.add_columns(indices(60))
    grown.remove_columns(indices(1, 60, 2))
    for start, stop in ((60, 63), (63, 64), (64, 104), (104, 111)):
        if start == 104:
            grown.add_columns(indices(60, 100))
        grown.add_arms(arms[start:stop])
    registered = torch.cat([indices(0, 60, 2), indices(60, 100)])
    scratch = cache(arms)
    scratch.add_columns(registered)
    return grown, scratch, registered


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "recomputed"])
def test_appended_arms_equal_a_cache_built_on_all_arms(stored, tkwargs):
    grown, scratch, registered = _grown_and_scratch(stored, tkwargs)
    assert grown.num_arms == scratch.num_arms == 111
    assert grown.num_columns == scratch.num_columns
    assert (grown.features is None) == (scratch.features is None) == (not stored)
    assert grown.columns_stored == scratch.columns_stored == stored
    assert grown.multiplied_columns(registered) == (
        2 * BLOCK_COLUMNS if stored else registered.numel()
    )
    if stored:  # equal up to rounding (the products' blocking differs)
        assert grown.features.shape == (111, NUM_FEATURES)
        assert_close(grown.features, scratch.features)
    arms = scratch.arms
    W = _normal(3, NUM_FEATURES, seed=2, like=arms)
    V = _normal(len(registered), 3, seed=3, like=arms)
    assert_close(
        _evaluate(grown, W, registered, V), _evaluate(scratch, W, registered, V)
    )
    indices = torch.tensor([0, 64, 110], device=arms.device)
    assert_close(grown.features_at(indices), scratch.features_at(indices))


def test_appends_grow_the_buffers_by_a_quarter_within_the_budget():
    arms = _arms(n=126, d=2)
    kernel = rbf_kernel(0.3, 1.5)
    columns = torch.tensor([0, 1])
    W, V = _normal(2, NUM_FEATURES, seed=2, like=arms), _normal(2, 2, seed=3, like=arms)
    expected = ArmFeatureCache(arms, kernel, NUM_FEATURES, basis_seed=4)
    expected.add_columns(columns)
    # bytes per arm of the features, and of the features and one block
    features, both = NUM_FEATURES * 8, (NUM_FEATURES + BLOCK_COLUMNS) * 8

    def appended(budget):
        r"""The bytes stored after appending 1, 24 and 1 arms to 100."""
        cache = ArmFeatureCache(
            arms[:100], kernel, NUM_FEATURES, basis_seed=4, memory_budget=budget
        )
        cache.add_columns(columns)
        stored = []
        for start, stop in ((100, 101), (101, 125), (125, 126)):
            cache.add_arms(arms[start:stop])
            stored.append(cache.stored_bytes)
            assert cache.stored_bytes <= budget
        assert_close(
            _evaluate(cache, W, columns, V), _evaluate(expected, W, columns, V)
        )
        return cache, stored

    # room for 125 arms after the first append, filled in place; then 156
    cache, stored = appended(2.0**30)
    assert stored == [125 * both, 125 * both, 156 * both] and cache.columns_stored
    # a quarter more does not fit: room for 101; at 125 the block no longer fits
    # beside the features: dropped; the features alone get a quarter more
    cache, stored = appended(125 * both - 1)
    assert stored == [101 * both, 125 * features, 156 * features]
    assert not cache.columns_stored and cache.features is not None
    # the features fit up to 125 arms (the block never did): then dropped too
    cache, stored = appended(125 * features)
    assert stored == [125 * features, 125 * features, 0]
    assert not cache.columns_stored and cache.features is None


def test_prior_bank_extends_its_values_to_appended_arms(tkwargs):
    arms = _arms(n=90, **tkwargs)
    kernel = rbf_kernel(0.3, 1.5, **tkwargs)
    cache = ArmFeatureCache(arms[:50], kernel, NUM_FEATURES, basis_seed=1)
    full = ArmFeatureCache(arms, kernel, NUM_FEATURES, basis_seed=1)
    bank = PriorPathBank(cache, block=5)
    generator, g = seeded(7), seeded(7)
    weights = torch.randn(5, NUM_FEATURES, generator=g, dtype=DTYPE).to(arms)
    bank.take(2, generator)
    cache.add_arms(arms[50:80])  # new buffers
    bank.extend()
    taken, values = bank.take(1, generator)
    assert_close(taken, weights[2:3])
    assert_close(values, full.features[:80] @ weights[2:3].mT)
    cache.add_arms(arms[80:81])  # in place; taken without an explicit extend
    taken, values = bank.take(2, generator)
    assert_close(values, full.features[:81] @ weights[3:5].mT)
    assert bank.remaining.shape == (0, NUM_FEATURES)
    cache.add_arms(arms[81:])
    refill = torch.randn(5, NUM_FEATURES, generator=g, dtype=DTYPE).to(arms)
    taken, values = bank.take(1, generator)  # a fresh block, at all 90 arms
    assert_close(values, full.features @ refill[:1].mT)


class _Fault(Exception):
    pass


@pytest.mark.parametrize("room", [True, False], ids=["in place", "new buffers"])
def test_a_failed_append_leaves_the_cache_as_it_was(room, monkeypatch):
    r"""An append that fails after it wrote the new features (past the arms in
    use, or into new buffers): the rollback of the atomic call restores the
    cache, and a retry equals a fault-free append."""
    arms = _arms(n=70, d=2)
    kernel = rbf_kernel(0.3, 1.5)

    def built():
        cache = ArmFeatureCache(arms[:50], kernel, NUM_FEATURES, basis_seed=2)
        cache.add_columns(torch.tensor([3, 4, 5]))
        if room:
            cache.add_arms(arms[50:51])  # room for 62 arms
        return cache

    cache, twin = built(), built()
    first = cache.num_arms
    W, V = _normal(2, NUM_FEATURES, seed=2, like=arms), _normal(3, 2, seed=3, like=arms)
    columns = torch.tensor([3, 4, 5])
    before = _evaluate(cache, W, columns, V)
    features, stored = cache.features.clone(), cache.stored_bytes

    def failing(self, first):
        raise _Fault

    monkeypatch.setattr(ArmFeatureCache, "_write_columns", failing)
    with pytest.raises(_Fault), rolled_back_on_failure(cache):
        cache.add_arms(arms[first : first + 10])
    monkeypatch.undo()
    assert cache.num_arms == first and cache.stored_bytes == stored
    assert torch.equal(cache.features, features)
    assert torch.equal(_evaluate(cache, W, columns, V), before)
    cache.add_arms(arms[first : first + 10])
    twin.add_arms(arms[first : first + 10])
    assert torch.equal(_evaluate(cache, W, columns, V), _evaluate(twin, W, columns, V))


def test_prior_bank_computes_values_a_pass_of_prior_value_rows_at_a_time(monkeypatch):
    arms = _arms(n=90)
    kernel = rbf_kernel(0.3, 1.5)
    cache = ArmFeatureCache(arms[:50], kernel, NUM_FEATURES, basis_seed=1)
    full = ArmFeatureCache(arms, kernel, NUM_FEATURES, basis_seed=1)
    block = 2 * PRIOR_VALUE_ROWS + 6
    bank, generator, g = PriorPathBank(cache, block=block), seeded(7), seeded(7)
    weights = torch.randn(block, NUM_FEATURES, generator=g, dtype=DTYPE)
    passes = []  # (rows, first arm) of each pass over the features
    prior_values = ArmFeatureCache._prior_values

    def counted(self, rows, first=0):
        passes.append((rows.shape[0], first))
        return prior_values(self, rows, first)

    monkeypatch.setattr(ArmFeatureCache, "_prior_values", counted)
    for draw in range(block):
        if draw == 10:  # appended while rows 10..31 are computed, 32.. are not
            cache.add_arms(arms[50:])
        taken, values = bank.take(1, generator)
        assert_close(taken, weights[draw : draw + 1])
        assert_close(values, full.features[: cache.num_arms] @ taken.mT)
    rows = PRIOR_VALUE_ROWS
    assert passes == [(rows, 0), (rows - 10, 50), (rows, 0), (6, 0)]
