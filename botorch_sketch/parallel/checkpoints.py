r"""The checkpoint file of :func:`~botorch_sketch.parallel.driver.run_parallel`: the
optimizer's state and the log, written atomically (a temporary file moved into place).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from botorch_sketch.generation.ask_tell import AskTellOptimizer
from botorch_sketch.parallel.log import EvaluationLog

#: Version of the checkpoint layout written by :func:`run_parallel`.
CHECKPOINT_VERSION = 1


def save_checkpoint(
    path: str | os.PathLike, optimizer: AskTellOptimizer, log: EvaluationLog
) -> None:
    r"""Write the optimizer's state and the log to ``path`` atomically."""
    path = Path(path)
    temporary = _temporary_path(path)
    torch.save(
        {
            "version": CHECKPOINT_VERSION,
            "optimizer": optimizer.state_dict(),
            "log": log.to_dict(),
        },
        temporary,
    )
    os.replace(temporary, path)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], EvaluationLog]:
    r"""The optimizer state and the log saved by :func:`run_parallel` at ``path``;
    a ValueError naming the file if it cannot be read (truncated or corrupt)."""
    try:
        saved = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # torch.load's errors differ with the damage
        raise ValueError(
            f"`checkpoint` {path} is not a readable run_parallel checkpoint "
            f"(truncated or corrupt; delete it to start afresh): "
            f"{type(error).__name__}: {error}"
        ) from error
    if not isinstance(saved, dict) or saved.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"`checkpoint` {path} is not a run_parallel checkpoint.")
    return saved["optimizer"], EvaluationLog.from_dict(saved["log"])


def check_checkpoint_writable(path: str | os.PathLike) -> None:
    r"""Raise a ValueError naming ``checkpoint`` unless :func:`save_checkpoint` can
    write ``path``: its folder exists and takes a file (written and removed here,
    under the temporary name that :func:`save_checkpoint` uses)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(
            f"`checkpoint` {path}: the folder {path.parent} does not exist."
        )
    if path.is_dir():
        raise ValueError(f"`checkpoint` {path} is a folder, not a file.")
    probe = _temporary_path(path)
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"`checkpoint` {path} cannot be written: {error}") from error


def _temporary_path(path: Path) -> Path:
    r"""Where :func:`save_checkpoint` writes ``path`` before moving it there."""
    return path.with_name(f".{path.name}.tmp")
