r"""The in-flight driver: one method on one problem with ``k`` trials running.

:func:`run_trials` keeps up to ``k`` trials running: it asks while fewer than ``k``
run (a method may answer None, "wait"), then completes one running trial chosen in a
seeded random order, tells its loss, and refills, until ``budget`` trials are told.
Each trial is evaluated when it is asked; only the method's own calls are timed (its
construction, ``ask`` and ``tell``), never the objective.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from botorch_sketch.benchmarks.tuning.methods import Method
from botorch_sketch.utils.validation import check_int

Config = dict[str, Any]


@dataclass
class TrialLog:
    r"""What one run recorded, in completion order.

    Attributes:
        configs: The configuration of each told trial.
        losses: Its loss.
        ask_seconds: Time in ``ask`` for that trial (with the asks that answered
            "wait" just before it).
        tell_seconds: Time in ``tell`` for that trial.
        setup_seconds: Time building the method.
        max_running: The most trials that ran at once.
        stopped: Why the run ended before its budget ("" if it did not).
    """

    configs: list[Config] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    ask_seconds: list[float] = field(default_factory=list)
    tell_seconds: list[float] = field(default_factory=list)
    setup_seconds: float = 0.0
    max_running: int = 0
    stopped: str = ""

    @property
    def optimizer_seconds(self) -> float:
        return self.setup_seconds + sum(self.ask_seconds) + sum(self.tell_seconds)


def run_trials(
    make: Callable[[], Method],
    loss: Callable[[Config], float],
    budget: int,
    in_flight: int,
    seed: int,
    *,
    max_optimizer_seconds: float | None = None,
    on_told: Callable[[], None] | None = None,
) -> TrialLog:
    r"""Run ``budget`` trials of the method built by ``make`` (timed) on ``loss``.

    Args:
        make: Builds the method.
        loss: The objective, minimized.
        budget: Trials to tell.
        in_flight: At most this many trials run at once.
        seed: Seed of the completion order.
        max_optimizer_seconds: Stop early once the method's own time exceeds this
            (None: never); :attr:`TrialLog.stopped` says so.
        on_told: Called after each ``tell`` (progress).
    """
    check_int(budget, "budget", 1)
    check_int(in_flight, "in_flight", 1)
    order = np.random.default_rng(seed)
    log = TrialLog()
    start = time.perf_counter()
    method = make()
    log.setup_seconds = time.perf_counter() - start
    running: list[tuple[Any, Config, float, float]] = []
    waited = 0.0
    while len(log.losses) < budget:
        while len(running) < in_flight and len(log.losses) + len(running) < budget:
            start = time.perf_counter()
            proposal = method.ask()
            waited += time.perf_counter() - start
            if proposal is None:
                break
            key, config = proposal
            running.append((key, config, loss(config), waited))
            waited = 0.0
            log.max_running = max(log.max_running, len(running))
        if not running:
            raise RuntimeError("The method asked to wait with no trial running.")
        key, config, value, asked = running.pop(int(order.integers(len(running))))
        start = time.perf_counter()
        method.tell(key, value)
        log.tell_seconds.append(time.perf_counter() - start)
        log.configs.append(config)
        log.losses.append(value)
        log.ask_seconds.append(asked)
        if on_told is not None:
            on_told()
        if max_optimizer_seconds is not None and (
            log.optimizer_seconds > max_optimizer_seconds
        ):
            if len(log.losses) < budget:
                log.stopped = (
                    f"stopped after {len(log.losses)} trials: optimizer time "
                    f"above {max_optimizer_seconds:g} s"
                )
            break
    return log
