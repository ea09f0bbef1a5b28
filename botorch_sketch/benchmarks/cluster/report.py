r"""Figures of merit of simulated runs: a run's cluster quantities, curves on a time
grid, times to reach a reference, the per-method summary table.

A simulated run is a :class:`~botorch_sketch.benchmarks.results.RunTrace` (``policy``
the method's label, ``ask_seconds`` / ``tell_seconds`` the CPU time in ``ask`` /
``tell`` since the previous completion, each completion its own step) with
``diagnostics["simulated_time"]`` (completion times, increasing) and
``diagnostics["busy_worker_time"]`` (busy worker-time up to each completion), and in
``metadata``: ``workers`` (``W``); ``num_asks`` ``ask`` calls, ``empty_asks`` of them
with no arm; ``wall_seconds`` in ``ask`` and ``tell``; ``gflop``, the floating-point
work the method counted (NaN if it counts none); ``last_start``, the simulated time
``t_s`` the ``T``-th evaluation started; ``ask_p99_ms``, the 99th percentile of the
wall-clock time of one ``ask``; ``refit_seconds``, the CPU time spent refitting
hyperparameters (NaN for fixed ones), included in the ``ask`` and ``tell`` times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from botorch_sketch.benchmarks.cluster.methods import METHODS, base_method, label
from botorch_sketch.benchmarks.results import RunTrace
from botorch_sketch.benchmarks.writers import checkpoints


def times(trace: RunTrace) -> np.ndarray:
    r"""The simulated completion times."""
    return trace.diagnostics["simulated_time"]


def busy(trace: RunTrace) -> np.ndarray:
    r"""The busy worker-time up to each completion."""
    return trace.diagnostics["busy_worker_time"]


def workers(trace: RunTrace) -> int:
    r"""``W``."""
    return int(trace.metadata["workers"])


def makespan(trace: RunTrace) -> float:
    r"""The simulated time of the last completion."""
    return float(times(trace)[-1])


def utilization(trace: RunTrace) -> np.ndarray:
    r"""Busy worker-time so far over ``W`` times the elapsed simulated time."""
    return busy(trace) / (workers(trace) * times(trace))


def utilization_until_last_start(trace: RunTrace) -> float:
    r"""Busy worker-time over ``W t_s`` up to ``t_s``, the time the ``T``-th
    evaluation started: the share of the workers a method kept busy while it had
    evaluations left to hand out (1 when all started at time 0)."""
    last_start = trace.metadata.get("last_start", math.nan)
    if last_start == 0:
        return 1.0
    # busy worker-time grows linearly between completions, and t_s is one
    done = np.interp(last_start, np.r_[0.0, times(trace)], np.r_[0.0, busy(trace)])
    return float(done / (workers(trace) * last_start))


def run_summary(trace: RunTrace) -> dict[str, float]:
    r"""A simulated run's final values."""
    ask_seconds = float(trace.ask_seconds.sum())
    tell_seconds = float(trace.tell_seconds.sum())
    seconds = ask_seconds + tell_seconds
    meta = trace.metadata
    return {
        "makespan": makespan(trace),
        "utilization": float(utilization(trace)[-1]),
        "utilization_until_last_start": utilization_until_last_start(trace),
        "regret_ratio": float(trace.curve("regret_ratio")[-1]),
        "simple_regret": float(trace.curve("simple_regret")[-1]),
        "ms_per_suggestion": 1e3 * seconds / trace.horizon,
        "wall_ms_per_suggestion": 1e3 * meta["wall_seconds"] / trace.horizon,
        "mflop_per_suggestion": 1e3 * meta["gflop"] / trace.horizon,
        "gflop_per_cpu_second": meta["gflop"] / seconds,
        "ask_seconds": ask_seconds,
        "tell_seconds": tell_seconds,
        "setup_seconds": trace.setup_seconds,
        "num_asks": meta["num_asks"],
        "empty_asks": meta["empty_asks"],
        "ask_p99_ms": meta["ask_p99_ms"],
        "refit_share": meta["refit_seconds"] / seconds,
    }


def run_json(trace: RunTrace, max_points: int = 500) -> dict[str, object]:
    r"""A simulated run's summary and curves at up to ``max_points`` completions."""
    at = checkpoints(trace.horizon, max_points) - 1
    return {
        "problem": trace.problem,
        "method": trace.policy,
        "seed": trace.seed,
        "workers": workers(trace),
        "horizon": trace.horizon,
        "summary": run_summary(trace),
        "curves": {
            "completed": (at + 1).tolist(),
            "time": times(trace)[at].tolist(),
            "regret_ratio": trace.curve("regret_ratio")[at].tolist(),
            "simple_regret": trace.curve("simple_regret")[at].tolist(),
            "utilization": utilization(trace)[at].tolist(),
        },
    }


def value_on_grid(trace: RunTrace, curve: np.ndarray, grid: np.ndarray) -> np.ndarray:
    r"""The curve's value at the last completion ``<= grid`` (NaN before the first
    completion and after the makespan)."""
    grid = np.asarray(grid, dtype=float)
    at = np.searchsorted(times(trace), grid, side="right") - 1
    inside = (at >= 0) & (grid <= makespan(trace))
    return np.where(inside, curve[np.maximum(at, 0)], np.nan)


def busy_fraction(trace: RunTrace, grid: np.ndarray) -> np.ndarray:
    r"""Fraction of the ``W`` workers busy on average over ``(grid[i-1], grid[i]]``
    (from 0 for ``i = 0``); NaN past the makespan. Exact: evaluations start only at 0
    or at completions, so the busy worker-time grows linearly between completions."""
    grid = np.asarray(grid, dtype=float)
    done = np.interp(grid, np.r_[0.0, times(trace)], np.r_[0.0, busy(trace)])
    widths = np.diff(grid, prepend=0.0)
    fraction = np.diff(done, prepend=0.0) / (workers(trace) * widths)
    return np.where(grid <= makespan(trace), fraction, np.nan)


def time_to_reach(trace: RunTrace, target: float) -> float:
    r"""The first simulated time after which the regret ratio stays ``<= target``
    (inf if it ends above)."""
    ratio = trace.curve("regret_ratio")
    above = np.nonzero(ratio > target)[0]
    if above.size == 0:
        return float(times(trace)[0])
    if above[-1] == trace.horizon - 1:
        return math.inf
    return float(times(trace)[above[-1] + 1])


def time_to_find(trace: RunTrace, target: float) -> float:
    r"""The first simulated time at which the simple regret (the best value found
    so far) is ``<= target`` (inf if never)."""
    found = np.nonzero(trace.curve("simple_regret") <= target)[0]
    return float(times(trace)[found[0]]) if found.size else math.inf


def summarize(
    traces: Sequence[RunTrace], reference: str = "bbkb-sync"
) -> list[dict[str, object]]:
    r"""One row per ``(problem, workers, method)``: means over seeds of
    :func:`run_summary`, plus, against the reference method's run of the same
    seed, ``time_to_reference``: the time to reach (and stay at or below) its final
    regret ratio over its makespan, ``time_to_reference_best``: the time to find an
    arm as good as its best over its makespan, and ``reference_at_makespan``: its
    regret ratio when this method finished (its last value if it finished
    earlier)."""
    groups: dict[tuple[str, int, str], list[RunTrace]] = {}
    for trace in traces:
        key = (trace.problem, workers(trace), trace.policy)
        groups.setdefault(key, []).append(trace)
    rows = []
    for (problem, width, method), group in groups.items():
        row: dict[str, object] = {
            "problem": problem,
            "workers": width,
            "method": method,
            "seeds": len(group),
            "horizon": group[0].horizon,
        }
        finals = [run_summary(trace) for trace in group]
        for key in finals[0]:
            row[key] = float(np.mean([final[key] for final in finals]))
        fractions, best_fractions, at_makespan = [], [], []
        for trace in group:
            base = groups.get((problem, width, reference), [])
            base = [b for b in base if b.seed == trace.seed]
            if base:
                ratio = base[0].curve("regret_ratio")
                span = makespan(base[0])
                fractions.append(time_to_reach(trace, ratio[-1]) / span)
                best = base[0].curve("simple_regret")[-1]
                best_fractions.append(time_to_find(trace, best) / span)
                grid = np.array([min(makespan(trace), span)])
                at_makespan.append(value_on_grid(base[0], ratio, grid)[0])
        if fractions:
            row["time_to_reference"] = float(np.mean(fractions))
            row["time_to_reference_best"] = float(np.mean(best_fractions))
            row["reference_at_makespan"] = float(np.mean(at_makespan))
        rows.append(row)
    order = {name: k for k, name in enumerate(METHODS)}

    def key(row: dict[str, object]) -> tuple[object, ...]:
        rank = order.get(base_method(str(row["method"])), len(order))
        return row["problem"], row["workers"], rank, row["method"]

    return sorted(rows, key=key)


def format_markdown(rows: Sequence[dict[str, object]], reference: str) -> str:
    r"""A markdown table of :func:`summarize` rows."""
    head = (
        "| problem | W | method | T | seeds | makespan | utilization | utilization "
        "until the last start | regret ratio | "
        f"simple regret | time to {label(reference)}'s final regret "
        f"ratio (/ its makespan) | time to its best arm's value (/ its makespan) | "
        f"{label(reference)}'s regret ratio at this "
        "makespan | optimizer CPU ms / suggestion (wall) | counted MFLOP / "
        "suggestion (GFLOP per CPU second) | empty asks |"
    )
    lines = [head, "|" + "---|" * 16]
    for row in rows:
        reach = row.get("time_to_reference", math.nan)
        find = row.get("time_to_reference_best", math.nan)
        base = row.get("reference_at_makespan", math.nan)
        lines.append(
            f"| {row['problem']} | {row['workers']} | "
            f"{label(row['method'])} | {row['horizon']} | "
            f"{row['seeds']} | {row['makespan']:,.0f} | {row['utilization']:.1%} | "
            f"{row['utilization_until_last_start']:.1%} | "
            f"{row['regret_ratio']:.4f} | {row['simple_regret']:.4f} | "
            f"{reach:.3g} | {find:.3g} | {base:.4f} | {row['ms_per_suggestion']:.2f} "
            f"({row['wall_ms_per_suggestion']:.2f}) | "
            f"{row['mflop_per_suggestion']:.3g} ({row['gflop_per_cpu_second']:.2g}) | "
            f"{row['empty_asks']:.0f} / {row['num_asks']:.0f} |"
        )
    return "\n".join(lines)
