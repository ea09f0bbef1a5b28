r"""Benchmark output shared by every benchmark tool: :func:`text_table` and
:func:`markdown_table`; :func:`format_table` for the terminal, :func:`write_results`
for ``summary.csv``, ``curves.csv`` and ``results.json``."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.results import (
    RunTrace,
    band_description,
    json_safe,
    summarize,
)


def safe_name(name: str) -> str:
    r"""``name`` with every run of characters outside ``[A-Za-z0-9_.-]`` as ``_``
    (for file names)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def format_cell(value: object, spec: str = "") -> str:
    r"""``format(value, spec)``, or ``"-"`` (an empty cell) for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[object]], labels: int = 1
) -> str:
    r"""An aligned text table, cells as :func:`format_cell`: the first ``labels``
    columns left-justified, the others right-justified, two spaces apart, a rule of
    dashes under the header."""
    rows = [[format_cell(cell) for cell in row] for row in rows]
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]

    def render(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i < labels else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = ["-" * width for width in widths]
    return "\n".join(render(line) for line in [header, rule, *rows])


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[object]], labels: int = 1
) -> str:
    r"""A Markdown table, cells as :func:`format_cell`: the first ``labels`` columns
    left-aligned, the others right-aligned."""
    rows = [[format_cell(cell) for cell in row] for row in rows]
    align = ["---"] * labels + ["---:"] * (len(header) - labels)
    return "\n".join("| " + " | ".join(line) + " |" for line in [header, align, *rows])


#: The two tables of :func:`format_table`, each a list of (summary key, header,
#: format): what a method found and what it cost, then where its time went.
TABLE_COLUMNS = (
    (
        ("policy", "policy", ""),
        ("cumulative_regret", "cum. regret", ".4g"),
        ("regret_ratio", "regret ratio", ".4f"),
        ("simple_regret", "simple regret", ".4f"),
        ("total_seconds", "total s", ".2f"),
        ("time_vs_reference", "time/exact", ".3g"),
    ),
    (
        ("policy", "policy", ""),
        ("ask_seconds", "select s", ".2f"),
        ("tell_seconds", "update s", ".2f"),
        ("time_vs_flops", "time/flops", ".3g"),
        ("aten_calls_per_evaluation", "ops/eval", ".0f"),
        ("syncs_per_evaluation", "syncs/eval", ".1f"),
        ("max_batch_size", "max batch", ".0f"),
        ("dictionary_size", "dict size", ".0f"),
        ("dictionary_churn", "churn", ".1f"),
        ("peak_memory_mb", "peak MiB", ".0f"),
    ),
)


def format_table(rows: Sequence[dict[str, object]]) -> str:
    r"""The terminal summary of :func:`summarize` rows, one block per problem (its
    name, ``T`` and seeds, then two tables of about 100 characters: regret and time,
    and where the time went): means, with the band of the regret ratio and of the
    total time in brackets when there are several seeds, and a last line saying
    what the band is."""
    interval_keys = {"regret_ratio", "total_seconds"}  # cum. regret: as the ratio
    blocks = []
    for problem in dict.fromkeys(row["problem"] for row in rows):
        block = [row for row in rows if row["problem"] == problem]
        runs = dict.fromkeys(
            f"T = {r['horizon']}, {r['seeds']} seed{'s' * (r['seeds'] != 1)}"
            for r in block
        )
        lines = [f"{problem} ({'; '.join(runs)})"]
        for columns in TABLE_COLUMNS:
            cells = []
            for row in block:
                line = []
                for key, _, spec in columns:
                    text = format_cell(row.get(key), spec)
                    if key in interval_keys and row["seeds"] > 1 and text != "-":
                        low, high = row[f"{key}_low"], row[f"{key}_high"]
                        text += f" [{low:{spec}}, {high:{spec}}]"
                    line.append(text)
                cells.append(line)
            lines.append(text_table([header for _, header, _ in columns], cells))
        blocks.append("\n\n".join(lines))
    table = "\n\n".join(blocks)
    bands = dict.fromkeys(
        band_description(row["seeds"]).removeprefix("mean and ")
        for row in rows
        if row["seeds"] > 1
    )
    if bands:
        table += f"\nmeans; in brackets the {'; '.join(bands)}"
    return table


def checkpoints(horizon: int, max_points: int = 500) -> np.ndarray:
    r"""At most ``max_points`` evenly spaced steps in ``1..horizon``, both included."""
    return np.unique(np.linspace(1, horizon, min(horizon, max_points)).round()).astype(
        int
    )


def write_results(
    traces: Sequence[RunTrace],
    output_dir: str | Path,
    metadata: dict[str, object],
    max_points: int = 500,
) -> list[Path]:
    r"""Write ``summary.csv``, ``curves.csv`` and ``results.json`` to ``output_dir``.

    ``curves.csv`` (long format: problem, policy, seed, t, one column per curve) and
    the per-run curves in ``results.json`` keep at most ``max_points`` checkpoints per
    run (:func:`checkpoints`), always including ``t = 1`` and ``t = T``.

    Returns:
        The written paths.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = summarize(traces)
    summary_path = output_dir / "summary.csv"
    fieldnames = list(dict.fromkeys(key for row in rows for key in row))
    with summary_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames, restval="")
        writer.writeheader()
        writer.writerows(rows)
    names = list(dict.fromkeys(n for trace in traces for n in trace.curve_names()))
    runs = []
    curves_path = output_dir / "curves.csv"
    with curves_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["problem", "policy", "seed", "t", *names])
        for trace in traces:
            steps = checkpoints(trace.horizon, max_points)
            curves = {
                name: (
                    trace.curve(name)[steps - 1]
                    if name in trace.curve_names()
                    else np.full(len(steps), math.nan)
                )
                for name in names
            }
            for i, step in enumerate(steps):
                writer.writerow(
                    [trace.problem, trace.policy, trace.seed, int(step)]
                    + [repr(float(curves[name][i])) for name in names]
                )
            runs.append(
                {
                    "problem": trace.problem,
                    "policy": trace.policy,
                    "seed": trace.seed,
                    "memory_method": trace.memory_method,
                    "summary": trace.summary(),
                    "curves": {"t": steps.tolist()}
                    | {name: curves[name].tolist() for name in names},
                }
            )
    results_path = output_dir / "results.json"
    payload = {"metadata": metadata, "summary": rows, "runs": runs}
    results_path.write_text(json.dumps(json_safe(payload), indent=1))
    return [summary_path, curves_path, results_path]
