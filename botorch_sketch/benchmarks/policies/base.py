r"""The ask/tell contract between the benchmark runner and a bandit policy.

A :class:`Problem` is either *finite* (``arms`` is an ``A x d`` tensor and policies
choose arm indices) or a *box* (``arms`` is None and policies choose points in
``bounds``). The runner calls ``policy.reset(problem, horizon, generator)`` once, then
alternates ``ask()`` and ``tell(...)`` until exactly ``horizon`` rewards were observed
(it truncates the last batch if it would overrun the horizon).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class Problem:
    r"""A noisy maximization problem.

    Attributes:
        name: Short identifier used in tables and file names.
        bounds: ``2 x d`` box containing the domain.
        objective: Maps ``n x d`` points to their noiseless values (``n``).
        noise_std: Standard deviation of the Gaussian reward noise.
        optimum: The maximum of ``objective`` over the domain (over ``arms`` if finite).
        arms: ``A x d`` finite arm set, or None for a continuous box.
        arm_values: ``A`` noiseless values of the arms (finite problems only).
        hyperparameters: Suggested fixed kernel settings shared by all policies, e.g.
            ``{"lengthscale": 3.0, "outputscale": 1.0}``.
    """

    name: str
    bounds: Tensor
    objective: Callable[[Tensor], Tensor]
    noise_std: float
    optimum: float
    arms: Tensor | None = None
    arm_values: Tensor | None = None
    hyperparameters: dict[str, float] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.bounds.shape[-1]

    @property
    def is_finite(self) -> bool:
        return self.arms is not None

    def uniform_points(self, num: int, generator: torch.Generator) -> Tensor:
        r"""``num x d`` uniform points in ``bounds`` (drawn on the CPU, then moved)."""
        unit = torch.rand(num, self.dim, generator=generator).to(self.bounds)
        low, high = self.bounds
        return low + unit * (high - low)

    def uniform_choices(self, num: int, generator: torch.Generator) -> Tensor:
        r"""``num`` uniformly random choices: arm indices (a LongTensor on the arms'
        device) for finite problems, :meth:`uniform_points` for boxes."""
        if not self.is_finite:
            return self.uniform_points(num, generator)
        indices = torch.randint(self.arms.shape[0], (num,), generator=generator)
        return indices.to(self.arms.device)


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
