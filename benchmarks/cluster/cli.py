r"""``python -m benchmarks.cluster``: presets, the command line, and
the files it writes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.arguments import (
    OneLineParser,
    add_options,
    name_list,
    resolve_data_dir,
)
from benchmarks.cluster.methods import METHODS, method_label
from benchmarks.cluster.report import (
    format_markdown,
    plot,
    run_json,
    run_summary,
    summarize,
)
from benchmarks.cluster.simulation import simulate
from benchmarks.presets import Block, Preset
from benchmarks.problems import make_problem
from benchmarks.results import RunTrace, expected_uniform_regret
from benchmarks.runner import RunStore

#: The methods with the problem's fixed kernel.
_ALL = tuple(name for name in METHODS if not name.endswith("-learned"))


def _preset(name: str, problem: str, workers: int, horizon: int) -> Preset:
    r"""The run of every fixed-kernel method, seed 0, on ``problem`` with ``workers``
    workers for ``horizon`` evaluations."""
    return Preset(
        name,
        f"{problem}, W = {workers}, T = {horizon}",
        (Block((problem,), _ALL, horizon, workers),),
    )


#: Presets, all with ``W = 100`` but the smoke run: cadata with ``T = 10^4``
#: (needs ``--data-dir``), Rosenbrock-8 on 20,000 arms with ``T = 2,000`` (the
#: ``default`` benchmark's problem and horizon), and a seconds-long smoke run.
PRESETS = {
    preset.name: preset
    for preset in (
        _preset("cluster-cadata", "cadata:lengthscale=3:noise=1", 100, 10_000),
        _preset("cluster-rosenbrock", "rosenbrock:dim=8:arms=20000:noise=1", 100, 2000),
        _preset("cluster-smoke", "rosenbrock:dim=8:arms=500:noise=1", 8, 60),
    )
}


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    r"""The command line; ``prog`` names the command in its help."""
    parser = OneLineParser(
        prog=prog or "python -m benchmarks.cluster",
        description="Bandits on a simulated cluster of W workers with log-normal "
        "evaluation times: regret vs simulated time, utilization, optimizer time.",
    )
    add_options(
        parser,
        "preset",
        "list",
        preset={"choices": list(PRESETS), "default": "cluster-smoke"},
    )
    parser.add_argument("--problem", help="problem spec (overrides the preset's)")
    add_options(
        parser,
        "methods",
        methods={
            "type": name_list(METHODS),
            "help": f"comma-separated, any of {', '.join(METHODS)} (default: the "
            "preset's)",
        },
    )
    parser.add_argument("-W", "--workers", type=int, help="workers W (1 to 1000)")
    add_options(parser, "horizon", "seeds")
    parser.add_argument("--duration-mean", type=float, default=1.0)
    parser.add_argument("--duration-sigma", type=float, default=1.0)
    parser.add_argument(
        "--ratio-threshold",
        type=float,
        help="BBKB's C~ for bbkb-sync and bbkb-async (default: 2 for bbkb-sync, "
        "1 + 0.07 W v for bbkb-async, v the outputscale over the noise variance)",
    )
    parser.add_argument(
        "--reference",
        help="method label of the time-to-reference column (default bbkb-sync, "
        "with -c<C~> for --ratio-threshold C~)",
    )
    add_options(
        parser,
        *("collect", "resume", "data_dir", "output_dir", "plot_dir", "no_plots"),
        output_dir={"default": "cluster_results"},
    )
    return parser


def _run(args: argparse.Namespace) -> tuple[list[RunTrace], dict[str, object]]:
    r"""Run the preset with the command line's overrides, saving every trace to
    ``--output-dir/runs/w<W>/`` (with ``--resume``, reusing the stored runs of the
    same settings); returns the traces and the settings."""
    block = PRESETS[args.preset].block
    (spec,) = block.problems
    methods = args.methods or block.methods
    seeds = args.seeds or block.seeds
    workers = args.workers or block.in_flight
    horizon = args.horizon or block.horizon
    problem = make_problem(args.problem or spec, data_dir=resolve_data_dir(args))
    uniform_regret = expected_uniform_regret(problem)
    settings = {
        "problem": problem.name,
        "workers": workers,
        "horizon": horizon,
        "seeds": list(seeds),
        "duration_mean": args.duration_mean,
        "duration_sigma": args.duration_sigma,
        "ratio_threshold": args.ratio_threshold,
    }
    store = RunStore(Path(args.output_dir) / "runs" / f"w{workers}")
    traces = []
    for seed in seeds:
        for method in methods:
            fingerprint = {k: v for k, v in settings.items() if k != "seeds"} | {
                "method": method,
                "optimum": problem.optimum,
                "uniform_regret": uniform_regret,
            }
            name = method_label(method, args.ratio_threshold)
            if args.resume:
                trace, why = store.load(problem.name, name, seed, fingerprint)
                if why is not None:
                    print(f"note: running again: {why}", flush=True)
                if trace is not None:
                    traces.append(trace)
                    continue
            trace = simulate(
                problem,
                method,
                workers=workers,
                horizon=horizon,
                seed=seed,
                duration_mean=args.duration_mean,
                duration_sigma=args.duration_sigma,
                ratio_threshold=args.ratio_threshold,
                uniform_regret=uniform_regret,
            )
            store.save(trace, fingerprint)
            summary = run_summary(trace)
            print(
                f"{trace.policy} seed {seed}: makespan {summary['makespan']:.1f}, "
                f"utilization {summary['utilization']:.3f} (until the last start "
                f"{summary['utilization_until_last_start']:.3f}), regret ratio "
                f"{summary['regret_ratio']:.4f}, "
                f"{summary['ms_per_suggestion']:.2f} ms CPU / suggestion",
                flush=True,
            )
            traces.append(trace)
    return traces, settings


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    r"""Run a preset (options override it), or with ``--collect`` gather saved runs;
    write ``cluster_results.json``, ``cluster_table.md`` and the PNGs to
    ``--output-dir`` and print the table. Returns the exit status."""
    args = build_parser(prog).parse_args(argv)
    if args.list:
        for name, preset in PRESETS.items():
            print(f"{name}: {preset.description}")
        return 0
    torch.set_num_threads(1)
    if args.collect:
        stores = [
            RunStore(folder)
            for d in args.collect
            for folder in sorted(Path(d).glob("runs/w*"))
        ]
        traces = [trace for store in stores for trace in store.traces()]
        if not traces:
            raise SystemExit(f"No saved runs under {args.collect}.")
        settings: dict[str, object] = {
            "collected": [str(store.directory) for store in stores]
        }
    else:
        traces, settings = _run(args)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    reference = args.reference or method_label("bbkb-sync", args.ratio_threshold)
    rows = summarize(traces, reference)
    table = format_markdown(rows, reference)
    command = "python -m benchmarks.cluster " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    results = {
        "command": command,
        "settings": settings | {"torch_threads": torch.get_num_threads()},
        "rows": rows,
        "runs": [run_json(trace) for trace in traces],
    }
    (output / "cluster_results.json").write_text(json.dumps(results, indent=1))
    (output / "cluster_table.md").write_text(table + "\n")
    if not args.no_plots:
        plot(traces, args.plot_dir or output, reference)
    print(table)
    return 0
