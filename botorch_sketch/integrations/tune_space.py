r"""Tune search spaces as finite arm sets (:class:`ArmSpace`), for the Ray Tune
searchers of :mod:`botorch_sketch.integrations.ray_tune`.

A Tune search space (``tune.uniform``, ``quniform``, ``loguniform``, ``qloguniform``,
``randint``, ``qrandint``, ``lograndint``, ``choice``; nested dicts and constants
allowed) becomes ``num_arms`` scrambled Sobol configurations (duplicates of discrete
spaces dropped), each with its features in the unit cube: floats and integers by their
position between the bounds (in log space for log-uniform domains, after rounding and
quantization), each ``choice`` as one coordinate per category (one-hot). A finite list
of configurations is taken as is, numeric values scaled to ``[0, 1]`` over the list
and other values one-hot.

Needs the optional dependency ray[tune] (``pip install "botorch-sketch[distributed]"``).
"""

from __future__ import annotations

try:
    import ray.tune  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ray installed
    from botorch_sketch.parallel import DISTRIBUTED_INSTALL_HINT

    raise ImportError(
        "botorch_sketch.integrations.ray_tune needs the optional dependency "
        f"ray[tune]. {DISTRIBUTED_INSTALL_HINT}"
    ) from error

import copy
import math
from numbers import Real
from typing import Any

import torch
from ray.tune.search.sample import (
    Categorical,
    Float,
    Integer,
    LogUniform,
    Quantized,
    Uniform,
)
from ray.tune.search.variant_generator import parse_spec_vars
from torch import Tensor

from botorch_sketch.utils.validation import check_int

__all__ = ["DEFAULT_NUM_ARMS", "ArmSpace", "checked_points"]

#: Default number of configurations drawn from a Tune search space.
DEFAULT_NUM_ARMS = 2048

KeyPath = tuple[str, ...]


def _name(path: KeyPath) -> str:
    r"""A parameter's name in messages: its keys joined by ``/``."""
    return "/".join(map(str, path))


def _check_bounds(path: KeyPath, lower: float, upper: float, integer: bool) -> None:
    r"""Raise a ValueError naming the parameter unless its domain holds more than
    one value: ``lower < upper`` (integers: ``[lower, upper)`` not empty)."""
    if upper > lower:
        return
    if integer:
        raise ValueError(
            f"`space` parameter {_name(path)}: an integer domain draws from "
            f"[lower, upper), empty for lower={lower}, upper={upper}."
        )
    single = " (a single value: use a constant)" if lower == upper else ""
    raise ValueError(
        f"`space` parameter {_name(path)}: needs lower < upper, got "
        f"lower={lower}, upper={upper}{single}."
    )


class _Numeric:
    r"""A float or integer domain: unit coordinate <-> value (log space for
    log-uniform samplers), rounding for integers, quantization."""

    width = 1

    def __init__(self, path: KeyPath, domain: Float | Integer) -> None:
        sampler = domain.get_sampler()
        self.q = sampler.q if isinstance(sampler, Quantized) else None
        sampler = sampler.sampler if isinstance(sampler, Quantized) else sampler
        if not isinstance(sampler, (Uniform, LogUniform)):
            raise ValueError(
                f"`space` parameter {_name(path)}: only uniform and "
                f"log-uniform samplers are supported, got {type(sampler).__name__}."
            )
        self.log = isinstance(sampler, LogUniform)
        self.integer = isinstance(domain, Integer)
        _check_bounds(path, domain.lower, domain.upper, self.integer)
        self.lower, self.upper = domain.lower, domain.upper
        transform = math.log if self.log else float
        self.low, self.high = transform(domain.lower), transform(domain.upper)

    def values(self, unit: Tensor) -> Tensor:
        r"""The domain's values (``n``) at unit coordinates (``n x 1``, float64)."""
        values = self.low + unit[:, 0] * (self.high - self.low)
        values = values.exp() if self.log else values
        if self.integer:  # [lower, upper), as tune.randint
            values = values.floor().clamp(max=self.upper - 1)
        if self.q is not None:
            values = torch.round(values / self.q) * self.q
        return values

    def features(self, values: Tensor) -> Tensor:
        r"""Unit coordinates of ``values`` (``n x 1``)."""
        position = values.log() if self.log else values
        unit = (position - self.low) / (self.high - self.low)
        return unit.clamp(0.0, 1.0).unsqueeze(-1)

    def config_value(self, value: float) -> int | float:
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
        # integers: [lower, upper) as tune.randint, the upper end when quantized
        top = self.upper - 1 if self.integer and self.q is None else self.upper
        if not self.lower <= value <= top:
            raise ValueError(
                f"{where} must lie in [{self.lower}, {top}], got {value!r}."
            )
        return float(value)


class _Choice:
    r"""A categorical domain: one unit coordinate per category, the largest wins."""

    def __init__(self, path: KeyPath, domain: Categorical) -> None:
        if not isinstance(domain.get_sampler(), Uniform):
            raise ValueError(
                f"`space` parameter {_name(path)}: only uniform choices are supported."
            )
        if not domain.categories:
            raise ValueError(f"`space` parameter {_name(path)}: choice([]) is empty.")
        self.categories = list(domain.categories)
        self.width = len(self.categories)

    def values(self, unit: Tensor) -> Tensor:
        r"""Category indices (``n``) of unit coordinates (``n x width``)."""
        return unit.argmax(dim=-1).double()

    def features(self, values: Tensor) -> Tensor:
        return torch.nn.functional.one_hot(values.long(), self.width).double()

    def config_value(self, value: float) -> Any:
        return copy.deepcopy(self.categories[int(value)])

    def value_of(self, value: Any, where: str) -> float:
        r"""The category index of a user's ``value`` (ValueError if none)."""
        for index, category in enumerate(self.categories):
            if category == value:
                return float(index)
        raise ValueError(f"{where} must be one of {self.categories}, got {value!r}.")


class ArmSpace:
    r"""A finite arm set for a Tune search space or a list of configurations.

    Attributes:
        features: ``A x D`` arm features in the unit cube (float64).
        num_arms: ``A``.
        point_indices: The arm of each configuration of ``points_to_evaluate``.

    Args:
        space: A Tune search space (a dict, possibly nested, of Tune domains and
            constants) or a non-empty list of configurations (dicts).
        num_arms: Configurations drawn from a search space before duplicates are
            dropped (ignored for a list).
        seed: Seed of the scrambled Sobol sequence.
        points_to_evaluate: Configurations of the user's choice. For a list
            ``space`` each must be in the list; for a search space each must give
            every searched parameter a value of its domain (and constants their
            value), and becomes an extra arm unless an arm has its values.
    """

    def __init__(
        self,
        space: dict | list[dict],
        num_arms: int = DEFAULT_NUM_ARMS,
        seed: int = 0,
        points_to_evaluate: list[dict] | None = None,
    ) -> None:
        check_int(num_arms, "num_arms", 1)
        check_int(seed, "seed", 0)
        points = checked_points(points_to_evaluate)
        if isinstance(space, dict):
            self._init_domains(space, num_arms, seed)
            self.point_indices = [
                self._add_point(point, f"`points_to_evaluate`[{i}]")
                for i, point in enumerate(points)
            ]
        elif isinstance(space, list):
            self._init_list(space)
            self.point_indices = [
                self._list_index(point, f"`points_to_evaluate`[{i}]")
                for i, point in enumerate(points)
            ]
        else:
            raise TypeError(
                "`space` must be a dict (a Tune search space) or a list of "
                f"configurations, got {type(space).__name__}."
            )

    def _init_domains(self, space: dict, num_arms: int, seed: int) -> None:
        constants, domains, grids = parse_spec_vars(space)
        if grids:
            names = [_name(path) for path, _ in grids]
            raise ValueError(f"`space` must not use grid_search, found {names}.")
        if not domains:
            raise ValueError("`space` holds no Tune domain to search over.")
        codecs: list[_Numeric | _Choice] = []
        for path, domain in domains:
            if isinstance(domain, (Float, Integer)):
                codecs.append(_Numeric(path, domain))
            elif isinstance(domain, Categorical):
                codecs.append(_Choice(path, domain))
            else:
                raise ValueError(
                    f"`space` parameter {_name(path)}: unsupported "
                    f"domain {type(domain).__name__}."
                )
        self._codecs = codecs
        width = sum(codec.width for codec in codecs)
        unit = torch.quasirandom.SobolEngine(width, scramble=True, seed=seed)
        values = self.values_at(unit.draw(num_arms, dtype=torch.float64))
        keep = _first_unique_rows(values)
        self.features, self._values = self.features_of(values[keep]), values[keep]
        self._paths = [path for path, _ in domains]
        self._constants = constants
        self._configs = None

    def _init_list(self, configs: list[dict]) -> None:
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise ValueError("`space` as a list must hold at least one dict.")
        flat = [dict(_flatten(config)) for config in configs]
        keys = list(flat[0])
        if any(set(f) != set(keys) for f in flat):
            raise ValueError("`space`: every configuration must have the same keys.")
        columns = []
        for key in keys:
            column = [f[key] for f in flat]
            if all(isinstance(v, Real) and not isinstance(v, bool) for v in column):
                values = torch.tensor([float(v) for v in column], dtype=torch.float64)
                span = values.max() - values.min()
                scaled = (
                    (values - values.min()) / span
                    if span > 0
                    else torch.full_like(values, 0.5)
                )
                columns.append(scaled.unsqueeze(-1))
            else:
                distinct: list[Any] = []
                for v in column:
                    if v not in distinct:
                        distinct.append(v)
                codes = torch.tensor([distinct.index(v) for v in column])
                columns.append(
                    torch.nn.functional.one_hot(codes, len(distinct)).double()
                )
        self.features = torch.cat(columns, dim=-1)
        self._configs = [copy.deepcopy(config) for config in configs]

    def _list_index(self, point: dict, where: str) -> int:
        r"""The index of ``point`` in the list of configurations."""
        for index, config in enumerate(self._configs):
            if config == point:
                return index
        raise ValueError(f"{where} is not a configuration of the list `space`.")

    def _add_point(self, point: dict, where: str) -> int:
        r"""The arm with the values of ``point`` (a search space's configuration),
        appended if no arm has them."""
        flat = dict(_flatten(point))
        paths = set(self._paths) | {path for path, _ in self._constants}
        unknown = sorted(_name(path) for path in set(flat) - paths)
        missing = sorted(_name(path) for path in set(self._paths) - set(flat))
        if unknown or missing:
            raise ValueError(
                f"{where} must set the searched parameters and nothing else: "
                f"unknown {unknown}, missing {missing}."
            )
        for path, constant in self._constants:
            if path in flat and flat[path] != constant:
                raise ValueError(
                    f"{where}: {_name(path)} must be the constant {constant!r}."
                )
        row = torch.tensor(
            [
                codec.value_of(flat[path], f"{where}: {_name(path)}")
                for path, codec in zip(self._paths, self._codecs, strict=True)
            ],
            dtype=torch.float64,
        )
        same = (self._values == row).all(dim=-1).nonzero()
        if same.numel():
            return int(same[0])
        self._values = torch.cat([self._values, row.unsqueeze(0)])
        self.features = torch.cat([self.features, self.features_of(row[None])])
        return self.num_arms - 1

    def features_of(self, values: Tensor) -> Tensor:
        r"""Unit-cube features (``n x D``) of parameter values (``n x P``) of a
        search space."""
        return torch.cat(
            [codec.features(values[:, j]) for j, codec in enumerate(self._codecs)],
            dim=-1,
        )

    @property
    def num_arms(self) -> int:
        return self.features.shape[0]

    @property
    def refinable(self) -> bool:
        r"""Whether arms can be added (a search space, not a list)."""
        return self._configs is None

    @property
    def values(self) -> Tensor:
        r"""``A x P`` parameter values of the arms of a search space (a float's
        value, an integer, a choice's category index)."""
        return self._values

    def values_at(self, unit: Tensor) -> Tensor:
        r"""Parameter values (``n x P``) of points of the unit cube (``n x D``):
        numbers from their coordinate (rounded for integers, quantized), each
        choice the category of its largest coordinate."""
        blocks = unit.split([codec.width for codec in self._codecs], dim=-1)
        return torch.stack(
            [codec.values(b) for codec, b in zip(self._codecs, blocks, strict=True)],
            dim=-1,
        )

    def add_values(self, values: Tensor) -> Tensor:
        r"""Append the arms of parameter ``values`` (``n x P``) that no arm has yet
        (each once), ``O(n A P)``.

        Returns:
            The features (``n' x D``) of the appended arms, in order.
        """
        if not self.refinable:
            raise ValueError("Arms cannot be added to a list of configurations.")
        values = values[_first_unique_rows(values)]
        known = (values.unsqueeze(1) == self._values.unsqueeze(0)).all(-1).any(-1)
        values = values[~known]
        features = self.features_of(values)
        self._values = torch.cat([self._values, values])
        self.features = torch.cat([self.features, features])
        return features

    def config(self, index: int) -> dict:
        r"""The configuration of arm ``index`` (a fresh nested dict)."""
        if self._configs is not None:
            return copy.deepcopy(self._configs[index])
        config: dict = {}
        for path, value in self._constants:
            _assign(config, path, copy.deepcopy(value))
        for path, codec, value in zip(
            self._paths, self._codecs, self._values[index].tolist(), strict=True
        ):
            _assign(config, path, codec.config_value(value))
        return config


def checked_points(points: object) -> list[dict]:
    r"""``points_to_evaluate`` as a list of dicts (None: none)."""
    if points is None:
        return []
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        raise TypeError(
            "`points_to_evaluate` must be a list of dicts (configurations)."
        )
    return points


def _first_unique_rows(values: Tensor) -> Tensor:
    r"""Indices of the first occurrence of each distinct row, in order."""
    _, inverse = torch.unique(values, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), values.shape[0], dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(values.shape[0]), "amin")
    return first.sort().values


def _flatten(config: dict, prefix: KeyPath = ()) -> list[tuple[KeyPath, Any]]:
    items = []
    for key, value in config.items():
        path = (*prefix, key)
        items.extend(
            _flatten(value, path) if isinstance(value, dict) else [(path, value)]
        )
    return items


def _assign(config: dict, path: KeyPath, value: Any) -> None:
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = value
