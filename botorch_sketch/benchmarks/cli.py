r"""Command line of the benchmark suite: ``python -m botorch_sketch.benchmarks``.

Without arguments it runs the ``default`` preset (BBKB vs BKB vs exact GP-UCB vs
uniform on a 20,000-arm, 8-d problem), prints a table, and writes ``summary.csv``,
``curves.csv``, ``results.json`` and PNG plots to ``./benchmark_results``. Flags pick
another preset (or ``--config`` reruns a saved ``results.json``), override its
problems, policies, horizon, seeds and policy options, and choose dtype, device,
threads and output folder. ``--list`` shows what exists. Timings are single-threaded
unless ``--threads`` says otherwise.

Each finished (problem, policy, seed) run is written to ``OUTPUT_DIR/runs/`` at once;
after Ctrl-C or a crash the finished runs and their summary stay on disk, and the same
command with ``--resume`` runs only what is missing. Bad arguments end in one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from botorch_sketch.benchmarks.arguments import OneLineParser
from botorch_sketch.benchmarks.methods import (
    METHODS,
    PerHorizon,
    PolicyConfig,
    get_method,
    parse_option,
)
from botorch_sketch.benchmarks.plots import plot_all
from botorch_sketch.benchmarks.presets import PRESETS, get_preset
from botorch_sketch.benchmarks.problems import (
    KNOWN_DATASETS,
    PAPER_PROBLEMS,
    SYNTHETIC_FUNCTIONS,
    Problem,
    make_problem,
    parse_problem_spec,
)
from botorch_sketch.benchmarks.results import RunTrace, summarize, verdict
from botorch_sketch.benchmarks.runner import (
    RunStore,
    environment_metadata,
    run_benchmark,
)
from botorch_sketch.benchmarks.writers import format_table, write_results
from botorch_sketch.utils.validation import check_int

DEFAULT_OUTPUT_DIR = "benchmark_results"
DATA_ENV = "BOTORCH_SKETCH_DATA"
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def build_parser() -> argparse.ArgumentParser:
    r"""The argument parser (also documents every flag in ``--help``)."""
    parser = OneLineParser(
        prog="botorch-sketch-bench",
        description="Run GP-bandit benchmarks (sketched methods vs exact baselines).",
        epilog="Examples:\n"
        "  botorch-sketch-bench                       # built-in comparison\n"
        "  botorch-sketch-bench --preset bbkb-cadata --data-dir DATA --smoke\n"
        "  botorch-sketch-bench --problem ackley:dim=4:arms=5000 "
        "--algorithms exact-ucb,exact-bucb -T 500 --option exact-bucb:batch_size=5\n"
        "  botorch-sketch-bench ... --resume         # after Ctrl-C: the same "
        "command, finishing the missing runs\n"
        "  botorch-sketch-bench --config benchmark_results/results.json\n"
        "Subcommands (each with its own --help):\n"
        "  botorch-sketch-bench scoring          # Nystrom vs exact GP scoring time\n"
        "  botorch-sketch-bench thompson_steps   # S-GP-TS vs exact GP-TS step time\n"
        "  botorch-sketch-bench cluster          # W workers, simulated time",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset", help=f"one of {', '.join(PRESETS)} (default: default)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the preset's reduced variant (small T, one seed) for quick checks",
    )
    parser.add_argument(
        "--config",
        metavar="RESULTS_JSON",
        help="rerun the problems, policies, options, T, seeds, dtype, device and "
        "threads saved in a results.json (instead of a preset; other flags still "
        "override them)",
    )
    parser.add_argument(
        "--problem",
        "--problems",
        dest="problems",
        action="append",
        metavar="SPEC[,SPEC]",
        help="problems replacing the preset's, e.g. levy:dim=8:arms=20000, "
        "cadata:lengthscale=3, path/to/file.csv:target=0, threds_branin "
        "(keys: dim, arms, noise_std, lengthscale, outputscale, noise, rescale, seed, "
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
    parser.add_argument(
        "--bayes-radius",
        metavar="R",
        help="shortcut for --option bayes_radius=R (Bayesian scale: index mu + R "
        "sigma; a number, 'theory' for bbkb/bkb or 'srinivas' for the exact GP-UCBs)",
    )
    parser.add_argument("--dtype", choices=sorted(_DTYPES), help="default float64")
    parser.add_argument("--device", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default 1: single-threaded timings are comparable "
        "across methods and robust on shared machines; 0 keeps torch's default)",
    )
    parser.add_argument(
        "--data-dir",
        help=f"folder with abalone.csv / cadata.csv (default ${DATA_ENV} or ./data)",
    )
    parser.add_argument(
        "--output-dir",
        default=DEFAULT_OUTPUT_DIR,
        help=f"where results and plots go (default ./{DEFAULT_OUTPUT_DIR}); "
        "finished runs go to its runs/ folder as they complete",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the finished runs in OUTPUT_DIR/runs/ made with the same "
        "settings and run only the missing ones",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip PNG plots")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress display (default: bars on a terminal, else a log line "
        "per finished run and every minute)",
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
        get_method(name)
        kept = by_label.get(label)
        options = kept.options if kept is not None and kept.name == name else {}
        configs.append(PolicyConfig(name, label, options))
    return tuple(configs)


def apply_options(
    configs: Sequence[PolicyConfig], options: Sequence[str]
) -> tuple[PolicyConfig, ...]:
    r"""Apply ``[POLICY:]KEY=VALUE`` options to the policies.

    A targeted option must name a selected policy (label or registry name). An
    untargeted one goes to every selected policy whose method accepts
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
            hits = [i for i, c in enumerate(configs) if key in c.method.options()]
            if not hits:
                raise ValueError(f"No selected policy accepts option {key!r}.")
        for i in hits:
            configs[i] = configs[i].with_options({key: value})
    return tuple(configs)


def _listing() -> str:
    lines = ["presets:"]
    lines += [f"  {name:18s} {preset.description}" for name, preset in PRESETS.items()]
    lines.append("policies:")
    for name, method in METHODS.items():
        lines.append(f"  {name:18s} {method.description}")
    lines.append("problems:")
    lines.append(f"  test functions: {', '.join(sorted(SYNTHETIC_FUNCTIONS))}")
    lines.append(f"  datasets (in --data-dir): {', '.join(KNOWN_DATASETS)}, or *.csv")
    lines.append(f"  paper setups: {', '.join(PAPER_PROBLEMS)}")
    return "\n".join(lines)


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
    r"""Everything a benchmark command runs, after presets, ``--config`` and flags.

    Attributes:
        source: The preset's name or ``config FILE``.
        smoke: Whether the preset's smoke variant was taken.
        problems: Problem specs.
        problem_settings: Settings applied on top of every spec.
        policies: Policies with their options.
        horizon: Evaluations per run.
        seeds: Run seeds.
        dtype: ``"float64"`` or ``"float32"``.
        device: A CPU or available CUDA device.
        threads: torch CPU threads (0: torch's default).
        data_dir: Folder of the datasets.
    """

    source: str
    smoke: bool
    problems: tuple[str, ...]
    problem_settings: Mapping[str, object]
    policies: tuple[PolicyConfig, ...]
    horizon: int
    seeds: tuple[int, ...]
    dtype: str
    device: torch.device
    threads: int
    data_dir: str

    def config(self) -> dict[str, object]:
        r"""The JSON-able settings ``--config`` reads back (options resolved for
        ``horizon``)."""
        return {
            "problems": list(self.problems),
            "problem_settings": dict(self.problem_settings),
            "policies": [
                {
                    "name": c.name,
                    "label": c.label,
                    "options": c.resolved_options(self.horizon),
                }
                for c in self.policies
            ],
            "horizon": self.horizon,
            "seeds": list(self.seeds),
            "dtype": self.dtype,
            "device": str(self.device),
            "threads": self.threads,
        }


def _tuples(value: object) -> object:
    r"""JSON lists back into tuples (option values such as ``f_range=0.5,1.2``)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_config(path: str) -> dict[str, object]:
    r"""The ``metadata.config`` of a saved ``results.json``, checked.

    Raises:
        ValueError: The file is missing, not JSON, or holds no valid config.
    """
    try:
        payload = json.loads(Path(path).read_text())
    except OSError as error:
        raise ValueError(
            f"--config {path}: cannot read it ({error.strerror})"
        ) from None
    except ValueError:
        raise ValueError(f"--config {path}: not a JSON file") from None
    metadata = payload.get("metadata") if isinstance(payload, dict) else None
    config = metadata.get("config") if isinstance(metadata, dict) else None
    needed = {"problems", "problem_settings", "policies", "horizon", "seeds"}
    if not isinstance(config, dict) or not needed <= set(config):
        raise ValueError(
            f"--config {path}: no metadata.config with {sorted(needed)} (is it a "
            "results.json written by this version?)"
        )
    try:
        config["policies"] = tuple(
            PolicyConfig(
                entry["name"],
                entry["label"],
                {key: _tuples(value) for key, value in entry["options"].items()},
            )
            for entry in config["policies"]
        )
        config["seeds"] = tuple(int(seed) for seed in config["seeds"])
        config["horizon"] = int(config["horizon"])
        config["problems"] = tuple(str(spec) for spec in config["problems"])
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"--config {path}: malformed config ({error!r})") from None
    return config


def _check_device(text: str) -> torch.device:
    try:
        device = torch.device(text)
    except RuntimeError:
        raise ValueError(
            f"--device {text!r} is not a device; use cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {text}: CUDA is not available (torch {torch.__version__} "
                "finds no GPU); use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {text}: this machine has {count} CUDA devices")
    elif device.type != "cpu":
        raise ValueError(f"--device {text}: only cpu and cuda devices are supported")
    return device


def _check_output_dir(text: str) -> Path:
    r"""``--output-dir`` as a path, if it or its nearest existing parent is a
    writable folder."""
    path = Path(text)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ValueError(
                    f"--output-dir {text}: {folder} is a file, not a folder"
                )
            if not os.access(folder, os.W_OK | os.X_OK):
                raise ValueError(f"--output-dir {text}: {folder} is not writable")
            break
    return path


def _check_datasets(specs: Sequence[str], data_dir: str) -> None:
    for spec in specs:
        name, _ = parse_problem_spec(spec)
        if name in KNOWN_DATASETS and not (Path(data_dir) / f"{name}.csv").is_file():
            raise ValueError(
                f"problem {name!r} reads {name}.csv, which is not in the data folder "
                f"{data_dir!r}: pass --data-dir FOLDER or set {DATA_ENV}=FOLDER"
            )


def resolve_job(args: argparse.Namespace) -> Job:
    r"""Combine the preset (or ``--config``) with the flags; check every value.

    Raises:
        ValueError: A bad or conflicting argument (the message names it).
    """
    saved: dict[str, object] = {}
    if args.config:
        if args.preset or args.smoke:
            raise ValueError("--config replaces --preset and --smoke; give one of them")
        saved = load_config(args.config)
        source, policies = f"config {args.config}", saved["policies"]
        horizon, seeds = saved["horizon"], saved["seeds"]
        specs, settings = saved["problems"], dict(saved["problem_settings"])
    else:
        preset = get_preset(args.preset or "default")
        policies, horizon, seeds, settings = preset.variant(args.smoke)
        source, specs = f"preset {preset.name}", preset.problems
    if args.algorithms:
        policies = parse_algorithms(args.algorithms, policies)
    if args.horizon is not None:
        horizon = check_int(args.horizon, "-T/--horizon", 1)
    if args.seeds and args.num_seeds is not None:
        raise ValueError("give --seeds or --num-seeds, not both")
    if args.seeds:
        seeds = parse_seeds(args.seeds)
    elif args.num_seeds is not None:
        seeds = tuple(range(check_int(args.num_seeds, "--num-seeds", 1)))
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    shortcuts = []
    if args.batch_size is not None:
        shortcuts.append(f"batch_size={args.batch_size}")
    if args.bayes_radius is not None:
        shortcuts.append(f"bayes_radius={args.bayes_radius}")
    policies = apply_options(policies, shortcuts + list(args.option))
    threads = args.threads if args.threads is not None else saved.get("threads", 1)
    check_int(threads, "--threads", 0)
    if args.problems:
        specs = [spec for group in args.problems for spec in group.split(",")]
        settings = {}
    dtype = args.dtype or saved.get("dtype", "float64")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    data_dir = args.data_dir or os.environ.get(DATA_ENV) or "data"
    _check_datasets(specs, data_dir)
    return Job(
        source=source,
        smoke=args.smoke,
        problems=tuple(specs),
        problem_settings=settings,
        policies=tuple(policies),
        horizon=horizon,
        seeds=tuple(seeds),
        dtype=dtype,
        device=_check_device(args.device or saved.get("device", "cpu")),
        threads=threads,
        data_dir=data_dir,
    )


def _save_partial(
    traces: Sequence[RunTrace],
    output_dir: Path,
    metadata: dict[str, object],
    what: str,
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


def _prepare(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[Job, list[Problem], Path]:
    r"""The job, its problems and the output folder; every bad setting (problem,
    policy option, folder) is a one-line usage error before anything runs."""
    try:
        job = resolve_job(args)
        problems = [
            make_problem(
                spec,
                data_dir=job.data_dir,
                dtype=_DTYPES[job.dtype],
                device=job.device,
                **job.problem_settings,
            )
            for spec in job.problems
        ]
        for config in job.policies:  # bad option names and values fail here
            try:
                config.method.check(config.resolved_options(job.horizon))
                for problem in problems:  # a throwaway build on the first it takes
                    if config.method.supports(problem):
                        config.build(problem, job.horizon, torch.Generator())
                        break
            except (ValueError, TypeError) as error:
                raise ValueError(f"policy {config.label}: {error}") from None
        return job, problems, _check_output_dir(args.output_dir)
    except (ValueError, TypeError, RuntimeError) as error:
        parser.error(str(error))


def _announce(job: Job, problems: Sequence[Problem], metadata: dict) -> None:
    r"""Print what is about to run: preset, horizon, seeds, machine, problems,
    policies with their options."""
    print(
        f"botorch-sketch benchmark: {job.source}{' (smoke)' if job.smoke else ''}, "
        f"T = {job.horizon}, {format_seeds(job.seeds)}, {metadata['dtype']} on "
        f"{metadata['device']}, {_plural(metadata['torch_threads'], 'thread')}, "
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
    output_dir: Path,
    metadata: dict,
    plots: bool,
    store: RunStore,
) -> None:
    r"""Print the table and the verdict; write the results (and the plots)."""
    print()
    rows = summarize(traces, matmul_gflops=metadata["matmul_gflops"])
    print(format_table(rows))
    summary_line = verdict(rows)
    if summary_line:
        print()
        print(summary_line)
    written = write_results(traces, output_dir, metadata)
    if plots:
        written += plot_all(traces, output_dir)
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
    job, problems, output_dir = _prepare(parser, args)
    if job.threads > 0:
        torch.set_num_threads(job.threads)
    metadata = environment_metadata(_DTYPES[job.dtype], job.device)
    _announce(job, problems, metadata)
    metadata |= {
        "command": shlex.join(
            ["botorch-sketch-bench", *(sys.argv[1:] if argv is None else argv)]
        ),
        "preset": job.source,
        "smoke": job.smoke,
        "horizon": job.horizon,
        "seeds": list(job.seeds),
        "problems": list(job.problems),
        "problem_settings": dict(job.problem_settings),
        "policies": [_describe_options(c, job.horizon) for c in job.policies],
        "config": job.config(),
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
    _report(traces, output_dir, metadata, not args.no_plots, store)
    return 0
