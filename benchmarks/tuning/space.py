r"""Search spaces in one neutral form (a :data:`Space` is a tuple of :class:`Param`),
with converters to Ray Tune, Optuna and Ax and a uniform sampler."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("float", "log-float", "int", "choice")


@dataclass(frozen=True)
class Param:
    r"""One parameter: ``low``/``high`` for numeric kinds (both included; positive
    for ``log-float``), ``choices`` for ``"choice"``."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}, got {self.kind!r}.")
        if self.kind == "choice":
            if len(self.choices) < 2:
                raise ValueError(f"{self.name}: a choice needs >= 2 choices.")
        elif not self.low < self.high or (self.kind == "log-float" and self.low <= 0):
            raise ValueError(f"{self.name}: bad bounds [{self.low}, {self.high}].")


Space = tuple[Param, ...]


def to_tune(space: Space) -> dict[str, Any]:
    r"""A Ray Tune ``param_space`` (``tune.randint``'s upper end is exclusive)."""
    from ray import tune

    domains = {
        "float": lambda p: tune.uniform(p.low, p.high),
        "log-float": lambda p: tune.loguniform(p.low, p.high),
        "int": lambda p: tune.randint(int(p.low), int(p.high) + 1),
        "choice": lambda p: tune.choice(list(p.choices)),
    }
    return {p.name: domains[p.kind](p) for p in space}


def to_optuna(space: Space) -> dict[str, Any]:
    r"""Optuna distributions by name (for ``study.ask(fixed_distributions)``)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    domains = {
        "float": lambda p: FloatDistribution(p.low, p.high),
        "log-float": lambda p: FloatDistribution(p.low, p.high, log=True),
        "int": lambda p: IntDistribution(int(p.low), int(p.high)),
        "choice": lambda p: CategoricalDistribution(p.choices),
    }
    return {p.name: domains[p.kind](p) for p in space}


def to_ax(space: Space) -> list[Any]:
    r"""Ax parameter configs (``Client.configure_experiment(parameters=...)``)."""
    from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig

    def config(p: Param) -> Any:
        if p.kind == "choice":
            kind = "str" if isinstance(p.choices[0], str) else "float"
            return ChoiceParameterConfig(
                name=p.name,
                values=list(p.choices),
                parameter_type=kind,
                is_ordered=False,
            )
        return RangeParameterConfig(
            name=p.name,
            parameter_type="int" if p.kind == "int" else "float",
            bounds=(p.low, p.high),
            scaling="log" if p.kind == "log-float" else "linear",
        )

    return [config(p) for p in space]


def sample(space: Space, rng: np.random.Generator) -> dict[str, Any]:
    r"""One configuration drawn uniformly (log-uniformly for ``log-float``)."""
    draws = {
        "float": lambda p: float(rng.uniform(p.low, p.high)),
        "log-float": lambda p: math.exp(rng.uniform(math.log(p.low), math.log(p.high))),
        "int": lambda p: int(rng.integers(int(p.low), int(p.high) + 1)),
        "choice": lambda p: p.choices[int(rng.integers(len(p.choices)))],
    }
    return {p.name: draws[p.kind](p) for p in space}
