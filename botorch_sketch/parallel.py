r"""Run an ask/tell optimizer on a finite arm set with evaluations in parallel.

:func:`run_parallel` keeps up to ``num_workers`` evaluations of an objective in flight
on an execution engine, hands each result to the optimizer as soon as it arrives and
asks for new arms as workers free up:

- any :class:`concurrent.futures.Executor` (threads, processes):
  :class:`ExecutorEngine`;
- a Dask ``distributed.Client``: :class:`DaskEngine`;
- Ray remote tasks: :class:`RayEngine`;
- a simulated clock (evaluation times given, nothing sleeps; the cluster
  benchmark): :class:`SimulatedEngine`.

The engines differ only in how they submit a call, wait for the first results (with
a timeout) and cancel; the loop itself (:func:`run_parallel`) is shared. The
optimizer is anything with the
:class:`~botorch_sketch.generation.ask_tell.AskTellOptimizer` interface, e.g.
:class:`~botorch_sketch.generation.bbkb_loop.BBKB` (asynchronous batches: ``ask`` may
return no arm while the batch rule waits for outcomes; build it with
``**asynchronous_options(num_workers)`` for the workers at hand) or
:class:`~botorch_sketch.generation.sgpts_loop.SGPTS`.

A worker exception (``SystemExit`` and ``KeyboardInterrupt`` raised by the objective
included), a result that is not a finite real number (a string or a bool is not), or
no result within
``evaluation_timeout`` seconds marks the arm as failed (``optimizer.fail``) and is
logged with the arm; the run goes on. ``total_timeout`` ends the run with what has
been collected. With a ``checkpoint`` file the optimizer's state and the evaluation
log are saved after every round of results, when the run times out and when it is
interrupted (``KeyboardInterrupt`` or any error); a later call with the same file
resumes, re-submitting the arms that were still pending. A Ctrl-C (SIGINT) that
arrives while the driver updates the optimizer, the log or the file takes effect once
the update is complete, so the saved state is never half-updated.

Ray and Dask are optional (``pip install -e ".[distributed]"`` from the repository
root) and are imported only when their engine is built.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import heapq
import math
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from botorch_sketch.generation.ask_tell import AskTellOptimizer
from botorch_sketch.utils.extras import require
from botorch_sketch.utils.validation import (
    check_allocation,
    check_at_least,
    check_indices,
    check_int,
    check_positive,
)

__all__ = [
    "DaskEngine",
    "Engine",
    "EvaluationError",
    "EvaluationInterrupted",
    "EvaluationLog",
    "ExecutorEngine",
    "RayEngine",
    "SimulatedEngine",
    "as_engine",
    "run_parallel",
]

#: Version of the checkpoint layout written by :func:`run_parallel`.
CHECKPOINT_VERSION = 1


class Engine(ABC):
    r"""Where evaluations run: submit a call, wait for results, cancel."""

    @abstractmethod
    def submit(self, objective: Callable[[Tensor], Any], x: Tensor) -> Hashable:
        r"""Start ``objective(x)``; return a handle (a future)."""

    @abstractmethod
    def wait(
        self, handles: list[Hashable], timeout: float | None = None
    ) -> list[Hashable]:
        r"""Block until at least one of ``handles`` is done, or ``timeout`` seconds
        have passed (None: no limit); return all done ones (possibly none after a
        timeout)."""

    @abstractmethod
    def result(self, handle: Hashable) -> Any:
        r"""The value of a done handle; raises the worker's exception."""

    @abstractmethod
    def cancel(self, handles: list[Hashable]) -> None:
        r"""Cancel evaluations that are no longer wanted (best effort)."""

    def check_objective(self, objective: Callable[[Tensor], Any]) -> None:  # noqa: B027
        r"""Raise a TypeError naming ``objective`` if the engine cannot send it to
        its workers; :func:`run_parallel` calls it before the first evaluation.
        By default nothing is checked (the objective stays in this process)."""


class ExecutorEngine(Engine):
    r"""Evaluations on a :class:`concurrent.futures.Executor`."""

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        if not isinstance(executor, concurrent.futures.Executor):
            raise TypeError(
                "`executor` must be a concurrent.futures.Executor, got "
                f"{type(executor).__name__}."
            )
        self.executor = executor

    def submit(self, objective: Callable[[Tensor], Any], x: Tensor) -> Hashable:
        return self.executor.submit(objective, x)

    def wait(
        self, handles: list[Hashable], timeout: float | None = None
    ) -> list[Hashable]:
        done, _ = concurrent.futures.wait(
            handles, timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        return list(done)

    def result(self, handle: Hashable) -> Any:
        return handle.result()

    def cancel(self, handles: list[Hashable]) -> None:
        for handle in handles:
            handle.cancel()

    def check_objective(self, objective: Callable[[Tensor], Any]) -> None:
        r"""A process pool sends the objective with :func:`pickle.dumps`."""
        if isinstance(self.executor, concurrent.futures.ProcessPoolExecutor):
            _check_picklable(objective, pickle.dumps, "a ProcessPoolExecutor")


class DaskEngine(Engine):
    r"""Evaluations as tasks of a Dask ``distributed.Client`` (``pure=False``: a
    repeated arm is evaluated again)."""

    def __init__(self, client: Any) -> None:
        self.distributed = require("distributed", "distributed")
        if not isinstance(client, self.distributed.Client):
            raise TypeError(
                f"`client` must be a distributed.Client, got {type(client).__name__}."
            )
        self.client = client

    def submit(self, objective: Callable[[Tensor], Any], x: Tensor) -> Hashable:
        return self.client.submit(objective, x, pure=False)

    def wait(
        self, handles: list[Hashable], timeout: float | None = None
    ) -> list[Hashable]:
        try:
            done, _ = self.distributed.wait(
                handles, timeout=timeout, return_when="FIRST_COMPLETED"
            )
        except TimeoutError:  # distributed.TimeoutError
            return [handle for handle in handles if handle.done()]
        return list(done)

    def result(self, handle: Hashable) -> Any:
        return handle.result()

    def cancel(self, handles: list[Hashable]) -> None:
        if handles:
            self.client.cancel(handles)

    def check_objective(self, objective: Callable[[Tensor], Any]) -> None:
        dumps = self.distributed.protocol.pickle.dumps
        _check_picklable(objective, dumps, "Dask")


class RayEngine(Engine):
    r"""Evaluations as Ray remote tasks (Ray is initialized on first use if it is
    not yet; call ``ray.init`` first to choose the cluster).

    Args:
        **remote_options: Options of each task (``ray.remote``), e.g.
            ``num_cpus=1``, ``num_gpus=1``, ``max_retries=0``.
    """

    def __init__(self, **remote_options: Any) -> None:
        self.ray = require("ray", "distributed")
        self.task = self.ray.remote(_call)
        if remote_options:
            self.task = self.task.options(**remote_options)

    def submit(self, objective: Callable[[Tensor], Any], x: Tensor) -> Hashable:
        return self.task.remote(objective, x)

    def wait(
        self, handles: list[Hashable], timeout: float | None = None
    ) -> list[Hashable]:
        self.ray.wait(handles, num_returns=1, timeout=timeout)
        done, _ = self.ray.wait(handles, num_returns=len(handles), timeout=0)
        return done

    def result(self, handle: Hashable) -> Any:
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayTaskError as error:
            if error.cause is None:
                raise
            raise error.cause from error  # the objective's own exception

    def cancel(self, handles: list[Hashable]) -> None:
        for handle in handles:
            self.ray.cancel(handle)

    def check_objective(self, objective: Callable[[Tensor], Any]) -> None:
        _check_picklable(objective, self.ray.cloudpickle.dumps, "Ray")


def _check_picklable(
    objective: Callable[[Tensor], Any], dumps: Callable[[Any], bytes], engine: str
) -> None:
    r"""Raise a TypeError naming ``objective`` unless ``dumps`` (the engine's
    serializer) can pickle it."""
    try:
        dumps(objective)
    except Exception as error:  # pickling raises what the object's hooks raise
        raise TypeError(
            f"`objective` cannot be pickled, so {engine} cannot send it to its "
            f"workers (define it at module level, without locks, open files or "
            f"other unpicklable state): {type(error).__name__}: {error}"
        ) from error


def _call(objective: Callable[[Tensor], Any], x: Tensor) -> Any:
    r"""``objective(x)``: Ray's task for any callable (functions, partials, objects)."""
    return objective(x)


def _bools_or_complex(values: Any) -> bool:
    r"""Whether a tensor or a list or tuple holds bools or complex numbers (which
    a conversion to float64 would silently take as numbers)."""
    if isinstance(values, Tensor):
        return values.dtype == torch.bool or values.is_complex()
    if isinstance(values, (list, tuple)):
        return any(isinstance(v, (bool, complex)) for v in values)
    return False


class SimulatedEngine(Engine):
    r"""Evaluations on a simulated clock: nothing sleeps and nothing runs beside the
    driver. The ``k``-th submission is evaluated at once (``objective(x)`` in the
    driver, an error kept for :meth:`result`) and completes ``durations[k]``
    simulated seconds after the clock's time at its submission; :meth:`wait` moves the
    clock to the earliest completion among its handles and returns that one
    evaluation alone (ties: the earlier submission first; evaluations not waited for
    that end before it complete on the way; handles already done are returned
    without moving the clock), so :func:`run_parallel` tells one outcome per round
    and asks again before the next. Timeouts are real seconds and never reached:
    the engine ignores them.

    Attributes:
        durations: The evaluation times (simulated seconds), in submission order.
        now: The simulated time of the last completion (0 before the first).
        busy_time: Worker-time (simulated seconds) spent on evaluations up to
            ``now``; a cancelled evaluation stops counting at the time it is
            cancelled.

    Args:
        durations: ``n`` finite non-negative evaluation times (a sequence or a 1-d
            tensor); at most ``n`` submissions.

    Example:
        >>> engine = SimulatedEngine.lognormal(100, generator=torch.Generator())
        >>> log = run_parallel(optimizer, objective, engine, num_workers=10,
        ...                    budget=100)
        >>> engine.now  # the simulated makespan
    """

    def __init__(self, durations: Any) -> None:
        message = "`durations` must be a sequence of real numbers or a 1-d tensor"
        if _bools_or_complex(durations):
            raise TypeError(f"{message}, got bools or complex numbers.")
        try:
            values = torch.as_tensor(durations, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"{message}, got {type(durations).__name__}.") from error
        if values.dim() != 1:
            raise ValueError(
                f"`durations` must be 1-dimensional, got shape {tuple(values.shape)}."
            )
        if not (values.isfinite().all() and (values >= 0).all()):
            raise ValueError("`durations` must be finite and >= 0.")
        self.durations: list[float] = values.tolist()
        self.now = 0.0
        self.busy_time = 0.0
        self._queue: list[tuple[float, int, _SimulatedRun]] = []  # a heap
        self._running = 0
        self._submitted = 0
        self._done: set[_SimulatedRun] = set()

    @classmethod
    def lognormal(
        cls,
        count: int,
        mean: float = 1.0,
        sigma: float = 1.0,
        *,
        generator: torch.Generator | None = None,
    ) -> SimulatedEngine:
        r"""``count`` log-normal evaluation times with mean ``mean`` and
        log-standard deviation ``sigma`` (0: all equal ``mean``), drawn at once with
        ``torch.randn(count, generator=generator, dtype=torch.float64)``."""
        check_int(count, "count", 1)
        mean = check_positive(mean, "mean")
        sigma = check_at_least(sigma, "sigma", 0.0)
        check_allocation(count, "`count`")
        log_durations = torch.randn(count, generator=generator, dtype=torch.float64)
        # sigma * sigma: inf past 1e154, where sigma**2 raises OverflowError
        durations = mean * torch.exp(sigma * log_durations - sigma * sigma / 2)
        if not durations.isfinite().all():
            raise ValueError(
                f"`mean` {mean} and `sigma` {sigma} give non-finite durations."
            )
        return cls(durations)

    @property
    def num_submitted(self) -> int:
        r"""Submissions so far (the next one takes ``durations[num_submitted]``)."""
        return self._submitted

    def submit(self, objective: Callable[[Tensor], Any], x: Tensor) -> Hashable:
        order = self._submitted
        if order >= len(self.durations):
            raise RuntimeError(
                f"SimulatedEngine has {len(self.durations)} `durations`: no time "
                f"for submission {order + 1}."
            )
        run = _SimulatedRun(order, self.now, self.now + self.durations[order])
        try:
            run.value = objective(x)
        except Exception as error:  # reported by result(), as real engines do
            run.error = error
        self._submitted += 1
        heapq.heappush(self._queue, (run.end, order, run))
        self._running += 1
        return run

    def wait(
        self, handles: list[Hashable], timeout: float | None = None
    ) -> list[Hashable]:
        wanted = set(handles)
        done = wanted & self._done
        if done:
            return sorted(done, key=lambda run: run.order)
        if not any(not (run.done or run.cancelled) for run in wanted):
            return []  # nothing to wait for: the clock stays
        while True:  # evaluations ending first complete on the way
            end, _, run = heapq.heappop(self._queue)
            if run.cancelled:
                continue
            self.busy_time += self._running * (end - self.now)
            self.now = end
            self._running -= 1
            run.done = True
            self._done.add(run)
            if run in wanted:
                return [run]

    def result(self, handle: Hashable) -> Any:
        if not handle.done:
            raise RuntimeError("The simulated evaluation has not completed yet.")
        if handle.error is not None:
            raise handle.error
        return handle.value

    def cancel(self, handles: list[Hashable]) -> None:
        for run in handles:
            if not (run.done or run.cancelled):
                run.cancelled = True  # its worker is free from now on
                self._running -= 1


class _SimulatedRun:
    r"""A :class:`SimulatedEngine` evaluation: its submission order, simulated
    start and end, and its outcome."""

    __slots__ = ("cancelled", "done", "end", "error", "order", "start", "value")

    def __init__(self, order: int, start: float, end: float) -> None:
        self.order, self.start, self.end = order, start, end
        self.done = self.cancelled = False
        self.value: Any = None
        self.error: Exception | None = None


class EvaluationInterrupted(Exception):
    r"""The objective raised ``SystemExit`` or ``KeyboardInterrupt`` on a worker: the
    evaluation fails, the worker and the run go on."""


def _evaluate(objective: Callable[[Tensor], Any], x: Tensor) -> Any:
    r"""``objective(x)`` on a worker, with ``SystemExit`` and ``KeyboardInterrupt``
    turned into :class:`EvaluationInterrupted` (an ``Exception``: executors, Dask and
    Ray report it as the evaluation's error instead of ending the worker or the
    driver)."""
    try:
        return objective(x)
    except (SystemExit, KeyboardInterrupt) as error:
        raise EvaluationInterrupted(
            f"the objective raised {type(error).__name__}({error})"
        ) from error


def as_engine(engine: Any) -> Engine:
    r"""An :class:`Engine` for ``engine``: an Engine, a concurrent.futures Executor,
    a Dask ``distributed.Client`` or the string ``"ray"``."""
    if isinstance(engine, Engine):
        return engine
    if isinstance(engine, concurrent.futures.Executor):
        return ExecutorEngine(engine)
    if isinstance(engine, str) and engine == "ray":
        return RayEngine()
    if type(engine).__module__.split(".")[0] == "distributed":
        return DaskEngine(engine)
    raise TypeError(
        "`engine` must be an Engine, a concurrent.futures.Executor, a "
        f'distributed.Client or "ray", got {type(engine).__name__}.'
    )


@dataclass
class EvaluationError:
    r"""A failed evaluation: the arm index, the arm (a list of ``d`` floats), the
    error as ``"Type: message"`` and its formatted traceback."""

    index: int
    arm: list[float]
    error: str
    traceback: str


@dataclass
class EvaluationLog:
    r"""What :func:`run_parallel` recorded, in completion order.

    Attributes:
        indices: Told arm indices (``n``).
        rewards: Their rewards (``n``; for an optimizer of ``c > 1`` outcomes,
            e.g. a :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`,
            ``n`` lists of ``c``).
        failed: Failed arm indices, with one :class:`EvaluationError` each in
            ``errors``.
        num_asked: Arms the optimizer returned from ``ask`` over the whole run,
            with those pending when it started (told + failed + still pending).
    """

    indices: list[int] = field(default_factory=list)
    rewards: list[float] | list[list[float]] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[EvaluationError] = field(default_factory=list)
    num_asked: int = 0

    @property
    def num_completed(self) -> int:
        r"""Told plus failed evaluations."""
        return len(self.indices) + len(self.failed)

    def best(self) -> tuple[int, float]:
        r"""The told arm with the largest reward and that reward (one outcome
        only: with several there is no single best)."""
        if not self.rewards:
            raise ValueError("No evaluation has succeeded yet.")
        if isinstance(self.rewards[0], list):
            raise ValueError(
                "The rewards have several outcomes (objectives and constraints): "
                "no single best; read the optimizer's feasible outcomes instead."
            )
        position = max(range(len(self.rewards)), key=self.rewards.__getitem__)
        return self.indices[position], self.rewards[position]

    def to_dict(self) -> dict[str, Any]:
        r"""Plain lists, numbers and strings (loadable with ``weights_only=True``)."""
        return {
            "indices": list(self.indices),
            "rewards": list(self.rewards),
            "failed": list(self.failed),
            "errors": [vars(error).copy() for error in self.errors],
            "num_asked": self.num_asked,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> EvaluationLog:
        return cls(
            indices=list(state["indices"]),
            rewards=list(state["rewards"]),
            failed=list(state["failed"]),
            errors=[EvaluationError(**error) for error in state["errors"]],
            num_asked=int(state["num_asked"]),
        )


def save_checkpoint(
    path: str | os.PathLike, optimizer: AskTellOptimizer, log: EvaluationLog
) -> None:
    r"""Write the optimizer's state and the log to ``path`` atomically."""
    path = Path(path)
    temporary = _temporary_path(path)
    torch.save(
        {
            "version": CHECKPOINT_VERSION,
            "optimizer": optimizer.state_dict(),
            "log": log.to_dict(),
        },
        temporary,
    )
    os.replace(temporary, path)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], EvaluationLog]:
    r"""The optimizer state and the log saved by :func:`run_parallel` at ``path``;
    a ValueError naming the file if it cannot be read (truncated or corrupt)."""
    try:
        saved = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # torch.load's errors differ with the damage
        raise ValueError(
            f"`checkpoint` {path} is not a readable run_parallel checkpoint "
            f"(truncated or corrupt; delete it to start afresh): "
            f"{type(error).__name__}: {error}"
        ) from error
    if not isinstance(saved, dict) or saved.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"`checkpoint` {path} is not a run_parallel checkpoint.")
    return saved["optimizer"], EvaluationLog.from_dict(saved["log"])


def _check_checkpoint_writable(path: str | os.PathLike) -> None:
    r"""Raise a ValueError naming ``checkpoint`` unless :func:`save_checkpoint` can
    write ``path``: its folder exists and takes a file (written and removed here,
    under the temporary name that :func:`save_checkpoint` uses)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(
            f"`checkpoint` {path}: the folder {path.parent} does not exist."
        )
    if path.is_dir():
        raise ValueError(f"`checkpoint` {path} is a folder, not a file.")
    probe = _temporary_path(path)
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"`checkpoint` {path} cannot be written: {error}") from error


def _temporary_path(path: Path) -> Path:
    r"""Where :func:`save_checkpoint` writes ``path`` before moving it there."""
    return path.with_name(f".{path.name}.tmp")


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
        _check_checkpoint_writable(checkpoint)
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
    evaluate = functools.partial(_evaluate, objective)
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
