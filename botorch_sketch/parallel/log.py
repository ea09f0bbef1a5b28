r"""What :func:`~botorch_sketch.parallel.driver.run_parallel` records: the told and
failed evaluations (:class:`EvaluationLog`) and each failure (:class:`EvaluationError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvaluationError:
    r"""A failed evaluation: the arm index, the arm (a list of ``d`` floats), the
    error as ``"Type: message"`` and its formatted traceback."""

    index: int
    arm: list[float]
    error: str
    traceback: str


@dataclass
class EvaluationLog:
    r"""What :func:`run_parallel` recorded, in completion order.

    Attributes:
        indices: Told arm indices (``n``).
        rewards: Their rewards (``n``; for an optimizer of ``c > 1`` outcomes,
            e.g. a :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`,
            ``n`` lists of ``c``).
        failed: Failed arm indices, with one :class:`EvaluationError` each in
            ``errors``.
        num_asked: Arms the optimizer returned from ``ask`` over the whole run,
            with those pending when it started (told + failed + still pending).
    """

    indices: list[int] = field(default_factory=list)
    rewards: list[float] | list[list[float]] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[EvaluationError] = field(default_factory=list)
    num_asked: int = 0

    @property
    def num_completed(self) -> int:
        r"""Told plus failed evaluations."""
        return len(self.indices) + len(self.failed)

    def best(self) -> tuple[int, float]:
        r"""The told arm with the largest reward and that reward (one outcome
        only: with several there is no single best)."""
        if not self.rewards:
            raise ValueError("No evaluation has succeeded yet.")
        if isinstance(self.rewards[0], list):
            raise ValueError(
                "The rewards have several outcomes (objectives and constraints): "
                "no single best; read the optimizer's feasible outcomes instead."
            )
        position = max(range(len(self.rewards)), key=self.rewards.__getitem__)
        return self.indices[position], self.rewards[position]

    def to_dict(self) -> dict[str, Any]:
        r"""Plain lists, numbers and strings (loadable with ``weights_only=True``)."""
        return {
            "indices": list(self.indices),
            "rewards": list(self.rewards),
            "failed": list(self.failed),
            "errors": [vars(error).copy() for error in self.errors],
            "num_asked": self.num_asked,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> EvaluationLog:
        return cls(
            indices=list(state["indices"]),
            rewards=list(state["rewards"]),
            failed=list(state["failed"]),
            errors=[EvaluationError(**error) for error in state["errors"]],
            num_asked=int(state["num_asked"]),
        )
