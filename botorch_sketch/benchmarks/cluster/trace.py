r"""A simulated run's record (:class:`ClusterTrace`), its derived curves and its
``.npz`` file."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from botorch_sketch.benchmarks.writers import checkpoints


@dataclass
class ClusterTrace:
    r"""One simulated run, per completed evaluation (arrays of length ``T``).

    Attributes:
        problem: Problem name.
        method: Method name.
        seed: Run seed.
        workers: ``W``.
        optimum: ``f*``.
        uniform_regret: Expected per-step regret of uniform sampling.
        times: Simulated completion times, increasing.
        values: Noiseless values of the completed arms.
        busy: Busy worker-time up to each completion.
        ask_seconds: CPU time of the process in ``ask`` (one thread: the
            optimizer's own compute, unaffected by other processes).
        tell_seconds: CPU time in ``tell``.
        setup_seconds: CPU time building the method.
        num_asks: ``ask`` calls; ``empty_asks`` of them returned no arm.
        empty_asks: See ``num_asks``.
        wall_seconds: Wall-clock time in ``ask`` and ``tell``.
        gflop: The floating-point work the method counted (NaN if it counts
            none).
        last_start: Simulated time ``t_s`` at which the ``T``-th evaluation
            started (NaN in traces saved before it was recorded).
        ask_p99_ms: 99th percentile of the wall-clock time of one ``ask`` (ms;
            NaN in traces saved before it was recorded).
        refit_seconds: CPU time the method spent refitting hyperparameters (NaN
            for fixed hyperparameters), included in ``ask_seconds`` and
            ``tell_seconds``.
    """

    problem: str
    method: str
    seed: int
    workers: int
    optimum: float
    uniform_regret: float
    times: np.ndarray
    values: np.ndarray
    busy: np.ndarray
    ask_seconds: float
    tell_seconds: float
    setup_seconds: float
    num_asks: int
    empty_asks: int
    wall_seconds: float = math.nan
    gflop: float = math.nan
    last_start: float = math.nan
    ask_p99_ms: float = math.nan
    refit_seconds: float = math.nan

    @property
    def horizon(self) -> int:
        return self.values.shape[0]

    @property
    def makespan(self) -> float:
        return float(self.times[-1])

    def regret_ratio(self) -> np.ndarray:
        r"""``R_k / (k r_unif)`` after each completion."""
        steps = np.arange(1, self.horizon + 1)
        return np.cumsum(self.optimum - self.values) / (steps * self.uniform_regret)

    def simple_regret(self) -> np.ndarray:
        return self.optimum - np.maximum.accumulate(self.values)

    def utilization(self) -> np.ndarray:
        r"""Busy worker-time so far over ``W`` times the elapsed simulated time."""
        return self.busy / (self.workers * self.times)

    def utilization_until_last_start(self) -> float:
        r"""Busy worker-time over ``W t_s`` up to ``t_s``, the time the ``T``-th
        evaluation started: the share of the workers a method kept busy while it had
        evaluations left to hand out (1 when all started at time 0)."""
        if self.last_start == 0:
            return 1.0
        # busy worker-time grows linearly between completions, and t_s is one
        busy = np.interp(self.last_start, np.r_[0.0, self.times], np.r_[0.0, self.busy])
        return float(busy / (self.workers * self.last_start))

    def summary(self) -> dict[str, float]:
        seconds = self.ask_seconds + self.tell_seconds
        return {
            "makespan": self.makespan,
            "utilization": float(self.utilization()[-1]),
            "utilization_until_last_start": self.utilization_until_last_start(),
            "regret_ratio": float(self.regret_ratio()[-1]),
            "simple_regret": float(self.simple_regret()[-1]),
            "ms_per_suggestion": 1e3 * seconds / self.horizon,
            "wall_ms_per_suggestion": 1e3 * self.wall_seconds / self.horizon,
            "mflop_per_suggestion": 1e3 * self.gflop / self.horizon,
            "gflop_per_cpu_second": self.gflop / seconds,
            "ask_seconds": self.ask_seconds,
            "tell_seconds": self.tell_seconds,
            "setup_seconds": self.setup_seconds,
            "num_asks": self.num_asks,
            "empty_asks": self.empty_asks,
            "ask_p99_ms": self.ask_p99_ms,
            "refit_share": self.refit_seconds / seconds,
        }

    def to_json(self, max_points: int = 500) -> dict[str, object]:
        r"""Summary and curves at up to ``max_points`` completions."""
        at = checkpoints(self.horizon, max_points) - 1
        return {
            "problem": self.problem,
            "method": self.method,
            "seed": self.seed,
            "workers": self.workers,
            "horizon": self.horizon,
            "summary": self.summary(),
            "curves": {
                "completed": (at + 1).tolist(),
                "time": self.times[at].tolist(),
                "regret_ratio": self.regret_ratio()[at].tolist(),
                "simple_regret": self.simple_regret()[at].tolist(),
                "utilization": self.utilization()[at].tolist(),
            },
        }


_SCALARS = (
    "problem",
    "method",
    "seed",
    "workers",
    "optimum",
    "uniform_regret",
    "ask_seconds",
    "tell_seconds",
    "setup_seconds",
    "num_asks",
    "empty_asks",
    "wall_seconds",
    "gflop",
    "last_start",
    "ask_p99_ms",
    "refit_seconds",
)


def save_trace(trace: ClusterTrace, folder: str | Path) -> Path:
    r"""Write the full trace to ``folder/<problem>_w<W>_<method>_s<seed>.npz``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{trace.problem}_w{trace.workers}_{trace.method}_s{trace.seed}.npz"
    scalars = {key: np.array(getattr(trace, key)) for key in _SCALARS}
    np.savez(
        folder / name,
        times=trace.times,
        values=trace.values,
        busy=trace.busy,
        **scalars,
    )
    return folder / name


def load_trace(path: str | Path) -> ClusterTrace:
    r"""Read a trace written by :func:`save_trace`."""
    with np.load(path) as data:
        scalars = {key: data[key].item() for key in _SCALARS if key in data}
        return ClusterTrace(
            times=data["times"], values=data["values"], busy=data["busy"], **scalars
        )
