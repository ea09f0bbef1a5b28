r"""The ask/tell contract between the benchmark runner and a bandit policy.

A :class:`~botorch_sketch.benchmarks.problems.Problem` is either *finite* (``arms``
is an ``A x d`` tensor and policies choose arm indices) or a *box* (``arms`` is None
and policies choose points in ``bounds``). The runner calls
``policy.reset(problem, horizon, generator)`` once, then alternates ``ask()`` and
``tell(...)`` until exactly ``horizon`` rewards were observed (it truncates the last
batch if it would overrun the horizon).

Policies on a library ask/tell object (:class:`AskTell`: BBKB, GP-ThreDS, S-GP-TS's
loop) derive from :class:`AskTellPolicy` and only configure that object per run.
:class:`AskTell` is the part of the library's contract the runner uses; the arm
loops' whole contract is
:class:`~botorch_sketch.generation.ask_tell.AskTellOptimizer`, which GP-ThreDS
(points of a box, no arm indices, pending or failed arms) does not follow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from botorch_sketch.benchmarks.problems import Problem


class Policy(ABC):
    r"""A bandit algorithm seen by the benchmark runner.

    Finite problems: ``ask()`` returns a LongTensor of ``b >= 1`` arm indices and
    ``tell(indices, Y)`` receives them back with their ``b`` noisy rewards.
    Box problems: ``ask()`` returns a ``b x d`` tensor of points and ``tell(X, Y)``
    receives the points with their rewards. ``diagnostics()`` reports per-step
    quantities worth plotting (e.g. ``{"dictionary_size": 42}``).
    """

    name: str = "policy"
    supports_finite: bool = True
    supports_box: bool = False

    @abstractmethod
    def reset(self, problem: Problem, horizon: int, generator: torch.Generator) -> None:
        r"""Start a fresh run on ``problem`` with ``horizon`` evaluations."""

    @abstractmethod
    def ask(self) -> Tensor:
        r"""Return the next batch (arm indices or points, see the class docstring)."""

    @abstractmethod
    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        r"""Receive the (possibly truncated) batch with its ``b`` noisy rewards."""

    def diagnostics(self) -> dict[str, float]:
        r"""Per-step diagnostics (dictionary size, ...); empty by default."""
        return {}


@runtime_checkable
class AskTell(Protocol):
    r"""A library ask/tell object as the runner drives it, e.g.
    :class:`~botorch_sketch.BBKB`, :class:`~botorch_sketch.GPThreDS` or
    :class:`~botorch_sketch.generation.sgpts_loop.SGPTS`.

    ``ask()`` returns the next choices (arm indices, or ``b x d`` points);
    ``tell(chosen, rewards)`` reports the ``b`` noisy rewards of asked choices.
    The arm loops follow the larger
    :class:`~botorch_sketch.generation.ask_tell.AskTellOptimizer`.
    """

    def ask(self) -> Tensor: ...

    def tell(self, chosen: Tensor, rewards: Tensor, /) -> None: ...


def draw_seed(generator: torch.Generator) -> int:
    r"""A seed in ``[0, 2^31 - 1)`` for a library object, drawn from ``generator``."""
    return int(torch.randint(2**31 - 1, (1,), generator=generator))


class AskTellPolicy(Policy):
    r"""A policy that is configuration only: :meth:`build` makes the run's
    :class:`AskTell` object (:attr:`loop`) and ``ask`` / ``tell`` are forwarded to it.

    Subclasses override :meth:`ask` only to pass extra arguments (e.g. a batch cap)
    and :meth:`diagnostics` to report the object's state.
    """

    loop: AskTell | None = None

    @abstractmethod
    def build(
        self, problem: Problem, horizon: int, generator: torch.Generator
    ) -> AskTell:
        r"""The ask/tell object of a fresh run on ``problem`` (check ``problem`` before
        drawing from ``generator``, e.g. with :func:`draw_seed`)."""

    def reset(self, problem: Problem, horizon: int, generator: torch.Generator) -> None:
        loop = self.build(problem, horizon, generator)
        self.horizon = horizon
        self.loop = loop

    def ask(self) -> Tensor:
        return self.loop.ask()

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        self.loop.tell(chosen, rewards)
