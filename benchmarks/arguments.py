r"""The options the benchmark commands share, spelled and checked the same in each,
and their parser, which prints usage errors on one line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import torch

DATA_ENV = "BOTORCH_SKETCH_DATA"
DTYPES = {"float64": torch.float64, "float32": torch.float32}


class OneLineParser(argparse.ArgumentParser):
    r"""argparse with usage errors on one line (``prog: error: ... (see --help)``),
    exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see --help)\n")


def parse_seeds(text: str) -> tuple[int, ...]:
    r"""``"0,1,5"`` or ``"0-4"`` (or a mix) into a tuple of distinct seeds.

    Raises:
        argparse.ArgumentTypeError: A malformed, empty or repeating list.
    """
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise argparse.ArgumentTypeError(
                f"Bad seed list {text!r}; use e.g. 0,1,2 or 0-4."
            )
        seeds.extend(range(int(first), int(last) + 1) if dash else [int(first)])
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"Seed list {text!r} is empty or repeats a seed."
        )
    return tuple(seeds)


def name_list(choices: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    r"""An argparse type: a comma-separated list of names among ``choices``."""
    known = list(choices)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(","))
        if not set(names) <= set(known):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give a comma-separated list of {', '.join(known)}"
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


def writable_folder(text: str) -> Path:
    r"""``--output-dir`` as a path, if it or its nearest existing parent is a
    writable folder."""
    path = Path(text)
    folder = next(folder for folder in (path, *path.parents) if folder.exists())
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: {folder} is not writable")
    return path


def _option(*flags: str, **keywords: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, keywords


#: The options the commands share, by name: flags and argparse keywords. A command
#: adds them with :func:`add_options`, which can change the keywords (defaults,
#: choices, help).
OPTIONS = {
    "preset": _option("--preset", metavar="NAME", help="one of %(choices)s"),
    "list": _option("--list", action="store_true", help="list the presets"),
    "methods": _option("--methods", metavar="LIST", help="comma-separated methods"),
    "seeds": _option(
        "--seeds", type=parse_seeds, metavar="LIST", help="seeds, e.g. 0,1,2 or 0-4"
    ),
    "horizon": _option(
        "-T", "--horizon", type=int, metavar="T", help="evaluations per run"
    ),
    "data_dir": _option(
        "--data-dir",
        metavar="DIR",
        help=f"folder of the data sets, e.g. cadata.csv (default ${DATA_ENV} or "
        "./data)",
    ),
    "output_dir": _option(
        "--output-dir", type=writable_folder, metavar="DIR", help="where results go"
    ),
    "plot_dir": _option(
        "--plot-dir", metavar="DIR", help="where PNGs go (default: --output-dir)"
    ),
    "no_plots": _option("--no-plots", action="store_true", help="skip PNG plots"),
    "collect": _option(
        "--collect",
        nargs="+",
        metavar="DIR",
        help="run nothing: make the tables and plots from the results saved in "
        "these output folders",
    ),
    "resume": _option(
        "--resume",
        action="store_true",
        help="reuse the finished runs in OUTPUT_DIR/runs/ made with the same settings",
    ),
    "dtype": _option(
        "--dtype", choices=list(DTYPES), default="float64", help="torch dtype"
    ),
    "device": _option(
        "--device", type=parse_device, default="cpu", help="cpu, cuda, cuda:1, ..."
    ),
    "threads": _option(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch CPU threads, 0 for torch's default; 1 gives comparable timings",
    ),
    "no_progress": _option(
        "--no-progress", action="store_true", help="no progress display"
    ),
}


def add_options(
    parser: argparse.ArgumentParser, *names: str, **changes: dict[str, Any]
) -> None:
    r"""Add the :data:`OPTIONS` ``names`` to ``parser``, in order.

    Args:
        names: Keys of :data:`OPTIONS`.
        changes: By name, argparse keywords that replace the option's, e.g.
            ``seeds={"default": "0-2"}`` (a string default is parsed like a value;
            the help then names it).
    """
    for name in names:
        flags, keywords = OPTIONS[name]
        keywords = keywords | changes.get(name, {})
        if keywords.get("default") is not None and keywords.get("action") is None:
            keywords["help"] = keywords.get("help", "") + " (default %(default)s)"
        parser.add_argument(*flags, **keywords)


def resolve_data_dir(args: argparse.Namespace) -> str:
    r"""``--data-dir``, else ``$BOTORCH_SKETCH_DATA``, else ``data``."""
    return args.data_dir or os.environ.get(DATA_ENV) or "data"


def collected_files(
    parser: argparse.ArgumentParser, folders: Iterable[str], name: str
) -> list[Path]:
    r"""The file ``name`` in each ``--collect`` folder (a usage error if missing)."""
    paths = [Path(folder) / name for folder in folders]
    for path in paths:
        if not path.is_file():
            parser.error(f"argument --collect: {path.parent} holds no {name}")
    return paths


def set_threads(parser: argparse.ArgumentParser, threads: int) -> None:
    r"""Apply ``--threads`` (0 keeps torch's default; negative is a usage error)."""
    if threads < 0:
        parser.error(f"argument --threads: must be >= 0, got {threads}")
    if threads > 0:
        torch.set_num_threads(threads)
