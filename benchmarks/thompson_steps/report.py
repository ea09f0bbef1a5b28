r"""The step-time and box tables, the results' JSON file and the step-time PNG."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict

from benchmarks.thompson_steps.steps import METHODS, StepTimings
from benchmarks.writers import format_cell, text_table

#: Method keys of :func:`time_box_batches` with their table labels.
BOX_METHODS = {"sgpts": "S-GP-TS", "exact-gpts": "exact GP-TS"}
#: Line style and marker of each method in :func:`plot_step_times`.
_METHOD_STYLES = {"sgpts-cached": ("-", "o"), "exact-gpts-incremental": ("--", "s")}


def _span(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if values[-1] != values[0] else str(values[0])


def format_report(results: dict[str, object]) -> str:
    r"""The results of :func:`measure_thompson_steps` as a text table and summary.

    ``flop x`` is the median step time over the time of its flop count at the
    measured ``N x (M + m)`` matrix-vector throughput.
    """
    s = results["settings"]
    lines = [
        f"S-GP-TS Hartmann-6: N = {s['num_arms']} arms, m = {s['num_inducing']}, "
        f"M = {s['num_features']}, quality {s['inducing_quality']}, seed {s['seed']}, "
        f"{s['torch_threads']} torch threads, {s['warmup']} warm-up steps, cache "
        f"{s['cache_dtype']} within {s['memory_budget_gib']:g} GiB, matrix-vector "
        f"throughput {s['gemv_flops'] / 1e9:.2f} GFlop/s (1024^3 matrix product "
        f"{s.get('gemm_flops', math.nan) / 1e9:.2f}), peak RSS "
        f"{s['peak_rss_gib']:.2f} GiB",
    ]
    rows = []
    for name, runs in results["timings"].items():
        for t, run in runs.items():
            select = 1e3 * statistics.median(run.select_seconds)
            update = 1e3 * statistics.median(run.update_seconds)
            flop_x = None
            if run.flops is not None:
                flop_x = run.median_ms / (1e3 * run.flops / s["gemv_flops"])
            rows.append(
                [
                    METHODS[name],
                    t,
                    len(run.chosen),
                    _span(run.observations),
                    run.num_inducing,
                    f"{select:.1f}",
                    f"{update:.1f}",
                    f"{run.median_ms:.1f}",
                    f"{run.min_ms:.1f}",
                    format_cell(run.memory_gib, ".2f"),
                    format_cell(flop_x, ".2f"),
                    run.reselections,
                ]
            )
    header = (
        "method,t,steps,n,m_t,select ms,update ms,median ms,min ms,GiB,flop x,resel"
    ).split(",")
    lines.append(text_table(header, rows))
    ts = s["ts"]
    for name, g in results["growth"].items():
        lines.append(
            f"{METHODS[name]} step(t={ts[-1]}) / step(t={ts[0]}): median "
            f"{g['median']:.2f}, min {g['min']:.2f}"
        )
    if results["speedup"]:
        rows = [
            [METHODS[name], t, f"{ratio['median']:.1f}x", f"{ratio['min']:.1f}x"]
            for name, by_t in results["speedup"].items()
            for t, ratio in by_t.items()
        ]
        lines += [
            "speed-up of S-GP-TS, exact over S-GP-TS step time:",
            text_table(["versus", "t", "median", "min"], rows),
        ]
    return "\n".join(lines)


def save_results(results: Sequence[dict[str, object]], path: str) -> None:
    r"""Write runs of :func:`measure_thompson_steps` (e.g. one per ``N``) as JSON."""
    data = [
        {
            **result,
            "timings": {
                name: {t: asdict(run) for t, run in runs.items()}
                for name, runs in result["timings"].items()
            },
        }
        for result in results
    ]
    with open(path, "w") as file:  # json writes the int keys t as strings
        json.dump(data, file, indent=1)


def load_results(path: str) -> list[dict[str, object]]:
    r"""Read runs written by :func:`save_results`."""
    with open(path) as file:
        data = json.load(file)
    for result in data:
        result["timings"] = {
            name: {int(t): StepTimings(**run) for t, run in runs.items()}
            for name, runs in result["timings"].items()
        }
        result["speedup"] = {
            name: {int(t): ratio for t, ratio in by_t.items()}
            for name, by_t in result["speedup"].items()
        }
    return data


def format_box_report(results: dict[str, dict[int, dict[str, float]]]) -> str:
    r"""The results of :func:`time_box_batches` as a table with the speed-up."""
    rows = [
        [BOX_METHODS[name], t]
        + [f"{run[key]:.2f}" for key in ("select", "update", "batch")]
        for name, by_t in results.items()
        for t, run in by_t.items()
    ]
    header = ["method", "t", "select s", "update s", "batch s"]
    lines = ["continuous Hartmann-6, one batch (seconds):", text_table(header, rows)]
    for t, run in results["exact-gpts"].items():
        ratio = run["batch"] / results["sgpts"][t]["batch"]
        lines.append(f"exact GP-TS / S-GP-TS batch time at t={t}: {ratio:.1f}x")
    return "\n".join(lines)


def plot_step_times(results: Sequence[dict[str, object]], path: str) -> None:
    r"""Write a PNG of median step time against ``t`` (left, one line per method and
    ``N``) and against ``N`` (right, one line per method and ``t``) from runs of
    :func:`measure_thompson_steps` at one or more ``N``.

    The color is ``N`` (left) or ``t`` (right), the line style and marker the
    method, so lines that coincide stay visible; legends sit below the axes."""
    from benchmarks.plots import new_figure, save_figure

    figure, (by_t, by_n) = new_figure((11, 5.6), ncols=2)
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
        axes.set(xscale="log", yscale="log", xlabel=xlabel)
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
    save_figure(figure, path)
