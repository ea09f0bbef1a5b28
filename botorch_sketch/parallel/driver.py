r"""The evaluation driver :func:`run_parallel`: keeps up to ``num_workers``
evaluations in flight on an engine, tells each result to the optimizer as it arrives,
fails the evaluations that raise, return no finite number or time out, and saves a
checkpoint after every round of results.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from botorch_sketch.generation.ask_tell import AskTellOptimizer
from botorch_sketch.parallel.checkpoints import (
    check_checkpoint_writable,
    load_checkpoint,
    save_checkpoint,
)
from botorch_sketch.parallel.engines import Engine, as_engine, evaluate_objective
from botorch_sketch.parallel.log import EvaluationError, EvaluationLog
from botorch_sketch.utils.extras import require
from botorch_sketch.utils.validation import (
    check_indices,
    check_int,
)


def _check_timeout(value: object, name: str) -> float | None:
    r"""None, or a positive finite number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"`{name}` must be a number of seconds or None, got {type(value).__name__}."
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be positive and finite, got {value}.")
    return float(value)


def _as_outcomes(value: Any, count: int) -> float | list[float]:
    r"""The reward (``count = 1``, :func:`_as_reward`) or the ``count`` outcomes
    (a list of finite floats) of an objective's return value: for several, a
    sequence, tensor or array of ``count`` real numbers; a TypeError naming the
    count otherwise."""
    if count == 1:
        return _as_reward(value)
    values = value.tolist() if isinstance(value, (Tensor, np.ndarray)) else value
    if not isinstance(values, (list, tuple)) or len(values) != count:
        raise TypeError(
            f"the objective returned {value!r}: the optimizer takes {count} "
            "outcomes per arm (objectives, then constraints), a sequence of "
            f"{count} real numbers."
        )
    return [_as_reward(element) for element in values]


def _as_reward(value: Any) -> float:
    r"""A finite float from an objective's return value: a real number (an int or
    a float, Python's, NumPy's or a one-element tensor or array of them); a
    TypeError for anything else (a string, a bool, a complex number), a ValueError
    for NaN or infinity."""
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        value = _element(value)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"the objective returned {value!r} ({type(value).__name__}): a reward "
            "must be a real number (int, float, or a NumPy or torch scalar)."
        )
    reward = float(value)
    if not math.isfinite(reward):
        raise ValueError(f"the objective returned a non-finite value {reward}.")
    return reward


def _element(value: Tensor | np.ndarray | np.generic) -> Any:
    r"""The Python number of a one-element tensor or array (a NumPy scalar
    included); a TypeError naming the shape for more elements."""
    count = value.numel() if isinstance(value, Tensor) else value.size
    if count != 1:
        raise TypeError(
            f"the objective returned {type(value).__name__} of shape "
            f"{tuple(value.shape)}: a reward must be one number."
        )
    return value.item()


def _error(index: int, arm: Tensor, error: BaseException) -> EvaluationError:
    return EvaluationError(
        index=index,
        arm=arm.tolist(),
        error=f"{type(error).__name__}: {error}",
        traceback="".join(traceback.format_exception(error)),
    )


def _progress_bar(progress: bool | None, total: int, initial: int) -> Any:
    r"""A tqdm bar on stderr (``progress=None``: only when stderr is a terminal), or
    None when disabled."""
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    tqdm = require("tqdm", "distributed").tqdm
    return tqdm(total=total, initial=initial, file=sys.stderr, unit="eval")


def _checked_answer(optimizer: AskTellOptimizer, max_arms: int) -> Tensor:
    r"""``optimizer.ask(max_arms)``, checked: at most ``max_arms`` indices of its
    arms in a 1-d LongTensor (a negative index would otherwise pick an arm from the
    end)."""
    name = f"optimizer.ask({max_arms})"
    asked = check_indices(optimizer.ask(max_arms), name, optimizer.arms.shape[0])
    if asked.numel() > max_arms:
        raise RuntimeError(f"`{name}` returned {asked.numel()} arms.")
    return asked


def run_parallel(
    optimizer: AskTellOptimizer,
    objective: Callable[[Tensor], Any],
    engine: Any,
    *,
    num_workers: int,
    budget: int,
    checkpoint: str | os.PathLike | None = None,
    evaluation_timeout: float | None = None,
    total_timeout: float | None = None,
    progress: bool | None = None,
    callback: Callable[[EvaluationLog], None] | None = None,
) -> EvaluationLog:
    r"""Evaluate ``objective`` on the arms the optimizer asks for, ``num_workers`` at
    a time, until ``budget`` evaluations have completed.

    Each round: re-submit arms left pending by an interrupted run, ``ask`` for as
    many arms as there are free workers (the optimizer may return fewer, or none to
    wait for outcomes), submit them, wait for the first results and ``tell`` them (in
    submission order) or ``fail`` them. Evaluations in flight when the budget is
    reached are waited for, so a finished run has nothing pending (unless
    ``total_timeout`` ended it).

    Timeouts. An evaluation without a result ``evaluation_timeout`` seconds after its
    submission fails with a ``TimeoutError`` in ``log.errors``. It is cancelled as far
    as the engine can (Ray interrupts the task; Dask and ``concurrent.futures``
    cannot stop one that runs: its thread or process goes on until the objective
    returns, and the interpreter waits for it at exit) and abandoned: its late
    result is never read or told. An abandoned
    evaluation keeps its worker busy meanwhile, and later submissions may queue
    behind it within their own timeout: give a thread or process pool spare workers
    if evaluations can hang. ``total_timeout`` seconds after the call the run stops
    and returns the log: evaluations in flight are cancelled and abandoned the same
    way, their arms stay pending in the optimizer (and in the checkpoint, saved then),
    so a later call with the same ``checkpoint`` re-submits them; the log then has
    ``num_completed < budget``.

    Build BBKB for the ``W = num_workers`` workers:
    ``BBKB(arms, ..., **asynchronous_options(num_workers=W))``
    (:func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options`: a batch rule
    that admits ``W`` pending arms once they are explored, batches that end once 5%
    of their arms are done, a cap of ``W + ceil(W / 20)`` arms); with the loop's
    defaults (``C~ = 2``) most of ``W = 100`` workers wait (docs/benchmarks.md).

    Args:
        optimizer: An :class:`AskTellOptimizer` (e.g. ``BBKB``, ``SGPTS``).
        objective: ``objective(x) -> reward`` for one arm ``x = arms[i]`` (a ``d``
            tensor); the reward is maximized. It must be picklable for process,
            Dask and Ray engines (a module-level function), and runs inside
            this module's wrapper there (``botorch_sketch`` must be importable on
            the workers); that it pickles is checked before the first
            evaluation (:meth:`Engine.check_objective`). ``SystemExit`` or
            ``KeyboardInterrupt`` raised by it fails the evaluation
            (:class:`EvaluationInterrupted`); a Ctrl-C of the driver still stops
            the run. A reward is a finite real number (an int, a float, a NumPy or
            one-element torch number); anything else fails the evaluation. For
            an optimizer of ``c > 1`` outcomes (its ``num_outcomes``: a
            :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`
            of objectives and constraints), ``c`` of them: a sequence, tensor
            or array of ``c`` finite real numbers.
        engine: An :class:`Engine`, a ``concurrent.futures.Executor``, a Dask
            ``distributed.Client`` or ``"ray"``.
        num_workers: Evaluations kept in flight (``>= 1``).
        budget: Completed (told + failed) evaluations at which the run stops,
            counting those of a resumed run.
        checkpoint: File for the optimizer state and the log (``torch.save``). If it
            exists the run resumes from it (a ValueError naming it if it cannot be
            read); it is rewritten after every round of results and when the run
            is interrupted or times out. That it can be written is checked before
            the first evaluation.
        evaluation_timeout: Seconds an evaluation may take from its submission
            (None: no limit).
        total_timeout: Seconds this call may take (None: no limit).
        progress: tqdm bar on stderr (completed / pending / failed); None: only
            when stderr is a terminal.
        callback: Called with the log after every round of results.

    Returns:
        The :class:`EvaluationLog` of the whole run (a resumed one included).

    Raises:
        ValueError: ``checkpoint`` cannot be written, or exists and cannot be read.
        TypeError: A bad argument, or an ``objective`` the engine cannot pickle.
    """
    if not isinstance(optimizer, AskTellOptimizer):
        raise TypeError(
            "`optimizer` must have arms, pending, ask, tell, fail, state_dict and "
            f"load_state_dict, got {type(optimizer).__name__}."
        )
    if not callable(objective):
        raise TypeError("`objective` must be callable.")
    check_int(num_workers, "num_workers", 1)
    check_int(budget, "budget", 1)
    evaluation_timeout = _check_timeout(evaluation_timeout, "evaluation_timeout")
    total_timeout = _check_timeout(total_timeout, "total_timeout")
    if callback is not None and not callable(callback):
        raise TypeError("`callback` must be callable or None.")
    engine = as_engine(engine)
    engine.check_objective(objective)
    if checkpoint is not None:
        check_checkpoint_writable(checkpoint)
    stop = _deadline(total_timeout)
    # the arms pending at the start are the run's own (a checkpoint's log counts them)
    log = EvaluationLog(num_asked=optimizer.pending.numel())
    if checkpoint is not None and Path(checkpoint).exists():
        state, log = load_checkpoint(checkpoint)
        try:
            optimizer.load_state_dict(state)
        except (ValueError, TypeError) as error:
            raise type(error)(
                f"`checkpoint` {checkpoint} was saved by another optimizer (other "
                f"arms, options or outcomes): {error} Pass a new checkpoint file, or "
                "delete this one to start afresh."
            ) from error
    evaluate = functools.partial(evaluate_objective, objective)
    count = getattr(optimizer, "num_outcomes", 1)  # outcomes per arm
    # asked but not submitted: the arms a resumed run left pending come first
    queue: deque[int] = deque(optimizer.pending.tolist())
    in_flight: dict[Hashable, _Evaluation] = {}
    submitted = 0
    bar = _progress_bar(progress, budget, log.num_completed)
    try:
        while stop is None or time.monotonic() < stop:
            free = num_workers - len(in_flight) - len(queue)
            remaining = budget - log.num_completed - len(in_flight) - len(queue)
            if free > 0 and remaining > 0:
                with _interrupts_deferred():
                    asked = _checked_answer(optimizer, min(free, remaining))
                    log.num_asked += asked.numel()
                    queue.extend(asked.tolist())
            while queue and len(in_flight) < num_workers:
                index = queue.popleft()
                handle = engine.submit(evaluate, optimizer.arms[index])
                in_flight[handle] = _Evaluation(
                    submitted, index, _deadline(evaluation_timeout)
                )
                submitted += 1
            if not in_flight:
                if log.num_completed < budget:
                    raise RuntimeError(
                        "`optimizer.ask` returned no arm with nothing pending."
                    )
                return log
            deadlines = [stop]
            if evaluation_timeout is not None:
                deadlines.extend(e.deadline for e in in_flight.values())
            done = engine.wait(list(in_flight), _seconds_left(deadlines))
            expired = [] if evaluation_timeout is None else _expired(in_flight, done)
            if not done and not expired:
                continue
            with _interrupts_deferred():
                outcomes = _outcomes(
                    engine, in_flight, done, expired, evaluation_timeout, count
                )
                _record(optimizer, outcomes, log)
                if checkpoint is not None:
                    save_checkpoint(checkpoint, optimizer, log)
            engine.cancel(expired)  # best effort: abandoned, never read
            if bar is not None:
                bar.update(len(outcomes))
                bar.set_postfix(
                    pending=len(in_flight) + len(queue), failed=len(log.failed)
                )
            if callback is not None:
                callback(log)
        # total_timeout: the evaluations in flight are abandoned and stay pending
        engine.cancel(list(in_flight))
        if checkpoint is not None:
            with _interrupts_deferred():
                save_checkpoint(checkpoint, optimizer, log)
    except BaseException:
        engine.cancel(list(in_flight))
        if checkpoint is not None:
            with _interrupts_deferred():
                save_checkpoint(checkpoint, optimizer, log)
        raise
    finally:
        if bar is not None:
            bar.close()
    return log


@dataclass(frozen=True)
class _Evaluation:
    r"""An evaluation in flight: its submission order, its arm and the
    ``time.monotonic()`` time by which it must be done (None: no limit)."""

    order: int
    index: int
    deadline: float | None


def _deadline(timeout: float | None) -> float | None:
    r"""The ``time.monotonic()`` time ``timeout`` seconds from now (None: none)."""
    return None if timeout is None else time.monotonic() + timeout


def _seconds_left(deadlines: list[float | None]) -> float | None:
    r"""Seconds (``>= 0``) until the earliest of ``deadlines``; None if all are
    None."""
    times = [deadline for deadline in deadlines if deadline is not None]
    return max(0.0, min(times) - time.monotonic()) if times else None


def _expired(
    in_flight: dict[Hashable, _Evaluation], done: list[Hashable]
) -> list[Hashable]:
    r"""The handles in flight, not in ``done``, whose deadline has passed."""
    now, finished = time.monotonic(), set(done)
    return [
        handle
        for handle, evaluation in in_flight.items()
        if handle not in finished
        and evaluation.deadline is not None
        and evaluation.deadline <= now
    ]


def _outcomes(
    engine: Engine,
    in_flight: dict[Hashable, _Evaluation],
    done: list[Hashable],
    expired: list[Hashable],
    timeout: float | None,
    count: int,
) -> list[tuple[int, float | list[float] | Exception]]:
    r"""Remove ``done`` and ``expired`` (after ``timeout`` seconds) from
    ``in_flight``; return their arms with a finite reward (``count`` finite
    outcomes) or the error, in submission order."""
    outcomes = []
    for handle in sorted([*done, *expired], key=lambda h: in_flight[h].order):
        evaluation = in_flight.pop(handle)
        if handle in expired:
            outcome: float | list[float] | Exception = TimeoutError(
                f"no result within evaluation_timeout={timeout:g} s"
            )
        else:
            try:
                outcome = _as_outcomes(engine.result(handle), count)
            except Exception as error:  # a worker's error, reported with its arm
                outcome = error
        outcomes.append((evaluation.index, outcome))
    return outcomes


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    r"""Hold SIGINT (Ctrl-C) until the block is done, then deliver it to the handler
    it was meant for. Outside the main thread, where Python runs no signal handler,
    the block runs as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield  # None: a handler set outside Python, which could not be restored
        return
    received: list[tuple[int, Any]] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(*received[0])
        elif received and previous != signal.SIG_IGN:
            raise KeyboardInterrupt


def _record(
    optimizer: AskTellOptimizer,
    outcomes: list[tuple[int, float | list[float] | Exception]],
    log: EvaluationLog,
) -> None:
    r"""Tell the rewards of ``outcomes`` (arm index, reward or outcomes, or error)
    in one call and fail the arms with an error, logging it."""
    told = [
        (index, value) for index, value in outcomes if not isinstance(value, Exception)
    ]
    failed = [index for index, value in outcomes if isinstance(value, Exception)]
    for index, value in outcomes:
        if isinstance(value, Exception):
            log.errors.append(_error(index, optimizer.arms[index], value))
    device = optimizer.arms.device
    if told:
        indices, rewards = (list(column) for column in zip(*told, strict=True))
        optimizer.tell(
            torch.tensor(indices, dtype=torch.long, device=device),
            torch.tensor(rewards, dtype=optimizer.arms.dtype, device=device),
        )
        log.indices.extend(indices)
        log.rewards.extend(rewards)
    if failed:
        optimizer.fail(torch.tensor(failed, dtype=torch.long, device=device))
        log.failed.extend(failed)
