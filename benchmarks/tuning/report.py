r"""Tables and plots of the tuning benchmark, from its traces: simple regret and the
optimizer's own time per trial at the preset's budgets, the median time per trial in
windows of trials, and the fit of the time per trial of a run stopped early; on
constrained problems the best feasible loss (:func:`constrained_rows`), on problems
of several losses the hypervolume of the observed losses (:func:`hypervolume_rows`),
at the same budgets."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import plots
from benchmarks.results import RunTrace, aggregate_curve, group_traces
from benchmarks.writers import markdown_table, safe_name


def regret_rows(
    traces: Sequence[RunTrace], budgets: Sequence[int]
) -> list[dict[str, object]]:
    r"""One row per ``(problem, method, budget)`` that some seed reached; a group
    whose runs all stopped before the largest budget gets a row at the most trials
    its runs all made, marked ``stopped``."""
    rows = []
    for (problem, method), group in group_traces(traces).items():
        for budget, reached, stopped in _budget_points(group, budgets):
            regret = np.array([t.curve("simple_regret")[budget - 1] for t in reached])
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
                    **_time_fields(reached, budget),
                    "distinct_per_100": float(
                        np.mean([_distinct_per_100(t, budget) for t in reached])
                    ),
                    "stopped": stopped,
                }
            )
    return rows


def _budget_points(
    group: Sequence[RunTrace], budgets: Sequence[int]
) -> list[tuple[int, list[RunTrace], bool]]:
    r"""``(budget, the seeds that reached it, stopped)`` for each budget some seed
    reached, and for the most trials the seeds all made when that is below the
    largest budget and none of them (``stopped``: True)."""
    reach = min(t.horizon for t in group)
    extra = [reach] if reach < max(budgets) and reach not in budgets else []
    points = []
    for budget in [*budgets, *extra]:
        reached = [t for t in group if t.horizon >= budget]
        if reached:
            points.append((budget, reached, budget in extra))
    return points


def _time_fields(reached: Sequence[RunTrace], budget: int) -> dict[str, float]:
    r"""The optimizer's time per trial over the first ``budget`` trials (with the
    setup) and over the last tenth of them, mean over the seeds."""
    seconds = np.array([_trial_seconds(t)[:budget] for t in reached])
    setup = np.array([t.setup_seconds for t in reached])
    tail = max(1, budget // 10)
    return {
        "seconds_per_trial": float(((setup + seconds.sum(axis=1)) / budget).mean()),
        "seconds_per_trial_last": float(seconds[:, budget - tail :].mean()),
    }


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and standard deviation (``ddof=1``; 0 for one value; NaN for none)."""
    if not len(values):
        return math.nan, math.nan
    array = np.asarray(values, dtype=float)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def is_constrained(trace: RunTrace) -> bool:
    r"""Whether the trace is of a constrained problem of one loss."""
    return "violation" in trace.diagnostics and not is_multi_objective(trace)


def is_multi_objective(trace: RunTrace) -> bool:
    r"""Whether the trace is of a problem of several losses."""
    return "reference_point" in trace.metadata


def feasible(trace: RunTrace) -> np.ndarray:
    r"""Whether each trial was feasible (all of them on an unconstrained problem)."""
    violation = trace.diagnostics.get("violation")
    if violation is None:
        return np.ones(trace.horizon, dtype=bool)
    return np.asarray(violation) <= 0


def best_feasible(trace: RunTrace) -> np.ndarray:
    r"""After each trial, the smallest loss of the feasible trials so far (``inf``
    before the first)."""
    losses = np.where(feasible(trace), -np.asarray(trace.values), np.inf)
    return np.minimum.accumulate(losses)


def constrained_rows(
    traces: Sequence[RunTrace], budgets: Sequence[int]
) -> list[dict[str, object]]:
    r"""One row per ``(problem, method, budget)`` that some seed reached (and the
    ``stopped`` rows of :func:`regret_rows`): how many seeds had a feasible trial
    by then, the mean, standard deviation, smallest and largest over those seeds of
    their best feasible loss (NaN when none had one), the feasible trials per 100
    (mean over the seeds) and the optimizer's time per trial."""
    rows = []
    for (problem, method), group in group_traces(traces).items():
        for budget, reached, stopped in _budget_points(group, budgets):
            best = [float(best_feasible(t)[budget - 1]) for t in reached]
            found = [value for value in best if math.isfinite(value)]
            mean, std = _mean_std(found)
            rows.append(
                {
                    "problem": problem,
                    "method": method,
                    "budget": budget,
                    "seeds": len(reached),
                    "feasible_seeds": len(found),
                    "best_mean": mean,
                    "best_std": std,
                    "best_min": min(found, default=math.nan),
                    "best_max": max(found, default=math.nan),
                    "feasible_per_100": float(
                        np.mean([100 * feasible(t)[:budget].mean() for t in reached])
                    ),
                    **_time_fields(reached, budget),
                    "stopped": stopped,
                }
            )
    return rows


def hypervolume(losses: np.ndarray, reference_point: Sequence[float]) -> float:
    r"""The hypervolume of the loss vectors ``losses`` (``n x m``, minimized): the
    volume of the points that some loss vector dominates and that dominate
    ``reference_point``; vectors not below it in every loss add nothing (computed
    by BoTorch's ``Hypervolume`` on the negated Pareto front)."""
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume
    from botorch.utils.multi_objective.pareto import is_non_dominated

    reference = np.asarray(reference_point, dtype=np.float64)
    losses = np.asarray(losses, dtype=np.float64).reshape(-1, len(reference))
    inside = losses[(losses < reference).all(axis=1)]
    if not len(inside):
        return 0.0
    gains = -torch.from_numpy(inside)
    front = gains[is_non_dominated(gains, deduplicate=True)]
    return float(Hypervolume(-torch.from_numpy(reference)).compute(front))


def loss_vectors(trace: RunTrace) -> np.ndarray:
    r"""The trace's loss vectors (``T x m``) of a problem of several losses."""
    count = sum(key.startswith("loss_") for key in trace.diagnostics)
    return np.stack([trace.diagnostics[f"loss_{i}"] for i in range(count)], axis=1)


def max_hypervolume(trace: RunTrace) -> float:
    r"""The problem's largest hypervolume (NaN when unknown)."""
    value = trace.metadata.get("max_hypervolume")
    return math.nan if value is None else float(value)


def hypervolumes(trace: RunTrace, steps: Sequence[int]) -> np.ndarray:
    r"""The :func:`hypervolume` of the loss vectors of the feasible trials among
    the first ``t`` trials, for each ``t`` of ``steps`` (increasing, from 1)."""
    losses, keep = loss_vectors(trace), feasible(trace)
    reference = trace.metadata["reference_point"]
    front = np.empty((0, losses.shape[1]))
    values, last = [], 0
    for step in steps:
        new = losses[last:step][keep[last:step]]
        front = _pareto_front(np.concatenate([front, new]))
        values.append(hypervolume(front, reference))
        last = step
    return np.asarray(values)


def _pareto_front(losses: np.ndarray) -> np.ndarray:
    r"""The loss vectors (minimized) that no other dominates."""
    import torch
    from botorch.utils.multi_objective.pareto import is_non_dominated

    if len(losses) < 2:
        return losses
    keep = is_non_dominated(-torch.from_numpy(losses), deduplicate=True)
    return losses[keep.numpy()]


def hypervolume_rows(
    traces: Sequence[RunTrace], budgets: Sequence[int]
) -> list[dict[str, object]]:
    r"""One row per ``(problem, method, budget)`` that some seed reached (and the
    ``stopped`` rows of :func:`regret_rows`): the hypervolume of the observed
    losses (:func:`hypervolumes`) and its fraction of the largest (NaN when
    unknown), mean and standard deviation over the seeds, and the optimizer's
    time per trial."""
    rows = []
    for (problem, method), group in group_traces(traces).items():
        for budget, reached, stopped in _budget_points(group, budgets):
            volume = [float(hypervolumes(t, [budget])[0]) for t in reached]
            largest = max_hypervolume(reached[0])
            mean, std = _mean_std(volume)
            fraction_mean, fraction_std = _mean_std(np.asarray(volume) / largest)
            rows.append(
                {
                    "problem": problem,
                    "method": method,
                    "budget": budget,
                    "seeds": len(reached),
                    "hypervolume_mean": mean,
                    "hypervolume_std": std,
                    "max_hypervolume": largest,
                    "fraction_mean": fraction_mean,
                    "fraction_std": fraction_std,
                    **_time_fields(reached, budget),
                    "stopped": stopped,
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


def _seeds_note(count: int) -> str:
    return "" if count == 5 else f" ({count} seed{'s' * (count > 1)})"


def _regret_cell(row: dict[str, object]) -> str:
    seeds = _seeds_note(row["seeds"])
    return f"{row['regret_mean']:.3g} ± {row['regret_std']:.2g}{seeds}"


def _best_feasible_cell(row: dict[str, object]) -> str:
    found, count = row["feasible_seeds"], row["seeds"]
    if not found:
        return f"none feasible{_seeds_note(count)}"
    text = f"{row['best_mean']:.6g} ± {row['best_std']:.2g}"
    if found < count:
        return f"{text} ({found} of {count} seeds feasible)"
    return text + _seeds_note(count)


def _hypervolume_cell(row: dict[str, object]) -> str:
    seeds = _seeds_note(row["seeds"])
    if math.isnan(row["max_hypervolume"]):
        return f"HV {row['hypervolume_mean']:.4g} ± {row['hypervolume_std']:.2g}{seeds}"
    return f"{row['fraction_mean']:.4f} ± {row['fraction_std']:.2g}{seeds}"


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


def _time_and_stops(
    rows: Sequence[dict[str, object]],
    budget: int,
    cell: Callable[[dict[str, object]], str],
    measure: str,
) -> list[str]:
    r"""The lines of the optimizer-time table at ``budget`` and a note per row of
    runs stopped early (their ``measure`` by ``cell``)."""
    lines = [
        f"Optimizer time per trial [ms] over {budget} trials (in brackets: over "
        "the last tenth of them):",
        "",
        _pivot(rows, budget, _time_cell),
    ]
    for row in rows:
        if row["stopped"]:
            lines.append(
                f"\n{row['method']} on {row['problem']} stopped at {row['budget']} "
                f"trials (optimizer time cap): {measure} {cell(row)}, "
                f"optimizer ms/trial {_time_cell(row)}."
            )
    return lines


def _per_budget(
    rows: Sequence[dict[str, object]],
    budgets: Sequence[int],
    heading: str,
    cell: Callable[[dict[str, object]], str],
) -> list[str]:
    r"""For each budget, ``heading`` (its ``{}`` the budget) and the table of
    ``cell`` per problem and method."""
    lines = []
    for budget in budgets:
        lines += [heading.format(budget), "", _pivot(rows, budget, cell), ""]
    return lines


def constrained_tables(
    rows: Sequence[dict[str, object]], budgets: Sequence[int], minima: dict[str, float]
) -> str:
    r"""Per budget, the best feasible loss (:func:`constrained_rows`; mean ± std
    over the seeds with a feasible trial, 5 seeds unless said); the feasible
    trials per 100 and the optimizer's milliseconds per trial at the largest
    budget; ``minima``: the known minimum of each problem."""
    lines = _per_budget(
        rows,
        budgets,
        "Best feasible loss after {} trials (mean ± std over the seeds that found "
        "a feasible configuration):",
        _best_feasible_cell,
    )
    if minima:
        known = "; ".join(f"{name}: {value:.7g}" for name, value in minima.items())
        lines += [f"Known minima (BoTorch's `optimal_value`): {known}.", ""]
    budget = budgets[-1]
    lines += [
        f"Feasible trials per 100 over {budget} trials (mean over seeds):",
        "",
        _pivot(rows, budget, lambda row: f"{row['feasible_per_100']:.1f}"),
        "",
    ]
    lines += _time_and_stops(rows, budget, _best_feasible_cell, "best feasible loss")
    return "\n".join(lines)


def hypervolume_tables(
    rows: Sequence[dict[str, object]],
    budgets: Sequence[int],
    references: dict[str, tuple[list[float], float]],
) -> str:
    r"""Per budget, the hypervolume of the observed losses as a fraction of the
    largest (:func:`hypervolume_rows`; mean ± std over seeds, 5 seeds unless said;
    ``HV`` and the hypervolume itself when the largest is unknown), then the
    optimizer's milliseconds per trial at the largest budget; ``references``: each
    problem's reference point and largest hypervolume (NaN: unknown)."""
    lines = _per_budget(
        rows,
        budgets,
        "Hypervolume of the observed losses after {} trials, as a fraction of the "
        "largest (mean ± std over seeds):",
        _hypervolume_cell,
    )
    if references:
        points = "; ".join(
            f"{name}: reference point {point}, largest hypervolume {largest:.6g}"
            for name, (point, largest) in references.items()
        )
        lines += [f"Every loss minimized; {points}.", ""]
    lines += relative_hypervolume_lines(rows, budgets)
    lines += _time_and_stops(rows, budgets[-1], _hypervolume_cell, "hypervolume")
    return "\n".join(lines)


def relative_hypervolume_lines(
    rows: Sequence[dict[str, object]], budgets: Sequence[int]
) -> list[str]:
    r"""For the problems of :func:`hypervolume_rows` whose largest hypervolume is
    unknown (COCO's ``bbob-biobj``), per budget, a table with a row per method:
    its mean hypervolume on each problem as a fraction of the largest any method
    reached there, averaged over the problems; the problems where that fraction
    is at least 0.95; those where it is 1 (the first of equal methods). Problems
    where no method has a positive hypervolume are left out. No lines when every
    largest is known."""
    unknown = [row for row in rows if math.isnan(float(row["max_hypervolume"]))]
    methods = list(dict.fromkeys(str(row["method"]) for row in unknown))
    lines: list[str] = []
    for budget in budgets:
        volumes: dict[str, dict[str, float]] = {}
        for row in unknown:
            if row["budget"] == budget:
                problem = volumes.setdefault(str(row["problem"]), {})
                problem[str(row["method"])] = float(row["hypervolume_mean"])
        volumes = {p: v for p, v in volumes.items() if max(v.values()) > 0}
        if not volumes:
            continue
        lines += [
            f"Hypervolume after {budget} trials as a fraction of the largest any "
            f"method reached, over the {len(volumes)} problems whose largest is "
            "unknown:",
            "",
            "| method | mean fraction | problems at 0.95 or more | problems where "
            "largest |",
            "| --- | ---: | ---: | ---: |",
        ]
        for method in methods:
            fractions = [
                v[method] / max(v.values()) for v in volumes.values() if method in v
            ]
            largest = sum(max(v, key=v.__getitem__) == method for v in volumes.values())
            close = sum(fraction >= 0.95 for fraction in fractions)
            lines.append(
                f"| {method} | {np.mean(fractions):.3f} | {close} of {len(fractions)} "
                f"| {largest} |"
            )
        lines.append("")
    return lines


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
    groups, labels, styles = _problem_groups(traces, problem)
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
    written.append(_plot_time_per_trial(groups, labels, styles, output_dir, problem))
    return written


def _problem_groups(
    traces: Sequence[RunTrace], problem: str
) -> tuple[dict[str, list[RunTrace]], dict[str, str], dict[str, dict[str, object]]]:
    r"""The traces of ``problem`` by method, each method's legend label and line
    style."""
    groups = {
        method: group
        for (name, method), group in group_traces(traces).items()
        if name == problem
    }
    horizon = max(t.horizon for group in groups.values() for t in group)
    styles = dict(zip(groups, plots.line_styles(len(groups), horizon), strict=True))
    labels = {m: f"{m} ({len(g)} seed{'s' * (len(g) > 1)})" for m, g in groups.items()}
    return groups, labels, styles


def _plot_time_per_trial(
    groups: dict[str, list[RunTrace]],
    labels: dict[str, str],
    styles: dict[str, dict[str, object]],
    output_dir: Path,
    problem: str,
) -> Path:
    r"""``<problem>_time_per_trial.png``: the median over seeds and over bins of
    trials of the optimizer time per trial, against trials (logarithmic)."""
    figure, axes = plots.new_figure()
    for method, group in groups.items():
        trials, seconds = _binned_median_seconds(group)
        axes.plot(trials, seconds, label=labels[method], **styles[method])
    axes.set_xscale("log")
    axes.set_yscale("log", nonpositive="mask")
    path = output_dir / f"{safe_name(problem)}_time_per_trial.png"
    title = f"{problem}: median over seeds and bins of trials"
    ylabel = "optimizer time per trial [s]"
    return plots.finish(figure, axes, path, title, "told trials", ylabel)


def plot_outcome_problem(
    traces: Sequence[RunTrace], output_dir: str | Path, problem: str
) -> list[Path]:
    r"""For a constrained problem, ``<problem>_best_feasible.png`` (the best
    feasible loss against trials: the mean over seeds from the first trial at which
    every seed had a feasible one, and the seeds' range); for one of several
    losses, ``<problem>_hypervolume.png`` (the hypervolume's fraction of the
    largest, or the hypervolume when that is unknown, at up to 60 trial counts:
    mean and range over seeds); and ``<problem>_time_per_trial.png``."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    groups, labels, styles = _problem_groups(traces, problem)
    first = next(iter(groups.values()))[0]
    figure, axes = plots.new_figure()
    if is_multi_objective(first):
        largest = max_hypervolume(first)
        scale = 1.0 if math.isnan(largest) else largest
        for method, group in groups.items():
            horizon = min(t.horizon for t in group)
            steps = np.unique(np.geomspace(1, horizon, 60).astype(int))
            curves = np.stack([hypervolumes(t, steps) / scale for t in group])
            _plot_band(axes, steps, curves, labels[method], styles[method])
        name, ylabel = (
            "hypervolume",
            ("hypervolume" if scale == 1.0 else "hypervolume / largest"),
        )
    else:
        positive, drawn = True, False
        for method, group in groups.items():
            horizon = min(t.horizon for t in group)
            curves = np.stack([best_feasible(t)[:horizon] for t in group])
            steps = np.arange(1, horizon + 1)
            shown = np.isfinite(curves).all(axis=0)
            if not shown.any():
                continue
            curves, steps = curves[:, shown], steps[shown]
            positive &= bool((curves > 0).all())
            drawn = True
            _plot_band(axes, steps, curves, labels[method], styles[method])
        if not drawn:  # a legend entry saying so
            axes.plot([], [], label="no method feasible in every seed")
        elif positive:
            axes.set_yscale("log")
        name, ylabel = "best_feasible", "best feasible loss"
    axes.set_xscale("log")
    path = output_dir / f"{safe_name(problem)}_{name}.png"
    title = f"{problem}: mean and range over seeds"
    written = [plots.finish(figure, axes, path, title, "told trials", ylabel)]
    written.append(_plot_time_per_trial(groups, labels, styles, output_dir, problem))
    return written


def _plot_band(
    axes: Any, steps: np.ndarray, curves: np.ndarray, label: str, style: dict
) -> None:
    r"""The mean of ``curves`` (seeds x steps) as a line, their range as a band."""
    axes.plot(steps, curves.mean(0), label=label, **style)
    axes.fill_between(
        steps, curves.min(0), curves.max(0), color=style["color"], alpha=0.12
    )


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
    r""":func:`plot_problem` for every problem label in ``traces`` (
    :func:`plot_outcome_problem` for those of constrained problems and problems of
    several losses)."""
    problems = {t.problem: is_constrained(t) or is_multi_objective(t) for t in traces}
    return [
        path
        for name, outcome in problems.items()
        for path in (plot_outcome_problem if outcome else plot_problem)(
            traces, output_dir, name
        )
    ]
