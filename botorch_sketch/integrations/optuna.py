r"""Optuna samplers: asynchronous BBKB and S-GP-TS over a finite arm set of the
study's search space, for one process, ``n_jobs`` threads or many processes on a
shared storage.

Needs the optional dependency optuna (``pip install -e ".[optuna]"`` from the
repository root).

The relative search space is the intersection of the distributions of the study's
completed trials (single-valued ones left out); it becomes a finite arm set
(:func:`~botorch_sketch.integrations.optuna_space.arms_of_space`: scrambled Sobol
points mapped as the Ray Tune searchers map Tune spaces) and a loop on it:

- :class:`BBKBSampler`: :class:`~botorch_sketch.generation.bbkb_loop.BBKB`, the
  running trials hallucinated; when the batch rule is full a trial takes the
  batch's next UCB arm past the rule (or, with ``max_wait > 0``, first waits for
  results to come in, polling the storage);
- :class:`SGPTSSampler`: :class:`~botorch_sketch.generation.sgpts_loop.SGPTS`, a
  fresh Thompson path per trial (it never waits).

Parameters outside the relative space, and every parameter of the trials before
the first one completes, come from an independent sampler (by default a
``RandomSampler`` per trial, seeded by the sampler's seed and the trial number).
Once a trial has completed, the first independent draw of each parameter logs a
warning (``warn_independent_sampling=False``: none), as Optuna's samplers do.

**The loop follows the storage.** Before each trial the sampler catches up with
the study: trials finished since its last look are told (``COMPLETE``, the value
or its negative for ``minimize``) or failed (``FAIL``, ``PRUNED``); running trials
of other workers (other threads' or processes') whose parameters cover the space
are pending arms (their arm, added if their parameters are not an arm yet). Only
the trials new since the last look reach the loop. When the relative space
changes (a dynamic space), the arms and the loop are rebuilt once from the study.
Each trial whose arm this sampler asked records in the storage (a trial system
attribute) the arm and the steps it took since its previous ask; a sampler that
starts late or restarts with the same seed rebuilds its loop once by replaying
those steps and then makes the same choices as one that had been running all
along. One ``threading.Lock`` per sampler guards the loop and its trial records
(never held while an objective runs).

With default options the loops learn their kernel, noise and the objective's scale
and refine their arms near the best ones at each refit
(:class:`~botorch_sketch.integrations.arm_refinement.ArmRefiner`), so nothing needs
to be chosen.

**Constraints and several objectives.** A study with ``o > 1`` objectives, or whose
completed trials carry constraint values (``Trial.set_constraint``, or the
sampler's ``constraints_func`` as for Optuna's ``GPSampler`` and ``TPESampler``;
feasible where every value is ``<= 0``), gets one loop per objective and per
constraint on the same arms
(:class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`): each trial
takes the arm of best random scalarization of the objectives' UCBs (BBKB) or
Thompson samples (S-GP-TS) among the arms the constraints' UCBs or samples allow.
Infeasible trials inform every loop. Such studies never wait for results and run
no local phase (its evolution strategy follows one objective).

Example:
    >>> import optuna
    >>> study = optuna.create_study(sampler=BBKBSampler(seed=0))
    >>> study.optimize(objective, n_trials=100)
"""

from __future__ import annotations

# first: it raises the ImportError naming the extra when optuna is missing
from botorch_sketch.integrations.optuna_space import arms_of_space  # isort: skip

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from gpytorch.kernels import Kernel
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.samplers._base import _process_constraints_after_trial
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.multi_outcome import MultiOutcomeLoop
from botorch_sketch.generation.options import BBKBOptions, SGPTSOptions
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.integrations.arm_refinement import (
    DEFAULT_NUM_LOCAL,
    DEFAULT_NUM_REFINED,
    ArmRefiner,
)
from botorch_sketch.integrations.arm_space import DEFAULT_NUM_ARMS, DomainArms
from botorch_sketch.integrations.loop_builder import (
    LoopBuilder,
    StudyLoop,
    bbkb_worker_options,
)
from botorch_sketch.utils.validation import (
    check_allocation,
    check_at_least,
    check_bool,
    check_int,
    check_positive,
)

__all__ = ["BBKBSampler", "SGPTSSampler"]

#: The trial system attribute where a sampler records an arm it asked.
ASK_KEY = "botorch_sketch:ask"

#: Steps recorded with each ask: an arm of a trial made pending, told, failed;
#: an ask that returned no arm (BBKB's rule waiting).
PENDING, TOLD, FAILED, WAITED = "p", "t", "f", "w"

#: The largest seed: torch generators take seeds below 2^64 (and the refined
#: arms' generator takes the seed plus one).
MAX_SEED = 2**64 - 2

_FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)

#: Optuna's trial system attribute of constraint values: a list (``constraints_func``)
#: or one ``constraints:<name>`` key per value (``Trial.set_constraint``).
CONSTRAINTS_KEY = "constraints"

_logger = logging.getLogger(__name__)


class _LoopSampler(LoopBuilder, BaseSampler):
    r"""An Optuna sampler asking an ask/tell loop on the arms of the relative
    search space for one arm per trial; subclasses name the loop class."""

    loop_class: type

    def __init__(
        self,
        *,
        seed: int | None = None,
        num_arms: int = DEFAULT_NUM_ARMS,
        num_refined: int = DEFAULT_NUM_REFINED,
        num_local: int = DEFAULT_NUM_LOCAL,
        local_phase: bool = True,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        constraints_func: Callable[[FrozenTrial], Sequence[float]] | None = None,
        options: BBKBOptions | SGPTSOptions | None = None,
        covar_module: Kernel | None = None,
        **overrides: Any,
    ) -> None:
        check_int(num_arms, "num_arms", 1)
        check_allocation(num_arms, "`num_arms`")  # arm rows of one entry at least
        check_int(num_refined, "num_refined", 0)
        check_int(num_local, "num_local", 0)
        check_bool(warn_independent_sampling, "warn_independent_sampling")
        check_bool(local_phase, "local_phase")
        if seed is not None:  # the refined arms' generator takes seed + 1
            check_int(seed, "seed", 0, MAX_SEED)
        if independent_sampler is not None and not isinstance(
            independent_sampler, BaseSampler
        ):
            raise TypeError("`independent_sampler` must be an Optuna sampler.")
        if constraints_func is not None and not callable(constraints_func):
            raise TypeError("`constraints_func` must be a callable or None.")
        self._keep_loop_settings(options, covar_module, overrides)
        self._seed = random.SystemRandom().randrange(2**31) if seed is None else seed
        self._num_arms, self._num_refined = num_arms, num_refined
        self._num_local, self._local_phase = num_local, local_phase
        #: None: a RandomSampler per trial, seeded by the seed and the trial number
        self._independent = independent_sampler
        self._random_of: dict[int, RandomSampler] = {}  # trial number -> sampler
        self._warn_independent = warn_independent_sampling
        self._warned: set[str] = set()  # parameters whose independent draw warned
        self._constraints_func = constraints_func
        self._lock = threading.Lock()
        # BBKB's wait for results (SGPTS never waits)
        self._wait, self._poll = 0.0, 0.0
        self._study_id: int | None = None
        self._search_space = IntersectionSearchSpace()
        self._space: dict[str, BaseDistribution] | None = None
        self.arms: DomainArms | None = None
        self.loop: StudyLoop | None = None
        #: Trial numbers told to the loop, in order (rewards in ``loop.rewards``).
        self.told_trials: list[int] = []
        #: Trial numbers failed in the loop, in order.
        self.failed_trials: list[int] = []

    # -- Optuna's sampler interface ---------------------------------------------

    def reseed_rng(self) -> None:
        r"""Fresh random seeds for the independent sampler, the loop and the arm
        set (``study.optimize`` with ``n_jobs > 1`` calls this before each
        trial)."""
        with self._lock:
            if self._independent is not None:
                self._independent.reseed_rng()
            self._seed = random.SystemRandom().randrange(2**31)
            self._tag = f"{type(self).__name__}:{self._seed}"
            if self.loop is not None:
                self.loop.generator.manual_seed(self._seed)
                self._refiner.generator.manual_seed(self._seed + 1)

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        r"""The distributions of every completed trial, single values left out."""
        with self._lock:
            self._follow(study)
            space = self._search_space.calculate(study)
        return {name: d for name, d in sorted(space.items()) if not d.single()}

    def sample_relative(
        self,
        study: Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        r"""The parameters of the arm the loop asks for ``trial`` (none for an
        empty space or an enqueued trial with fixed parameters). While BBKB's batch
        rule is full the trial waits up to ``max_wait`` seconds for results, then
        takes an arm past the rule; each look while it waits reads the storage
        afresh (Optuna's cached trial list changes only at ``ask`` and ``tell``:
        it would never show another process's results)."""
        if not search_space or "fixed_params" in trial.system_attrs:
            return {}
        deadline = time.monotonic() + self._wait
        use_cache = True  # the first look: the trial list Optuna read for this ask
        while True:
            with self._lock:
                try:
                    index = self._look(study, trial, search_space, use_cache, deadline)
                except BaseException:
                    self._space = None  # rebuilt from the storage by the next ask
                    raise
                if index is not None:
                    return self.arms.params(index)
            time.sleep(self._poll)
            use_cache = False

    def _look(
        self,
        study: Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
        use_cache: bool,
        deadline: float,
    ) -> int | None:
        r"""One look at the study (under the lock): catch up, then ask; the arm
        recorded for ``trial`` (None: wait, until the monotonic ``deadline``)."""
        if self._space != search_space:
            self._rebuild(study, search_space)
        self._catch_up(study, trial.number, use_cache)
        late = time.monotonic() >= deadline
        # an ask that waited, and nothing new since: it would wait again
        waiting = self._steps and self._steps[-1][0] == WAITED
        index = None if waiting and not late else self._ask(wait=not late)
        if index is not None:
            self._record_ask(study, trial, index)
        return index

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        r"""A parameter outside the relative space, from the independent sampler
        (a warning the first time for ``param_name`` once a trial has completed)."""
        if self._warn_independent and param_name not in self._warned:
            self._warn_once(study, trial, param_name)
        return self._independent_for(trial).sample_independent(
            study, trial, param_name, param_distribution
        )

    def _warn_once(self, study: Study, trial: FrozenTrial, param_name: str) -> None:
        r"""Log that ``param_name`` is drawn independently, once per parameter and
        never before a trial completes (until then every draw is independent, by
        design)."""
        trials = study._get_trials(deepcopy=False, use_cache=True)
        if not any(t.state == TrialState.COMPLETE for t in trials):
            return
        with self._lock:
            if param_name in self._warned:
                return
            self._warned.add(param_name)
        independent = (
            RandomSampler if self._independent is None else type(self._independent)
        )
        name = type(self).__name__
        _logger.warning(
            f"The parameter `{param_name}` in Trial#{trial.number} is sampled "
            f"independently using `{independent.__name__}` instead of `{name}`, "
            "potentially degrading the optimization performance. This fallback "
            "happened because the parameter is outside the relative search space "
            "(the distributions every completed trial shares: a dynamic or "
            "conditional search space). "
            "You can suppress this warning by setting `warn_independent_sampling` "
            f"to `False` in the constructor of `{name}` if this independent "
            "sampling is intended behavior. Later draws of this parameter do not "
            "warn again."
        )

    def _independent_for(self, trial: FrozenTrial) -> BaseSampler:
        r"""The user's independent sampler, or the trial's own ``RandomSampler``
        (its draws do not depend on the trials before: a restarted sampler
        repeats them)."""
        if self._independent is not None:
            return self._independent
        with self._lock:
            if trial.number not in self._random_of:
                seed = (self._seed * 1_000_003 + trial.number) % 2**32
                self._random_of[trial.number] = RandomSampler(seed=seed)
            return self._random_of[trial.number]

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if self._independent is not None:
            self._independent.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        r"""Store the ``constraints_func`` values of a trial that completed or was
        pruned (as Optuna's samplers do), before its state reaches the storage."""
        if self._constraints_func is not None:
            _process_constraints_after_trial(
                self._constraints_func, study, trial, state
            )
        if self._independent is not None:
            self._independent.after_trial(study, trial, state, values)
        with self._lock:
            self._random_of.pop(trial.number, None)

    # -- the loop and the storage ---------------------------------------------

    def _follow(self, study: Study) -> None:
        r"""Forget everything when the sampler moves to another study."""
        if study._study_id == self._study_id:
            return
        self._study_id = study._study_id
        self._search_space = IntersectionSearchSpace()
        self._space, self.arms, self.loop = None, None, None

    def _rebuild(self, study: Study, space: dict[str, BaseDistribution]) -> None:
        r"""A fresh arm set and loop on ``space``, brought up to date with the
        study: the steps recorded with this sampler's asks are replayed (each ask
        again, as long as it gives the recorded arm), then the rest is caught up."""
        trials = study._get_trials(deepcopy=False, use_cache=True)
        #: the constraints' names (those of the first completed trial), in order
        self._constraint_names = next(
            (
                sorted(_constraints_of(trial))
                for trial in trials
                if trial.state == TrialState.COMPLETE
            ),
            [],
        )
        self._signs = [
            1.0 if direction == StudyDirection.MAXIMIZE else -1.0
            for direction in study.directions
        ]
        self.arms = arms_of_space(space, self._num_arms, self._seed)
        self.loop = self._build_outcome_loop(
            self.arms.features,
            self._seed,
            self.arms.continuous,
            len(self._signs),
            len(self._constraint_names),
        )
        self._refiner = ArmRefiner(
            self._num_refined,
            self._seed,
            self._num_local,
            self._local_phase and len(self._signs) == 1,
        )
        self._space, self._tag = dict(space), f"{type(self).__name__}:{self._seed}"
        self._single = not isinstance(self.loop, MultiOutcomeLoop)
        self.told_trials, self.failed_trials = [], []
        #: trial number -> arm, for the trials pending in the loop
        self._arm_of: dict[int, int] = {}
        #: trial numbers the loop is done with (told, failed or not mappable)
        self._done: set[int] = set()
        self._steps: list[list[Any]] = []  # since the last ask
        self._first_open = 0  # no trial below it is pending or new
        for trial in trials:
            record = trial.system_attrs.get(ASK_KEY)
            if not record or record.get("sampler") != self._tag:
                continue
            if not self._replay(record, trials):
                break
            self._arm_of[trial.number] = record["arm"]
            self._steps = []

    def _replay(self, record: dict[str, Any], trials: list[FrozenTrial]) -> bool:
        r"""Replay the steps of an ask ``record`` and the ask; False (the loop as
        before the ask that differs) once an ask gives another answer."""
        for code, number in record["steps"]:
            if code != WAITED:
                self._apply(code, trials[number])
            elif not self._replay_ask(None):
                return False
        return self._replay_ask(record["arm"])

    def _replay_ask(self, expected: int | None) -> bool:
        r"""Ask again; True if the loop gives ``expected`` (None: no arm, an ask
        that waited), else False with the loop and the refiner as before. An arm
        is asked without waiting: that ask gives the arm a waiting one would, or
        the one past the rule that the recorded ask took."""
        before, refiner = self.loop.state_dict(), self._refiner.state_dict()
        if self._ask(wait=expected is None) == expected:
            return True
        self.loop.load_state_dict(before)
        self._refiner = ArmRefiner.from_state_dict(refiner)
        return False

    def _catch_up(self, study: Study, current: int, use_cache: bool) -> None:
        r"""Tell or fail the trials finished since the last look, make the running
        ones of other workers pending (all but trial ``current``); the trials from
        the study's cached list, or (``use_cache=False``) read from the storage."""
        trials = study._get_trials(deepcopy=False, use_cache=use_cache)
        fresh = [
            trial
            for trial in trials[self._first_open :]
            if trial.number not in self._done and trial.number != current
        ]
        for trial in fresh:  # before any change
            self._check_constraints(trial)
        for trial in fresh:
            if trial.number not in self._arm_of and trial.state in (
                *_FINISHED,
                TrialState.RUNNING,
            ):
                self._apply(PENDING, trial)
            if trial.state == TrialState.COMPLETE:
                self._apply(TOLD, trial)
            elif trial.state in _FINISHED:
                self._apply(FAILED, trial)
        while self._first_open < len(trials) and self._first_open in self._done:
            self._first_open += 1

    def _apply(self, code: str, trial: FrozenTrial) -> None:
        r"""One step of the loop for ``trial`` (recorded): make its arm pending,
        tell its value (negated for ``minimize``), fail it."""
        number = trial.number
        if code == PENDING:
            index = self._arm_of_params(trial)
            if index is None:  # parameters outside the space: never an arm
                if trial.state in _FINISHED:
                    self._done.add(number)
                return
            self.loop.ask_arms(torch.tensor([index]))
            self._arm_of[number] = index
        elif number not in self._arm_of:
            return
        elif code == TOLD and (outcomes := self._outcomes_of(trial)) is not None:
            index = self._arm_of.pop(number)
            self.loop.tell(
                torch.tensor([index]), outcomes if self._single else outcomes[None]
            )
            self._refiner.refine(self.loop, self.arms)
            self._done.add(number)
            self.told_trials.append(number)
        else:  # failed, pruned, or no finite value
            self.loop.fail(torch.tensor([self._arm_of.pop(number)]))
            self._done.add(number)
            self.failed_trials.append(number)
            code = FAILED
        self._steps.append([code, number])

    def _check_constraints(self, trial: FrozenTrial) -> None:
        r"""Raise a ValueError unless a completed ``trial`` has the constraints of
        the study's first completed trial (by name)."""
        if trial.state != TrialState.COMPLETE:
            return
        names = sorted(_constraints_of(trial))
        if names != self._constraint_names:
            raise ValueError(
                f"{type(self).__name__}: trial {trial.number} has the constraints "
                f"{names}, the study's first completed trial {self._constraint_names}"
                "; every completed trial needs the same ones (set them in each "
                "trial, or give the sampler a `constraints_func`)."
            )

    def _outcomes_of(self, trial: FrozenTrial) -> torch.Tensor | None:
        r"""The ``o + k`` outcomes of a completed ``trial``: its values (negated
        for ``minimize``), then its constraint values; None if one is not
        finite."""
        constraints = _constraints_of(trial)
        values = [
            sign * value for sign, value in zip(self._signs, trial.values, strict=True)
        ]
        values += [constraints[name] for name in self._constraint_names]
        if not all(math.isfinite(value) for value in values):
            return None
        return torch.tensor(values, dtype=torch.float64)

    def _arm_of_params(self, trial: FrozenTrial) -> int | None:
        r"""The arm of ``trial``'s parameters, added to the arms and the loop if
        none has them; None unless it has every parameter of the space with the
        space's distribution."""
        if any(
            trial.distributions.get(name) != distribution
            for name, distribution in self._space.items()
        ):
            return None
        try:
            row = self.arms.value_row(trial.params, f"trial {trial.number}")
        except ValueError:  # a value the space's domain does not hold
            return None
        index = self.arms.index_of(row)
        if index is None:
            self.loop.add_arms(self.arms.add_values(row.unsqueeze(0)))
            index = self.arms.num_arms - 1
        return index

    def _ask(self, wait: bool) -> int | None:
        r"""One arm, pending for this trial: the local phase's next one, else the
        loop's (None: wait)."""
        index = self._refiner.next_arm(self.loop, self.arms)
        if index is not None:
            self.loop.ask_arms(torch.tensor([index]))
            return index
        indices = self.loop.ask(1, wait=wait)
        if indices.numel() == 0:
            self._steps.append([WAITED, -1])
            return None
        return int(indices[0])

    def _record_ask(self, study: Study, trial: FrozenTrial, index: int) -> None:
        r"""Write the arm and the steps since the previous ask to the storage."""
        self._arm_of[trial.number] = index
        record = {"sampler": self._tag, "arm": index, "steps": self._steps}
        study._storage.set_trial_system_attr(trial._trial_id, ASK_KEY, record)
        self._steps = []

    # -- what the loop has seen, for checks and logs -----------------------------

    @property
    def pending_trials(self) -> dict[int, int]:
        r"""Trial number -> arm of the trials pending in the loop."""
        with self._lock:
            return dict(self._arm_of) if self.loop is not None else {}


def _constraints_of(trial: FrozenTrial) -> dict[str, float]:
    r"""Name -> value of ``trial``'s constraints, in both of Optuna's formats: a
    list (``constraints_func``; names ``"0"``, ``"1"``...) and one key per value
    (``Trial.set_constraint``)."""
    attributes = trial.system_attrs
    constraints = {
        str(i): value for i, value in enumerate(attributes.get(CONSTRAINTS_KEY) or ())
    }
    prefix = f"{CONSTRAINTS_KEY}:"
    for key, value in attributes.items():
        if key.startswith(prefix):
            constraints[key[len(prefix) :]] = value
    return constraints


class BBKBSampler(_LoopSampler):
    r"""Asynchronous BBKB as an Optuna sampler.

    By default the loop has ``ratio_threshold=1`` (BKB): each ask conditions on
    every trial completed before it, the running ones (of other threads or
    processes) hallucinated. With ``max_wait > 0`` and ``num_workers = W > 1`` it
    defaults to
    :func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options` of ``W``
    (an ``options`` object given, or explicit keywords, win). A trial whose ask
    finds the batch rule full takes the batch's next UCB arm past the rule, the
    running trials hallucinated
    (GP-BUCB's choice; ``BBKB.ask(wait=False)``): an Optuna trial cannot be put
    off without holding its worker. With ``max_wait > 0`` it first waits that many
    seconds for other trials to finish (re-reading the storage every
    ``poll_interval`` seconds), as BBKB's rule asks, at the cost of idle workers.

    Args:
        seed: Seed of the arm set, the loop, the refined arms and the independent
            sampler, in ``[0, 2^64 - 2]`` (None: random).
        num_arms: Sobol points of the search space (default 2,048).
        num_refined: Arms added near the best ones at each refit of the learned
            kernel (0: none).
        num_local: Arms added in the trust region around the best one after
            each completed trial, once the kernel is fitted (0: none).
        local_phase: Hand the trials to an evolution strategy from the best
            arm when the trust region restarts after ``max(100, 20 d)`` completed
            trials (``d`` the arms' features), until it converges
            (:mod:`~botorch_sketch.integrations.local_phase`).
        num_workers: Trials run at once (threads and processes together); it
            sets BBKB's batch rule when trials may wait (``max_wait > 0``).
        max_wait: Longest wait, in seconds, of a trial for results while the
            batch rule is full (default 0: none).
        poll_interval: Seconds between two looks at the storage while waiting.
        independent_sampler: Sampler of the parameters outside the relative
            space (default: a ``RandomSampler`` per trial, seeded by ``seed`` and
            the trial number).
        warn_independent_sampling: Log a warning the first time each parameter
            is drawn by the independent sampler after a trial has completed (a
            parameter outside the relative space: a dynamic search space).
        options: The loop's :class:`~botorch_sketch.generation.options.BBKBOptions`
            (None: the defaults for ``num_workers`` workers).
        covar_module: The loop's fixed kernel (None: learned).
        **overrides: Fields of ``options`` to replace.
    """

    loop_class = BBKB

    def __init__(
        self,
        *,
        seed: int | None = None,
        num_arms: int = DEFAULT_NUM_ARMS,
        num_refined: int = DEFAULT_NUM_REFINED,
        num_local: int = DEFAULT_NUM_LOCAL,
        local_phase: bool = True,
        num_workers: int = 1,
        max_wait: float = 0.0,
        poll_interval: float = 0.05,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        options: BBKBOptions | None = None,
        covar_module: Kernel | None = None,
        **overrides: Any,
    ) -> None:
        check_int(num_workers, "num_workers", 1)
        check_at_least(max_wait, "max_wait", 0.0)
        if check_positive(poll_interval, "poll_interval") > threading.TIMEOUT_MAX:
            raise ValueError(  # longer sleeps overflow
                f"`poll_interval` must be <= {threading.TIMEOUT_MAX}, got "
                f"{poll_interval}."
            )
        super().__init__(
            seed=seed,
            num_arms=num_arms,
            num_refined=num_refined,
            num_local=num_local,
            local_phase=local_phase,
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            options=options,
            covar_module=covar_module,
            **overrides,
        )
        self._num_workers, self._wait, self._poll = num_workers, max_wait, poll_interval

    def _worker_options(self) -> dict[str, Any]:
        r"""BKB's rule (``C~ = 1``) unless trials may wait, else
        ``asynchronous_options(W)`` for ``W > 1`` workers: a trial that cannot
        wait is asked past the rule anyway, so a larger ``C~`` would only leave
        the results told since the batch opened out of the next asks."""
        if not self._wait:
            return {"ratio_threshold": 1.0}
        return bbkb_worker_options(self._num_workers)


class SGPTSSampler(_LoopSampler):
    r"""Asynchronous S-GP-TS as an Optuna sampler (a fresh Thompson path per
    trial: it never waits).

    Args:
        seed, num_arms, num_refined, num_local, local_phase, independent_sampler,
            warn_independent_sampling, covar_module: As for :class:`BBKBSampler`.
        options: The loop's
            :class:`~botorch_sketch.generation.options.SGPTSOptions`.
        **overrides: Fields of ``options`` to replace.
    """

    loop_class = SGPTS
