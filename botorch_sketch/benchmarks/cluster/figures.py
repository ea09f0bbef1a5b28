r"""The cluster benchmark's PNGs: regret ratio and utilization against simulated
time, and the utilization / regret trade-off."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from botorch_sketch.benchmarks.cluster.methods import label
from botorch_sketch.benchmarks.cluster.report import (
    busy_fraction,
    makespan,
    times,
    utilization_until_last_start,
    value_on_grid,
    workers,
)
from botorch_sketch.benchmarks.results import RunTrace


def _time_grid(traces: Sequence[RunTrace], points: int = 400) -> np.ndarray:
    low = min(float(times(t)[0]) for t in traces)
    high = max(makespan(t) for t in traces)
    return np.geomspace(low, high, points)


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return path


def plot(
    traces: Sequence[RunTrace],
    output_dir: str | Path,
    reference: str = "bbkb-sync",
) -> list[Path]:
    r"""For each ``(problem, W)``: ``cluster_<problem>_w<W>_regret.png`` (regret
    ratio vs simulated time, mean over seeds, log time axis, each line ending at its
    makespan), ``..._utilization.png`` (:func:`busy_fraction` over log-spaced
    windows) and, when the reference method ran, ``..._tradeoff.png``
    (:func:`plot_tradeoff`)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[RunTrace]] = {}
    for trace in traces:
        runs.setdefault((trace.problem, workers(trace)), []).append(trace)
    paths = []
    for (problem, width), group in runs.items():
        grid = _time_grid(group)
        views = (
            (
                "regret",
                lambda t, g: value_on_grid(t, t.curve("regret_ratio"), g),
                "regret ratio R_k / (k r_unif)",
            ),
            ("utilization", busy_fraction, "fraction of workers busy"),
        )
        for suffix, curve, ylabel in views:
            figure = Figure(figsize=(7, 4.2))
            axes = figure.add_subplot()
            methods = dict.fromkeys(t.policy for t in group)
            for method in methods:
                mine = [t for t in group if t.policy == method]
                curves = np.array([curve(t, grid) for t in mine])
                started = ~np.isnan(curves).all(axis=0)
                mean = np.full(grid.shape, np.nan)
                mean[started] = np.nanmean(curves[:, started], axis=0)
                axes.plot(grid, mean, label=label(method))
            axes.set_xscale("log")
            if suffix == "regret":
                axes.set_yscale("log")
            axes.set_xlabel("simulated wall time (mean evaluation time = 1)")
            axes.set_ylabel(ylabel)
            axes.set_title(f"{problem}, W = {width} workers, T = {group[0].horizon}")
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize=8)
            figure.tight_layout()
            name = f"cluster_{problem}_w{width}_{suffix}.png"
            paths.append(_save(figure, output_dir / name))
        name = f"cluster_{problem}_w{width}_tradeoff.png"
        figure = plot_tradeoff(group, reference)
        if figure is not None:
            paths.append(_save(figure, output_dir / name))
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
    figure = Figure(figsize=(7, 4.2))
    axes = figure.add_subplot()
    for name, (x, y) in points.items():
        axes.scatter(x, y, label=name, s=24)
    if omitted:
        note = "not drawn (above 2): " + ", ".join(omitted)
        axes.annotate(note, (0.01, 0.01), xycoords="axes fraction", fontsize=8)
    axes.axvline(0.9, color="grey", linestyle="--", linewidth=1)
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes.set_xlabel("utilization until the last start")
    axes.set_ylabel(f"final regret ratio / {label(reference)}'s (same seed)")
    axes.set_title(f"{traces[0].problem}, W = {workers(traces[0])}: one point per run")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure
