r"""Tables and plots of the tuning benchmark, from its traces: simple regret and the
optimizer's own time per trial at the preset's budgets, the median time per trial in
windows of trials, and the fit of the time per trial of a run stopped early."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from botorch_sketch.benchmarks import plots
from botorch_sketch.benchmarks.results import RunTrace, aggregate_curve, group_traces
from botorch_sketch.benchmarks.writers import markdown_table, safe_name


def regret_rows(
    traces: Sequence[RunTrace], budgets: Sequence[int]
) -> list[dict[str, object]]:
    r"""One row per ``(problem, method, budget)`` that some seed reached; a group
    whose runs all stopped before the largest budget gets a row at the most trials
    its runs all made, marked ``stopped``."""
    rows = []
    for (problem, method), group in group_traces(traces).items():
        reach = min(t.horizon for t in group)
        extra = [reach] if reach < max(budgets) and reach not in budgets else []
        for budget in [*budgets, *extra]:
            reached = [t for t in group if t.horizon >= budget]
            if not reached:
                continue
            regret = np.array([t.curve("simple_regret")[budget - 1] for t in reached])
            seconds = np.array([_trial_seconds(t) for t in reached])
            setup = np.array([t.setup_seconds for t in reached])
            tail = max(1, budget // 10)
            rows.append(
                {
                    "problem": problem,
                    "method": method,
                    "budget": budget,
                    "seeds": len(reached),
                    "regret_mean": float(regret.mean()),
                    "regret_std": float(regret.std(ddof=1)) if len(regret) > 1 else 0.0,
                    "regret_min": float(regret.min()),
                    "regret_max": float(regret.max()),
                    "seconds_per_trial": float(
                        ((setup + seconds[:, :budget].sum(axis=1)) / budget).mean()
                    ),
                    "seconds_per_trial_last": float(
                        seconds[:, budget - tail : budget].mean()
                    ),
                    "distinct_per_100": float(
                        np.mean([_distinct_per_100(t, budget) for t in reached])
                    ),
                    "stopped": budget in extra,
                }
            )
    return rows


def _distinct_per_100(trace: RunTrace, budget: int) -> float:
    r"""Distinct configurations per 100 of the first ``budget`` trials (100 when
    the trace did not record its repeats)."""
    repeats = trace.metadata.get("repeats", [])
    return 100.0 * (budget - sum(trial < budget for trial in repeats)) / budget


def _trial_seconds(trace: RunTrace) -> np.ndarray:
    r"""The optimizer's time on each told trial (its ``ask`` and ``tell``)."""
    return np.asarray(trace.ask_seconds) + np.asarray(trace.tell_seconds)


def window_rows(
    traces: Sequence[RunTrace], windows: Sequence[tuple[int, int]]
) -> list[dict[str, object]]:
    r"""One row per ``(problem, method, window)`` that some seed reached: the
    median optimizer time per trial over the trials ``first..last`` (1-based, both
    included) of every seed that reached ``last``, pooled."""
    rows = []
    for (problem, method), group in group_traces(traces).items():
        for first, last in windows:
            reached = [t for t in group if t.horizon >= last]
            if not reached:
                continue
            pooled = np.concatenate(
                [_trial_seconds(t)[first - 1 : last] for t in reached]
            )
            rows.append(
                {
                    "problem": problem,
                    "method": method,
                    "window": f"{first}-{last}",
                    "seeds": len(reached),
                    "median_seconds": float(np.median(pooled)),
                }
            )
    return rows


def time_growth(trace: RunTrace, at: int) -> tuple[float, float]:
    r"""The exponent ``b`` of a least-squares fit ``seconds ~ a n^b`` of the time
    per trial against the trial number ``n`` over the second half of the trace's
    trials, and the fit's time per trial at trial ``at`` (an extrapolation when
    ``at`` lies beyond the trace)."""
    seconds = _trial_seconds(trace)
    start = len(seconds) // 2
    n = np.arange(start + 1, len(seconds) + 1)
    keep = seconds[start:] > 0
    slope, intercept = np.polyfit(np.log(n[keep]), np.log(seconds[start:][keep]), 1)
    return float(slope), float(math.exp(intercept + slope * math.log(at)))


def pivot_table(
    rows: Sequence[dict[str, object]],
    line: str,
    column: str,
    cell: Callable[[dict[str, object]], str],
) -> str:
    r"""A :func:`markdown_table` of ``rows``: a line per value of ``row[line]``, a
    column per value of ``row[column]`` (in order of appearance), ``cell(row)`` at
    each."""
    columns = list(dict.fromkeys(row[column] for row in rows))
    cells = {(row[line], row[column]): cell(row) for row in rows}
    body = [
        [name, *(cells.get((name, key), "-") for key in columns)]
        for name in dict.fromkeys(row[line] for row in rows)
    ]
    return markdown_table([line, *map(str, columns)], body)


def _pivot(
    rows: Sequence[dict[str, object]],
    budget: int,
    cell: Callable[[dict[str, object]], str],
) -> str:
    r"""A table at ``budget``: a line per problem, a column per method."""
    at = [row for row in rows if row["budget"] == budget and not row["stopped"]]
    return pivot_table(at, "problem", "method", cell)


def _regret_cell(row: dict[str, object]) -> str:
    count = row["seeds"]
    seeds = "" if count == 5 else f" ({count} seed{'s' * (count > 1)})"
    return f"{row['regret_mean']:.3g} ± {row['regret_std']:.2g}{seeds}"


def _time_cell(row: dict[str, object]) -> str:
    whole, last = 1e3 * row["seconds_per_trial"], 1e3 * row["seconds_per_trial_last"]
    return f"{whole:.3g} ({last:.3g})"


def window_tables(rows: Sequence[dict[str, object]]) -> str:
    r"""Per problem, the median optimizer milliseconds per trial in each window
    (a line per method, a column per window)."""
    lines = []
    for problem in dict.fromkeys(row["problem"] for row in rows):
        at = [row for row in rows if row["problem"] == problem]
        lines += [
            f"Median optimizer time per trial [ms] in windows of trials, {problem}:",
            "",
            pivot_table(
                at, "method", "window", lambda r: f"{1e3 * r['median_seconds']:.3g}"
            ),
            "",
        ]
    return "\n".join(lines)


def growth_notes(traces: Sequence[RunTrace], at: int) -> list[str]:
    r"""For each run that stopped before ``at`` trials: :func:`time_growth`'s
    exponent and extrapolated time per trial at ``at``."""
    notes = []
    for trace in traces:
        if trace.horizon >= at:
            continue
        slope, seconds = time_growth(trace, at)
        notes.append(
            f"{trace.policy} on {trace.problem}, seed {trace.seed}: "
            f"{trace.horizon} trials; time per trial over trials "
            f"{trace.horizon // 2 + 1}-{trace.horizon} fits n^{slope:.2f}, "
            f"extrapolated to {1e3 * seconds:.3g} ms a trial at trial {at}"
        )
    return notes


def markdown_tables(rows: Sequence[dict[str, object]], budgets: Sequence[int]) -> str:
    r"""Per budget, simple regret (mean ± std over seeds, 5 seeds unless said) and
    the optimizer's milliseconds per trial (over all trials; over the last tenth)."""
    lines = []
    for budget in budgets:
        lines += [f"Simple regret after {budget} trials:", ""]
        lines += [_pivot(rows, budget, _regret_cell), ""]
    budget = budgets[-1]
    lines += [
        f"Optimizer time per trial [ms] over {budget} trials (in brackets: over "
        "the last tenth of them):",
        "",
        _pivot(rows, budget, _time_cell),
        "",
        f"Distinct configurations per 100 trials over {budget} trials (mean over "
        "seeds):",
        "",
        _pivot(rows, budget, lambda row: f"{row['distinct_per_100']:.1f}"),
    ]
    for row in rows:
        if row["stopped"]:
            lines.append(
                f"\n{row['method']} on {row['problem']} stopped at {row['budget']} "
                f"trials (optimizer time cap): simple regret {_regret_cell(row)}, "
                f"optimizer ms/trial {_time_cell(row)}."
            )
    return "\n".join(lines)


def plot_problem(
    traces: Sequence[RunTrace], output_dir: str | Path, problem: str
) -> list[Path]:
    r"""``<problem>_regret.png`` (simple regret against trials: mean and the seeds'
    range), ``<problem>_regret_vs_time.png`` (mean simple regret against mean
    cumulative optimizer time) and ``<problem>_time_per_trial.png`` (the median over
    seeds and over bins of trials of the optimizer time per trial, against trials),
    all logarithmic."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    groups = {
        method: group
        for (name, method), group in group_traces(traces).items()
        if name == problem
    }
    horizon = max(t.horizon for group in groups.values() for t in group)
    styles = dict(zip(groups, plots.line_styles(len(groups), horizon), strict=True))
    labels = {m: f"{m} ({len(g)} seed{'s' * (len(g) > 1)})" for m, g in groups.items()}
    prefix = safe_name(problem)
    written = []
    figure, axes = plots.new_figure()
    for method, group in groups.items():
        steps, mean, low, high = aggregate_curve(group, "simple_regret", "range")
        axes.plot(steps, mean, label=labels[method], **styles[method])
        axes.fill_between(steps, low, high, color=styles[method]["color"], alpha=0.12)
    axes.set_yscale("log", nonpositive="mask")
    path = output_dir / f"{prefix}_regret.png"
    title = f"{problem}: mean and range over seeds"
    written.append(
        plots.finish(figure, axes, path, title, "told trials", "simple regret")
    )
    figure, axes = plots.plot_against_time(groups, "simple_regret", labels, styles)
    path = output_dir / f"{prefix}_regret_vs_time.png"
    xlabel = "cumulative optimizer time [s] (objective excluded)"
    title = f"{problem}: mean over seeds"
    written.append(plots.finish(figure, axes, path, title, xlabel, "simple regret"))
    figure, axes = plots.new_figure()
    for method, group in groups.items():
        trials, seconds = _binned_median_seconds(group)
        axes.plot(trials, seconds, label=labels[method], **styles[method])
    axes.set_xscale("log")
    axes.set_yscale("log", nonpositive="mask")
    path = output_dir / f"{prefix}_time_per_trial.png"
    title = f"{problem}: median over seeds and bins of trials"
    ylabel = "optimizer time per trial [s]"
    written.append(plots.finish(figure, axes, path, title, "told trials", ylabel))
    return written


def _binned_median_seconds(
    group: Sequence[RunTrace], num_bins: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    r"""Bins of trials (logarithmically spaced edges, each at least one trial):
    their last trial and the median time per trial over the bin's trials of every
    seed that reached it."""
    horizon = max(t.horizon for t in group)
    edges = np.unique(np.geomspace(1, horizon + 1, num_bins + 1).astype(int))
    ends, medians = [], []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        pooled = [_trial_seconds(t)[low - 1 : high - 1] for t in group]
        pooled = [p for p in pooled if len(p) == high - low]
        if pooled:
            ends.append(high - 1)
            medians.append(float(np.median(np.concatenate(pooled))))
    return np.asarray(ends), np.asarray(medians)


def plot_all(traces: Sequence[RunTrace], output_dir: str | Path) -> list[Path]:
    r""":func:`plot_problem` for every problem label in ``traces``."""
    problems = dict.fromkeys(t.problem for t in traces)
    return [p for name in problems for p in plot_problem(traces, output_dir, name)]
