r"""Ray Tune searchers: asynchronous BBKB and S-GP-TS over a finite set of
configurations.

Needs the optional dependency ray[tune] (``pip install -e ".[distributed]"`` from the
repository root).

Both searchers turn the search space into a finite arm set
(:class:`~botorch_sketch.integrations.tune_space.ArmSpace`: scrambled Sobol
configurations of a Tune search space, or a given list of configurations, each with
features in the unit cube). The searcher then asks the loop for one arm per trial:

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

Rewards are the metric (``mode="max"``) or its negative (``mode="min"``). With the
default options both loops learn their kernel, noise and the metric's scale as they
go (:class:`~botorch_sketch.generation.bbkb_loop.BBKB` and
:class:`~botorch_sketch.generation.sgpts_loop.SGPTS` with no ``covar_module``):
nothing needs to be chosen for the metric's units, and an affine change of the
metric gives the same suggestions. At each refit of the learned kernel,
``num_refined`` configurations drawn near the best ones
(:mod:`~botorch_sketch.integrations.arm_refinement`) join the arms, so the precision on
continuous parameters is not capped by the ``num_arms`` Sobol configurations.
A trial that errored, or ended without a finite value of the metric, is failed
in the loop (it never enters the posterior) and listed in ``failures``.

Several objectives (``metric`` and ``mode`` lists, as Ray's ``OptunaSearch``
takes them) and constraints (``constraint_metrics``: result keys whose values
must be ``<= 0``) make the loop a
:class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop` of one loop per
objective and constraint: each trial takes the best random scalarization of the
objectives' UCBs or Thompson samples among the configurations whose constraints
are optimistically met, and every finished trial, feasible or not, informs every
loop (no local phase with several objectives). Once every
arm has failed, ``suggest`` returns ``Searcher.FINISHED`` and Tune starts no more
trials (BBKB asks no failed arm again; S-GP-TS may, but would only repeat failures).

Example:
    >>> from ray import tune
    >>> searcher = BBKBSearch(seed=0)
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

# first: it raises the ImportError naming the extra when ray[tune] is missing
from botorch_sketch.integrations.tune_space import (  # isort: skip
    DEFAULT_NUM_ARMS,
    ArmSpace,
    checked_points,
)

import copy
import math
import pickle
from numbers import Real
from typing import Any

import torch
from gpytorch.kernels import Kernel
from ray.tune.search import Searcher

from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.integrations.arm_refinement import (
    DEFAULT_NUM_LOCAL,
    DEFAULT_NUM_REFINED,
    ArmRefiner,
)
from botorch_sketch.integrations.loop_builder import (
    LoopBuilder,
    StudyLoop,
    bbkb_worker_options,
)
from botorch_sketch.utils.validation import check_int

__all__ = ["ArmSpace", "BBKBSearch", "SGPTSSearch"]


class _LoopSearch(LoopBuilder, Searcher):
    r"""A Tune searcher that asks an ask/tell loop on an :class:`ArmSpace` for one
    arm per trial; subclasses name the loop class."""

    loop_class: type

    def __init__(
        self,
        space: dict | list[dict] | None = None,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        *,
        constraint_metrics: list[str] | None = None,
        points_to_evaluate: list[dict] | None = None,
        max_concurrent: int | None = None,
        num_arms: int = DEFAULT_NUM_ARMS,
        num_refined: int = DEFAULT_NUM_REFINED,
        num_local: int = DEFAULT_NUM_LOCAL,
        local_phase: bool = True,
        seed: int = 0,
        options: BBKBOptions | SGPTSOptions | None = None,
        covar_module: Kernel | None = None,
        **overrides: Any,
    ) -> None:
        _check_objectives(metric, mode)
        self._constraints = _checked_constraints(constraint_metrics, metric)
        super().__init__(metric=metric, mode=mode)
        self._keep_loop_settings(options, covar_module, overrides)
        _check_savable(options, covar_module, overrides, type(self).__name__)
        check_int(num_arms, "num_arms", 1)
        check_int(seed, "seed", 0)
        # arms added as the learned kernel learns
        self._refiner = ArmRefiner(num_refined, seed, num_local, local_phase)
        if max_concurrent is not None:
            check_int(max_concurrent, "max_concurrent", 1)
        self._points = copy.deepcopy(checked_points(points_to_evaluate))
        self._max_concurrent = max_concurrent
        self._num_arms, self._seed = num_arms, seed
        self._spec: dict | list[dict] | None = None
        self.arm_space: ArmSpace | None = None
        self.loop: StudyLoop | None = None
        self._trials: dict[str, int] = {}
        #: Arms of ``points_to_evaluate`` not suggested yet, in order.
        self._queue: list[int] = []
        #: One entry per failed trial: trial id, arm index, configuration, reason.
        self.failures: list[dict[str, Any]] = []
        if space:
            self._set_space(space)

    def _set_space(self, space: dict | list[dict]) -> None:
        arm_space = ArmSpace(space, self._num_arms, self._seed, self._points)
        self._spec, self.arm_space = space, arm_space
        self.loop = self._new_loop()
        self._initial_num_arms = arm_space.num_arms
        self._queue = list(arm_space.point_indices)

    def _new_loop(self) -> StudyLoop:
        r"""A loop on the arms of :attr:`arm_space` (:meth:`_build_loop`), or one
        per objective and constraint in a
        :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`
        (:meth:`_build_outcome_loop`; no local phase with several objectives)."""
        arm_space, num_objectives = self.arm_space, self._num_objectives()
        if num_objectives > 1:
            self._refiner.local = None
        return self._build_outcome_loop(
            arm_space.features,
            self._seed,
            arm_space.continuous,
            num_objectives,
            len(self._constraints),
        )

    def _num_objectives(self) -> int:
        r"""The objectives the metric names (a list: several)."""
        return len(self._metric) if isinstance(self._metric, list) else 1

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        r"""Run at most ``max_concurrent`` trials at once (Tune's
        ``max_concurrent_trials``); a loop that has not suggested anything yet is
        rebuilt with the options for that many workers."""
        check_int(max_concurrent, "max_concurrent", 1)
        self._max_concurrent = max_concurrent
        if self.loop is not None and self._untouched():
            self.loop = self._new_loop()
        return True

    def _untouched(self) -> bool:
        loop = self.loop
        return not (
            loop.num_observations or loop.pending.numel() or loop.failed.numel()
        )

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        r"""Tune's ``metric``, ``mode`` and search space (``param_space``).

        Without a space of its own the searcher takes ``config`` and Tune's metric
        and mode replace its own, as Ray's ``OptunaSearch`` and ``HyperOptSearch``
        do; returns True. With a space of its own it returns False (Tune's space is
        not used); Tune's metric and mode then fill in those the searcher lacks, and
        one that differs from the searcher's is a ValueError (Ray's searchers would
        ignore it). A searcher of several objectives keeps its metric and mode
        lists (it takes Tune's space if it has none); Tune's, if given, must be
        their first entries, the objective Tune reports on."""
        if self.arm_space is None and not isinstance(self._metric, list):
            self._set_space(config)
            self._metric, self._mode = metric or self._metric, mode or self._mode
            return True
        taken = self.arm_space is None  # several objectives: Tune's space only
        if taken:
            self._set_space(config)
        for name, tune_value in (("metric", metric), ("mode", mode)):
            own = getattr(self, f"_{name}")
            first = own[0] if isinstance(own, list) else own  # reported by Tune
            if tune_value and own and tune_value != first:
                raise ValueError(
                    f"`{name}` {own!r} of {type(self).__name__} conflicts with "
                    f"{tune_value!r} of tune.TuneConfig: give it in one place."
                )
        self._metric, self._mode = self._metric or metric, self._mode or mode
        return taken

    def suggest(self, trial_id: str) -> dict | str | None:
        r"""The next configuration; None while the loop waits for results;
        ``Searcher.FINISHED`` once every arm has failed (at least once)."""
        if self.arm_space is None:
            raise RuntimeError(
                f"{type(self).__name__} has no search space: pass `space` or a "
                "`param_space` to tune.Tuner."
            )
        if self._metric is None or self._mode is None:
            raise RuntimeError(
                f"{type(self).__name__} needs `metric` and `mode` ('min' or 'max'), "
                "here or in tune.TuneConfig."
            )
        _check_objectives(self._metric, self._mode)
        # the metric came from Tune after the loop was built: rebuild it for them
        wanted = self._num_objectives() + len(self._constraints)
        if self._untouched() and getattr(self.loop, "num_outcomes", 1) != wanted:
            self.loop = self._new_loop()
        if self._max_concurrent is not None and (
            len(self._trials) >= self._max_concurrent
        ):
            return None
        if self._queue:  # points_to_evaluate first
            indices = torch.tensor(self._queue[:1])
            self.loop.ask_arms(indices)
            del self._queue[0]
        elif self._every_arm_failed():
            return Searcher.FINISHED
        elif (local := self._refiner.next_arm(self.loop, self.arm_space)) is not None:
            indices = torch.tensor([local])
            self.loop.ask_arms(indices)
        else:
            indices = self.loop.ask(1)
            if indices.numel() == 0:
                return None
        self._trials[trial_id] = int(indices[0])
        return self.arm_space.config(int(indices[0]))

    def _every_arm_failed(self) -> bool:
        r"""Whether every arm of the space is in the loop's ``failed`` list."""
        failed = self.loop.failed
        return torch.unique(failed).numel() == self.arm_space.num_arms

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        r"""Tell the trial's metric (negated for ``mode="min"``; several: each
        objective, then each constraint), or fail its arm if it errored or ended
        without a finite value of one of them."""
        index = self._trials.pop(trial_id, None)
        if index is None:  # not suggested by this searcher
            return
        indices = torch.tensor([index])
        metrics = self._metric if isinstance(self._metric, list) else [self._metric]
        modes = self._mode if isinstance(self._mode, list) else [self._mode]
        keys = [*metrics, *self._constraints]
        values = [(result or {}).get(key) for key in keys]
        missing = [
            (key, value)
            for key, value in zip(keys, values, strict=True)
            if not isinstance(value, Real) or not math.isfinite(value)
        ]
        if error or missing:
            reason = (
                "error"
                if error
                else f"no finite value of {missing[0][0]!r} (got {missing[0][1]!r})"
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
        signs = [1.0 if mode == "max" else -1.0 for mode in modes]
        signs += [1.0] * len(self._constraints)
        outcomes = torch.tensor(
            [sign * float(value) for sign, value in zip(signs, values, strict=True)],
            dtype=torch.float64,
        )
        single = len(keys) == 1
        self.loop.tell(indices, outcomes if single else outcomes.unsqueeze(0))
        self._refiner.refine(self.loop, self.arm_space)

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
            "constraint_metrics": list(self._constraints),
            "num_arms": self._num_arms,
            "seed": self._seed,
            "options": self._options,
            "overrides": self._overrides,
            "covar_module": self._covar_module,
            "loop": self.loop.state_dict() if self.loop is not None else None,
            "refiner": self._refiner.state_dict(),
            "added_values": None
            if self.loop is None or not self.arm_space.refinable
            else self.arm_space.values[self._initial_num_arms :].clone(),
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
        self._constraints = state.get("constraint_metrics", [])
        self._num_arms, self._seed = state["num_arms"], state["seed"]
        self._options, self._overrides = state["options"], state["overrides"]
        self._covar_module = state["covar_module"]
        self._points = state["points_to_evaluate"]
        self._max_concurrent = state["max_concurrent"]
        self._spec, self.arm_space, self.loop = None, None, None
        self._refiner = ArmRefiner.from_state_dict(state["refiner"])
        if state["spec"]:
            self._set_space(state["spec"])
            if state["added_values"] is not None:
                self.arm_space.add_values(state["added_values"])
            self.loop.load_state_dict(state["loop"])
        self._queue = list(state["queue"])
        self._trials = dict(state["trials"])
        self.failures = state["failures"]


def _check_objectives(
    metric: str | list[str] | None, mode: str | list[str] | None
) -> None:
    r"""Raise a ValueError unless ``mode`` fits ``metric``: ``"min"`` or
    ``"max"`` (or None) for one metric, a list of as many for a list of distinct
    metrics."""
    if isinstance(metric, list):
        if len(set(metric)) != len(metric) or not metric:
            raise ValueError(f"`metric` must name distinct results, got {metric}.")
        if mode is not None and (
            not isinstance(mode, list)
            or len(mode) != len(metric)
            or any(m not in ("min", "max") for m in mode)
        ):
            raise ValueError(
                f"`mode` must be a list of 'min' or 'max', one per metric {metric}, "
                f"got {mode!r}."
            )
    elif mode is not None and mode not in ("min", "max"):
        raise ValueError(f"`mode` must be 'min' or 'max', got {mode!r}.")


def _checked_constraints(
    constraint_metrics: list[str] | None, metric: str | list[str] | None
) -> list[str]:
    r"""The constraint metrics as a list, checked: distinct strings, none of them
    an objective."""
    if constraint_metrics is None:
        return []
    objectives = metric if isinstance(metric, list) else [metric]
    if (
        not isinstance(constraint_metrics, (list, tuple))
        or not all(isinstance(key, str) for key in constraint_metrics)
        or len(set(constraint_metrics)) != len(constraint_metrics)
        or set(constraint_metrics) & set(objectives)
    ):
        raise ValueError(
            "`constraint_metrics` must be a list of distinct result keys, none of "
            f"them an objective, got {constraint_metrics!r}."
        )
    return list(constraint_metrics)


def _check_savable(
    options: BBKBOptions | SGPTSOptions | None,
    covar_module: Kernel | None,
    overrides: dict[str, Any],
    owner: str,
) -> None:
    r"""Raise a TypeError unless the loop settings pickle: :meth:`_LoopSearch.save`
    writes them into Tune's checkpoints, mid-run."""
    try:
        pickle.dumps((options, covar_module, overrides))
    except Exception as error:  # pickling raises what the object's hooks raise
        raise TypeError(
            f"`options`, `covar_module` and the keyword options of {owner} must "
            "pickle (save() writes them into Tune's checkpoints; define callables "
            f"at module level): {type(error).__name__}: {error}"
        ) from error


class BBKBSearch(_LoopSearch):
    r"""Asynchronous BBKB as a Ray Tune searcher.

    With ``W = max_concurrent > 1`` (or Tune's ``max_concurrent_trials``) the loop
    defaults to :func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options`
    of ``W``: ``C~ = 1 + 0.07 W v`` with the kernel's ``v = max k(x, x) / noise``
    at each batch (it follows the learned noise),
    batches ending once 5% of their arms are done, at most ``W + ceil(W / 20)``
    arms a batch (an ``options`` object given, or explicit keywords, win).

    Args:
        space: Tune search space or list of configurations (or None: Tune's
            ``param_space``).
        metric: The result key to optimize (or None: ``tune.TuneConfig``'s); a
            list of keys for several objectives.
        mode: ``"max"`` or ``"min"``; a list of them, one per metric.
        constraint_metrics: Result keys of constraint values, feasible where all
            are ``<= 0`` (None: none).
        points_to_evaluate: Configurations suggested first, in order (their
            results enter the posterior as the others'); in the list ``space``,
            or values of a search space's domains (extra arms).
        max_concurrent: At most this many trials at once (None: no limit here).
        num_arms: Configurations drawn from a search space (default 2,048).
        num_refined: Configurations added near the best ones at each refit of a
            learned kernel (:data:`DEFAULT_NUM_REFINED`; 0: none; a list
            ``space`` gets none).
        num_local: Configurations added in the trust region around the best
            one after each result, once the kernel is fitted
            (:data:`DEFAULT_NUM_LOCAL`; 0: none; a list ``space`` gets none).
        local_phase: Hand the trials to an evolution strategy from the best
            configuration when the trust region restarts after ``max(100, 20 d)``
            results (``d`` the arms' features), until it converges
            (:mod:`~botorch_sketch.integrations.local_phase`).
        seed: Seed of the arm set, of the refined configurations and of the
            loop.
        options: The loop's :class:`~botorch_sketch.generation.options.BBKBOptions`
            (None: the defaults for ``max_concurrent`` workers).
        covar_module: The loop's fixed kernel (None: learned).
        **overrides: Fields of ``options`` to replace (``noise``, ``radius``,
            ``ratio_threshold``, ``rule``, ...).
    """

    loop_class = BBKB

    def _worker_options(self) -> dict[str, Any]:
        return bbkb_worker_options(self._max_concurrent)


class SGPTSSearch(_LoopSearch):
    r"""Asynchronous S-GP-TS as a Ray Tune searcher (it never waits, so
    ``max_concurrent`` only caps the running trials).

    Arguments: those of :class:`BBKBSearch` (``space``, ``metric``, ``mode``,
    ``constraint_metrics``, ``points_to_evaluate``, ``max_concurrent``,
    ``num_arms``, ``num_refined``, ``num_local``, ``local_phase``, ``seed``,
    ``covar_module``), with ``options`` an
    :class:`~botorch_sketch.generation.options.SGPTSOptions` and ``**overrides``
    its fields (``noise``, ``num_inducing``, ``num_features``, ``alpha``, ...).
    """

    loop_class = SGPTS
