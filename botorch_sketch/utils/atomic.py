r"""Atomic calls: a call that raises leaves its object exactly as it was.

A :class:`Restorable` object is checkpointed by reference: :func:`checkpoint`
records its attributes (lists, dicts and sets shallowly copied, a generator by its
state), recursing into the restorable objects it holds, in ``O(attributes)``
without copying a tensor. That is sound because a restorable object never changes
a tensor it holds in place, except

- in parts its recorded state does not read (rows past the used size of a
  growing buffer), and
- in overwrites announced by :func:`preserve`, which saves the overwritten part
  for the rollback of the atomic call in progress, and in caches derived from
  the rest that :func:`reset_on_rollback` announces (the rollback drops them).

:func:`atomic` makes a method of a restorable object atomic: on an exception of
any kind (``KeyboardInterrupt`` and ``MemoryError`` included) it writes the
preserved parts back, restores the checkpoint and re-raises. The rollback
computes nothing, so a fault that persists (a broken device, memory that stays
short) cannot make it fail: the new state is computed aside of the recorded one
and replaces it only when the whole call succeeded.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

Method = TypeVar("Method", bound=Callable[..., Any])

#: The object of the atomic call in progress in this thread and the actions that
#: undo its preserved overwrites (None outside an atomic call)
_CALL: ContextVar[tuple[object, list[Callable[[], None]]] | None] = ContextVar(
    "atomic_call", default=None
)


class Restorable:
    r"""An object :func:`checkpoint` records by reference: it replaces the tensors
    it holds instead of changing them in place, but for the exceptions of the
    module (growing buffers, :func:`preserve`, :func:`reset_on_rollback`)."""


@dataclass(frozen=True)
class Checkpoint:
    r"""The recorded attributes of a :class:`Restorable` ``owner``, the states of
    its generators and the checkpoints of the restorable objects it holds."""

    owner: Restorable
    attributes: dict[str, Any]
    generator_states: dict[str, Tensor]
    parts: tuple[Checkpoint, ...]

    def restore(self) -> None:
        r"""Put the recorded attributes back (and the held objects' too)."""
        for part in self.parts:
            part.restore()
        attributes = vars(self.owner)
        attributes.clear()
        attributes.update(self.attributes)
        for name, state in self.generator_states.items():
            attributes[name].set_state(state)


def checkpoint(owner: Restorable) -> Checkpoint:
    r"""Record ``owner`` and the restorable objects it holds (each once), by
    reference; ``O(attributes + container sizes)``."""
    return _checkpoint(owner, set())


def _checkpoint(owner: Restorable, seen: set[int]) -> Checkpoint:
    seen.add(id(owner))
    attributes, generator_states, parts = {}, {}, []
    for name, value in vars(owner).items():
        if isinstance(value, (list, dict, set)):
            value = copy.copy(value)
        elif isinstance(value, torch.Generator):
            generator_states[name] = value.get_state()
        elif isinstance(value, Restorable) and id(value) not in seen:
            parts.append(_checkpoint(value, seen))
        attributes[name] = value
    return Checkpoint(owner, attributes, generator_states, tuple(parts))


def preserve(tensor: Tensor, index: Tensor) -> None:
    r"""Save ``tensor[index]`` before it is overwritten in place, so that the
    rollback of the atomic call in progress writes it back (nothing outside an
    atomic call); ``O(size of the part)``."""
    call = _CALL.get()
    if call is None:
        return
    saved = tensor[index].clone()

    def write_back() -> None:
        tensor[index] = saved

    call[1].append(write_back)


def reset_on_rollback(owner: object, name: str) -> None:
    r"""Have the rollback of the atomic call in progress set ``owner.name`` to
    None: a cache derived from the rest of ``owner`` (rebuilt when next needed)
    that is about to be updated in place (nothing outside an atomic call)."""
    call = _CALL.get()
    if call is not None:
        call[1].append(lambda: setattr(owner, name, None))


@contextmanager
def rolled_back_on_failure(owner: Restorable) -> Iterator[None]:
    r"""Run the block as one atomic call on ``owner``: if it raises, ``owner`` is
    restored to its :func:`checkpoint`, the preserved overwrites are written back
    and the announced caches dropped (last first), and the exception propagates.
    Inside an atomic call on the same ``owner`` the block is part of that call."""
    call = _CALL.get()
    if call is not None and call[0] is owner:
        yield
        return
    saved = checkpoint(owner)
    undo: list[Callable[[], None]] = []
    token = _CALL.set((owner, undo))
    try:
        yield
    except BaseException:
        saved.restore()
        for action in reversed(undo):
            action()
        raise
    finally:
        _CALL.reset(token)


def atomic(method: Method) -> Method:
    r"""``method`` of a :class:`Restorable` object, made atomic
    (:func:`rolled_back_on_failure`)."""

    @functools.wraps(method)
    def atomic_method(self: Restorable, *args: Any, **kwargs: Any) -> Any:
        with rolled_back_on_failure(self):
            return method(self, *args, **kwargs)

    return cast(Method, atomic_method)
