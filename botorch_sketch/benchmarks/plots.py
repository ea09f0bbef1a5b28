r"""PNG plots of benchmark traces (matplotlib's Agg canvas; no global backend change).

For each problem, :func:`plot_problem` draws one figure per view, a line per policy
with the mean over seeds and a shaded 95% interval:

- ``<problem>_regret_ratio.png``: regret ratio ``R_t / R_t(uniform)`` vs ``t``;
- ``<problem>_cumulative_time.png``: cumulative wall time (selection + update) vs ``t``;
- ``<problem>_batch_size.png``: size of the batch holding evaluation ``t``;
- ``<problem>_dictionary_size.png``: the ``dictionary_size`` diagnostic vs ``t``
  (only when some policy reports it);
- ``<problem>_regret_vs_time.png``: cumulative regret vs cumulative wall time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from botorch_sketch.benchmarks.metrics import RunTrace, aggregate_curve, group_traces

#: ``(file suffix, curve, y label, log y)`` of the views against ``t``.
VIEWS = (
    ("regret_ratio", "regret_ratio", "regret ratio R_t / R_t(uniform)", False),
    ("cumulative_time", "cumulative_time", "cumulative wall time [s]", True),
    (
        "time_per_evaluation",
        "time_per_evaluation",
        "wall time per evaluation [s]",
        True,
    ),
    ("batch_size", "batch_size", "batch size", True),
    ("dictionary_size", "dictionary_size", "dictionary size", False),
)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return path


def plot_problem(
    traces: Sequence[RunTrace], output_dir: str | Path, problem: str
) -> list[Path]:
    r"""Draw every view for one problem's traces.

    Args:
        traces: Traces of that problem (any policies and seeds).
        output_dir: Existing or new folder for the PNG files.
        problem: The problem's name (file prefix and title).

    Returns:
        The written paths.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    groups = {
        policy: group
        for (name, policy), group in group_traces(traces).items()
        if name == problem
    }
    if not groups:
        raise ValueError(f"No traces for problem {problem!r}.")
    seeds = sorted({len(group) for group in groups.values()})
    title = f"{problem}: mean, 95% t-interval over {'/'.join(map(str, seeds))} seeds"
    written = []
    for suffix, curve, ylabel, log_y in VIEWS:
        curves = {
            policy: aggregate_curve(group, curve)
            for policy, group in groups.items()
            if curve in group[0].curve_names()
        }
        if not curves:
            continue
        figure = Figure(figsize=(6.4, 4.2), layout="constrained")
        axes = figure.add_subplot()
        for policy, (steps, mean, low, high) in curves.items():
            (line,) = axes.plot(steps, mean, label=policy)
            axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.15)
        if log_y:
            axes.set_yscale("log")
        axes.set_xlabel("evaluations t")
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.legend()
        written.append(_save(figure, output_dir / f"{_safe(problem)}_{suffix}.png"))
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for policy, group in groups.items():
        _, seconds, _, _ = aggregate_curve(group, "cumulative_time")
        _, regret, low, high = aggregate_curve(group, "cumulative_regret")
        (line,) = axes.plot(seconds, regret, label=policy)
        axes.fill_between(seconds, low, high, color=line.get_color(), alpha=0.15)
    axes.set_xscale("log")
    axes.set_xlabel("cumulative wall time [s] (mean over seeds)")
    axes.set_ylabel("cumulative regret")
    axes.set_title(title)
    axes.legend()
    written.append(_save(figure, output_dir / f"{_safe(problem)}_regret_vs_time.png"))
    return written


def plot_all(traces: Sequence[RunTrace], output_dir: str | Path) -> list[Path]:
    r"""Draw :func:`plot_problem` for every problem in ``traces``."""
    problems = dict.fromkeys(trace.problem for trace in traces)
    return [
        path
        for problem in problems
        for path in plot_problem(traces, output_dir, problem)
    ]
