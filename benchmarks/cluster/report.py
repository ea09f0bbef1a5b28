r"""Figures of merit of simulated runs, the per-method table and the PNGs.

A simulated run is a :class:`~benchmarks.results.RunTrace`, one step
per completion, with ``diagnostics`` ``simulated_time`` and ``busy_worker_time`` (at
each completion) and ``metadata`` ``workers``, ``num_asks``, ``empty_asks``,
``wall_seconds``, ``gflop``, ``last_start`` (when the ``T``-th evaluation started),
``ask_p99_ms`` and ``refit_seconds`` (:func:`~.simulation.simulate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from benchmarks.cluster.methods import METHODS, base_method, label
from benchmarks.plots import finish, line_styles, new_figure, save_figure
from benchmarks.results import RunTrace
from benchmarks.writers import checkpoints, format_cell, markdown_table


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
    evaluation started (1 when all started at time 0; NaN if not recorded)."""
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
    above = np.nonzero(trace.curve("regret_ratio") > target)[0]
    if above.size == 0:
        return float(times(trace)[0])
    if above[-1] == trace.horizon - 1:
        return math.inf
    return float(times(trace)[above[-1] + 1])


def time_to_find(trace: RunTrace, target: float) -> float:
    r"""The first simulated time at which the simple regret is ``<= target`` (inf
    if never)."""
    found = np.nonzero(trace.curve("simple_regret") <= target)[0]
    return float(times(trace)[found[0]]) if found.size else math.inf


def summarize(
    traces: Sequence[RunTrace], reference: str = "bbkb-sync"
) -> list[dict[str, object]]:
    r"""One row per ``(problem, workers, method)``: means over seeds of
    :func:`run_summary`, and against the reference method's run of the same seed,
    over its makespan: ``time_to_reference`` (to reach and stay at or below its final
    regret ratio), ``time_to_reference_best`` (to find an arm as good as its best);
    ``reference_at_makespan``: its regret ratio when this method finished."""
    groups: dict[tuple[str, int, str], list[RunTrace]] = {}
    for trace in traces:
        key = (trace.problem, workers(trace), trace.policy)
        groups.setdefault(key, []).append(trace)
    rows = []
    for (problem, width, method), group in groups.items():
        finals = [run_summary(trace) for trace in group]
        row: dict[str, object] = {
            "problem": problem,
            "workers": width,
            "method": method,
            "seeds": len(group),
            "horizon": group[0].horizon,
        }
        row |= {
            key: float(np.mean([final[key] for final in finals])) for key in finals[0]
        }
        # the reference's run of each seed (its first, if collected twice)
        bases = groups.get((problem, width, reference), [])
        base_of = {base.seed: base for base in reversed(bases)}
        reach, find, at_makespan = [], [], []
        for trace in group:
            base = base_of.get(trace.seed)
            if base is None:
                continue
            ratio, span = base.curve("regret_ratio"), makespan(base)
            reach.append(time_to_reach(trace, ratio[-1]) / span)
            find.append(time_to_find(trace, base.curve("simple_regret")[-1]) / span)
            grid = np.array([min(makespan(trace), span)])
            at_makespan.append(value_on_grid(base, ratio, grid)[0])
        if reach:
            row["time_to_reference"] = float(np.mean(reach))
            row["time_to_reference_best"] = float(np.mean(find))
            row["reference_at_makespan"] = float(np.mean(at_makespan))
        rows.append(row)
    order = {name: k for k, name in enumerate(METHODS)}

    def key(row: dict[str, object]) -> tuple[object, ...]:
        rank = order.get(base_method(str(row["method"])), len(order))
        return row["problem"], row["workers"], rank, row["method"]

    return sorted(rows, key=key)


def format_markdown(rows: Sequence[dict[str, object]], reference: str) -> str:
    r"""A :func:`markdown_table` of :func:`summarize` rows."""
    name = label(reference)
    header = (
        "problem|W|method|T|seeds|makespan|utilization|utilization until the last "
        f"start|regret ratio|simple regret|time to {name}'s final regret ratio (/ its "
        "makespan)|time to its best arm's value (/ its makespan)|"
        f"{name}'s regret ratio at this makespan|optimizer CPU ms / suggestion "
        "(wall)|counted MFLOP / suggestion (GFLOP per CPU second)|empty asks"
    ).split("|")
    cells = [
        [
            row["problem"],
            row["workers"],
            label(row["method"]),
            row["horizon"],
            row["seeds"],
            f"{row['makespan']:,.0f}",
            f"{row['utilization']:.1%}",
            f"{row['utilization_until_last_start']:.1%}",
            f"{row['regret_ratio']:.4f}",
            f"{row['simple_regret']:.4f}",
            format_cell(row.get("time_to_reference"), ".3g"),
            format_cell(row.get("time_to_reference_best"), ".3g"),
            format_cell(row.get("reference_at_makespan"), ".4f"),
            f"{row['ms_per_suggestion']:.2f} ({row['wall_ms_per_suggestion']:.2f})",
            f"{row['mflop_per_suggestion']:.3g} ({row['gflop_per_cpu_second']:.2g})",
            f"{row['empty_asks']:.0f} / {row['num_asks']:.0f}",
        ]
        for row in rows
    ]
    return markdown_table(header, cells, labels=3)


def plot(
    traces: Sequence[RunTrace], output_dir: str | Path, reference: str = "bbkb-sync"
) -> list[Path]:
    r"""For each ``(problem, W)``: ``cluster_<problem>_w<W>_regret.png`` (regret
    ratio vs simulated time, mean over seeds, each line ending at its makespan),
    ``..._utilization.png`` (:func:`busy_fraction` over log-spaced windows) and,
    when the reference method ran, ``..._tradeoff.png`` (:func:`plot_tradeoff`)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[RunTrace]] = {}
    for trace in traces:
        runs.setdefault((trace.problem, workers(trace)), []).append(trace)
    views = (
        (
            "regret",
            lambda t, g: value_on_grid(t, t.curve("regret_ratio"), g),
            "regret ratio R_k / (k r_unif)",
        ),
        ("utilization", busy_fraction, "fraction of workers busy"),
    )
    xlabel = "simulated wall time (mean evaluation time = 1)"
    paths = []
    for (problem, width), group in runs.items():
        low = min(float(times(t)[0]) for t in group)
        grid = np.geomspace(low, max(makespan(t) for t in group), 400)
        name = f"cluster_{problem}_w{width}"
        title = f"{problem}, W = {width} workers, T = {group[0].horizon}"
        methods = list(dict.fromkeys(t.policy for t in group))
        styles = line_styles(len(methods), len(grid))
        for suffix, curve, ylabel in views:
            figure, axes = new_figure()
            for method, style in zip(methods, styles, strict=True):
                curves = np.array([curve(t, grid) for t in group if t.policy == method])
                started = ~np.isnan(curves).all(axis=0)
                mean = np.full(grid.shape, np.nan)
                mean[started] = np.nanmean(curves[:, started], axis=0)
                axes.plot(grid, mean, label=label(method), **style)
            axes.set_xscale("log")
            if suffix == "regret":
                axes.set_yscale("log")
            path = output_dir / f"{name}_{suffix}.png"
            paths.append(finish(figure, axes, path, title, xlabel, ylabel))
        figure = plot_tradeoff(group, reference)
        if figure is not None:
            paths.append(save_figure(figure, output_dir / f"{name}_tradeoff.png"))
    return paths


def plot_tradeoff(
    traces: Sequence[RunTrace], reference: str = "bbkb-sync"
) -> Figure | None:
    r"""One point per run of one ``(problem, W)``: its utilization until the last
    start against its final regret ratio over that of the reference's run of the
    same seed (None when no other method has a reference run). Methods whose runs
    all end above twice the reference's are named in a note, not drawn, so that the
    axis resolves the rest."""
    references = {t.seed: t for t in traces if t.policy == reference}
    points, omitted = {}, []
    for method in dict.fromkeys(t.policy for t in traces):
        mine = [t for t in traces if t.policy == method and t.seed in references]
        if method == reference or not mine:
            continue
        x = [utilization_until_last_start(t) for t in mine]
        y = [
            t.curve("regret_ratio")[-1] / references[t.seed].curve("regret_ratio")[-1]
            for t in mine
        ]
        if min(y) > 2:
            omitted.append(label(method))
        else:
            points[label(method)] = (x, y)
    if not points:
        return None
    figure, axes = new_figure()
    for name, (x, y) in points.items():
        axes.scatter(x, y, label=name, s=24)
    if omitted:
        note = "not drawn (above 2): " + ", ".join(omitted)
        axes.annotate(note, (0.01, 0.01), xycoords="axes fraction", fontsize=8)
    axes.axvline(0.9, color="grey", linestyle="--", linewidth=1)
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes.set(
        xlabel="utilization until the last start",
        ylabel=f"final regret ratio / {label(reference)}'s (same seed)",
    )
    axes.set_title(
        f"{traces[0].problem}, W = {workers(traces[0])}: one point per run", fontsize=10
    )
    axes.grid(True, alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    return figure
