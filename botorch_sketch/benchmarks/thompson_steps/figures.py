r"""The step-time PNG: median step time against ``t`` and against ``N``."""

from __future__ import annotations

from collections.abc import Sequence

from botorch_sketch.benchmarks.thompson_steps.steps import METHODS

#: Line style and marker of each method in :func:`plot_step_times`.
_METHOD_STYLES = {"sgpts-cached": ("-", "o"), "exact-gpts-incremental": ("--", "s")}


def plot_step_times(results: Sequence[dict[str, object]], path: str) -> None:
    r"""Write a PNG of median step time against ``t`` (left, one line per method and
    ``N``) and against ``N`` (right, one line per method and ``t``) from runs of
    :func:`measure_thompson_steps` at one or more ``N``.

    The color is ``N`` (left) or ``t`` (right), the line style and marker the
    method, so lines that coincide stay visible; legends sit below the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 5.6), layout="constrained")
    FigureCanvasAgg(figure)
    by_t, by_n = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    points: dict[tuple[str, int], dict[int, float]] = {}
    sizes = sorted({result["settings"]["num_arms"] for result in results})
    for result in results:
        N = result["settings"]["num_arms"]
        for name, runs in result["timings"].items():
            ts = sorted(runs)
            style, marker = _METHOD_STYLES[name]
            by_t.plot(
                ts,
                [runs[t].median_ms for t in ts],
                linestyle=style,
                marker=marker,
                color=f"C{sizes.index(N) % 10}",
                label=f"{METHODS[name]}, N = {N:,}",
            )
            for t in ts:
                points.setdefault((name, t), {})[N] = runs[t].median_ms
    ts_all = sorted({t for _, t in points})
    for (name, t), by_size in sorted(points.items()):
        if len(by_size) > 1:
            arms = sorted(by_size)
            style, marker = _METHOD_STYLES[name]
            by_n.plot(
                arms,
                [by_size[n] for n in arms],
                linestyle=style,
                marker=marker,
                color=f"C{ts_all.index(t) % 10}",
                label=f"{METHODS[name]}, t = {t:,}",
            )
    for axes, xlabel in ((by_t, "observations t"), (by_n, "arms N")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel("median step time [ms]")
        axes.grid(True, which="both", alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(
                fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2
            )
    figure.suptitle(
        "Thompson step time (q = 1), Hartmann-6 arms, one thread; "
        "solid: S-GP-TS, cached; dashed: exact GP-TS, incremental"
    )
    figure.savefig(path, dpi=120)
