r"""Argument checks shared by models, acquisition functions and generators.

Every check raises a ``ValueError`` or ``TypeError`` that names the offending argument,
so callers can validate everything before changing any state.
"""

from __future__ import annotations

import copy
import math
import os

import torch
from botorch.exceptions.errors import InputDataError
from botorch.models.transforms.outcome import OutcomeTransform
from gpytorch.kernels import Kernel
from torch import Tensor

#: The fix a ``TypeError`` of :func:`check_tensor` names.
AS_TENSOR_FIX = "convert it first, e.g. torch.as_tensor(x, dtype=torch.float64)"


def check_tensor(value: object, name: str) -> Tensor:
    r"""Return ``value`` if it is a floating-point tensor, else raise ``TypeError``
    (naming the conversion, :data:`AS_TENSOR_FIX`)."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"`{name}` must be a torch.Tensor, got {type(value).__name__}: "
            f"{AS_TENSOR_FIX}."
        )
    if not value.is_floating_point():
        raise TypeError(
            f"`{name}` must be a floating-point tensor, got {value.dtype}: "
            f"{AS_TENSOR_FIX}."
        )
    return value


def check_finite(value: Tensor, name: str, fix: str = "") -> Tensor:
    r"""Raise ``ValueError`` if ``value`` holds NaN or infinite entries (the
    message ends with ``fix``, if given)."""
    check_tensor(value, name)
    if not torch.isfinite(value).all():
        raise ValueError(
            f"`{name}` contains NaN or infinite values" + (f"; {fix}." if fix else ".")
        )
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


#: Smallest noise variance (regularization) the models accept: below it a repeated
#: observation's factorization loses all precision.
MIN_NOISE = 1e-12

#: Dtypes the models compute in: GPyTorch's Cholesky factorizations and the
#: relative jitters are not defined for half precision.
MODEL_DTYPES = (torch.float32, torch.float64)


def check_model_dtype(value: Tensor, name: str) -> Tensor:
    r"""Raise ``TypeError`` unless ``value`` is a float32 or float64 tensor."""
    check_tensor(value, name)
    if value.dtype not in MODEL_DTYPES:
        raise TypeError(
            f"`{name}` must be float32 or float64, got {value.dtype} (half precision "
            "cannot be factorized)."
        )
    return value


def check_same_dtype(
    value: Tensor, name: str, reference: Tensor, ref_name: str
) -> None:
    r"""Raise ``TypeError`` unless ``value`` has the dtype of ``reference``."""
    if value.dtype != reference.dtype:
        raise TypeError(
            f"`{name}` must have the dtype of `{ref_name}` ({reference.dtype}), got "
            f"{value.dtype}."
        )


def check_points(value: object, name: str, num_cols: int) -> Tensor:
    r"""Check finite ``batch x q x d`` query points (at least 2-dimensional)."""
    check_finite(check_tensor(value, name), name)
    if value.dim() < 2 or value.shape[-1] != num_cols:
        raise ValueError(
            f"`{name}` must have shape batch x q x {num_cols} (at least "
            f"2-dimensional), got {tuple(value.shape)}."
        )
    return value


def check_observations(
    X: object, Y: object, num_cols: int, like: Tensor, num_outputs: int = 1
) -> None:
    r"""Check new observations for ``condition_on_observations``: finite
    ``batch x n' x d`` points ``X`` (``d = num_cols``) and ``batch' x n' x o``
    targets ``Y`` (``o = num_outputs``, batch shapes broadcastable), both of
    ``like``'s dtype and within ``finfo.max ** (1/4)``; ``TypeError`` /
    ``ValueError`` naming ``X`` or ``Y``."""
    check_model_dtype(X, "X")
    check_points(X, "X", num_cols)
    check_magnitude(X, "X")
    check_same_dtype(X, "X", like, "train_X")
    check_finite(Y, "Y")
    check_magnitude(Y, "Y")
    check_same_dtype(Y, "Y", X, "X")
    if Y.dim() < 2 or Y.shape[-1] != num_outputs or Y.shape[-2] != X.shape[-2]:
        raise ValueError(
            f"`Y` must have shape batch x {X.shape[-2]} x {num_outputs} (the rows of "
            f"`X`, the model's outputs), got {tuple(Y.shape)}."
        )


def check_output_indices(
    idcs: object, num_outputs: int, name: str = "idcs"
) -> list[int]:
    r"""Check a non-empty list of distinct output indices of a model with
    ``num_outputs`` outputs (negative indices count from the end).

    Returns:
        The indices as non-negative ints, in the given order; ``TypeError`` /
        ``ValueError`` naming ``name`` otherwise.
    """
    if not isinstance(idcs, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in idcs
    ):
        raise TypeError(f"`{name}` must be a list of ints, got {idcs!r}.")
    if len(idcs) == 0 or any(not -num_outputs <= i < num_outputs for i in idcs):
        raise ValueError(
            f"`{name}` must be a non-empty list of indices of the model's "
            f"{num_outputs} output(s), got {list(idcs)}."
        )
    indices = [i % num_outputs for i in idcs]
    if len(set(indices)) != len(indices):
        raise ValueError(f"`{name}` must not repeat an output, got {list(idcs)}.")
    return indices


def check_bool(value: object, name: str) -> bool:
    r"""Raise ``TypeError`` unless ``value`` is a ``bool`` (truthy objects rejected)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {type(value).__name__}.")
    return value


def check_int(
    value: object, name: str, minimum: int, maximum: int | None = None
) -> int:
    r"""Raise unless ``value`` is an int in ``[minimum, maximum]`` (no upper bound
    when ``maximum`` is None; bools and floats rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"`{name}` must be <= {maximum}, got {value}.")
    return value


def check_number(value: object, name: str) -> float:
    r"""Return ``value`` as a finite float (``TypeError`` for bools, non-numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite, got {value}.")
    return float(value)


def check_index(value: object, name: str, size: int) -> int:
    r"""Return ``value`` (an int or a 0-d integer tensor) as an int in ``[0, size)``."""
    if (
        isinstance(value, Tensor)
        and value.dim() == 0
        and not (
            value.is_floating_point() or value.is_complex() or value.dtype == torch.bool
        )
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    if not 0 <= value < size:
        raise ValueError(f"`{name}` must lie in [0, {size}), got {value}.")
    return value


def check_indices(value: object, name: str, size: int) -> Tensor:
    r"""Return ``value`` if it is a 1-d LongTensor of indices in ``[0, size)``
    (possibly empty)."""
    if not isinstance(value, Tensor) or value.dtype != torch.long:
        raise TypeError(f"`{name}` must be a LongTensor of indices.")
    if value.dim() != 1:
        raise ValueError(f"`{name}` must be 1-d, got shape {tuple(value.shape)}.")
    if value.numel() and (value.min() < 0 or value.max() >= size):
        raise ValueError(f"`{name}` must hold indices in [0, {size}).")
    return value


def check_scalar(value: object, name: str) -> float:
    r"""Return a finite number or one-element floating tensor as a float."""
    if isinstance(value, Tensor):
        check_finite(value, name)
        if value.numel() != 1:
            raise ValueError(f"`{name}` must hold one value, got {value.numel()}.")
        return float(value)
    return check_number(value, name)


def device_memory(device: torch.device) -> int:
    r"""Total memory in bytes of ``device`` (a GPU's own, else the machine's RAM)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_allocation(num_elements: int, names: str, like: Tensor | None = None) -> None:
    r"""Raise ``ValueError`` naming ``names`` if they ask for one tensor of
    ``num_elements`` entries (of ``like``'s dtype and device; default float64 on
    the CPU) larger than half of the device's memory.

    Such a request cannot be meant, and attempting it ends in an overflow, an
    allocation error or the operating system killing the process.
    """
    dtype = torch.float64 if like is None else like.dtype
    device = torch.device("cpu") if like is None else like.device
    size = num_elements * torch.finfo(dtype).bits // 8
    limit = device_memory(device) // 2
    if size > limit:
        raise ValueError(
            f"{names} ask for a tensor of {num_elements} entries ({size / 2**30:.3g} "
            f"GiB), more than half of the {device.type} memory "
            f"({2 * limit / 2**30:.3g} GiB)."
        )


def check_generator(value: object, name: str = "generator") -> None:
    r"""Raise ``TypeError`` unless ``value`` is None or a ``torch.Generator``."""
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(
            f"`{name}` must be a torch.Generator or None, got {type(value).__name__}."
        )


def check_kernel(value: object, name: str = "covar_module") -> Kernel:
    r"""Raise unless ``value`` is a GPyTorch ``Kernel`` without batch shape."""
    if not isinstance(value, Kernel):
        raise TypeError(
            f"`{name}` must be a gpytorch Kernel, got {type(value).__name__}."
        )
    if len(value.batch_shape) > 0:
        raise ValueError(
            f"`{name}` must not have a batch shape, got {tuple(value.batch_shape)}."
        )
    return value


def check_rewards(
    value: object, count: int, name: str = "rewards", fix: str = ""
) -> Tensor:
    r"""Check ``count`` rewards, shaped ``count`` or ``count x 1``: a floating-point
    tensor, finite (else the error names ``fix``, if given) and within
    :func:`check_magnitude`'s bound (the loops' sums of squares must not
    overflow).

    Returns:
        The rewards as a detached ``count`` tensor.
    """
    check_tensor(value, name)
    if value.shape not in ((count,), (count, 1)):
        raise ValueError(
            f"`{name}` must have shape ({count},) or ({count}, 1), one value per "
            f"arm, got {tuple(value.shape)}."
        )
    check_finite(value, name, fix)
    return check_magnitude(value, name).detach().reshape(-1)


def check_generator_state(value: object, name: str) -> Tensor:
    r"""Check a ``torch.Generator.get_state()`` tensor by setting it on a scratch
    generator."""
    if not isinstance(value, Tensor):
        raise TypeError(f"`{name}` must be a generator state tensor.")
    try:
        torch.Generator().set_state(value)
    except RuntimeError as error:
        raise ValueError(f"`{name}` is not a generator state: {error}") from None
    return value


def check_magnitude(value: Tensor, name: str) -> Tensor:
    r"""Raise ``ValueError`` if an entry of ``value`` exceeds ``finfo.max ** (1/4)``
    in magnitude (``1.2e77`` in float64, ``4.3e9`` in float32).

    Kernels evaluate squared distances of inputs centred on their mean: beyond this
    bound they overflow, and short of overflow one such point erases the precision
    of every other point's distances. Targets beyond it overflow the sums of
    squares of the likelihoods and of ``Standardize``.
    """
    limit = torch.finfo(value.dtype).max ** 0.25
    if (value.abs() > limit).any():
        raise ValueError(
            f"`{name}` has entries beyond {limit:.3g} in magnitude (kernel distances "
            "or sums of squares overflow); rescale them."
        )
    return value


def fitted_outcome_transform(
    transform: OutcomeTransform,
    Y: Tensor,
    name: str,
    *,
    fit: bool | None,
    Yvar: Tensor | None = None,
    X: Tensor | None = None,
) -> tuple[OutcomeTransform, Tensor, Tensor | None]:
    r"""Apply a deep copy of ``transform`` to ``n x o`` outcomes and check the result.

    The transform itself is left untouched (a training-mode transform fits its
    buffers), so a caller can reject bad outcomes before changing any state: a
    transform that overflows (e.g. ``Standardize`` of ``1e300``) or leaves its domain
    (``Log`` of negative values) gives a ``ValueError`` naming ``name``. The result
    must be finite and map back (``untransform``) to finite values.

    Args:
        transform: The outcome transform.
        Y: ``n x o`` outcomes.
        name: The argument name used in error messages.
        fit: Fit the copy's parameters on ``Y`` (training mode) or keep them
            (eval mode); None: the transform's own mode.
        Yvar: Optional ``n x o`` observation noise variances.
        X: Optional ``n x d`` transformed inputs, passed to the transform.

    Returns:
        ``(copy, Y_t, Yvar_t)``: the copy (in eval mode) and its outputs.
    """
    trial = copy.deepcopy(transform)
    if fit is not None:
        trial.train(fit)
    try:
        Y_t, Yvar_t = trial(Y, Yvar, X=X)
        trial.eval()
        back, _ = trial.untransform(Y_t, X=X)
    except InputDataError as error:  # BoTorch's own input checks
        raise ValueError(
            f"`{name}` was rejected by the outcome transform: {error}"
        ) from error
    outputs = [Y_t, back] + ([] if Yvar_t is None else [Yvar_t])
    if not all(bool(torch.isfinite(value).all()) for value in outputs):
        raise ValueError(
            f"`{name}` gives non-finite values under the outcome transform "
            f"{type(transform).__name__} (overflow, or values outside its domain)."
        )
    return trial, Y_t, Yvar_t
