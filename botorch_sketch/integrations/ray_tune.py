r"""Ray Tune searchers: asynchronous BBKB and S-GP-TS over a finite set of
configurations.

Needs the optional dependency ray[tune] (``pip install "botorch-sketch[distributed]"``).

Both searchers turn the search space into a finite arm set (:class:`ArmSpace`): a
Tune search space (``tune.uniform``, ``quniform``, ``loguniform``, ``qloguniform``,
``randint``, ``qrandint``, ``lograndint``, ``choice``; nested dicts and constants
allowed) becomes ``num_arms`` scrambled Sobol configurations (duplicates of discrete
spaces dropped), each with its features in the unit cube: floats and integers by their
position between the bounds (in log space for log-uniform domains, after rounding and
quantization), each ``choice`` as one coordinate per category (one-hot). A finite list
of configurations is taken as is, numeric values scaled to ``[0, 1]`` over the list
and other values one-hot. The searcher then asks the loop for one arm per trial:

- :class:`BBKBSearch`: :class:`~botorch_sketch.generation.bbkb_loop.BBKB`; running
  trials enter by BBKB's hallucinated variance update and ``suggest`` returns None
  while the batch rule waits for their results (Tune asks again later);
- :class:`SGPTSSearch`: :class:`~botorch_sketch.generation.sgpts_loop.SGPTS`, a fresh
  Thompson path per trial (it never waits).

``points_to_evaluate`` (as in Ray Tune's own searchers) are suggested first: they
become arms of the loop (``ask_arms``) whose results enter the posterior like the
others'. ``max_concurrent`` (or Tune's ``max_concurrent_trials``) caps the running
trials and, for BBKB, sets the loop's defaults for that many workers
(:func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options`).

Rewards are the metric (``mode="max"``) or its negative (``mode="min"``), as
reported: the loop's kernel and noise are fixed, so choose them for the metric's
scale. A trial that errored, or ended without a finite value of the metric, is failed
in the loop (it never enters the posterior) and listed in ``failures``.

Example:
    >>> from ray import tune
    >>> searcher = BBKBSearch(noise=1e-2, radius=0.5, seed=0)
    >>> tuner = tune.Tuner(
    ...     trainable,
    ...     param_space={"lr": tune.loguniform(1e-4, 1e-1), "act": tune.choice(["relu", "tanh"])},
    ...     tune_config=tune.TuneConfig(
    ...         search_alg=searcher, metric="accuracy", mode="max", num_samples=100
    ...     ),
    ... )
    >>> results = tuner.fit()
"""  # noqa: E501

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
import pickle
from numbers import Real
from typing import Any

import torch
from ray.tune.search import Searcher
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

from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.utils.validation import check_int

__all__ = ["ArmSpace", "BBKBSearch", "SGPTSSearch"]

#: Default number of configurations drawn from a Tune search space.
DEFAULT_NUM_ARMS = 2048

KeyPath = tuple[str, ...]


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
                f"`space` parameter {'/'.join(map(str, path))}: only uniform and "
                f"log-uniform samplers are supported, got {type(sampler).__name__}."
            )
        self.log = isinstance(sampler, LogUniform)
        self.integer = isinstance(domain, Integer)
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
                f"`space` parameter {'/'.join(map(str, path))}: only uniform "
                "choices are supported."
            )
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
        points = _checked_points(points_to_evaluate)
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
            names = ["/".join(map(str, path)) for path, _ in grids]
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
                    f"`space` parameter {'/'.join(map(str, path))}: unsupported "
                    f"domain {type(domain).__name__}."
                )
        widths = [codec.width for codec in codecs]
        unit = torch.quasirandom.SobolEngine(sum(widths), scramble=True, seed=seed)
        blocks = unit.draw(num_arms, dtype=torch.float64).split(widths, dim=-1)
        values = torch.stack(
            [codec.values(block) for codec, block in zip(codecs, blocks, strict=True)],
            dim=-1,
        )
        features = torch.cat(
            [codec.features(values[:, j]) for j, codec in enumerate(codecs)], dim=-1
        )
        keep = _first_unique_rows(values)
        self.features, self._values = features[keep], values[keep]
        self._codecs = codecs
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
        unknown = sorted("/".join(map(str, path)) for path in set(flat) - paths)
        missing = sorted("/".join(map(str, p)) for p in set(self._paths) - set(flat))
        if unknown or missing:
            raise ValueError(
                f"{where} must set the searched parameters and nothing else: "
                f"unknown {unknown}, missing {missing}."
            )
        for path, constant in self._constants:
            if path in flat and flat[path] != constant:
                name = "/".join(map(str, path))
                raise ValueError(f"{where}: {name} must be the constant {constant!r}.")
        row = torch.tensor(
            [
                codec.value_of(flat[path], f"{where}: {'/'.join(map(str, path))}")
                for path, codec in zip(self._paths, self._codecs, strict=True)
            ],
            dtype=torch.float64,
        )
        same = (self._values == row).all(dim=-1).nonzero()
        if same.numel():
            return int(same[0])
        features = torch.cat(
            [codec.features(row[j : j + 1]) for j, codec in enumerate(self._codecs)],
            dim=-1,
        )
        self._values = torch.cat([self._values, row.unsqueeze(0)])
        self.features = torch.cat([self.features, features])
        return self.num_arms - 1

    @property
    def num_arms(self) -> int:
        return self.features.shape[0]

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


def _checked_points(points: object) -> list[dict]:
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


class _LoopSearch(Searcher):
    r"""A Tune searcher that asks an ask/tell loop on an :class:`ArmSpace` for one
    arm per trial; subclasses name the loop class."""

    loop_class: type

    def __init__(
        self,
        space: dict | list[dict] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        *,
        points_to_evaluate: list[dict] | None = None,
        max_concurrent: int | None = None,
        num_arms: int = DEFAULT_NUM_ARMS,
        seed: int = 0,
        **loop_options: Any,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        check_int(num_arms, "num_arms", 1)
        check_int(seed, "seed", 0)
        if max_concurrent is not None:
            check_int(max_concurrent, "max_concurrent", 1)
        self._points = copy.deepcopy(_checked_points(points_to_evaluate))
        self._max_concurrent = max_concurrent
        self._num_arms, self._seed, self._loop_options = num_arms, seed, loop_options
        self._spec: dict | list[dict] | None = None
        self.arm_space: ArmSpace | None = None
        self.loop: Any = None
        self._trials: dict[str, int] = {}
        #: Arms of ``points_to_evaluate`` not suggested yet, in order.
        self._queue: list[int] = []
        #: One entry per failed trial: trial id, arm index, configuration, reason.
        self.failures: list[dict[str, Any]] = []
        if space:
            self._set_space(space)

    def _set_space(self, space: dict | list[dict]) -> None:
        arm_space = ArmSpace(space, self._num_arms, self._seed, self._points)
        self.loop = self._new_loop(arm_space.features)
        self._spec, self.arm_space = space, arm_space
        self._queue = list(arm_space.point_indices)

    def _new_loop(self, features: Tensor) -> Any:
        r"""The loop on ``features``: the user's options over
        :meth:`_worker_options`."""
        options = self._worker_options(features) | self._loop_options
        return self.loop_class(features, seed=self._seed, **options)

    def _worker_options(self, features: Tensor) -> dict[str, Any]:
        r"""Loop options for ``max_concurrent`` workers (none by default)."""
        return {}

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        r"""Run at most ``max_concurrent`` trials at once (Tune's
        ``max_concurrent_trials``); a loop that has not suggested anything yet is
        rebuilt with the options for that many workers."""
        check_int(max_concurrent, "max_concurrent", 1)
        self._max_concurrent = max_concurrent
        if self.loop is not None and self._untouched():
            self.loop = self._new_loop(self.arm_space.features)
        return True

    def _untouched(self) -> bool:
        loop = self.loop
        return not (
            loop.num_observations or loop.pending.numel() or loop.failed.numel()
        )

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        if self.arm_space is not None:
            return False
        self._set_space(config)
        return True

    def suggest(self, trial_id: str) -> dict | None:
        r"""The next configuration, or None while the loop waits for results."""
        if self.arm_space is None:
            raise RuntimeError(
                f"{type(self).__name__} has no search space: pass `space` or a "
                "`param_space` to tune.Tuner."
            )
        if self._metric is None or self._mode not in ("min", "max"):
            raise RuntimeError(
                f"{type(self).__name__} needs `metric` and `mode` ('min' or 'max'), "
                "here or in tune.TuneConfig."
            )
        if self._max_concurrent is not None and (
            len(self._trials) >= self._max_concurrent
        ):
            return None
        if self._queue:  # points_to_evaluate first
            indices = torch.tensor(self._queue[:1])
            self.loop.ask_arms(indices)
            del self._queue[0]
        else:
            indices = self.loop.ask(1)
            if indices.numel() == 0:
                return None
        self._trials[trial_id] = int(indices[0])
        return self.arm_space.config(int(indices[0]))

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        r"""Tell the trial's metric (negated for ``mode="min"``), or fail its arm
        if it errored or ended without a finite metric."""
        index = self._trials.pop(trial_id, None)
        if index is None:  # not suggested by this searcher
            return
        indices = torch.tensor([index])
        value = (result or {}).get(self._metric)
        if error or not isinstance(value, Real) or not math.isfinite(value):
            reason = (
                "error"
                if error
                else f"no finite value of {self._metric!r} (got {value!r})"
            )
            self.loop.fail(indices)
            self.failures.append(
                {
                    "trial_id": trial_id,
                    "index": index,
                    "config": self.arm_space.config(index),
                    "reason": reason,
                }
            )
            return
        reward = float(value) if self._mode == "max" else -float(value)
        self.loop.tell(indices, torch.tensor([reward], dtype=torch.float64))

    def save(self, checkpoint_path: str) -> None:
        r"""Pickle the search space, options, running trials, the points to
        evaluate not suggested yet and the loop's ``state_dict`` (pending arms
        included)."""
        state = {
            "spec": self._spec,
            "points_to_evaluate": copy.deepcopy(self._points),
            "queue": list(self._queue),
            "max_concurrent": self._max_concurrent,
            "metric": self._metric,
            "mode": self._mode,
            "num_arms": self._num_arms,
            "seed": self._seed,
            "loop_options": self._loop_options,
            "loop": self.loop.state_dict() if self.loop is not None else None,
            "trials": dict(self._trials),
            "failures": copy.deepcopy(self.failures),
        }
        with open(checkpoint_path, "wb") as file:
            pickle.dump(state, file)

    def restore(self, checkpoint_path: str) -> None:
        r"""Rebuild the arm set and the loop from :meth:`save`'s file."""
        with open(checkpoint_path, "rb") as file:
            state = pickle.load(file)
        self._metric, self._mode = state["metric"], state["mode"]
        self._num_arms, self._seed = state["num_arms"], state["seed"]
        self._loop_options = state["loop_options"]
        self._points = state["points_to_evaluate"]
        self._max_concurrent = state["max_concurrent"]
        self._spec, self.arm_space, self.loop = None, None, None
        if state["spec"]:
            self._set_space(state["spec"])
            self.loop.load_state_dict(state["loop"])
        self._queue = list(state["queue"])
        self._trials = dict(state["trials"])
        self.failures = state["failures"]


class BBKBSearch(_LoopSearch):
    r"""Asynchronous BBKB as a Ray Tune searcher.

    With ``W = max_concurrent`` (or Tune's ``max_concurrent_trials``) the loop
    defaults to :func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options`
    of ``W`` and the kernel's ``v = max k(x, x) / noise``: ``C~ = 1 + 0.07 W v``,
    batches ending once 5% of their arms are done, at most ``W + ceil(W / 20)``
    arms a batch (explicit ``loop_options`` win).

    Args:
        space: Tune search space or list of configurations (or None: Tune's
            ``param_space``).
        metric: The result key to optimize (or None: ``tune.TuneConfig``'s).
        mode: ``"max"`` or ``"min"``.
        points_to_evaluate: Configurations suggested first, in order (their
            results enter the posterior as the others'); in the list ``space``,
            or values of a search space's domains (extra arms).
        max_concurrent: At most this many trials at once (None: no limit here).
        num_arms: Configurations drawn from a search space (default 2,048).
        seed: Seed of the arm set and of the loop.
        **loop_options: Options of
            :class:`~botorch_sketch.generation.bbkb_loop.BBKB` (``covar_module``,
            ``noise``, ``radius``, ``ratio_threshold``, ``rule``, ...).
    """

    loop_class = BBKB

    def _worker_options(self, features: Tensor) -> dict[str, Any]:
        if self._max_concurrent is None:
            return {}
        prior = BBKB(features, seed=self._seed, **self._loop_options)
        scaled = float(prior.state.scaled_variance.max())
        return asynchronous_options(self._max_concurrent, scaled)


class SGPTSSearch(_LoopSearch):
    r"""Asynchronous S-GP-TS as a Ray Tune searcher (it never waits, so
    ``max_concurrent`` only caps the running trials).

    Arguments: those of :class:`BBKBSearch` (``space``, ``metric``, ``mode``,
    ``points_to_evaluate``, ``max_concurrent``, ``num_arms``, ``seed``), with
    ``**loop_options`` the options of
    :class:`~botorch_sketch.generation.sgpts_loop.SGPTS` (``covar_module``,
    ``noise``, ``num_inducing``, ``num_features``, ``alpha``, ...).
    """

    loop_class = SGPTS
