r"""The tuning benchmark's methods behind one ask/tell interface, each with its
library's default options (docs/benchmarks.md, "Hyperparameter tuning with default
options" and "Optuna samplers against Optuna's own")."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from benchmarks.tuning.space import (
    Space,
    sample,
    to_ax,
    to_optuna,
    to_tune,
)

Config = dict[str, Any]

METHODS = (
    "bbkb",
    "sgpts",
    "tpe",
    "tpe-multivariate",
    "tpe-independent",
    "gp",
    "random",
    "ax",
    "bbkb-optuna",
    "sgpts-optuna",
    "cmaes",
    "random-optuna",
    "nsga2",
)

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


def method_factory(name: str) -> Factory:
    r"""``(space, seed, in_flight, num_objectives=1, constrained=False) -> method``
    for ``name`` (one of :data:`METHODS`), with the method's default options; the
    libraries are imported here, so that building a method (timed by the driver)
    does not import them.

    With ``num_objectives > 1`` the study minimizes that many losses; with
    ``constrained``, the samplers of :data:`CONSTRAINED_METHODS` that take a
    ``constraints_func`` get :func:`stored_constraints`. A method outside
    :data:`MULTI_OBJECTIVE_METHODS` (:data:`CONSTRAINED_METHODS`) asked for several
    losses (constraints) raises ``ValueError`` when built."""
    if name not in METHODS:
        raise ValueError(f"Unknown method {name!r}; known: {METHODS}.")
    build = _plain_factory(name)

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


def _plain_factory(name: str) -> Callable[..., Method]:
    r"""``(space, seed, in_flight, num_objectives, sampler_options) -> method``
    (:func:`method_factory`); the options go to the Optuna sampler."""
    warnings.filterwarnings("ignore", module="optuna")  # experimental-API notices
    if name in ("bbkb", "sgpts"):
        from botorch_sketch.integrations.ray_tune import BBKBSearch, SGPTSSearch

        searcher = BBKBSearch if name == "bbkb" else SGPTSSearch
        return lambda space, seed, k, m, o: SearcherMethod(
            searcher(seed=seed), space, k
        )
    if name in (*TPE_VARIANTS, "gp", "cmaes", "random-optuna", "nsga2"):
        import optuna  # noqa: F401 (imported before timing)
        from optuna.samplers import (
            CmaEsSampler,
            GPSampler,
            NSGAIISampler,
            RandomSampler,
            TPESampler,
        )

        sampler = {
            "tpe": TPESampler,
            "tpe-multivariate": partial(TPESampler, multivariate=True),
            "tpe-independent": partial(TPESampler, multivariate=False),
            "gp": GPSampler,
            "cmaes": partial(CmaEsSampler, warn_independent_sampling=False),
            "random-optuna": RandomSampler,
            "nsga2": NSGAIISampler,
        }[name]
        return lambda space, seed, k, m, o: OptunaMethod(
            sampler(seed=seed, **o), space, m
        )
    if name == "bbkb-optuna":
        from botorch_sketch.integrations.optuna import BBKBSampler

        # num_workers: the concurrency, as Tune's max_concurrent_trials
        return lambda space, seed, k, m, o: OptunaMethod(
            BBKBSampler(seed=seed, num_workers=k, **o), space, m
        )
    if name == "sgpts-optuna":
        from botorch_sketch.integrations.optuna import SGPTSSampler

        return lambda space, seed, k, m, o: OptunaMethod(
            SGPTSSampler(seed=seed, **o), space, m
        )
    if name == "random":
        return lambda space, seed, k, m, o: RandomMethod(space, seed)
    import ax.api.client  # noqa: F401 (imported before timing)

    return lambda space, seed, k, m, o: AxMethod(space, seed)
