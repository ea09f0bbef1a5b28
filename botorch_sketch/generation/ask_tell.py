r"""The ask/tell contract of the loops on a finite arm set (:class:`AskTellOptimizer`)
and the base class of :class:`~botorch_sketch.generation.bbkb_loop.BBKB` and
:class:`~botorch_sketch.generation.sgpts_loop.SGPTS` (:class:`ArmLoop`): the arms,
the pending and failed arms, the checks of ``ask`` / ``tell`` / ``fail``, the
initial design, the self-tuning bookkeeping and the shared part of the saved
state."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar, cast, runtime_checkable

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.generation.arm_growth import checked_new_arms
from botorch_sketch.generation.hyperparameters import (
    FIT_INDUCING,
    INITIAL_LEARNED_NOISE,
    REFIT_MAX_ITERATIONS,
    RefitSchedule,
    bounding_box,
    checked_hyperparameters,
    cube_coordinates,
    fit_dtc_hyperparameters,
    hyperparameter_state,
    learnable_covar_module,
    restart_due,
    unit_cube,
)
from botorch_sketch.generation.initial_design import space_filling_arms
from botorch_sketch.generation.options import ArmLoopOptions, options_record
from botorch_sketch.generation.pending import staying_pending
from botorch_sketch.generation.repeats import repeat_threshold, repeats_agree
from botorch_sketch.generation.reward_warping import (
    fit_power,
    warped_rewards,
    warped_values,
)
from botorch_sketch.utils.atomic import Restorable, atomic
from botorch_sketch.utils.fingerprint import (
    check_fingerprint,
    check_saved_options,
    check_saved_state,
    problem_fingerprint,
)
from botorch_sketch.utils.validation import (
    check_bool,
    check_generator_state,
    check_indices,
    check_int,
    check_kernel,
    check_rewards,
)


@runtime_checkable
class AskTellOptimizer(Protocol):
    r"""An asynchronous ask/tell optimizer over the rows of ``arms`` (``A x d``).

    ``ask(max_arms)`` returns up to ``max_arms`` arm indices (possibly none while it
    waits for outcomes, at least one when nothing is pending) and adds them to
    ``pending``; ``tell`` and ``fail`` take any non-empty sub-multiset of ``pending``;
    ``state_dict`` includes the pending arms."""

    arms: Tensor

    @property
    def pending(self) -> Tensor: ...

    def ask(self, max_arms: int | None = None) -> Tensor: ...

    def tell(self, indices: Tensor, rewards: Tensor) -> None: ...

    def fail(self, indices: Tensor) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


#: The keys of :meth:`ArmLoop.state_dict`; a subclass adds its own.
STATE_KEYS = (
    "observed",
    "rewards",
    "pending",
    "failed",
    "generator",
    "fingerprint",
    "design_asked",
    "hyperparameters",
    "added_arms",
    "options",
)


#: The public methods of :class:`ArmLoop` and its subclasses that change, or read
#: all of, the loop's state: one call at a time (:func:`one_call_at_a_time`).
EXCLUSIVE_METHODS = (
    "ask",
    "ask_values",
    "ask_arms",
    "tell",
    "fail",
    "add_arms",
    "state_dict",
    "load_state_dict",
)

#: The :data:`EXCLUSIVE_METHODS` that change the loop: atomic
#: (:func:`~botorch_sketch.utils.atomic.atomic`), so a call that raises leaves the
#: loop exactly as it was.
ATOMIC_METHODS = tuple(name for name in EXCLUSIVE_METHODS if name != "state_dict")

Method = TypeVar("Method", bound=Callable[..., Any])


def one_call_at_a_time(method: Method) -> Method:
    r"""``method`` of an :class:`ArmLoop`, refusing to start while another thread is
    inside one of the loop's :data:`EXCLUSIVE_METHODS`: a RuntimeError, raised
    before anything changes (the loop's re-entrant lock, taken without waiting;
    the thread inside a call may enter others)."""

    @functools.wraps(method)
    def exclusive(self: ArmLoop, *args: Any, **kwargs: Any) -> Any:
        if not self._call_lock.acquire(blocking=False):
            raise RuntimeError(
                f"{type(self).__name__}.{method.__name__}() was called while "
                "another thread is inside a call of this loop; nothing was changed. "
                "A loop is not thread-safe: call it from one thread, or hold one "
                "lock around each call."
            )
        try:
            return method(self, *args, **kwargs)
        finally:
            self._call_lock.release()

    return cast(Method, exclusive)


class BestArm(NamedTuple):
    r"""The told arm with the largest reward (:meth:`ArmLoop.best`)."""

    #: Its index into the loop's arms
    index: int
    #: Its ``d`` coordinates (a copy)
    point: Tensor
    #: Its reward, as told
    reward: float


@dataclass(frozen=True)
class SavedLoop:
    r"""The validated shared part of a saved state (:meth:`ArmLoop._checked_saved`),
    copied to the loop's device: ``A'`` arms (added ones included), ``t`` observed
    indices and rewards, ``p`` pending and ``f`` failed indices, the design arms
    asked, the kernel, ``lambda`` and the observations at the last fit."""

    arms: Tensor
    observed: Tensor
    rewards: Tensor
    pending: Tensor
    failed: Tensor
    design_asked: int
    kernel: Kernel
    noise: float
    last_fit: int | None


class ArmLoop(Restorable):
    r"""What the ask/tell loops on a finite arm set share: the ``A x d`` :attr:`arms`
    (with the ones added later), the ``p`` :attr:`pending` arm indices (asked,
    neither told nor failed, a multiset), the ``f`` :attr:`failed` ones, the checks
    of ``ask`` / ``tell`` / ``fail`` (all raised before anything changes), the
    initial design, the self-tuning bookkeeping (a learned kernel on the arms'
    unit cube, reward standardization, the refit schedule and
    :attr:`refit_seconds`), the frozen :attr:`options` and the shared part of
    :meth:`state_dict` (the options included, as a plain dict).

    A subclass sets :attr:`generator` and :attr:`_design`, keeps :attr:`observed`
    and :attr:`rewards`, and implements ``ask``, ``tell`` and
    :meth:`_use_hyperparameters`.

    One call at a time: a call of one of the :data:`EXCLUSIVE_METHODS` (a
    subclass's included) made while another thread is inside one is refused with
    a RuntimeError before it changes anything (:func:`one_call_at_a_time`).

    Atomic: a call of one of the :data:`ATOMIC_METHODS` that raises, whatever
    the exception and wherever it arose, leaves the loop exactly as it was (the
    loop and the models and samplers it holds are
    :class:`~botorch_sketch.utils.atomic.Restorable`: the new state is computed
    aside and replaces the old one when the whole call succeeded), so the call
    can be retried once the fault is gone.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        r"""Make the subclass's own :data:`EXCLUSIVE_METHODS` one call at a
        time, and its :data:`ATOMIC_METHODS` atomic."""
        super().__init_subclass__(**kwargs)
        for name in EXCLUSIVE_METHODS:
            if name in vars(cls):
                method = vars(cls)[name]
                if name in ATOMIC_METHODS:
                    method = atomic(method)
                setattr(cls, name, one_call_at_a_time(method))

    #: The generator behind every random choice (set by the subclass)
    generator: torch.Generator
    #: Most inducing points of a refit when the option ``fit_inducing`` is None
    #: (:data:`~botorch_sketch.generation.hyperparameters.FIT_INDUCING`)
    default_fit_inducing: int = FIT_INDUCING
    #: The arm indices of the space-filling design, asked first
    _design: Tensor

    def __init__(
        self, arms: Tensor, *, covar_module: Kernel | None, options: ArmLoopOptions
    ) -> None:
        r"""
        Args:
            arms: ``A x d`` arm set, checked by the subclass.
            covar_module: Fixed kernel; None learns one on the arms' unit cube.
            options: The loop's options (validated), kept as :attr:`options`.
        """
        #: Held by the thread inside a call (:func:`one_call_at_a_time`)
        self._call_lock = threading.RLock()
        #: The loop's options (frozen; saved by :meth:`state_dict`)
        self.options = options
        learned = covar_module is None
        if not learned:
            check_kernel(covar_module)
        noise, num_initial = options.noise, options.num_initial
        standardize = learned if options.standardize is None else options.standardize
        d = arms.shape[-1]
        num_initial = max(5, 2 * d) if learned and num_initial is None else num_initial
        num_initial = min(num_initial or 0, len(arms))
        #: When a learned kernel is refitted (None: the kernel is fixed)
        growth = options.refit_growth
        self.refits = RefitSchedule(max(num_initial, 2), growth) if learned else None
        self.arms = arms
        self._given_arms = arms
        #: The arms' bounding box, whose unit cube a learned kernel works on
        self.box = bounding_box(arms) if learned else None
        #: ``A x d`` points the kernel sees: the arms, or their unit cube when the
        #: kernel is learned
        self.kernel_inputs = cube_coordinates(arms, self.box)
        self.covar_module = (learnable_covar_module(d) if learned else covar_module).to(
            arms
        )
        self.learn_noise = learned and noise is None
        if noise is None:
            noise = INITIAL_LEARNED_NOISE if learned else 1.0
        self.noise = float(noise)
        self.standardize = standardize
        #: The Yeo-Johnson power of the targets (1: the rewards standardized;
        #: fitted at each refit; :meth:`targets_of`)
        self.power = 1.0
        self.num_initial = num_initial
        self._design_asked = 0
        empty = torch.empty(0, dtype=torch.long, device=arms.device)
        self.pending = empty
        self.failed = empty.clone()
        #: CPU seconds spent in refits (fits and the posterior's recomputation)
        self.refit_seconds = 0.0

    def __getstate__(self) -> dict[str, Any]:
        r"""The attributes for pickle and deepcopy, without the lock."""
        state = self.__dict__.copy()
        del state["_call_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        r"""Restore pickled attributes, with a fresh lock."""
        self.__dict__.update(state)
        self._call_lock = threading.RLock()

    def _fingerprint(self, **options: Any) -> dict[str, Any]:
        r"""What a saved state must match: the arms, the fixed kernel and
        ``lambda``, ``standardize``, ``num_initial`` and the subclass's
        ``options``."""
        return problem_fingerprint(
            self._given_arms,
            self.covar_module,
            learned=self.refits is not None,
            noise=None if self.learn_noise else self.noise,
            standardize=self.standardize,
            num_initial=self.num_initial,
            **options,
        )

    def _space_filling_design(self, generator: torch.Generator) -> Tensor:
        r"""``num_initial`` arm indices nearest to scrambled Sobol points of the
        arms' unit cube, drawn from ``generator``."""
        return space_filling_arms(
            unit_cube(self._given_arms), self.num_initial, generator
        )

    @property
    def num_observations(self) -> int:
        r"""The number ``t`` of told outcomes."""
        return self.observed.shape[0]

    def best(self) -> BestArm:
        r"""The told arm with the largest reward, its point and that reward.

        The loops maximize: tell ``-loss`` to minimize a loss. Of equal rewards the
        one told first wins. On a noisy objective the largest told reward is
        optimistic (the best of ``t`` noisy draws): evaluate the point again to
        confirm it.

        Example:
            >>> index, point, reward = loop.best()
        """
        if self.num_observations == 0:
            raise ValueError(
                "No reward has been told yet: best() needs one tell(indices, rewards)."
            )
        position = int(self.rewards.argmax())
        index = int(self.observed[position])
        return BestArm(index, self.arms[index].clone(), float(self.rewards[position]))

    # ------------------------------------------------------------------ ask side
    def _repeat_threshold(self) -> float:
        r"""The repeat rule's ``delta`` now (``min_repeat_reduction``, resolved by
        :func:`~botorch_sketch.generation.repeats.repeat_threshold` for the
        current kernel and ``lambda``)."""
        option, learned = self.options.min_repeat_reduction, self.refits is not None
        return repeat_threshold(
            option,
            learned_kernel=learned,
            learned_noise=self.noise if self.learn_noise else None,
            repeats_agree=option is None
            and learned
            and repeats_agree(self.observed, self.rewards),
        )

    def _checked_ask(self, max_arms: int | None, wait: bool, default: int) -> int:
        r"""The number of arms an ``ask(max_arms, wait=wait)`` may return
        (``default`` when ``max_arms`` is None)."""
        limit = default if max_arms is None else check_int(max_arms, "max_arms", 1)
        check_bool(wait, "wait")
        return limit

    @property
    def design_left(self) -> int:
        r"""The arms of the initial design not asked yet (asked first)."""
        return self._design.numel() - self._design_asked

    def _design_left(self, limit: int) -> Tensor:
        r"""The next at most ``limit`` arms of the initial design (not marked
        asked)."""
        return self._design[self._design_asked : self._design_asked + limit]

    @one_call_at_a_time
    @atomic
    def ask_arms(self, indices: Tensor) -> None:
        r"""Mark user-chosen arms asked, as if ``ask`` had returned them (e.g.
        configurations to evaluate first): they join :attr:`pending`.

        Args:
            indices: ``b`` arm indices (LongTensor, repeats allowed).
        """
        check_indices(indices, "indices", self.arms.shape[0])
        self._hold(indices.to(self.arms.device))

    def _hold(self, indices: Tensor) -> None:
        r"""Add ``b`` asked arm indices to :attr:`pending`."""
        self.pending = torch.cat([self.pending, indices])

    # ----------------------------------------------------------------- tell side
    def _checked_outcomes(
        self, indices: Tensor, rewards: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""Check a ``tell``: ``indices`` (``b``) a non-empty sub-multiset of
        :attr:`pending`, ``rewards`` ``b`` (or ``b x 1``) finite numbers.

        Returns:
            The ``p`` mask of the pending arms that stay, the ``b`` indices on the
            arms' device and the ``b`` rewards in the arms' dtype.
        """
        keep = staying_pending(self.pending, indices, self.arms.shape[0])
        fix = "report an evaluation that gave no number with fail(indices)"
        rewards = check_rewards(rewards, indices.shape[0], fix=fix).to(self.arms)
        return keep, indices.to(self.arms.device), rewards

    @one_call_at_a_time
    @atomic
    def fail(self, indices: Tensor) -> None:
        r"""Record pending arms whose evaluation failed: they leave :attr:`pending`
        for :attr:`failed` and never enter the posterior.

        Args:
            indices: ``b`` pending arm indices (LongTensor).
        """
        keep = staying_pending(self.pending, indices, self.arms.shape[0])
        self.failed = torch.cat([self.failed, indices.to(self.failed.device)])
        self._drop_pending(keep)

    def _drop_pending(self, keep: Tensor) -> None:
        r"""Keep the pending arms of the ``p`` mask ``keep``."""
        self.pending = self.pending[keep]

    # --------------------------------------------------------------- self-tuning
    def targets_of(self, rewards: Tensor) -> Tensor:
        r"""The ``t`` targets the posterior is conditioned on for the ``t``
        rewards so far: when the loop standardizes, the rewards standardized and
        warped with the fitted :attr:`power`
        (:func:`~botorch_sketch.generation.reward_warping.warped_rewards`), else
        the rewards themselves."""
        return warped_rewards(rewards, self.power) if self.standardize else rewards

    def targets_at(self, values: Tensor) -> Tensor:
        r"""The targets of reward ``values`` (``v``) under the map
        :meth:`targets_of` applies to the rewards so far: a reward level (a
        constraint's bound, say) in the units of the posterior's values."""
        if not self.standardize:
            return values
        return warped_values(self.rewards, self.power, values)

    def _refit_due(self, num_observations: int) -> bool:
        r"""Whether a learned kernel is due for a refit at ``num_observations``."""
        return self.refits is not None and self.refits.due(num_observations)

    def _refit(self, observed: Tensor, rewards: Tensor, inducing: Tensor) -> None:
        r"""Refit the targets' power (if the loop standardizes,
        :func:`~botorch_sketch.generation.reward_warping.fit_power`), then MAP
        refit of the learned kernel (and ``lambda``) on the collapsed bound with
        the new targets, warm-started and, when :func:`restart_due`, restarted
        at :meth:`_initial_hyperparameters`; then :meth:`_use_hyperparameters` (with
        the old kernel and ``lambda`` if the fit failed). The CPU time goes to
        :attr:`refit_seconds`.

        Args:
            observed: ``t`` observed arm indices.
            rewards: Their ``t`` rewards.
            inducing: ``m`` arm indices of the inducing points.
        """
        start = time.process_time()
        restart = restart_due(self.refits.last, observed.shape[0])
        self.refits.done(observed.shape[0])
        if self.standardize:
            self.power = fit_power(rewards)
        cap = self.options.fit_inducing
        fitted = fit_dtc_hyperparameters(
            self.covar_module,
            self.noise,
            self.kernel_inputs[observed],
            self.targets_of(rewards),
            self.kernel_inputs[inducing],
            learn_noise=self.learn_noise,
            max_inducing=self.default_fit_inducing if cap is None else cap,
            max_iterations=REFIT_MAX_ITERATIONS,
            restart=self._initial_hyperparameters() if restart else None,
        )
        self._use_hyperparameters(*(fitted or (self.covar_module, self.noise)))
        self.refit_seconds += time.process_time() - start

    def _initial_hyperparameters(self) -> tuple[Kernel, float]:
        r"""The learned kernel and ``lambda`` a loop starts with, a refit's
        second start (:func:`fit_dtc_hyperparameters`)."""
        noise = INITIAL_LEARNED_NOISE if self.learn_noise else self.noise
        return learnable_covar_module(self.arms.shape[-1]).to(self.arms), noise

    def _use_hyperparameters(self, kernel: Kernel, noise: float) -> None:
        r"""Adopt a refitted kernel and ``lambda`` and recompute the posterior
        (with the targets of the current :attr:`power`)."""
        raise NotImplementedError

    def _checked_new_arms(self, points: Tensor) -> tuple[Tensor, Tensor]:
        r"""``n x d`` arms to add (checked against the arms, and their box when the
        kernel is learned) and their ``n x d`` kernel inputs."""
        points = checked_new_arms(points, self.arms, self.box)
        return points, cube_coordinates(points, self.box)

    # ------------------------------------------------------------- saved state
    @one_call_at_a_time
    def state_dict(self) -> dict[str, Any]:
        r"""The shared part of the saved state (:data:`STATE_KEYS`)."""
        return {
            "observed": self.observed.clone(),
            "rewards": self.rewards.clone(),
            "pending": self.pending.clone(),
            "failed": self.failed.clone(),
            "generator": self.generator.get_state(),
            "fingerprint": dict(self.fingerprint),
            "design_asked": self._design_asked,
            "hyperparameters": None
            if self.refits is None
            else hyperparameter_state(self.covar_module, self.noise, self.refits.last),
            "added_arms": self.arms[self._given_arms.shape[0] :].clone(),
            "options": options_record(self.options),
        }

    def _checked_saved(self, state: dict[str, Any], keys: tuple[str, ...]) -> SavedLoop:
        r"""Validate the shared part of a saved ``state`` holding ``keys`` (its
        fingerprint must equal the loop's); return copies on the loop's device.
        Changes nothing."""
        check_saved_state(state, keys)
        check_fingerprint(state["fingerprint"], self.fingerprint)
        check_saved_options(state["options"], options_record(self.options))
        given = self._given_arms
        added = checked_new_arms(
            state["added_arms"], given, self.box, "state['added_arms']", True
        )
        arms = torch.cat([given, added])
        num_arms = arms.shape[0]
        observed = check_indices(state["observed"], "state['observed']", num_arms)
        pending = check_indices(state["pending"], "state['pending']", num_arms)
        failed = check_indices(state["failed"], "state['failed']", num_arms)
        rewards = check_rewards(state["rewards"], observed.shape[0], "state['rewards']")
        check_generator_state(state["generator"], "state['generator']")
        design_asked = check_int(
            state["design_asked"], "state['design_asked']", 0, self._design.numel()
        )
        kernel, noise, last_fit = checked_hyperparameters(
            state["hyperparameters"],
            self.covar_module,
            self.noise,
            learned=self.refits is not None,
            has_data=observed.numel() > 0,
        )
        device = given.device
        return SavedLoop(
            arms=arms,
            observed=observed.clone().to(device),
            rewards=rewards.clone().to(given),
            pending=pending.clone().to(device),
            failed=failed.clone().to(device),
            design_asked=design_asked,
            kernel=kernel,
            noise=noise,
            last_fit=last_fit,
        )

    def _restore(self, saved: SavedLoop) -> None:
        r"""Adopt the shared bookkeeping of ``saved``: the pending and failed arms,
        the design arms asked, the hyperparameters and the refit schedule."""
        self.pending, self.failed = saved.pending, saved.failed
        self._design_asked = saved.design_asked
        self.covar_module, self.noise = saved.kernel, saved.noise
        if self.refits is not None:
            self.refits.last = saved.last_fit
        # the power fitted at the last refit, on the rewards told by then
        fitted = self.standardize and saved.last_fit is not None
        self.power = fit_power(saved.rewards[: saved.last_fit]) if fitted else 1.0
