r"""Command line of the benchmark suite: ``python -m botorch_sketch.benchmarks``.

Without arguments it runs the ``default`` preset (BBKB vs BKB vs exact GP-UCB vs
uniform on a 20,000-arm, 8-d problem), prints a table, and writes ``summary.csv``,
``curves.csv``, ``results.json`` and PNG plots to ``./benchmark_results``. Flags pick
another preset, override its problems, policies, horizon, seeds and policy options,
and choose dtype, device, threads and output folder. ``--list`` shows what exists.
Timings are single-threaded unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from botorch_sketch.benchmarks.metrics import (
    format_table,
    summarize,
    verdict,
    write_results,
)
from botorch_sketch.benchmarks.plots import plot_all
from botorch_sketch.benchmarks.presets import PRESETS, get_preset
from botorch_sketch.benchmarks.problems import (
    KNOWN_DATASETS,
    PAPER_PROBLEMS,
    SYNTHETIC_FUNCTIONS,
    make_problem,
)
from botorch_sketch.benchmarks.registry import (
    REGISTRY,
    PolicyConfig,
    parse_option,
    policy_options,
    policy_status,
)
from botorch_sketch.benchmarks.runner import environment_metadata, run_benchmark

DEFAULT_OUTPUT_DIR = "benchmark_results"
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def build_parser() -> argparse.ArgumentParser:
    r"""The argument parser (also documents every flag in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="botorch-sketch-bench",
        description="Run GP-bandit benchmarks (sketched methods vs exact baselines).",
        epilog="Examples:\n"
        "  botorch-sketch-bench                       # built-in comparison\n"
        "  botorch-sketch-bench --preset bbkb-cadata --data-dir DATA --smoke\n"
        "  botorch-sketch-bench --problem ackley:dim=4:arms=5000 "
        "--algorithms exact-ucb,exact-bucb -T 500 --option exact-bucb:batch_size=5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset", default="default", help=f"one of {', '.join(PRESETS)}"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the preset's reduced variant (small T, one seed) for quick checks",
    )
    parser.add_argument(
        "--problem",
        "--problems",
        dest="problems",
        action="append",
        metavar="SPEC[,SPEC]",
        help="problems replacing the preset's, e.g. levy:dim=8:arms=20000, "
        "cadata:lengthscale=3, path/to/file.csv:target=0, threds_branin "
        "(keys: dim, arms, noise_std, lengthscale, outputscale, rescale, seed, "
        "target, rows); repeatable",
    )
    parser.add_argument(
        "--algorithms",
        "--policies",
        dest="algorithms",
        metavar="LIST",
        help="comma-separated policies replacing the preset's; LABEL=NAME runs NAME "
        "under another label (e.g. ucb2=exact-ucb)",
    )
    parser.add_argument("-T", "--horizon", type=int, help="evaluations per run")
    parser.add_argument("--seeds", help="seeds, e.g. 0,1,2 or 0-4")
    parser.add_argument("--num-seeds", type=int, help="use seeds 0..N-1")
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="[POLICY:]KEY=VALUE",
        help="policy option; without POLICY it goes to every selected policy that "
        "accepts KEY; repeatable",
    )
    parser.add_argument(
        "--batch-size", type=int, help="shortcut for --option batch_size=B"
    )
    parser.add_argument("--radius", help="shortcut for --option radius=R")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float64")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: single-threaded timings are comparable "
        "across methods and robust on shared machines; 0 keeps torch's default)",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("BOTORCH_SKETCH_DATA", "data"),
        help="folder with abalone.csv / cadata.csv (default $BOTORCH_SKETCH_DATA "
        "or ./data)",
    )
    parser.add_argument(
        "--output-dir",
        default=DEFAULT_OUTPUT_DIR,
        help=f"where results and plots go (default ./{DEFAULT_OUTPUT_DIR})",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip PNG plots")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bars"
    )
    parser.add_argument(
        "--list", action="store_true", help="list presets, policies and problems"
    )
    return parser


def parse_seeds(text: str) -> tuple[int, ...]:
    r"""``"0,1,5"`` or ``"0-4"`` (or a mix) into a tuple of distinct seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"Bad seed list {text!r}; use e.g. 0,1,2 or 0-4.")
        seeds.extend(range(int(first), int(last) + 1) if dash else [int(first)])
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"Seed list {text!r} is empty or repeats a seed.")
    return tuple(seeds)


def parse_algorithms(
    text: str, preset_policies: Sequence[PolicyConfig]
) -> tuple[PolicyConfig, ...]:
    r"""``"bbkb,ucb2=exact-ucb"`` into policies; preset options are kept by label."""
    by_label = {config.label: config for config in preset_policies}
    configs = []
    for item in text.split(","):
        label, eq, name = item.strip().rpartition("=")
        if not eq:
            label = name
        if not name:
            raise ValueError(f"Empty policy name in {text!r}.")
        if name not in REGISTRY:
            raise ValueError(f"Unknown policy {name!r}; known: {sorted(REGISTRY)}.")
        kept = by_label.get(label)
        options = kept.options if kept is not None and kept.name == name else {}
        configs.append(PolicyConfig(name, label, options))
    return tuple(configs)


def apply_options(
    configs: Sequence[PolicyConfig], options: Sequence[str]
) -> tuple[PolicyConfig, ...]:
    r"""Apply ``[POLICY:]KEY=VALUE`` options to the policies.

    A targeted option must name a selected policy (label or registry name). An
    untargeted one goes to every *available* selected policy whose constructor has
    ``KEY``; it is an error if none has.
    """
    configs = list(configs)
    for text in options:
        target, key, value = parse_option(text)
        if target is not None:
            hits = [i for i, c in enumerate(configs) if target in (c.label, c.name)]
            if not hits:
                raise ValueError(f"Option {text!r} names no selected policy.")
        else:
            hits = [
                i
                for i, c in enumerate(configs)
                if policy_status(c.name) is None and key in policy_options(c.name)
            ]
            if not hits:
                raise ValueError(f"No selected policy accepts option {key!r}.")
        for i in hits:
            configs[i] = configs[i].with_options({key: value})
    return tuple(configs)


def _listing() -> str:
    lines = ["presets:"]
    lines += [f"  {name:18s} {preset.description}" for name, preset in PRESETS.items()]
    lines.append("policies:")
    for name, entry in REGISTRY.items():
        status = policy_status(name)
        state = "" if status is None else f"  [unavailable: {status}]"
        lines.append(f"  {name:18s} {entry.description}{state}")
    lines.append("problems:")
    lines.append(f"  test functions: {', '.join(sorted(SYNTHETIC_FUNCTIONS))}")
    lines.append(f"  datasets (in --data-dir): {', '.join(KNOWN_DATASETS)}, or *.csv")
    lines.append(f"  paper setups: {', '.join(PAPER_PROBLEMS)}")
    return "\n".join(lines)


def _describe_options(config: PolicyConfig, horizon: int) -> str:
    options = config.resolved_options(horizon)
    text = ", ".join(f"{key}={value!r}" for key, value in options.items())
    return f"{config.label} ({config.name}{': ' + text if text else ''})"


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the benchmark CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    try:
        preset = get_preset(args.preset)
        policies, horizon, seeds, problem_settings = preset.variant(args.smoke)
        if args.algorithms:
            policies = parse_algorithms(args.algorithms, policies)
        horizon = args.horizon if args.horizon is not None else horizon
        if args.seeds and args.num_seeds:
            raise ValueError("Give --seeds or --num-seeds, not both.")
        if args.seeds:
            seeds = parse_seeds(args.seeds)
        elif args.num_seeds is not None:
            if args.num_seeds < 1:
                raise ValueError("--num-seeds must be >= 1.")
            seeds = tuple(range(args.num_seeds))
        shortcuts = []
        if args.batch_size is not None:
            shortcuts.append(f"batch_size={args.batch_size}")
        if args.radius is not None:
            shortcuts.append(f"radius={args.radius}")
        policies = apply_options(policies, shortcuts + list(args.option))
        if args.threads < 0:
            raise ValueError("--threads must be >= 0.")
        dtype = _DTYPES[args.dtype]
        device = torch.device(args.device)
        if args.problems:
            specs = [spec for group in args.problems for spec in group.split(",")]
            problem_settings = {}
        else:
            specs = list(preset.problems)
        problems = [
            make_problem(
                spec,
                data_dir=args.data_dir,
                dtype=dtype,
                device=device,
                **problem_settings,
            )
            for spec in specs
        ]
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    output_dir = Path(args.output_dir)
    metadata = environment_metadata(dtype, device)
    print(
        f"botorch-sketch benchmark: preset {preset.name}"
        f"{' (smoke)' if args.smoke else ''}, T = {horizon}, seeds {list(seeds)}, "
        f"{metadata['dtype']} on {metadata['device']}, "
        f"{metadata['torch_threads']} threads, "
        f"matmul {metadata['matmul_gflops']:.1f} GFLOP/s"
    )
    for problem in problems:
        kind = (
            f"{problem.arms.shape[0]} arms" if problem.is_finite else "continuous box"
        )
        print(f"  problem {problem.name}: d = {problem.dim}, {kind}")
    for config in policies:
        print(f"  policy {_describe_options(config, horizon)}")
    start = time.perf_counter()
    try:
        traces, notes = run_benchmark(
            problems, policies, horizon, seeds, progress=not args.no_progress
        )
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    wall = time.perf_counter() - start
    if not traces:
        print("No run was possible (see the notes above).")
        return 1
    print()
    rows = summarize(traces, matmul_gflops=metadata["matmul_gflops"])
    print(format_table(rows))
    summary_line = verdict(rows)
    if summary_line:
        print()
        print(summary_line)
    metadata |= {
        "command": shlex.join(
            ["botorch-sketch-bench", *(sys.argv[1:] if argv is None else argv)]
        ),
        "preset": preset.name,
        "smoke": args.smoke,
        "horizon": horizon,
        "seeds": list(seeds),
        "problems": specs,
        "problem_settings": problem_settings,
        "policies": [_describe_options(c, horizon) for c in policies],
        "notes": notes,
        "peak_memory_method": sorted({trace.memory_method for trace in traces}),
        "benchmark_wall_seconds": wall,
    }
    written = write_results(traces, output_dir, metadata)
    if not args.no_plots:
        written += plot_all(traces, output_dir)
    print(f"\nwall time {wall:.1f} s; wrote {len(written)} files to {output_dir}/")
    for path in written:
        print(f"  {path}")
    return 0
