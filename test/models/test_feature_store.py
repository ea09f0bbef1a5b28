r"""FeatureStore against dense features kept beside it."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.models.feature_store import FeatureStore

DOUBLE = torch.zeros(0, dtype=torch.float64)


def _householder(
    size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A unit vector ``h`` and the dense ``I - 2 h h^T``."""
    h = torch.randn(size, generator=generator, dtype=torch.float64)
    h = h / h.norm()
    return h, torch.eye(size, dtype=torch.float64) - 2 * torch.outer(h, h)


def _store_with_history(
    generator: torch.Generator,
) -> tuple[FeatureStore, torch.Tensor]:
    r"""A store after appends and rotations, and its dense ``A x m`` features."""
    store = FeatureStore(30, DOUBLE)
    dense = torch.zeros(30, 0, dtype=torch.float64)
    for count in (5, 3, 4):
        new = torch.randn(30, count, generator=generator, dtype=torch.float64)
        store.append(new)
        dense = torch.cat([dense, new], dim=-1)
        h, reflection = _householder(dense.shape[-1], generator)
        store.rotate_and_drop_last(h)
        dense = (dense @ reflection)[:, :-1]
    return store, dense


def test_appends_and_rotations_equal_the_dense_features() -> None:
    generator = torch.Generator().manual_seed(0)
    store, dense = _store_with_history(generator)
    assert store.size == dense.shape[-1] == 9 and store.num_raw == 12
    torch.testing.assert_close(store.features, dense)
    rows = torch.tensor([3, 0, 29])
    torch.testing.assert_close(store.feature_rows(rows), dense[rows])
    torch.testing.assert_close(store.feature_rows(7), dense[7])
    directions = torch.randn(9, 5, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(store.times(directions), dense @ directions)
    torch.testing.assert_close(store.times(directions[:, 0]), dense @ directions[:, 0])
    # raw rows and raw directions give the same inner products
    torch.testing.assert_close(
        store.raw_rows(rows) @ store.to_raw(directions), dense[rows] @ directions
    )


def test_read_of_any_width_equals_the_product_with_the_raw_columns() -> None:
    generator = torch.Generator().manual_seed(1)
    store, _ = _store_with_history(generator)
    raw = store.raw_rows(torch.arange(30))
    for width in (1, 2, 5, 8):
        rhs = torch.randn(
            store.num_raw, width, generator=generator, dtype=torch.float64
        )
        torch.testing.assert_close(store.read(rhs), raw @ rhs)


def test_a_rotation_with_no_reflector_drops_the_last_coordinate() -> None:
    store = FeatureStore(6, DOUBLE)
    new = torch.randn(
        6, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    store.append(new)
    store.rotate_and_drop_last(None)
    torch.testing.assert_close(store.features, new[:, :2])


def test_compaction_keeps_the_features_in_a_new_buffer() -> None:
    store, dense = _store_with_history(torch.Generator().manual_seed(3))
    buffer, used = store.buffer, store.raw[:, : store.num_raw].clone()
    store.compact()
    assert store.num_raw == store.size == 9 and store.buffer is not buffer
    torch.testing.assert_close(store.basis, torch.eye(9, dtype=torch.float64))
    torch.testing.assert_close(store.features, dense)
    # the held buffer was only read (its unused columns hold whatever memory held)
    assert torch.equal(buffer[:30, :12], used)


def test_a_full_buffer_grows_by_half_and_keeps_its_columns() -> None:
    generator = torch.Generator().manual_seed(4)
    store = FeatureStore(10, DOUBLE)
    first = torch.randn(10, 30, generator=generator, dtype=torch.float64)
    store.append(first)
    assert store.buffer.shape[1] == 32 and store.fits(2) and not store.fits(3)
    second = torch.randn(10, 5, generator=generator, dtype=torch.float64)
    store.append(second)
    assert store.buffer.shape[1] == 48
    torch.testing.assert_close(store.features, torch.cat([first, second], dim=-1))


def test_rebuild_holds_the_given_features_chunk_by_chunk() -> None:
    generator = torch.Generator().manual_seed(5)
    store, _ = _store_with_history(generator)
    dense = torch.randn(30, 40, generator=generator, dtype=torch.float64)
    asked = []

    def features(rows: slice) -> torch.Tensor:
        asked.append(rows)
        return dense[rows]

    store.rebuild(40, features)
    assert store.num_raw == 40 and store.buffer.shape[1] == 48 and asked
    torch.testing.assert_close(store.features, dense)
    buffer = store.buffer
    store.rebuild(0, features)  # no features: nothing allocated, nothing asked
    assert store.size == store.num_raw == 0 and store.buffer is buffer
    assert len(asked) == 1


def test_with_candidates_leaves_the_store_as_it_was() -> None:
    generator = torch.Generator().manual_seed(6)
    store, dense = _store_with_history(generator)
    added = torch.randn(4, 9, generator=generator, dtype=torch.float64)
    grown = store.with_candidates(added)
    assert store.num_points == 30 and grown.num_points == 34
    assert grown.buffer.shape[0] == 34 + 34 // 8  # spare rows for later appends
    torch.testing.assert_close(grown.features, torch.cat([dense, added]))
    torch.testing.assert_close(store.features, dense)
    more = torch.randn(2, 9, generator=generator, dtype=torch.float64)
    again = grown.with_candidates(more)  # into the spare rows
    assert again.buffer is grown.buffer
    torch.testing.assert_close(again.features, torch.cat([dense, added, more]))
    torch.testing.assert_close(grown.features, torch.cat([dense, added]))


def test_single_precision_raw_columns_give_results_in_the_candidates_dtype() -> None:
    generator = torch.Generator().manual_seed(7)
    store = FeatureStore(20, DOUBLE, dtype=torch.float32)
    dense = torch.randn(20, 6, generator=generator, dtype=torch.float64)
    store.append(dense)
    assert store.buffer.dtype == torch.float32
    rhs = torch.randn(6, 3, generator=generator, dtype=torch.float64)
    product = store.read(rhs)
    assert product.dtype == torch.float64
    torch.testing.assert_close(product, dense @ rhs, rtol=1e-5, atol=1e-5)


def test_growing_past_the_memory_budget_names_it() -> None:
    store = FeatureStore(100, DOUBLE, memory_budget=100 * 40 * 8)
    store.append(torch.ones(100, 32, dtype=torch.float64))
    with pytest.raises(MemoryError, match="memory_budget"):
        store.append(torch.ones(100, 1, dtype=torch.float64))
    assert store.num_raw == 32 and store.buffer.shape[1] == 32  # as it was
