r"""Figures of merit of simulated runs: curves on a time grid, times to reach a
reference, the per-method summary table."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from botorch_sketch.benchmarks.cluster.methods import METHODS, base_method, label
from botorch_sketch.benchmarks.cluster.trace import ClusterTrace


def value_on_grid(
    trace: ClusterTrace, curve: np.ndarray, grid: np.ndarray
) -> np.ndarray:
    r"""The curve's value at the last completion ``<= grid`` (NaN before the first
    completion and after the makespan)."""
    grid = np.asarray(grid, dtype=float)
    at = np.searchsorted(trace.times, grid, side="right") - 1
    inside = (at >= 0) & (grid <= trace.makespan)
    return np.where(inside, curve[np.maximum(at, 0)], np.nan)


def busy_fraction(trace: ClusterTrace, grid: np.ndarray) -> np.ndarray:
    r"""Fraction of the ``W`` workers busy on average over ``(grid[i-1], grid[i]]``
    (from 0 for ``i = 0``); NaN past the makespan. Exact: evaluations start only at 0
    or at completions, so the busy worker-time grows linearly between completions."""
    grid = np.asarray(grid, dtype=float)
    busy = np.interp(grid, np.r_[0.0, trace.times], np.r_[0.0, trace.busy])
    widths = np.diff(grid, prepend=0.0)
    fraction = np.diff(busy, prepend=0.0) / (trace.workers * widths)
    return np.where(grid <= trace.makespan, fraction, np.nan)


def time_to_reach(trace: ClusterTrace, target: float) -> float:
    r"""The first simulated time after which the regret ratio stays ``<= target``
    (inf if it ends above)."""
    ratio = trace.regret_ratio()
    above = np.nonzero(ratio > target)[0]
    if above.size == 0:
        return float(trace.times[0])
    if above[-1] == trace.horizon - 1:
        return math.inf
    return float(trace.times[above[-1] + 1])


def time_to_find(trace: ClusterTrace, target: float) -> float:
    r"""The first simulated time at which the simple regret (the best value found
    so far) is ``<= target`` (inf if never)."""
    found = np.nonzero(trace.simple_regret() <= target)[0]
    return float(trace.times[found[0]]) if found.size else math.inf


def summarize(
    traces: Sequence[ClusterTrace], reference: str = "bbkb-sync"
) -> list[dict[str, object]]:
    r"""One row per ``(problem, workers, method)``: means over seeds of
    :meth:`ClusterTrace.summary`, plus, against the reference method's run of the same
    seed, ``time_to_reference``: the time to reach (and stay at or below) its final
    regret ratio over its makespan, ``time_to_reference_best``: the time to find an
    arm as good as its best over its makespan, and ``reference_at_makespan``: its
    regret ratio when this method finished (its last value if it finished
    earlier)."""
    groups: dict[tuple[str, int, str], list[ClusterTrace]] = {}
    for trace in traces:
        groups.setdefault((trace.problem, trace.workers, trace.method), []).append(
            trace
        )
    rows = []
    for (problem, workers, method), group in groups.items():
        row: dict[str, object] = {
            "problem": problem,
            "workers": workers,
            "method": method,
            "seeds": len(group),
            "horizon": group[0].horizon,
        }
        finals = [trace.summary() for trace in group]
        for key in finals[0]:
            row[key] = float(np.mean([final[key] for final in finals]))
        fractions, best_fractions, at_makespan = [], [], []
        for trace in group:
            base = groups.get((problem, workers, reference), [])
            base = [b for b in base if b.seed == trace.seed]
            if base:
                ratio = base[0].regret_ratio()
                fractions.append(time_to_reach(trace, ratio[-1]) / base[0].makespan)
                best = base[0].simple_regret()[-1]
                best_fractions.append(time_to_find(trace, best) / base[0].makespan)
                grid = np.array([min(trace.makespan, base[0].makespan)])
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
