r"""PNG figures of every benchmark tool: :func:`new_figure`, :func:`line_styles`,
:func:`finish` and :func:`save_figure` (matplotlib's Agg canvas; no global backend
change), and the main benchmark's :func:`plot_problem`: a figure per :data:`VIEWS`
entry and regret against wall time, a line per policy (mean and band over seeds)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from benchmarks.results import (
    RunTrace,
    aggregate_curve,
    band_description,
    group_traces,
)
from benchmarks.writers import safe_name


@dataclass(frozen=True)
class View:
    r"""One plot of a :meth:`RunTrace.curve` against ``t``, saved as
    ``<problem>_<curve>.png``; ``legend_value`` (``"max"``, ``"last"`` or None) adds
    that value of the mean curve to each legend entry; ``timed``: a wall time."""

    curve: str
    ylabel: str
    log_y: bool = False
    legend_value: str | None = None
    timed: bool = False


VIEWS = (
    View("regret_ratio", "regret ratio R_t / R_t(uniform)"),
    View("cumulative_time", "cumulative wall time [s]", log_y=True, timed=True),
    View(
        "time_per_evaluation",
        "wall time per evaluation [s]\n(batch time / batch size, trailing mean)",
        log_y=True,
        timed=True,
    ),
    View("batch_size", "batch size", log_y=True, legend_value="max"),
    View("dictionary_size", "dictionary size", legend_value="last"),
)

_LINE_STYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_NUM_MARKERS = 8


def line_styles(num_lines: int, num_steps: int) -> list[dict[str, object]]:
    r"""Keyword arguments of ``Axes.plot`` for each of ``num_lines`` lines of
    ``num_steps`` points: color, line style, marker and staggered ``markevery``, so
    that coinciding lines show every line's markers at different steps."""
    every = max(1, num_steps // _NUM_MARKERS)
    styles = itertools.cycle(_LINE_STYLES)
    markers = itertools.cycle(_MARKERS)
    return [
        {
            "linestyle": next(styles),
            "marker": next(markers),
            "markevery": (min(i * every // num_lines, num_steps - 1), every),
            "markersize": 5,
            "linewidth": 1.4,
            "color": f"C{i % 10}",
        }
        for i in range(num_lines)
    ]


def plot_title(
    problem: str, groups: dict[str, list[RunTrace]], method: str = "auto"
) -> str:
    r"""The figures' title: the seed of one-seed runs, else what the band
    (:func:`seed_band` with ``method``) shows."""
    counts = {len(group) for group in groups.values()}
    if counts == {1}:
        seeds = {group[0].seed for group in groups.values()}
        if len(seeds) == 1:
            return f"{problem}: seed {seeds.pop()}"
        return f"{problem}: 1 seed per policy"
    if len(counts) == 1:
        return f"{problem}: {band_description(counts.pop(), method)}"
    return f"{problem}: mean and band over the seeds in the legend"


def machine_line(traces: Sequence[RunTrace]) -> str | None:
    r"""``"1 thread, matmul 33.0 GFLOP/s"`` from the runs' environments (a range of
    throughputs when they differ, e.g. after ``--resume``); None when unknown."""
    known = [t.environment for t in traces if "matmul_gflops" in t.environment]
    if not known:
        return None
    threads = sorted({int(env["torch_threads"]) for env in known})
    gflops = sorted(float(env["matmul_gflops"]) for env in known)
    count = "/".join(map(str, threads))
    speed = f"{gflops[0]:.1f}" + (
        f"-{gflops[-1]:.1f}" if gflops[-1] - gflops[0] >= 0.05 else ""
    )
    unknown = " (some runs unknown)" if len(known) < len(traces) else ""
    return (
        f"{count} thread{'' if threads == [1] else 's'}, matmul {speed} GFLOP/s "
        f"measured at the start{unknown}"
    )


def new_figure(
    figsize: tuple[float, float] = (8.0, 4.2), ncols: int = 1
) -> tuple[Figure, Axes | np.ndarray]:
    r"""A figure with constrained layout and its axes (an array of ``ncols`` when
    ``ncols > 1``)."""
    figure = Figure(figsize=figsize, layout="constrained")
    return figure, figure.subplots(1, ncols)


def save_figure(figure: Figure, path: str | Path) -> Path:
    r"""Write ``figure`` to the PNG file ``path`` at 110 dpi; return the path."""
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return Path(path)


def finish(
    figure: Figure,
    axes: Axes,
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    machine: str | None = None,
) -> Path:
    r"""Label the axes, title them (a second line ``machine``, if given), add a grid
    and the legend right of the axes, and :func:`save_figure`."""
    axes.set(xlabel=xlabel, ylabel=ylabel)
    axes.set_title(title if machine is None else f"{title}\n{machine}", fontsize=10)
    axes.grid(True, which="major", alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    return save_figure(figure, path)


def plot_against_time(
    groups: dict[str, list[RunTrace]],
    curve: str,
    labels: dict[str, str],
    styles: dict[str, dict[str, object]],
) -> tuple[Figure, Axes]:
    r"""A :func:`new_figure` of each group's mean ``curve`` against its mean
    ``cumulative_time``, both axes logarithmic."""
    figure, axes = new_figure()
    for key, group in groups.items():
        _, seconds, _, _ = aggregate_curve(group, "cumulative_time")
        _, mean, _, _ = aggregate_curve(group, curve)
        axes.plot(seconds, mean, label=labels[key], **styles[key])
    axes.set_xscale("log")
    axes.set_yscale("log", nonpositive="mask")
    return figure, axes


def plot_problem(
    traces: Sequence[RunTrace], output_dir: str | Path, problem: str
) -> list[Path]:
    r"""Draw every view for one problem's traces.

    Args:
        traces: Traces of that problem (any policies and seeds).
        output_dir: Existing or new folder for the PNG files.
        problem: The problem's name (file prefix and title). Views of wall time get
            a second title line with the runs' threads and measured matmul
            throughput (:attr:`RunTrace.environment`), when known.

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
    machine = machine_line([trace for group in groups.values() for trace in group])
    mixed = len({len(group) for group in groups.values()}) > 1
    horizon = min(trace.horizon for group in groups.values() for trace in group)
    styles = dict(zip(groups, line_styles(len(groups), horizon), strict=True))
    labels = {p: f"{p} ({len(g)} seeds)" if mixed else p for p, g in groups.items()}
    prefix = safe_name(problem)
    written = []
    for view in VIEWS:
        method = "range" if view.log_y else "auto"  # log axes: no band clipped at 0
        title = plot_title(problem, groups, method)
        curves = {
            policy: aggregate_curve(group, view.curve, method)
            for policy, group in groups.items()
            if view.curve in group[0].curve_names()
        }
        if not curves:
            continue
        figure, axes = new_figure()
        for policy, (steps, mean, low, high) in curves.items():
            label = labels[policy]
            if view.legend_value is not None:
                value = np.nanmax(mean) if view.legend_value == "max" else mean[-1]
                label += f": {view.legend_value} {value:.0f}"
            axes.plot(steps, mean, label=label, **styles[policy])
            if len(groups[policy]) > 1:
                axes.fill_between(
                    steps, low, high, color=styles[policy]["color"], alpha=0.15
                )
        if view.log_y:
            axes.set_yscale("log")
        if view.legend_value is not None:  # sizes: plain numbers on the axis
            axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axes.yaxis.set_minor_formatter(NullFormatter())
        path = output_dir / f"{prefix}_{view.curve}.png"
        timed = machine if view.timed else None
        written.append(
            finish(figure, axes, path, title, "evaluations t", view.ylabel, timed)
        )
    figure, axes = plot_against_time(groups, "cumulative_regret", labels, styles)
    counts = {len(group) for group in groups.values()}
    title = plot_title(problem, groups)
    if mixed:  # no band here: the title says "mean" only
        title = f"{problem}: mean over the seeds in the legend"
    elif counts != {1}:
        title = f"{problem}: mean of {counts.pop()} seeds"
    path = output_dir / f"{prefix}_regret_vs_time.png"
    xlabel, ylabel = "cumulative wall time [s]", "cumulative regret"
    written.append(finish(figure, axes, path, title, xlabel, ylabel, machine))
    return written


def plot_all(traces: Sequence[RunTrace], output_dir: str | Path) -> list[Path]:
    r"""Draw :func:`plot_problem` for every problem in ``traces``."""
    problems = dict.fromkeys(trace.problem for trace in traces)
    return [
        path
        for problem in problems
        for path in plot_problem(traces, output_dir, problem)
    ]
