r"""The options the benchmark commands share, spelled and checked the same in each,
and their parser, which prints usage errors on one line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

import torch

DATA_ENV = "BOTORCH_SKETCH_DATA"
DTYPES = {"float64": torch.float64, "float32": torch.float32}
_PRESETS = "the preset's"


class OneLineParser(argparse.ArgumentParser):
    r"""argparse with usage errors on one line (``prog: error: ... (see --help)``),
    exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see --help)\n")


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


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return parse_seeds(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def name_list(choices: Iterable[str] | None):
    r"""An argparse type: a comma-separated list of names, each among ``choices``
    (any name when ``None``)."""
    known = None if choices is None else list(choices)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(","))
        unknown = [name for name in names if known is not None and name not in known]
        if not all(names) or unknown:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give a comma-separated list of {', '.join(known or [])}"
            )
        return names

    return parse


def parse_device(text: str) -> torch.device:
    r"""``--device``: ``cpu``, ``cuda`` or ``cuda:N`` that this machine has."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r}: use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text}: only cpu and cuda are supported")
    count = torch.cuda.device_count()
    if device.type == "cuda" and (device.index or 0) >= count:
        raise argparse.ArgumentTypeError(
            f"{text}: this machine has {count} CUDA devices"
        )
    return device


def add_seeds(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    r"""``--seeds 0,1,2`` or ``0-4`` (or a mix), parsed to a tuple of ints."""
    parser.add_argument(
        "--seeds",
        type=_seeds,
        default=None if default is None else parse_seeds(default),
        metavar="LIST",
        help=f"seeds, e.g. 0,1,2 or 0-4 (default {default or _PRESETS})",
    )


def add_methods(
    parser: argparse.ArgumentParser, choices: Iterable[str] | None, default: str
) -> None:
    r"""``--methods a,b``: comma-separated method names (among ``choices``)."""
    parser.add_argument(
        "--methods",
        type=name_list(choices),
        metavar="LIST",
        help=f"comma-separated methods (default {default})",
    )


def add_horizon(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    r"""``-T/--horizon``: evaluations per run."""
    parser.add_argument(
        "-T",
        "--horizon",
        type=int,
        default=default,
        metavar="T",
        help=f"evaluations per run (default {default or _PRESETS})",
    )


def add_preset(
    parser: argparse.ArgumentParser,
    names: Iterable[str],
    default: str | None,
    listing: str = "the presets",
) -> None:
    r"""``--preset NAME`` among ``names`` and ``--list`` (print ``listing``)."""
    names = list(names)
    parser.add_argument(
        "--preset",
        choices=names,
        default=default,
        metavar="NAME",
        help=f"one of {', '.join(names)}"
        + (f" (default {default})" if default else ""),
    )
    parser.add_argument("--list", action="store_true", help=f"list {listing}")


def add_output_dir(
    parser: argparse.ArgumentParser, default: str, plots: bool = True
) -> None:
    r"""``--output-dir`` for the results; with ``plots``, ``--plot-dir`` and
    ``--no-plots`` for the PNG figures."""
    parser.add_argument(
        "--output-dir",
        default=default,
        metavar="DIR",
        help=f"where results go (default {default})",
    )
    if plots:
        parser.add_argument(
            "--plot-dir", metavar="DIR", help="where PNGs go (default: --output-dir)"
        )
        parser.add_argument("--no-plots", action="store_true", help="skip PNG plots")


def add_data_dir(parser: argparse.ArgumentParser, files: str) -> None:
    r"""``--data-dir``: the folder of the real data sets (:func:`data_dir`)."""
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"folder of {files} (default ${DATA_ENV} or ./data)",
    )


def resolve_data_dir(args: argparse.Namespace) -> str:
    r"""``--data-dir``, else ``$BOTORCH_SKETCH_DATA``, else ``data``."""
    return args.data_dir or os.environ.get(DATA_ENV) or "data"


def add_resume(parser: argparse.ArgumentParser) -> None:
    r"""``--resume``: reuse the runs ``OUTPUT_DIR/runs/`` holds."""
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the finished runs in OUTPUT_DIR/runs/ made with the same settings",
    )


def add_collect(parser: argparse.ArgumentParser) -> None:
    r"""``--collect DIR ...``: report on the results saved under these folders."""
    parser.add_argument(
        "--collect",
        nargs="+",
        metavar="DIR",
        help="run nothing: make the tables and plots from the results saved in these "
        "output folders",
    )


def collected_files(
    parser: argparse.ArgumentParser, folders: Iterable[str], name: str
) -> list[Path]:
    r"""The file ``name`` in each ``--collect`` folder (a usage error if missing)."""
    paths = [Path(folder) / name for folder in folders]
    for path in paths:
        if not path.is_file():
            parser.error(f"argument --collect: {path.parent} holds no {name}")
    return paths


def add_machine(
    parser: argparse.ArgumentParser, threads: bool = True, device: bool = True
) -> None:
    r"""``--dtype`` (a key of :data:`DTYPES`), ``--device`` and ``--threads``."""
    if device:
        parser.add_argument(
            "--dtype", choices=list(DTYPES), default="float64", help="default float64"
        )
        parser.add_argument(
            "--device",
            type=parse_device,
            default=torch.device("cpu"),
            help="cpu (default), cuda, cuda:1, ...",
        )
    if threads:
        parser.add_argument(
            "--threads",
            type=int,
            default=1,
            metavar="N",
            help="torch CPU threads (default 1, for comparable timings; 0: torch's)",
        )


def set_threads(parser: argparse.ArgumentParser, threads: int) -> None:
    r"""Apply ``--threads`` (0 keeps torch's default; negative is a usage error)."""
    if threads < 0:
        parser.error(f"argument --threads: must be >= 0, got {threads}")
    if threads > 0:
        torch.set_num_threads(threads)


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    r"""``--no-progress``: no progress bars."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress display",
    )
