r"""Where :func:`~botorch_sketch.parallel.driver.run_parallel` runs evaluations: an
:class:`Engine` submits a call, waits for the first results (with a timeout) and
cancels. :class:`ExecutorEngine` (any ``concurrent.futures`` executor),
:class:`DaskEngine`, :class:`RayEngine` (imported only when built, from the
``distributed`` extra) and :class:`SimulatedEngine` (a simulated clock: evaluation
times given, nothing sleeps).
"""

from __future__ import annotations

import concurrent.futures
import heapq
import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.utils.extras import require
from botorch_sketch.utils.validation import (
    check_allocation,
    check_at_least,
    check_int,
    check_positive,
)


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


def evaluate_objective(objective: Callable[[Tensor], Any], x: Tensor) -> Any:
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
