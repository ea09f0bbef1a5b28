r"""The tuning benchmark's methods behind one ask/tell interface, each with its
library's default options (docs/benchmarks.md, "Hyperparameter tuning with default
options" and "Optuna samplers against Optuna's own")."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np

from botorch_sketch.benchmarks.tuning.space import (
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
)

#: ``TPESampler`` with its defaults (Optuna 5: multivariate for one objective; Optuna
#: 4: independent), with ``multivariate=True`` and with ``multivariate=False``.
TPE_VARIANTS = ("tpe", "tpe-multivariate", "tpe-independent")


class Method(Protocol):
    r"""``ask`` gives ``(key, config)`` or None (wait for a running trial);
    ``tell`` reports the loss of the trial ``key``."""

    def ask(self) -> tuple[Any, Config] | None: ...

    def tell(self, key: Any, loss: float) -> None: ...


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

    def tell(self, key: Any, loss: float) -> None:
        self.searcher.on_trial_complete(key, {"loss": loss})


class OptunaMethod:
    r"""An Optuna study with ``sampler``; trials in flight stay asked, not told
    (``RUNNING``), as other workers' trials do."""

    def __init__(self, sampler: Any, space: Space) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._distributions = to_optuna(space)

    def ask(self) -> tuple[Any, Config]:
        trial = self.study.ask(self._distributions)
        return trial, dict(trial.params)

    def tell(self, key: Any, loss: float) -> None:
        self.study.tell(key, loss)


class RandomMethod:
    r"""Independent uniform draws from the space (seeded)."""

    def __init__(self, space: Space, seed: int) -> None:
        self.space, self.rng, self._count = space, np.random.default_rng(seed), 0

    def ask(self) -> tuple[Any, Config]:
        self._count += 1
        return self._count, sample(self.space, self.rng)

    def tell(self, key: Any, loss: float) -> None:
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

    def tell(self, key: Any, loss: float) -> None:
        self.client.complete_trial(key, raw_data={"loss": loss})


Factory = Callable[[Space, int, int], Method]


def method_factory(name: str) -> Factory:
    r"""``(space, seed, in_flight) -> method`` for ``name`` (one of
    :data:`METHODS`), with the method's default options; the libraries are imported
    here, so that building a method (timed by the driver) does not import them."""
    warnings.filterwarnings("ignore", module="optuna")  # experimental-API notices
    if name in ("bbkb", "sgpts"):
        from botorch_sketch.integrations.ray_tune import BBKBSearch, SGPTSSearch

        searcher = BBKBSearch if name == "bbkb" else SGPTSSearch
        return lambda space, seed, k: SearcherMethod(searcher(seed=seed), space, k)
    if name in (*TPE_VARIANTS, "gp", "cmaes", "random-optuna"):
        import optuna  # noqa: F401 (imported before timing)
        from optuna.samplers import CmaEsSampler, GPSampler, RandomSampler, TPESampler

        sampler = {
            "tpe": TPESampler,
            "tpe-multivariate": partial(TPESampler, multivariate=True),
            "tpe-independent": partial(TPESampler, multivariate=False),
            "gp": GPSampler,
            "cmaes": partial(CmaEsSampler, warn_independent_sampling=False),
            "random-optuna": RandomSampler,
        }[name]
        return lambda space, seed, k: OptunaMethod(sampler(seed=seed), space)
    if name == "bbkb-optuna":
        from botorch_sketch.integrations.optuna import BBKBSampler

        # num_workers: the concurrency, as Tune's max_concurrent_trials
        return lambda space, seed, k: OptunaMethod(
            BBKBSampler(seed=seed, num_workers=k), space
        )
    if name == "sgpts-optuna":
        from botorch_sketch.integrations.optuna import SGPTSSampler

        return lambda space, seed, k: OptunaMethod(SGPTSSampler(seed=seed), space)
    if name == "random":
        return lambda space, seed, k: RandomMethod(space, seed)
    if name == "ax":
        import ax.api.client  # noqa: F401 (imported before timing)

        return lambda space, seed, k: AxMethod(space, seed)
    raise ValueError(f"Unknown method {name!r}; known: {METHODS}.")
