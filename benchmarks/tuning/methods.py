r"""The tuning benchmark's methods behind one ask/tell interface, each with its
library's default options (docs/benchmarks.md, "Hyperparameter tuning with default
options" and "Optuna samplers against Optuna's own")."""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from benchmarks.methods import BenchmarkMethod
from benchmarks.tuning.space import (
    Space,
    sample,
    to_ax,
    to_optuna,
    to_tune,
)

Config = dict[str, Any]


#: ``TPESampler`` with its defaults (Optuna 5: multivariate for one objective; Optuna
#: 4: independent), with ``multivariate=True`` and with ``multivariate=False``.
TPE_VARIANTS = ("tpe", "tpe-multivariate", "tpe-independent")

#: The methods that run constrained problems: Optuna's samplers that take a
#: ``constraints_func`` (given :func:`stored_constraints`), the package's (which
#: take it as they do) and random search (which needs none); and those that run
#: problems with several losses (the same).
CONSTRAINED_METHODS = (
    "bbkb-optuna",
    "sgpts-optuna",
    *TPE_VARIANTS,
    "gp",
    "nsga2",
    "random",
    "random-optuna",
)
MULTI_OBJECTIVE_METHODS = CONSTRAINED_METHODS
#: The Optuna methods given a ``constraints_func`` on a constrained problem.
_TAKE_CONSTRAINTS = ("bbkb-optuna", "sgpts-optuna", *TPE_VARIANTS, "gp", "nsga2")
#: The user attribute where a trial's constraint values are stored.
CONSTRAINTS_ATTR = "constraints"


Loss = float | tuple[float, ...]


class Method(Protocol):
    r"""``ask`` gives ``(key, config)`` or None (wait for a running trial);
    ``tell`` reports the loss (a tuple for several losses) of the trial ``key``,
    and on a constrained problem its constraint values (given only there)."""

    def ask(self) -> tuple[Any, Config] | None: ...

    def tell(
        self, key: Any, loss: Loss, constraints: Sequence[float] | None = None
    ) -> None: ...


def stored_constraints(trial: Any) -> Sequence[float]:
    r"""The ``constraints_func`` of the Optuna methods: the constraint values the
    objective stored in the trial's user attribute :data:`CONSTRAINTS_ATTR`."""
    return trial.user_attrs[CONSTRAINTS_ATTR]


class SearcherMethod:
    r"""A Ray Tune ``Searcher`` minimizing ``"loss"``, driven as Tune drives it
    (``max_concurrent_trials`` is ``in_flight``; ``suggest`` may answer None)."""

    def __init__(self, searcher: Any, space: Space, in_flight: int) -> None:
        searcher.set_search_properties("loss", "min", to_tune(space))
        searcher.set_max_concurrency(in_flight)
        self.searcher, self._count = searcher, 0

    def ask(self) -> tuple[Any, Config] | None:
        key = f"trial_{self._count}"
        config = self.searcher.suggest(key)
        if config is None:
            return None
        self._count += 1
        return key, config

    def tell(self, key: Any, loss: float, constraints: None = None) -> None:
        self.searcher.on_trial_complete(key, {"loss": loss})


class OptunaMethod:
    r"""An Optuna study with ``sampler`` minimizing ``num_objectives`` losses;
    trials in flight stay asked, not told (``RUNNING``), as other workers' trials
    do. A trial's constraint values are stored in its user attribute
    :data:`CONSTRAINTS_ATTR` just before it is told, as an objective stores them
    (:func:`stored_constraints` reads them back)."""

    def __init__(self, sampler: Any, space: Space, num_objectives: int = 1) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if num_objectives == 1:
            self.study = optuna.create_study(direction="minimize", sampler=sampler)
        else:
            self.study = optuna.create_study(
                directions=["minimize"] * num_objectives, sampler=sampler
            )
        self._distributions = to_optuna(space)

    def ask(self) -> tuple[Any, Config]:
        trial = self.study.ask(self._distributions)
        return trial, dict(trial.params)

    def tell(
        self, key: Any, loss: Loss, constraints: Sequence[float] | None = None
    ) -> None:
        if constraints is not None:
            key.set_user_attr(CONSTRAINTS_ATTR, [float(c) for c in constraints])
        self.study.tell(key, list(loss) if isinstance(loss, tuple) else loss)


class RandomMethod:
    r"""Independent uniform draws from the space (seeded)."""

    def __init__(self, space: Space, seed: int) -> None:
        self.space, self.rng, self._count = space, np.random.default_rng(seed), 0

    def ask(self) -> tuple[Any, Config]:
        self._count += 1
        return self._count, sample(self.space, self.rng)

    def tell(self, key: Any, loss: Loss, constraints: Any = None) -> None:
        pass


class AxMethod:
    r"""Ax's ``Client`` with its default generation strategy, one trial per ask."""

    def __init__(self, space: Space, seed: int) -> None:
        from ax.api.client import Client
        from ax.utils.common.logger import set_ax_logger_levels

        set_ax_logger_levels(logging.WARNING)
        self.client = Client(random_seed=seed)
        self.client.configure_experiment(parameters=to_ax(space))
        self.client.configure_optimization(objective="-loss")

    def ask(self) -> tuple[Any, Config]:
        ((index, parameters),) = self.client.get_next_trials(max_trials=1).items()
        return index, dict(parameters)

    def tell(self, key: Any, loss: float, constraints: None = None) -> None:
        self.client.complete_trial(key, raw_data={"loss": loss})


#: ``(space, seed, in_flight, num_objectives=1, constrained=False) -> method``.
Factory = Callable[..., Method]


def _searcher(name: str) -> Callable[..., Method]:
    r"""The build of the package's Ray Tune searcher ``name`` (``BBKBSearch`` or
    ``SGPTSSearch``), driven as Tune drives it."""

    def build(
        space: Space, seed: int, in_flight: int, num_objectives: int, options: Config
    ) -> Method:
        from botorch_sketch.integrations import ray_tune

        return SearcherMethod(getattr(ray_tune, name)(seed=seed), space, in_flight)

    return build


def _optuna(sampler: str, *, pass_workers: bool = False, **fixed: Any) -> Callable:
    r"""The build of an Optuna study with the sampler class named ``sampler`` (of
    ``optuna.samplers``, or the package's when it starts with ``BBKB`` / ``SGPTS``)
    and the options ``fixed``; ``pass_workers``: the concurrency as the sampler's
    ``num_workers``, as Tune's ``max_concurrent_trials``."""

    def build(
        space: Space, seed: int, in_flight: int, num_objectives: int, options: Config
    ) -> Method:
        if sampler.startswith(("BBKB", "SGPTS")):
            from botorch_sketch.integrations import optuna as library
        else:
            from optuna import samplers as library
        workers = {"num_workers": in_flight} if pass_workers else {}
        made = getattr(library, sampler)(seed=seed, **workers, **fixed, **options)
        return OptunaMethod(made, space, num_objectives)

    return build


def _random(
    space: Space, seed: int, in_flight: int, num_objectives: int, options: Config
) -> Method:
    return RandomMethod(space, seed)


def _ax(
    space: Space, seed: int, in_flight: int, num_objectives: int, options: Config
) -> Method:
    return AxMethod(space, seed)


_RAY = ("ray.tune", "botorch_sketch.integrations.ray_tune")
_OPTUNA = ("optuna", "optuna.samplers")
_OURS_OPTUNA = (*_OPTUNA, "botorch_sketch.integrations.optuna")

#: The methods, by name: records as the main benchmark's, each built as
#: ``build(space, seed, in_flight, num_objectives, sampler_options)`` with its
#: library's defaults; ``requires`` lists what :func:`method_factory` imports
#: before a build is timed.
METHODS: dict[str, BenchmarkMethod] = {
    method.name: method
    for method in (
        BenchmarkMethod(
            "bbkb", "BBKBSearch (Ray Tune)", _searcher("BBKBSearch"), requires=_RAY
        ),
        BenchmarkMethod(
            "sgpts", "SGPTSSearch (Ray Tune)", _searcher("SGPTSSearch"), requires=_RAY
        ),
        BenchmarkMethod(
            "tpe", "TPESampler, its defaults", _optuna("TPESampler"), requires=_OPTUNA
        ),
        BenchmarkMethod(
            "tpe-multivariate",
            "TPESampler(multivariate=True)",
            _optuna("TPESampler", multivariate=True),
            requires=_OPTUNA,
        ),
        BenchmarkMethod(
            "tpe-independent",
            "TPESampler(multivariate=False)",
            _optuna("TPESampler", multivariate=False),
            requires=_OPTUNA,
        ),
        BenchmarkMethod("gp", "GPSampler", _optuna("GPSampler"), requires=_OPTUNA),
        BenchmarkMethod("random", "independent uniform draws", _random),
        BenchmarkMethod(
            "ax", "Ax's Client, its default strategy", _ax, requires=("ax.api.client",)
        ),
        BenchmarkMethod(
            "bbkb-optuna",
            "BBKBSampler (Optuna)",
            _optuna("BBKBSampler", pass_workers=True),
            requires=_OURS_OPTUNA,
        ),
        BenchmarkMethod(
            "sgpts-optuna",
            "SGPTSSampler (Optuna)",
            _optuna("SGPTSSampler"),
            requires=_OURS_OPTUNA,
        ),
        BenchmarkMethod(
            "cmaes",
            "CmaEsSampler",
            _optuna("CmaEsSampler", warn_independent_sampling=False),
            requires=_OPTUNA,
        ),
        BenchmarkMethod(
            "random-optuna", "RandomSampler", _optuna("RandomSampler"), requires=_OPTUNA
        ),
        BenchmarkMethod(
            "nsga2", "NSGAIISampler", _optuna("NSGAIISampler"), requires=_OPTUNA
        ),
    )
}


def method_factory(name: str) -> Factory:
    r"""``(space, seed, in_flight, num_objectives=1, constrained=False) -> method``
    for ``name`` (one of :data:`METHODS`), with the method's default options; the
    libraries it ``requires`` are imported here, so that building a method (timed
    by the driver) does not import them.

    With ``num_objectives > 1`` the study minimizes that many losses; with
    ``constrained``, the samplers of :data:`CONSTRAINED_METHODS` that take a
    ``constraints_func`` get :func:`stored_constraints`. A method outside
    :data:`MULTI_OBJECTIVE_METHODS` (:data:`CONSTRAINED_METHODS`) asked for several
    losses (constraints) raises ``ValueError`` when built."""
    if name not in METHODS:
        raise ValueError(f"Unknown method {name!r}; known: {tuple(METHODS)}.")
    warnings.filterwarnings("ignore", module="optuna")  # experimental-API notices
    for module in METHODS[name].requires:
        importlib.import_module(module)
    build = METHODS[name].build

    def factory(
        space: Space,
        seed: int,
        in_flight: int,
        num_objectives: int = 1,
        constrained: bool = False,
    ) -> Method:
        if num_objectives > 1 and name not in MULTI_OBJECTIVE_METHODS:
            raise ValueError(
                f"{name} runs problems of one loss; for several: "
                f"{MULTI_OBJECTIVE_METHODS}."
            )
        if constrained and name not in CONSTRAINED_METHODS:
            raise ValueError(
                f"{name} runs unconstrained problems; constrained: "
                f"{CONSTRAINED_METHODS}."
            )
        options: dict[str, Any] = {}
        if constrained and name in _TAKE_CONSTRAINTS:
            options["constraints_func"] = stored_constraints
        return build(space, seed, in_flight, num_objectives, options)

    return factory
