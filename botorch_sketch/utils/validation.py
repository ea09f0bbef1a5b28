r"""Argument checks shared by models, acquisition functions and generators.

Every check raises a ``ValueError`` or ``TypeError`` that names the offending argument,
so callers can validate everything before changing any state.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_tensor(value: object, name: str) -> Tensor:
    r"""Return ``value`` if it is a floating-point tensor, else raise ``TypeError``."""
    if not isinstance(value, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(value).__name__}.")
    if not value.is_floating_point():
        raise TypeError(f"`{name}` must be a floating-point tensor, got {value.dtype}.")
    return value


def check_finite(value: Tensor, name: str) -> Tensor:
    r"""Raise ``ValueError`` if ``value`` holds NaN or infinite entries."""
    check_tensor(value, name)
    if not torch.isfinite(value).all():
        raise ValueError(f"`{name}` contains NaN or infinite values.")
    return value


def check_matrix(
    value: Tensor, name: str, *, num_cols: int | None = None, allow_empty: bool = False
) -> Tensor:
    r"""Check a finite ``n x d`` tensor (optionally ``d == num_cols``, ``n > 0``)."""
    check_finite(value, name)
    if value.dim() != 2:
        raise ValueError(f"`{name}` must be 2-dimensional (n x d), got {value.dim()}.")
    if num_cols is not None and value.shape[-1] != num_cols:
        raise ValueError(
            f"`{name}` must have {num_cols} columns, got shape {tuple(value.shape)}."
        )
    if not allow_empty and value.shape[0] == 0:
        raise ValueError(f"`{name}` must have at least one row.")
    return value


def check_positive(value: float, name: str, *, minimum: float = 0.0) -> float:
    r"""Raise ``ValueError`` unless ``value`` is a finite number ``> minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not (value > minimum and value < float("inf")):
        raise ValueError(f"`{name}` must be finite and > {minimum}, got {value}.")
    return float(value)


def check_at_least(value: float, name: str, minimum: float) -> float:
    r"""Raise ``ValueError`` unless ``value`` is a finite number ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not (value >= minimum and value < float("inf")):
        raise ValueError(f"`{name}` must be finite and >= {minimum}, got {value}.")
    return float(value)


def check_bounds(bounds: Tensor, name: str = "bounds") -> Tensor:
    r"""Check a BoTorch-style ``2 x d`` box with ``lower < upper`` everywhere."""
    check_finite(bounds, name)
    if bounds.dim() != 2 or bounds.shape[0] != 2:
        raise ValueError(f"`{name}` must have shape 2 x d, got {tuple(bounds.shape)}.")
    if not (bounds[0] < bounds[1]).all():
        raise ValueError(f"`{name}` must satisfy lower < upper in every dimension.")
    return bounds
