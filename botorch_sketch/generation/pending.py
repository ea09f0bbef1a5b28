r"""Pending arms of an asynchronous ask/tell loop: a multiset of arm indices that
``tell`` and ``fail`` remove from, the earliest asked copies of an arm first."""

from __future__ import annotations

import torch
from torch import Tensor

from botorch_sketch.utils.validation import check_indices


def staying_pending(
    pending: Tensor, indices: object, num_arms: int, name: str = "indices"
) -> Tensor:
    r"""The mask of the ``p`` pending entries that stay when ``indices`` leave.

    Args:
        pending: ``p`` pending arm indices (repeats allowed).
        indices: ``b >= 1`` arm indices leaving, a sub-multiset of ``pending``.
        num_arms: The number of arms ``A``.
        name: The argument's name in error messages.

    Returns:
        ``p`` booleans; of repeated arms, the earliest copies are the ones leaving.
    """
    indices = check_indices(indices, name, num_arms).to(pending.device)
    if indices.numel() == 0:
        raise ValueError(f"`{name}` must hold at least one pending arm.")
    # counts over the distinct arms involved: O((p + b) log(p + b)), never O(A)
    arms, inverse = torch.unique(torch.cat([pending, indices]), return_inverse=True)
    held, gone = inverse[: pending.shape[0]], inverse[pending.shape[0] :]
    leaving = torch.bincount(gone, minlength=arms.shape[0])
    missing = arms[leaving > torch.bincount(held, minlength=arms.shape[0])]
    if missing.numel():
        raise ValueError(
            f"`{name}` holds arms that are not pending (asked, not yet told or "
            f"failed): {missing[:10].tolist()}."
        )
    return occurrence_rank(pending) >= leaving[held]


def occurrence_rank(values: Tensor) -> Tensor:
    r"""For each entry, how many equal entries come before it (``0`` for the first
    copy of a value, ``1`` for the second, ...), ``O(p log p)``."""
    order = torch.argsort(values, stable=True)
    ordered = values[order]
    first = torch.searchsorted(ordered, ordered)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(values.shape[0], device=values.device) - first
    return rank
