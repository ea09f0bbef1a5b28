r"""The pending multiset of the asynchronous loops."""

from collections import Counter

import pytest
import torch

from botorch_sketch.generation.pending import occurrence_rank, staying_pending


def brute_force_staying(pending, indices):
    r"""Remove the earliest copy of each leaving arm, one at a time."""
    keep = [True] * len(pending)
    for arm in indices:
        keep[next(i for i, a in enumerate(pending) if a == arm and keep[i])] = False
    return keep


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_staying_pending_equals_removing_earliest_copies(device):
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        pending = torch.randint(0, 6, (12,), generator=generator).to(device)
        leaving = pending[torch.randperm(12, generator=generator)[:5].to(device)]
        keep = staying_pending(pending, leaving.cpu(), 6)  # indices on any device
        assert keep.device == pending.device
        assert keep.tolist() == brute_force_staying(pending.tolist(), leaving.tolist())
        assert Counter(pending[keep].tolist()) == Counter(pending.tolist()) - Counter(
            leaving.tolist()
        )


def test_occurrence_rank():
    assert occurrence_rank(torch.tensor([4, 2, 4, 7, 2, 4])).tolist() == [
        0,
        0,
        1,
        0,
        1,
        2,
    ]


@pytest.mark.parametrize(
    "indices, error, match",
    [
        (torch.tensor([7, 7]), ValueError, "not pending"),
        (torch.tensor([2, 2, 2]), ValueError, "not pending"),
        (torch.tensor([], dtype=torch.long), ValueError, "at least one"),
        (torch.tensor([9]), ValueError, "indices"),
        (torch.tensor([[2]]), ValueError, "1-d"),
        ([2], TypeError, "LongTensor"),
        (torch.tensor([2.0]), TypeError, "LongTensor"),
    ],
)
def test_bad_leaving_indices(indices, error, match):
    with pytest.raises(error, match=match):
        staying_pending(torch.tensor([4, 2, 4, 7, 2]), indices, 9)
