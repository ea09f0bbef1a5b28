r"""Finite arm sets over a search space of named parameters, whatever library
describes it: the Ray Tune searchers (:mod:`~botorch_sketch.integrations.tune_space`)
and the Optuna samplers (:mod:`~botorch_sketch.integrations.optuna`) translate their
spaces into these domains and share everything else.

A parameter is a :class:`NumericDomain` (a float or an integer between bounds,
possibly on a log scale, possibly on a grid of ``step``) or a :class:`ChoiceDomain`
(categories). :class:`DomainArms` draws ``num_arms`` scrambled Sobol points of the
unit cube (one coordinate per number, one per category), turns each into parameter
values (duplicates of discrete spaces dropped) and gives every arm its features in
the unit cube: a number by its position between the bounds (in log space for a log
scale), a choice one-hot.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any, Protocol

import torch
from torch import Tensor

from botorch_sketch.integrations.loop_builder import StudyLoop
from botorch_sketch.utils.validation import check_int

__all__ = ["DEFAULT_NUM_ARMS", "ChoiceDomain", "DomainArms", "NumericDomain"]

#: Default number of Sobol points drawn from a search space.
DEFAULT_NUM_ARMS = 2048


class NumericDomain:
    r"""A float or integer parameter: unit coordinate <-> value.

    A coordinate ``u`` is the position ``low + u (high - low)`` between the bounds
    (their logarithms for ``log``); integers take its floor in ``[lower, upper)``
    (as ``tune.randint``); with a ``step`` the value is then rounded to the grid
    ``origin + k step``.

    Args:
        name: The parameter's name in messages.
        lower: Lower bound (inclusive).
        upper: Upper bound (inclusive for floats, exclusive for integers).
        log: Positions on a log scale (``lower > 0``).
        integer: Integer values (``int`` in :meth:`config_value`).
        step: Grid spacing of the values (None: none).
        origin: A point of the grid.
    """

    width = 1

    def __init__(
        self,
        name: str,
        lower: float,
        upper: float,
        *,
        log: bool = False,
        integer: bool = False,
        step: float | None = None,
        origin: float = 0.0,
    ) -> None:
        _check_bounds(name, lower, upper, integer)
        if log and lower <= 0:
            raise ValueError(
                f"`space` parameter {name}: a log scale needs lower > 0, got {lower}."
            )
        if step is not None and not step > 0:
            raise ValueError(f"`space` parameter {name}: needs step > 0, got {step}.")
        self.name, self.log, self.integer = name, log, integer
        self.lower, self.upper, self.step, self.origin = lower, upper, step, origin
        transform = math.log if log else float
        self.low, self.high = transform(lower), transform(upper)

    def values(self, unit: Tensor) -> Tensor:
        r"""The values (``n``) at unit coordinates (``n x 1``, float64)."""
        values = self.low + unit[:, 0] * (self.high - self.low)
        values = values.exp() if self.log else values
        if self.integer:  # [lower, upper), as tune.randint
            # exp(log(lower)) may round below lower
            values = values.floor().clamp(self.lower, self.upper - 1)
        else:  # exp(log(upper)) may round past upper
            values = values.clamp(self.lower, self.upper)
        if self.step is not None:
            grid = torch.round((values - self.origin) / self.step)
            values = self.origin + grid * self.step
        return values

    def end_values(self) -> Tensor:
        r"""The smallest and the largest value (``2``): the bounds exactly for
        floats (features 0 and 1), the last integer of the grid for integers."""
        if not self.integer:
            return torch.tensor([self.lower, self.upper], dtype=torch.float64)
        return self.values(torch.tensor([[0.0], [1.0]], dtype=torch.float64))

    def features(self, values: Tensor) -> Tensor:
        r"""Unit coordinates of ``values`` (``n x 1``)."""
        position = values.log() if self.log else values
        unit = (position - self.low) / (self.high - self.low)
        return unit.clamp(0.0, 1.0).unsqueeze(-1)

    def config_value(self, value: float) -> int | float:
        r"""A value as the library expects it (``int`` or ``float``)."""
        return int(value) if self.integer else float(value)

    def value_of(self, value: Any, where: str) -> float:
        r"""The internal value of a user's ``value`` (ValueError if outside)."""
        if (
            isinstance(value, bool)
            or not isinstance(value, Real)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{where} must be a finite number, got {value!r}.")
        if self.integer and value != int(value):
            raise ValueError(f"{where} must be an integer, got {value!r}.")
        # integers: [lower, upper) as tune.randint, the upper end on a grid
        top = self.upper - 1 if self.integer and self.step is None else self.upper
        if not self.lower <= value <= top:
            raise ValueError(
                f"{where} must lie in [{self.lower}, {top}], got {value!r}."
            )
        return float(value)


class ChoiceDomain:
    r"""A categorical parameter: one unit coordinate per category, the largest
    wins; its internal value is the category's index.

    Args:
        name: The parameter's name in messages.
        categories: The categories (at least one).
    """

    def __init__(self, name: str, categories: Sequence[Any]) -> None:
        if not categories:
            raise ValueError(f"`space` parameter {name}: choice([]) is empty.")
        self.name = name
        self.categories = list(categories)
        self.width = len(self.categories)

    def values(self, unit: Tensor) -> Tensor:
        r"""Category indices (``n``) of unit coordinates (``n x width``)."""
        return unit.argmax(dim=-1).double()

    def end_values(self) -> Tensor:
        r"""The first and the last category's index (``2``)."""
        return torch.tensor([0.0, self.width - 1.0], dtype=torch.float64)

    def features(self, values: Tensor) -> Tensor:
        r"""One-hot features (``n x width``) of category indices (``n``)."""
        return torch.nn.functional.one_hot(values.long(), self.width).double()

    def config_value(self, value: float) -> Any:
        r"""A copy of the category of index ``value``."""
        return copy.deepcopy(self.categories[int(value)])

    def value_of(self, value: Any, where: str) -> float:
        r"""The category index of a user's ``value`` (ValueError if none)."""
        for index, category in enumerate(self.categories):
            if category == value:
                return float(index)
        raise ValueError(f"{where} must be one of {self.categories}, got {value!r}.")


Domain = NumericDomain | ChoiceDomain


class DomainArms:
    r"""A finite arm set over named domains: scrambled Sobol points of the unit
    cube as parameter values, the two arms of the domains' end values (so that
    the features of every value of the space lie in the arms' bounding box: the
    loops map their arms, and any added later, to the unit cube of that box), and
    arms added later (:meth:`add_values`).

    Attributes:
        domains: The ``P`` domains, in order.
        features: ``A x D`` arm features in the unit cube (float64).
        values: ``A x P`` parameter values of the arms (a number, an integer, a
            choice's category index).

    Args:
        domains: The parameters (at least one, distinct names).
        num_arms: Sobol points drawn before duplicates are dropped.
        seed: Seed of the scrambled Sobol sequence.
    """

    def __init__(self, domains: Sequence[Domain], num_arms: int, seed: int) -> None:
        check_int(num_arms, "num_arms", 1)
        check_int(seed, "seed", 0)
        names = [domain.name for domain in domains]
        if not names or len(set(names)) != len(names):
            raise ValueError("`domains` must be a non-empty list of distinct names.")
        self.domains = list(domains)
        width = sum(domain.width for domain in self.domains)
        unit = torch.quasirandom.SobolEngine(width, scramble=True, seed=seed)
        self.values = torch.empty(0, len(self.domains), dtype=torch.float64)
        self.features = torch.empty(0, width, dtype=torch.float64)
        #: The arm of each row of values (a hash table: lookups in ``O(P)``)
        self._index: dict[tuple[float, ...], int] = {}
        self.add_values(self.values_at(unit.draw(num_arms, dtype=torch.float64)))
        self.add_values(torch.stack([d.end_values() for d in self.domains], dim=-1))

    @property
    def num_arms(self) -> int:
        return self.features.shape[0]

    @property
    def refinable(self) -> bool:
        r"""Arms can be added (always, here)."""
        return True

    @property
    def continuous(self) -> bool:
        r"""Whether some parameter is a float off any grid: configurations are
        then never exhausted, and a new one near an arm is always at hand."""
        return any(
            isinstance(domain, NumericDomain)
            and not domain.integer
            and domain.step is None
            for domain in self.domains
        )

    def values_at(self, unit: Tensor) -> Tensor:
        r"""Parameter values (``n x P``) of points of the unit cube (``n x D``):
        numbers from their coordinate (floored for integers, on their grid), each
        choice the category of its largest coordinate."""
        blocks = unit.split([domain.width for domain in self.domains], dim=-1)
        return torch.stack(
            [domain.values(b) for domain, b in zip(self.domains, blocks, strict=True)],
            dim=-1,
        )

    def features_of(self, values: Tensor) -> Tensor:
        r"""Unit-cube features (``n x D``) of parameter values (``n x P``)."""
        return torch.cat(
            [domain.features(values[:, j]) for j, domain in enumerate(self.domains)],
            dim=-1,
        )

    def value_row(self, params: Mapping[str, Any], where: str) -> Tensor:
        r"""The internal values (``P``, float64) of ``params`` (a value for each
        domain's name); ValueError naming ``where`` and the parameter if one is
        outside its domain."""
        return torch.tensor(
            [
                domain.value_of(params[domain.name], f"{where}: {domain.name}")
                for domain in self.domains
            ],
            dtype=torch.float64,
        )

    def index_of(self, row: Tensor) -> int | None:
        r"""The arm whose values are ``row`` (``P``), None if none, ``O(P)``."""
        return self._index.get(tuple(row.tolist()))

    def add_values(self, values: Tensor) -> Tensor:
        r"""Append the arms of parameter ``values`` (``n x P``) that no arm has yet
        (each once), ``O(n P)`` besides appending to the ``A`` rows.

        Returns:
            The features (``n' x D``) of the appended arms, in order.
        """
        fresh: dict[tuple[float, ...], int] = {}
        for position, row in enumerate(map(tuple, values.tolist())):
            if row not in self._index and row not in fresh:
                fresh[row] = position
        values = values[list(fresh.values())]
        features = self.features_of(values)
        first = self.num_arms
        self.values = torch.cat([self.values, values])
        self.features = torch.cat([self.features, features])
        self._index.update((row, first + i) for i, row in enumerate(fresh))
        return features

    def params(self, index: int) -> dict[str, Any]:
        r"""The parameters of arm ``index``: domain name -> value."""
        return {
            domain.name: domain.config_value(value)
            for domain, value in zip(
                self.domains, self.values[index].tolist(), strict=True
            )
        }


class RefinableArms(Protocol):
    r"""An arm set of parameter values that can grow (e.g. :class:`DomainArms`)."""

    refinable: bool

    def values_at(self, unit: Tensor) -> Tensor: ...

    def features_of(self, values: Tensor) -> Tensor: ...

    def add_values(self, values: Tensor) -> Tensor: ...

    def index_of(self, row: Tensor) -> int | None: ...


def add_unit_points(
    loop: StudyLoop, arms: RefinableArms, unit: Tensor
) -> list[int | None]:
    r"""Snap points of the loop's unit cube (``n x d``, the cube of its box
    ``loop.box``) to the domains, add those inside the box that are not arms yet to
    ``arms`` and to the loop (``add_arms``), in order.

    Returns:
        The arm of each point (None for a point whose snapped values leave the
        box).
    """
    low, high = loop.box
    values = arms.values_at(low + unit.to(low) * (high - low))
    features = arms.features_of(values)
    inside = ((features >= low) & (features <= high)).all(-1)
    added = arms.add_values(values[inside])
    if added.numel():
        loop.add_arms(added)
    return [
        arms.index_of(row) if keep else None
        for row, keep in zip(values, inside.tolist(), strict=True)
    ]


def _check_bounds(name: str, lower: float, upper: float, integer: bool) -> None:
    r"""Raise a ValueError naming the parameter unless its domain holds more than
    one value: ``lower < upper`` (integers: ``[lower, upper)`` not empty)."""
    if upper > lower:
        return
    if integer:
        raise ValueError(
            f"`space` parameter {name}: an integer domain draws from "
            f"[lower, upper), empty for lower={lower}, upper={upper}."
        )
    single = " (a single value: use a constant)" if lower == upper else ""
    raise ValueError(
        f"`space` parameter {name}: needs lower < upper, got "
        f"lower={lower}, upper={upper}{single}."
    )
