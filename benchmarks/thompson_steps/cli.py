r"""``python -m benchmarks thompson_steps``: sizes, the command line and what it
writes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.arguments import (
    OneLineParser,
    add_options,
    collected_files,
    name_list,
    set_threads,
)
from benchmarks.thompson_steps.report import (
    format_box_report,
    format_report,
    load_results,
    plot_step_times,
    save_results,
)
from benchmarks.thompson_steps.steps import (
    METHODS,
    measure_thompson_steps,
    time_box_batches,
)

#: What an output folder holds: the results (one per N) and their figure.
RESULTS_NAME = "thompson_steps.json"
PLOT_NAME = "sgpts_step_time.png"

DESCRIPTION = (
    "Per-step wall time of S-GP-TS against exact GP-TS on S-GP-TS's Hartmann-6."
)

#: Sizes of the S-GP-TS paper's setting and of the quick ``--smoke`` variant.
FULL_SIZES = {
    "inducing": 100,
    "features": 1000,
    "arms": 10_000,
    "t": [500, 5000],
    "steps": 20,
    "exact_steps": 3,
}
SMOKE_SIZES = {
    "inducing": 10,
    "features": 64,
    "arms": 200,
    "t": [30, 60],
    "steps": 2,
    "exact_steps": 2,
}


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    r"""The argument parser; size flags default to the paper's setting."""
    parser = OneLineParser(
        prog=prog or "python -m benchmarks.thompson_steps",
        description=DESCRIPTION,
    )
    sizes = ", ".join(f"{k} {v}" for k, v in SMOKE_SIZES.items())
    parser.add_argument(
        "--smoke", action="store_true", help=f"tiny default sizes ({sizes})"
    )
    parser.add_argument("--inducing", type=int, help="inducing points m (100)")
    parser.add_argument("--features", type=int, help="random features M (1000)")
    parser.add_argument(
        "--arms", type=int, nargs="+", help="candidate arms N, one run each (10000)"
    )
    parser.add_argument(
        "--t", type=int, nargs="+", help="observation counts (500 5000)"
    )
    parser.add_argument("--steps", type=int, help="timed S-GP-TS steps per t (20)")
    parser.add_argument(
        "--exact-steps", type=int, help="timed exact GP-TS steps per t (3)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    parser.add_argument(
        "--quality", choices=("variance", "improvement"), default="variance"
    )
    add_options(
        parser,
        "methods",
        methods={
            "type": name_list(METHODS),
            "help": f"comma-separated, any of {', '.join(METHODS)} (default: all)",
        },
    )
    parser.add_argument(
        "--memory-budget",
        type=float,
        default=8.0,
        help="GiB of cached features and columns per method (8)",
    )
    parser.add_argument(
        "--cache-dtype", choices=("float32", "float64"), help="cache storage dtype"
    )
    add_options(
        parser,
        *("output_dir", "plot_dir", "no_plots", "collect"),
        output_dir={"default": "thompson_steps_results"},
    )
    parser.add_argument(
        "--box-batch",
        type=int,
        nargs="+",
        metavar="T",
        help="instead: time one batch on the continuous Hartmann-6 after T points",
    )
    parser.add_argument(
        "--batch-size", type=int, default=100, help="box batch size (100)"
    )
    add_options(parser, "threads")
    parser.add_argument("--seed", type=int, default=0, help="data seed (0)")
    parser.add_argument("--skip-exact", action="store_true", help="time S-GP-TS only")
    add_options(parser, "no_progress")
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    r"""Parse ``argv`` and run the measurement, plot or box timing it asks for."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
    sizes = {
        key: default if getattr(args, key) is None else getattr(args, key)
        for key, default in sizes.items()
    }
    arms = sizes["arms"] if isinstance(sizes["arms"], list) else [sizes["arms"]]
    set_threads(parser, args.threads)
    output_dir = Path(args.output_dir)
    plot_path = Path(args.plot_dir or output_dir) / PLOT_NAME
    if args.collect:
        loaded = [
            result
            for path in collected_files(parser, args.collect, RESULTS_NAME)
            for result in load_results(str(path))
        ]
        _plot(loaded, plot_path)
        return
    try:
        if args.box_batch:
            box = time_box_batches(
                args.box_batch,
                args.batch_size,
                num_inducing=sizes["inducing"],
                num_features=sizes["features"],
                inducing_quality=args.quality,
                seed=args.seed,
            )
            print(format_box_report(box))
            return
        results = []
        for num_arms in arms:
            result = measure_thompson_steps(
                sizes["inducing"],
                sizes["features"],
                num_arms,
                sizes["t"],
                sizes["steps"],
                sizes["exact_steps"],
                warmup=args.warmup,
                inducing_quality=args.quality,
                seed=args.seed,
                skip_exact=args.skip_exact,
                methods=args.methods,
                memory_budget_gib=args.memory_budget,
                cache_dtype=args.cache_dtype,
                progress=not args.no_progress,
            )
            print(format_report(result), flush=True)
            results.append(result)
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    output_dir.mkdir(parents=True, exist_ok=True)
    save_results(results, str(output_dir / RESULTS_NAME))
    print(f"wrote {output_dir / RESULTS_NAME}")
    if not args.no_plots:
        _plot(results, plot_path)


def _plot(results: list[dict[str, object]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_step_times(results, str(path))
    print(f"wrote {path}")
