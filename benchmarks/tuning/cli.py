r"""``python -m benchmarks.tuning``: run a tuning preset (``--problems
a,b``, ``--methods c,d``, ``--seeds 0,1``: only those of its problems, methods and
seeds), saving each run to ``runs/`` as it finishes (``--resume`` reuses those made
with the same settings); then write ``summary.csv``, ``curves.csv``,
``results.json``, ``traces.json``, ``regret.csv``, ``tables.md`` (:mod:`.report`)
and three PNG plots per problem label; for COCO's ``bbob`` problems, COCO's measures
instead (:mod:`.coco`: ``bbob_ecdf.csv``, its tables and an ECDF plot per dimension
and trials in flight); for constrained problems the best feasible loss
(``constrained.csv``, its tables, a ``_best_feasible.png`` and a time plot per
problem label), for problems of several losses the hypervolume of the observed
losses (``hypervolume.csv``, its tables, a ``_hypervolume.png`` and a time plot per
problem label) instead of the regret (their ``values`` in ``summary.csv`` and
``curves.csv`` are the negated first losses of every trial, feasible or not)."""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.arguments import (
    OneLineParser,
    add_options,
    collected_files,
    resolve_data_dir,
)
from benchmarks.presets import Preset
from benchmarks.results import RunTrace
from benchmarks.runner import RunStore
from benchmarks.tuning.coco import (
    bbob_spec,
    coco_tables,
    ecdf_rows,
    plot_ecdf,
)
from benchmarks.tuning.driver import (
    arm_set_floor,
    load_problems,
    parse_label,
    preset_runs,
    run_preset,
    stored_runs,
    with_optima,
)
from benchmarks.tuning.presets import PRESETS
from benchmarks.tuning.problems import make_tuning_problem
from benchmarks.tuning.report import (
    constrained_rows,
    constrained_tables,
    growth_notes,
    hypervolume_rows,
    hypervolume_tables,
    is_constrained,
    is_multi_objective,
    markdown_tables,
    max_hypervolume,
    plot_all,
    regret_rows,
    window_rows,
    window_tables,
)
from benchmarks.writers import write_results

PROG = "python -m benchmarks.tuning"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Hyperparameter-tuning benchmark: the package's Ray Tune "
        "searchers and Optuna samplers with default options against Optuna's TPE, "
        "GP, CMA-ES, NSGA-II and random samplers, random search and Ax, at equal "
        "budgets (constrained and multi-objective problems too).",
    )
    add_options(
        parser,
        *("preset", "list", "data_dir", "output_dir", "no_progress", "collect"),
        "resume",
        preset={"choices": list(PRESETS)},
        output_dir={"default": "tuning_PRESET"},
    )
    for field in ("problems", "methods", "seeds"):
        parser.add_argument(
            f"--{field}",
            metavar="LIST",
            help=f"comma-separated {field} of the preset to run (default: all of them)",
        )
    return parser


def restrict(
    preset: Preset,
    problems: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> Preset:
    r"""The preset with only the ``problems``, ``methods`` and ``seeds`` named
    (None: all of them) in its blocks (a block left without any is dropped);
    ``ValueError`` naming those it lacks."""
    blocks = preset.blocks
    for field, names in (
        ("problems", problems),
        ("methods", methods),
        ("seeds", seeds),
    ):
        if names is None:
            continue
        known = dict.fromkeys(
            n for block in preset.blocks for n in getattr(block, field)
        )
        missing = [str(name) for name in names if name not in known]
        if missing:
            raise ValueError(
                f"{preset.name} has no {field[:-1]} {', '.join(missing)}; its "
                f"{field}: {', '.join(map(str, known))}"
            )
        kept = (
            replace(
                block, **{field: tuple(n for n in getattr(block, field) if n in names)}
            )
            for block in blocks
        )
        blocks = tuple(block for block in kept if getattr(block, field))
    return replace(preset, blocks=blocks)


def write_csv(path: Path, rows: Sequence[dict[str, object]]) -> None:
    r"""Write ``rows`` (dicts with the same keys, at least one) to the CSV ``path``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def problem_tables(
    preset: Preset,
    traces: Sequence[RunTrace],
    rows: Sequence[dict[str, object]],
) -> str:
    r"""The Markdown tables of the problems other than ``bbob``: simple regret and
    time per trial, the preset's windows and the searchers' arm-set floors."""
    tables = markdown_tables(rows, preset.budgets)
    if preset.windows:
        tables += "\n\n" + window_tables(window_rows(traces, preset.windows))
        growth = growth_notes(traces, max(preset.budgets))
        if growth:
            tables += "\n" + "\n".join(f"- {note}" for note in growth)
    seeds = tuple(sorted({trace.seed for trace in traces}))
    names = dict.fromkeys(parse_label(trace.problem)[0] for trace in traces)
    names.pop("hgb-cadata", None)  # needs data, and its minimum is unknown
    if any(trace.policy in ("bbkb", "sgpts") for trace in traces) and names:
        floors = [
            f"{name}: {arm_set_floor(make_tuning_problem(name), seeds):.3g}"
            for name in names
        ]
        tables += (
            "\n\nThe searchers' initial arm set (2,048 Sobol configurations, before "
            "the refined ones are added): the smallest regret among its "
            f"configurations, mean over seeds {list(seeds)}: " + "; ".join(floors) + "."
        )
    return tables


def write_outputs(
    preset: Preset,
    traces: Sequence[RunTrace],
    output_dir: Path,
    notes: list[str],
) -> str:
    r"""Write the result files and plots; return the Markdown tables: those of
    :func:`problem_tables`, then COCO's measures on the ``bbob`` problems
    (:func:`~.coco.coco_tables`, ``bbob_ecdf.csv``, an ECDF plot per dimension and
    trials in flight) instead of per-problem tables and plots, then the best
    feasible loss on constrained problems (:func:`~.report.constrained_tables`,
    ``constrained.csv``) and the hypervolume on problems of several losses
    (:func:`~.report.hypervolume_tables`, ``hypervolume.csv``), each with its
    plots; ``regret.csv`` holds the other problems' rows (none: not written)."""
    metadata = {
        "preset": preset.name,
        "budgets": list(preset.budgets),
        "notes": notes,
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
    }
    write_results(traces, output_dir, metadata)
    saved = {"metadata": metadata, "traces": [trace.to_dict() for trace in traces]}
    (output_dir / "traces.json").write_text(json.dumps(saved))
    constrained = [trace for trace in traces if is_constrained(trace)]
    multi = [trace for trace in traces if is_multi_objective(trace)]
    single = [t for t in traces if not (is_constrained(t) or is_multi_objective(t))]
    rows = regret_rows(single, preset.budgets)
    if rows:
        write_csv(output_dir / "regret.csv", rows)
    others = [trace for trace in single if bbob_spec(trace.problem) is None]
    sections = []
    if others:
        known = {trace.problem for trace in others}
        at = [row for row in rows if row["problem"] in known]
        sections.append(problem_tables(preset, others, at))
        plot_all(others, output_dir)
    if len(others) < len(single):
        sections.append(coco_tables(single, rows, preset.budgets))
        write_csv(output_dir / "bbob_ecdf.csv", ecdf_rows(single, preset.budgets))
        plot_ecdf(single, output_dir)
    if constrained:
        found = constrained_rows(constrained, preset.budgets)
        write_csv(output_dir / "constrained.csv", found)
        minima = {
            parse_label(t.problem)[0]: -t.optimum
            for t in constrained
            if not np.isnan(t.optimum)
        }
        sections.append(constrained_tables(found, preset.budgets, minima))
        plot_all(constrained, output_dir)
    if multi:
        found = hypervolume_rows(multi, preset.budgets)
        write_csv(output_dir / "hypervolume.csv", found)
        references = {
            parse_label(t.problem)[0]: (
                t.metadata["reference_point"],
                max_hypervolume(t),
            )
            for t in multi
        }
        sections.append(hypervolume_tables(found, preset.budgets, references))
        plot_all(multi, output_dir)
    tables = "\n\n".join(sections)
    text = "\n".join([tables, *(f"\n- {note}" for note in notes)])
    (output_dir / "tables.md").write_text(text + "\n")
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the preset; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        for preset in PRESETS.values():
            print(f"{preset.name}: {preset.description}")
        return 0
    if args.preset is None:
        parser.error("pass --preset NAME or --list")
    preset = PRESETS[args.preset]
    for field in ("problems", "methods", "seeds"):
        given = getattr(args, field)
        if given is None or args.collect:
            continue
        names: list = [n for n in given.split(",") if n]
        try:
            if field == "seeds":
                names = [int(n) for n in names]
            preset = restrict(preset, **{field: names})
        except ValueError as error:
            parser.error(f"argument --{field}: {error}")
    output_dir = Path(str(args.output_dir).replace("PRESET", preset.name))
    if args.collect:
        saved = [
            json.loads(path.read_text())
            for path in collected_files(parser, args.collect, "traces.json")
        ]
        traces = [RunTrace.from_dict(t) for run in saved for t in run["traces"]]
        notes = [note for run in saved for note in run["metadata"]["notes"]]
        print(write_outputs(preset, traces, output_dir, notes))
        return 0
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # scikit-learn's OpenMP and BLAS: one thread too
    except ImportError:
        pass
    problems, notes = load_problems(preset, resolve_data_dir(args))
    for note in notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    if not problems:
        print(f"{PROG}: error: nothing to run", file=sys.stderr)
        return 2
    store = RunStore(output_dir / "runs")
    runs = preset_runs(preset, problems)
    done, reruns = stored_runs(preset, problems, store) if args.resume else ({}, [])
    for line in reruns:
        print(f"note: {line}")
    if args.resume:
        print(f"note: resuming: {len(done)} of {len(runs)} runs already done")
    elif len(store):
        print(
            f"note: {store.directory}/ holds {len(store)} finished run(s) of an "
            "earlier command; this one replaces those it repeats (--resume would "
            "reuse them)"
        )
    total = sum(block.horizon for key, block in runs.items() if key not in done)
    from tqdm.auto import tqdm

    try:
        with tqdm(total=total, unit="trial", disable=args.no_progress) as bar:
            traces = run_preset(
                preset, problems, lambda: bar.update(), store=store, done=done
            )
    except BaseException as error:
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else "crashed"
        print(
            f"{PROG}: {what}: the finished runs are in {store.directory}/; the same "
            "command with --resume runs the rest",
            file=sys.stderr,
        )
        if isinstance(error, KeyboardInterrupt):
            return 130
        raise
    notes += [
        f"{name} ({k} in flight) {method} seed {seed}: {trace.metadata['stopped']}"
        for (name, k, method, seed), trace in traces.items()
        if trace.metadata.get("stopped")
    ]
    tables = write_outputs(preset, with_optima(traces), output_dir, notes)
    print(tables)
    print(f"results in {output_dir}")
    return 0
