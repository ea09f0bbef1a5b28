r"""The ask/tell contract between the benchmark runner and a bandit policy.

A :class:`~botorch_sketch.benchmarks.problems.Problem` is either *finite* (``arms``
is an ``A x d`` tensor and policies choose arm indices) or a *box* (``arms`` is None
and policies choose points in ``bounds``). The runner calls
``policy.reset(problem, horizon, generator)`` once, then alternates ``ask()`` and
``tell(...)`` until exactly ``horizon`` rewards were observed (it truncates the last
batch if it would overrun the horizon).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

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
