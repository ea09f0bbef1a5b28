r"""COCO's measures on the tuning benchmark's ``bbob`` runs (docs/benchmarks.md,
"COCO's bbob suite"): the fraction of ``(function, instance, target)`` triples
solved within each number of evaluations, an empirical cumulative distribution
(ECDF) over COCO's 51 default targets ``f_opt + 10^k``, ``k = 2, 1.8, ..., -8``;
tables of it, of the best ``f - f_opt`` per function and of the optimizer's time
per trial; and ECDF plots."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks import plots
from benchmarks.results import RunTrace
from benchmarks.tuning.driver import parse_label
from benchmarks.tuning.problems import BBOBSpec, parse_bbob
from benchmarks.tuning.report import pivot_table
from botorch_sketch.utils.validation import check_int

#: COCO's default ``bbob`` targets, as distances ``f - f_opt``: ``10^k`` for
#: ``k`` from 2 down to -8 in steps of 0.2 (51 targets).
BBOB_TARGETS = 10.0 ** np.linspace(2.0, -8.0, 51)
#: A group of ``bbob`` runs: ``(dimension, trials in flight)``.
Group = tuple[int, int]
Row = dict[str, object]


def bbob_spec(problem: str) -> BBOBSpec | None:
    r"""The ``bbob`` problem of a trace's problem label (None: not a ``bbob``
    problem)."""
    return parse_bbob(parse_label(problem)[0])


def targets_hit(regret: np.ndarray, targets: np.ndarray = BBOB_TARGETS) -> np.ndarray:
    r"""For each entry of ``regret`` (a distance ``f - f_opt``), how many of
    ``targets`` it reaches (``regret <= target``)."""
    ordered = np.sort(np.asarray(targets, dtype=np.float64))
    return len(ordered) - np.searchsorted(ordered, regret, side="left")


def fraction_solved(
    runs: Sequence[np.ndarray], horizon: int, targets: np.ndarray = BBOB_TARGETS
) -> np.ndarray:
    r"""The ECDF at ``t = 1..horizon``: the fraction of ``(run, target)`` pairs
    for which some of the run's first ``t`` values of ``f - f_opt`` (one array per
    run, in evaluation order, at least one value) is at most the target. A run with
    fewer than ``t`` values counts with all of them (it ended unsolved)."""
    check_int(horizon, "horizon", 1)
    if not runs or any(len(run) == 0 for run in runs):
        raise ValueError("`runs` must hold at least one non-empty run.")
    hits = np.zeros(horizon)
    for run in runs:
        best = np.minimum.accumulate(np.asarray(run, dtype=np.float64)[:horizon])
        counts = targets_hit(best, targets)
        hits[: len(counts)] += counts
        hits[len(counts) :] += counts[-1]
    return hits / (len(runs) * len(targets))


def bbob_groups(traces: Sequence[RunTrace]) -> dict[Group, dict[str, list[RunTrace]]]:
    r"""The ``bbob`` traces by ``(dimension, trials in flight)``, then by method,
    in order of appearance (other traces left out)."""
    groups: dict[Group, dict[str, list[RunTrace]]] = {}
    for trace in traces:
        spec = bbob_spec(trace.problem)
        if spec is not None:
            key = (spec.dim, parse_label(trace.problem)[1])
            groups.setdefault(key, {}).setdefault(trace.policy, []).append(trace)
    return groups


def group_name(group: Group) -> str:
    r"""``"5-D, 1 in flight"``."""
    return f"{group[0]}-D, {group[1]} in flight"


def _regrets(group: Sequence[RunTrace]) -> list[np.ndarray]:
    return [trace.curve("simple_regret") for trace in group]


def ecdf_rows(traces: Sequence[RunTrace], budgets: Sequence[int]) -> list[Row]:
    r"""One row per ``(group, method, budget)``: the fraction of triples solved
    within ``budget`` evaluations (:func:`fraction_solved`). A budget beyond a run
    that ended there without being stopped by its time cap is left out;
    ``stopped`` counts the runs stopped before ``budget``, taken as they ended."""
    rows = []
    for group, methods in bbob_groups(traces).items():
        for method, runs in methods.items():
            curve = fraction_solved(_regrets(runs), max(t.horizon for t in runs))
            for budget in budgets:
                ended = [t for t in runs if t.horizon < budget]
                if any("stopped" not in t.metadata for t in ended):
                    continue
                rows.append(
                    {
                        "group": group_name(group),
                        "method": method,
                        "budget": budget,
                        "runs": len(runs),
                        "stopped": len(ended),
                        "fraction_solved": float(curve[min(budget, len(curve)) - 1]),
                    }
                )
    return rows


def _reduce(
    rows: Sequence[Row],
    keys: tuple[str, ...],
    value: str,
    how: Callable[[np.ndarray], float],
) -> list[Row]:
    r"""One row per value of ``keys`` (in order of appearance): ``how`` of the
    rows' ``value``."""
    pooled: dict[tuple[object, ...], list[float]] = {}
    for row in rows:
        pooled.setdefault(tuple(row[key] for key in keys), []).append(row[value])
    return [
        dict(zip(keys, key, strict=True)) | {value: float(how(np.asarray(values)))}
        for key, values in pooled.items()
    ]


def _with_specs(rows: Sequence[Row]) -> list[Row]:
    r"""The :func:`~benchmarks.tuning.report.regret_rows` of
    ``bbob`` runs (not those marked ``stopped``), with their ``group`` and
    ``function`` (``"f3"``)."""
    found = []
    for row in rows:
        spec = bbob_spec(str(row["problem"]))
        if spec is not None and not row["stopped"]:
            group = (spec.dim, parse_label(str(row["problem"]))[1])
            found.append(
                row | {"group": group_name(group), "function": f"f{spec.function}"}
            )
    return found


def coco_tables(
    traces: Sequence[RunTrace], rows: Sequence[Row], budgets: Sequence[int]
) -> str:
    r"""Markdown, per group: the fraction of triples solved at each budget, the
    mean optimizer milliseconds per trial over the first ``budget`` trials, and per
    budget the median over instances of the best ``f - f_opt`` (mean over seeds) per
    function; ``rows`` are the runs'
    :func:`~benchmarks.tuning.report.regret_rows`."""
    solved = ecdf_rows(traces, budgets)
    regrets = _with_specs(rows)
    lines = []
    for group in bbob_groups(traces):
        name = group_name(group)
        at = [row for row in regrets if row["group"] == name]
        lines += [
            f"COCO bbob, {name}: fraction of the (function, instance, target) "
            f"triples solved within each budget ({len(BBOB_TARGETS)} targets "
            "f_opt + 10^k, k = 2..-8; * some runs stopped by the time cap before):",
            "",
            pivot_table(
                [row for row in solved if row["group"] == name],
                "method",
                "budget",
                lambda r: f"{r['fraction_solved']:.3f}" + "*" * (r["stopped"] > 0),
            ),
            "",
            f"COCO bbob, {name}: optimizer time per trial [ms] over the first "
            "`budget` trials, mean over runs:",
            "",
            pivot_table(
                _reduce(at, ("method", "budget"), "seconds_per_trial", np.mean),
                "method",
                "budget",
                lambda r: f"{1e3 * r['seconds_per_trial']:.3g}",
            ),
        ]
        for budget in budgets:
            best = _reduce(
                [row for row in at if row["budget"] == budget],
                ("function", "method"),
                "regret_mean",
                np.median,
            )
            lines += [
                "",
                f"COCO bbob, {name}: best f - f_opt after {budget} trials, median "
                "over instances of the mean over seeds:",
                "",
                pivot_table(
                    best, "function", "method", lambda r: f"{r['regret_mean']:.3g}"
                ),
            ]
        lines.append("")
    return "\n".join(lines)


def plot_ecdf(traces: Sequence[RunTrace], output_dir: str | Path) -> list[Path]:
    r"""``bbob_ecdf_<D>d_<K>_in_flight.png`` per group: the fraction of triples
    solved against the number of evaluations (logarithmic), a line per method."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for group, methods in bbob_groups(traces).items():
        horizon = max(t.horizon for runs in methods.values() for t in runs)
        styles = plots.line_styles(len(methods), horizon)
        figure, axes = plots.new_figure()
        for (method, runs), style in zip(methods.items(), styles, strict=True):
            length = max(t.horizon for t in runs)
            curve = fraction_solved(_regrets(runs), length)
            steps = np.arange(1, length + 1)
            axes.plot(steps, curve, label=f"{method} ({len(runs)} runs)", **style)
        axes.set_xscale("log")
        axes.set_ylim(0.0, 1.0)
        title = (
            f"COCO bbob, {group_name(group)}: {len(BBOB_TARGETS)} targets "
            "f_opt + 10^k, k = 2..-8"
        )
        path = output_dir / f"bbob_ecdf_{group[0]}d_{group[1]}_in_flight.png"
        ylabel = "fraction of (function, instance, target) solved"
        written.append(
            plots.finish(figure, axes, path, title, "evaluations (told trials)", ylabel)
        )
    return written
