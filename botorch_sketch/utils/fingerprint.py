r"""Fingerprints of a loop's problem, saved with its state so that a checkpoint of
another problem (other arms, kernel or options) is rejected instead of resumed."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor


def tensor_digest(*tensors: Tensor) -> str:
    r"""SHA-256 of the tensors' dtypes, shapes and values (copied to the CPU), hex.

    ``O(total size)``; equal values give equal digests on every device.

    Example:
        >>> tensor_digest(torch.zeros(2)) == tensor_digest(torch.zeros(2))
        True
    """
    digest = hashlib.sha256()
    for tensor in tensors:
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def problem_fingerprint(
    arms: Tensor, kernel: Kernel, *, learned: bool, **options: Any
) -> dict[str, Any]:
    r"""A loop's fingerprint: the digest of its arms, of its kernel (``"learned"``
    when the loop learns it) and the ``options`` that give its state its meaning
    (numbers, strings, booleans or None)."""
    kernel_digest = (
        "learned"
        if learned
        else f"{type(kernel).__name__}:{tensor_digest(*kernel.state_dict().values())}"
    )
    return {"arms": tensor_digest(arms), "covar_module": kernel_digest, **options}


def check_saved_state(state: object, keys: tuple[str, ...]) -> dict[str, Any]:
    r"""``state`` (a loop's saved state) if it is a dict holding every key of
    ``keys``; else a ``TypeError`` / ``ValueError`` naming what is missing."""
    if not isinstance(state, dict):
        raise TypeError(f"`state` must be a dict, got {type(state).__name__}.")
    missing = set(keys) - set(state)
    if missing:
        raise ValueError(f"`state` misses the keys {sorted(missing)}.")
    return state


def check_fingerprint(saved: object, expected: dict[str, Any]) -> None:
    r"""Raise ``ValueError`` unless ``saved`` (``state['fingerprint']``) equals the
    loop's ``expected`` fingerprint, naming the entries that differ."""
    if differing := differing_entries(saved, expected, "fingerprint"):
        raise ValueError(
            "`state` was saved by a loop on another problem: its fingerprint differs "
            f"in {differing} (other arms, covar_module or options). Build the loop as "
            "the saved one was built to resume it."
        )


def check_saved_options(saved: object, expected: dict[str, Any]) -> None:
    r"""Raise ``ValueError`` unless ``saved`` (``state['options']``) equals the
    loop's options record ``expected``, naming the fields that differ."""
    if differing := differing_entries(saved, expected, "options"):
        raise ValueError(
            f"`state['options']` differ from the loop's in {differing}: the state "
            "was saved by a loop with other options. Build the loop with the saved "
            "options to resume it."
        )


def differing_entries(saved: object, expected: dict[str, Any], key: str) -> list[str]:
    r"""The sorted keys whose values differ between ``saved`` (``state[key]``, which
    must be a dict) and ``expected``."""
    if not isinstance(saved, dict):
        raise ValueError(
            f"`state['{key}']` must be the dict a loop's state_dict saves, got "
            f"{type(saved).__name__}."
        )
    return sorted(
        name
        for name in saved.keys() | expected.keys()
        if saved.get(name) != expected.get(name)
    )
