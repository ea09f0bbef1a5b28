r"""ATen operator calls and host synchronizations per evaluation of a benchmark run.

On a GPU a step that issues many small operators is bound by kernel launches, and
one that reads a device value on the host (``.item()``, ``float(t)``, ``bool(t)``,
a boolean mask, ``nonzero``) waits for the device to drain. Both can be counted on
any device: :class:`OpCounter` sees every ATen call through a
:class:`~torch.utils._python_dispatch.TorchDispatchMode`, and
:func:`~benchmarks.runner.count_operations` replays the first
evaluations of a run under it (untimed).

What is counted as a synchronization: the operators whose result size or value the
host needs (:data:`SYNCING_OPERATORS`), indexing with boolean masks, and copies from
a CUDA tensor to the CPU (``.cpu()``, ``.tolist()`` on CUDA). On the CPU, ``.tolist()``
and ``.numpy()`` read memory directly and are not seen.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: Operators that make the host wait for the device's result.
SYNCING_OPERATORS = frozenset(
    {
        "aten._local_scalar_dense",  # .item(), float(), int(), bool()
        "aten.nonzero",
        "aten.masked_select",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.equal",
    }
)
_MASKED_INDEXING = frozenset({"aten.index", "aten.index_put", "aten.index_put_"})


def _is_mask(index: object) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype == torch.bool


def _cuda_to_cpu(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    r"""Whether the call copies a CUDA tensor to the CPU (``.cpu()``, ``.tolist()``)."""
    if name == "aten._to_copy":
        device = kwargs.get("device")
        return args[0].device.type == "cuda" and (
            device is not None and torch.device(device).type == "cpu"
        )
    if name == "aten.copy_":
        return args[1].device.type == "cuda" and args[0].device.type == "cpu"
    return False


def _syncs(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    r"""Whether the ATen call ``name(*args, **kwargs)`` makes the host wait for the
    device."""
    if name in SYNCING_OPERATORS:
        return True
    if name in _MASKED_INDEXING:
        return any(_is_mask(index) for index in args[1] if index is not None)
    return _cuda_to_cpu(name, args, kwargs)


class OpCounter(TorchDispatchMode):
    r"""Counts the ATen calls made while active, by operator, and the host
    synchronizations among them.

    Attributes:
        calls: ATen calls by operator name (``"aten.mm"``, ...).
        syncs: Synchronizing calls by operator name.

    Example:
        >>> with OpCounter() as counter:
        ...     float(torch.ones(3).sum())
        >>> counter.total_calls, counter.total_syncs
        (3, 1)
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = str(func.overloadpacket)
        self.calls[name] += 1
        if _syncs(name, args, kwargs or {}):
            self.syncs[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())
