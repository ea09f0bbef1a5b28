r"""Tune search spaces as finite arm sets (:class:`ArmSpace`), for the Ray Tune
searchers of :mod:`botorch_sketch.integrations.ray_tune`.

A Tune search space (``tune.uniform``, ``quniform``, ``loguniform``, ``qloguniform``,
``randint``, ``qrandint``, ``lograndint``, ``choice``; nested dicts and constants
allowed) becomes ``num_arms`` scrambled Sobol configurations (duplicates of discrete
spaces dropped), each with its features in the unit cube: floats and integers by their
position between the bounds (in log space for log-uniform domains, after rounding and
quantization), each ``choice`` as one coordinate per category (one-hot). A finite list
of configurations is taken as is, numeric values scaled to ``[0, 1]`` over the list
and other values one-hot. The domains and the arm set are those of
:mod:`~botorch_sketch.integrations.arm_space` (the Optuna samplers share them);
this module only reads Tune's spaces.

Needs the optional dependency ray[tune] (``pip install -e ".[distributed]"`` from the
repository root).
"""

from __future__ import annotations

try:
    import ray.tune  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ray installed
    from botorch_sketch.utils.extras import missing_dependency

    raise missing_dependency(
        "ray[tune]", "distributed", "botorch_sketch.integrations.ray_tune"
    ) from error

import copy
from numbers import Real
from typing import Any

import torch
from ray.tune.search.sample import (
    Categorical,
    Domain,
    Float,
    Integer,
    LogUniform,
    Quantized,
    Uniform,
)
from ray.tune.search.variant_generator import parse_spec_vars
from torch import Tensor

from botorch_sketch.integrations.arm_space import (
    DEFAULT_NUM_ARMS,
    ChoiceDomain,
    DomainArms,
    NumericDomain,
)
from botorch_sketch.utils.validation import check_int

__all__ = ["DEFAULT_NUM_ARMS", "ArmSpace", "checked_points"]

KeyPath = tuple[str, ...]


def _name(path: KeyPath) -> str:
    r"""A parameter's name in messages: its keys joined by ``/``."""
    return "/".join(map(str, path))


def _domain(path: KeyPath, domain: Domain) -> NumericDomain | ChoiceDomain:
    r"""The neutral domain of a Tune domain (ValueError naming the parameter if
    it is not supported)."""
    name = _name(path)
    sampler = domain.get_sampler()
    if isinstance(domain, Categorical):
        if not isinstance(sampler, Uniform):
            raise ValueError(
                f"`space` parameter {name}: only uniform choices are supported."
            )
        return ChoiceDomain(name, domain.categories)
    if not isinstance(domain, (Float, Integer)):
        raise ValueError(
            f"`space` parameter {name}: unsupported domain {type(domain).__name__}."
        )
    step = sampler.q if isinstance(sampler, Quantized) else None
    sampler = sampler.sampler if isinstance(sampler, Quantized) else sampler
    if not isinstance(sampler, (Uniform, LogUniform)):
        raise ValueError(
            f"`space` parameter {name}: only uniform and "
            f"log-uniform samplers are supported, got {type(sampler).__name__}."
        )
    return NumericDomain(
        name,
        domain.lower,
        domain.upper,
        log=isinstance(sampler, LogUniform),
        integer=isinstance(domain, Integer),
        step=step,  # Tune rounds to multiples of q
    )


class ArmSpace:
    r"""A finite arm set for a Tune search space or a list of configurations.

    A search space becomes a :class:`~botorch_sketch.integrations.arm_space.DomainArms`
    of its domains (the mapping the Optuna samplers share); constants are kept
    for the configurations.

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
        self._arms: DomainArms | None = None
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
        neutral = [_domain(path, domain) for path, domain in domains]
        self._arms = DomainArms(neutral, num_arms, seed)
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
        self._list_features = torch.cat(columns, dim=-1)
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
        named = {_name(path): flat[path] for path in self._paths}
        row = self._arms.value_row(named, where)
        index = self._arms.index_of(row)
        if index is None:
            self._arms.add_values(row.unsqueeze(0))
            index = self.num_arms - 1
        return index

    @property
    def features(self) -> Tensor:
        r"""``A x D`` arm features in the unit cube (float64)."""
        return self._list_features if self._arms is None else self._arms.features

    def features_of(self, values: Tensor) -> Tensor:
        r"""Unit-cube features (``n x D``) of parameter values (``n x P``) of a
        search space."""
        return self._arms.features_of(values)

    @property
    def num_arms(self) -> int:
        return self.features.shape[0]

    @property
    def refinable(self) -> bool:
        r"""Whether arms can be added (a search space, not a list)."""
        return self._arms is not None

    @property
    def continuous(self) -> bool:
        r"""Whether a search space has a float parameter off any grid
        (:attr:`~botorch_sketch.integrations.arm_space.DomainArms.continuous`);
        a list of configurations never has."""
        return self.refinable and self._arms.continuous

    @property
    def values(self) -> Tensor:
        r"""``A x P`` parameter values of the arms of a search space (a float's
        value, an integer, a choice's category index)."""
        return self._arms.values

    def values_at(self, unit: Tensor) -> Tensor:
        r"""Parameter values (``n x P``) of points of the unit cube (``n x D``):
        numbers from their coordinate (rounded for integers, quantized), each
        choice the category of its largest coordinate."""
        return self._arms.values_at(unit)

    def add_values(self, values: Tensor) -> Tensor:
        r"""Append the arms of parameter ``values`` (``n x P``) that no arm has yet
        (each once), ``O(n A P)``.

        Returns:
            The features (``n' x D``) of the appended arms, in order.
        """
        if not self.refinable:
            raise ValueError("Arms cannot be added to a list of configurations.")
        return self._arms.add_values(values)

    def index_of(self, row: Tensor) -> int | None:
        r"""The arm whose values are ``row`` (``P``) in a search space, None if
        none."""
        return self._arms.index_of(row)

    def config(self, index: int) -> dict:
        r"""The configuration of arm ``index`` (a fresh nested dict)."""
        if self._configs is not None:
            return copy.deepcopy(self._configs[index])
        config: dict = {}
        for path, value in self._constants:
            _assign(config, path, copy.deepcopy(value))
        params = self._arms.params(index)
        for path in self._paths:
            _assign(config, path, params[_name(path)])
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
