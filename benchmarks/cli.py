r"""Command line of the benchmark suite: ``python -m benchmarks``.

Runs a preset (``default`` unless ``--preset`` names another) or the problems and
policies the flags give, prints a table and writes the results and plots to
``--output-dir``; each finished run goes to ``OUTPUT_DIR/runs/`` at once, so that
``--resume`` can finish an interrupted command. Bad arguments end in one line on stderr
and exit status 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.arguments import (
    DATA_ENV,
    DTYPES,
    OneLineParser,
    add_options,
    resolve_data_dir,
    set_threads,
)
from benchmarks.methods import (
    METHODS,
    PerHorizon,
    PolicyConfig,
    parse_option,
)
from benchmarks.plots import plot_all
from benchmarks.presets import PRESETS, get_preset
from benchmarks.problems import (
    KNOWN_DATASETS,
    PAPER_PROBLEMS,
    SYNTHETIC_FUNCTIONS,
    Problem,
    make_problem,
    parse_problem_spec,
)
from benchmarks.results import RunTrace, summarize, verdict
from benchmarks.runner import (
    COUNTED_EVALUATIONS,
    RunStore,
    environment_metadata,
    run_benchmark,
)
from benchmarks.writers import format_table, write_results
from botorch_sketch.utils.validation import check_int

DEFAULT_OUTPUT_DIR = "benchmark_results"

_EPILOG = """\
Examples:
  python -m benchmarks                  # built-in comparison
  python -m benchmarks --preset bbkb-cadata --data-dir DATA --smoke
  python -m benchmarks --problem ackley:dim=4:arms=5000 \
--methods exact-ucb,exact-bucb -T 500 --option exact-bucb:batch_size=5
  python -m benchmarks ... --resume     # after Ctrl-C: finish the missing runs
Subcommands (each with its own --help), run from the repository root:
  python -m benchmarks scoring          # Nystrom vs exact GP scoring time
  python -m benchmarks thompson_steps   # S-GP-TS vs exact GP-TS step time
  python -m benchmarks cluster          # W workers, simulated time
  python -m benchmarks.tuning           # tuning: Optuna samplers and Ray Tune"""


def build_parser() -> argparse.ArgumentParser:
    r"""The argument parser (its ``--help`` documents every flag)."""
    parser = OneLineParser(
        prog="python -m benchmarks",
        description="Run GP-bandit benchmarks (sketched methods vs exact baselines).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(
        parser,
        "preset",
        "list",
        preset={"choices": list(PRESETS), "default": "default"},
        list={"help": "list presets, methods and problems"},
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the preset's small, one-seed variant"
    )
    parser.add_argument(
        "--problem",
        metavar="SPEC[,SPEC]",
        help="problems replacing the preset's, e.g. levy:dim=8:arms=20000, "
        "cadata:lengthscale=3, path/to/file.csv:target=0, threds_branin",
    )
    help = "comma-separated methods replacing the preset's; LABEL=NAME runs NAME "
    add_options(
        parser,
        "methods",
        "horizon",
        "seeds",
        methods={"help": help + "under another label (e.g. ucb2=exact-ucb)"},
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="[METHOD:]KEY=VALUE",
        help="method option; without METHOD, for every selected method that accepts "
        "KEY; repeatable",
    )
    parser.add_argument(
        "--batch-size", type=int, metavar="B", help="shortcut for --option batch_size=B"
    )
    parser.add_argument(
        "--bayes-radius",
        metavar="R",
        help="shortcut for --option bayes_radius=R (index mu + R sigma; a number, "
        "'theory' for bbkb/bkb or 'srinivas' for the exact GP-UCBs)",
    )
    add_options(
        parser,
        *("dtype", "device", "threads", "data_dir", "output_dir", "plot_dir"),
        *("no_plots", "resume", "no_progress"),
        output_dir={"default": DEFAULT_OUTPUT_DIR},
    )
    return parser


def parse_algorithms(
    text: str, preset_policies: Sequence[PolicyConfig]
) -> tuple[PolicyConfig, ...]:
    r"""``"bbkb,ucb2=exact-ucb"`` into policies; preset options are kept by label."""
    by_label = {config.label: config for config in preset_policies}
    configs = []
    for item in text.split(","):
        config = PolicyConfig.parse(item)
        kept = by_label.get(config.label)
        configs.append(
            kept if kept is not None and kept.name == config.name else config
        )
    return tuple(configs)


def apply_options(
    configs: Sequence[PolicyConfig], options: Sequence[str]
) -> tuple[PolicyConfig, ...]:
    r"""Apply ``[POLICY:]KEY=VALUE`` options to the policies.

    A targeted option must name a selected policy (label or registry name); an
    untargeted one goes to every selected policy that accepts ``KEY`` (at least one).
    """
    configs = list(configs)
    for text in options:
        target, key, value = parse_option(text)
        if target is not None:
            hits = [i for i, c in enumerate(configs) if target in (c.label, c.name)]
            if not hits:
                raise ValueError(f"Option {text!r} names no selected policy.")
        else:
            hits = [i for i, c in enumerate(configs) if key in c.method.options()]
            if not hits:
                raise ValueError(f"No selected policy accepts option {key!r}.")
        for i in hits:
            configs[i] = configs[i].with_options({key: value})
    return tuple(configs)


def _listing() -> str:
    return "\n".join(
        [
            "presets:",
            *(f"  {name:18s} {preset.description}" for name, preset in PRESETS.items()),
            "methods:",
            *(f"  {name:18s} {method.description}" for name, method in METHODS.items()),
            "problems:",
            f"  test functions: {', '.join(sorted(SYNTHETIC_FUNCTIONS))}",
            f"  datasets (in --data-dir): {', '.join(KNOWN_DATASETS)}, or *.csv",
            f"  paper setups: {', '.join(PAPER_PROBLEMS)}",
        ]
    )


def _format_value(value: object, horizon: int) -> str:
    r"""An option value as printed: floats to 4 significant digits, ``1/T (0.0001)``."""
    if isinstance(value, PerHorizon):
        return f"{value.text} ({_format_value(value.function(horizon), horizon)})"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (tuple, list)):
        return ",".join(_format_value(item, horizon) for item in value)
    return str(value)


def _describe_options(config: PolicyConfig, horizon: int) -> str:
    text = ", ".join(
        f"{key}={_format_value(value, horizon)}"
        for key, value in config.options.items()
    )
    return f"{config.label} ({config.name}{': ' + text if text else ''})"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_seeds(seeds: Sequence[int]) -> str:
    r"""``seed 0``, ``seeds 0-4`` (consecutive) or ``seeds 0, 2, 7``."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


@dataclass(frozen=True)
class Job:
    r"""What a command runs: the preset combined with the flags, checked."""

    source: str
    problems: tuple[str, ...]
    problem_settings: Mapping[str, object]
    policies: tuple[PolicyConfig, ...]
    horizon: int
    seeds: tuple[int, ...]
    device: torch.device
    data_dir: str


def resolve_job(args: argparse.Namespace) -> Job:
    r"""Combine the preset with the flags; check every value.

    Raises:
        ValueError: A bad or conflicting argument (the message names it).
    """
    preset = get_preset(args.preset)
    policies, horizon, seeds, settings = preset.variant(args.smoke)
    specs = preset.block.problems
    if args.methods:
        try:
            policies = parse_algorithms(args.methods, policies)
        except ValueError as error:
            raise ValueError(f"argument --methods: {error}") from None
    if args.horizon is not None:
        horizon = check_int(args.horizon, "-T/--horizon", 1)
    seeds = args.seeds or seeds
    shortcuts = [
        f"{key}={value}"
        for key, value in (
            ("batch_size", args.batch_size),
            ("bayes_radius", args.bayes_radius),
        )
        if value is not None
    ]
    policies = apply_options(policies, shortcuts + list(args.option))
    if args.problem:
        specs = args.problem.split(",")
        settings = {}
    data_dir = resolve_data_dir(args)
    for spec in specs:
        name, _ = parse_problem_spec(spec)
        if name in KNOWN_DATASETS and not (Path(data_dir) / f"{name}.csv").is_file():
            raise ValueError(
                f"problem {name!r} reads {name}.csv, which is not in the data folder "
                f"{data_dir!r}: pass --data-dir FOLDER or set {DATA_ENV}=FOLDER"
            )
    return Job(
        source=f"preset {preset.name}",
        problems=tuple(specs),
        problem_settings=settings,
        policies=tuple(policies),
        horizon=horizon,
        seeds=tuple(seeds),
        device=args.device,
        data_dir=data_dir,
    )


def _save_partial(
    traces: Sequence[RunTrace], output_dir: Path, metadata: dict, what: str
) -> None:
    r"""Summarize the finished runs after an interruption or a crash (no plots)."""
    if not traces:
        print(f"{what} before any run finished", file=sys.stderr)
        return
    write_results(traces, output_dir, metadata | {"incomplete": what})
    print(
        f"{what} after {_plural(len(traces), 'finished run')}: they are in "
        f"{output_dir / 'runs'}/ and summarized in {output_dir}/summary.csv and "
        "results.json; the same command with --resume runs the rest",
        file=sys.stderr,
    )


def _log(text: str) -> None:
    print(text, flush=True)


def _checked_job(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[Job, list[Problem]]:
    r"""The job and its problems; every bad setting (problem, policy option, folder)
    is a usage error before anything runs, a throwaway build of each policy checking
    its option values."""
    try:
        job = resolve_job(args)
        problems = [
            make_problem(
                spec,
                data_dir=job.data_dir,
                dtype=DTYPES[args.dtype],
                device=job.device,
                **job.problem_settings,
            )
            for spec in job.problems
        ]
        for config in job.policies:
            try:
                config.method.check(config.resolved_options(job.horizon))
                problem = next((p for p in problems if config.method.supports(p)), None)
                if problem is not None:
                    config.build(problem, job.horizon, torch.Generator())
            except (ValueError, TypeError) as error:
                raise ValueError(f"policy {config.label}: {error}") from None
    except (ValueError, TypeError, RuntimeError) as error:
        parser.error(str(error))
    return job, problems


def _announce(
    job: Job, problems: Sequence[Problem], metadata: dict, smoke: bool
) -> None:
    r"""Print what is about to run."""
    print(
        f"botorch-sketch benchmark: {job.source}{' (smoke)' if smoke else ''}, "
        f"T = {job.horizon}, "
        f"{format_seeds(job.seeds)}, {metadata['dtype']} on {metadata['device']}, "
        f"{_plural(metadata['torch_threads'], 'thread')}, "
        f"matmul {metadata['matmul_gflops']:.1f} GFLOP/s"
    )
    for problem in problems:
        kind = (
            f"{problem.arms.shape[0]} arms" if problem.is_finite else "continuous box"
        )
        print(f"  problem {problem.name}: d = {problem.dim}, {kind}")
    for config in job.policies:
        print(f"  policy {_describe_options(config, job.horizon)}")


def _report(
    traces: Sequence[RunTrace],
    metadata: dict,
    args: argparse.Namespace,
    store: RunStore,
) -> None:
    r"""Print the table and the verdict, write the results and plots, list them."""
    output_dir = args.output_dir
    rows = summarize(traces, matmul_gflops=metadata["matmul_gflops"])
    print(f"\n{format_table(rows)}")
    if summary_line := verdict(rows):
        print(f"\n{summary_line}")
    written = write_results(traces, output_dir, metadata)
    if not args.no_plots:
        written += plot_all(traces, Path(args.plot_dir or output_dir))
    print(
        f"\nwall time {metadata['benchmark_wall_seconds']:.1f} s; wrote "
        f"{_plural(len(written), 'file')} to {output_dir}/ (and the runs to "
        f"{store.directory}/)"
    )
    for path in written:
        print(f"  {path}")


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the benchmark CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    job, problems = _checked_job(parser, args)
    set_threads(parser, args.threads)
    output_dir = args.output_dir
    metadata = environment_metadata(DTYPES[args.dtype], job.device)
    _announce(job, problems, metadata, args.smoke)
    metadata |= {
        "command": shlex.join(
            ["python -m benchmarks", *(sys.argv[1:] if argv is None else argv)]
        ),
        "preset": job.source,
        "smoke": args.smoke,
        "horizon": job.horizon,
        "seeds": list(job.seeds),
        "problems": list(job.problems),
        "problem_settings": dict(job.problem_settings),
        "policies": [_describe_options(c, job.horizon) for c in job.policies],
    }
    store = RunStore(output_dir / "runs")
    if not args.resume and len(store):
        _log(
            f"note: {store.directory}/ holds {_plural(len(store), 'finished run')} "
            "of an earlier command; this one replaces those it repeats (--resume "
            "would reuse them)"
        )
    progress = "off" if args.no_progress else "bar" if sys.stderr.isatty() else "log"
    finished: list[RunTrace] = []
    start = time.perf_counter()
    try:
        traces, notes = run_benchmark(
            problems,
            job.policies,
            job.horizon,
            job.seeds,
            progress=progress,
            log=_log,
            store=store,
            resume=args.resume,
            on_trace=finished.append,
            counted_evaluations=COUNTED_EVALUATIONS,
            environment={
                key: metadata[key]
                for key in ("torch_threads", "matmul_gflops", "dtype", "device")
            },
        )
    except KeyboardInterrupt:
        _save_partial(finished, output_dir, metadata, "interrupted")
        return 130
    except BaseException:
        _save_partial(finished, output_dir, metadata, "crashed")
        raise
    if not traces:
        print("No run was possible (see the notes above).")
        return 1
    metadata |= {
        "notes": notes,
        "peak_memory_method": sorted({trace.memory_method for trace in traces}),
        "benchmark_wall_seconds": time.perf_counter() - start,
    }
    _report(traces, metadata, args, store)
    return 0
