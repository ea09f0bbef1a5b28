r"""BBKB's options for ``W`` asynchronous workers, shared by the Ray Tune searcher
(``max_concurrent``) and the Optuna sampler (``num_workers``)."""

from __future__ import annotations

from typing import Any

from botorch_sketch.generation.bbkb_loop import asynchronous_options


def bbkb_worker_options(num_workers: int | None) -> dict[str, Any]:
    r""":func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options` for
    ``num_workers`` (its ratio threshold follows the loop's kernel and ``lambda``);
    none for None or one worker (the loop's own defaults)."""
    if num_workers is None or num_workers == 1:
        return {}
    return asynchronous_options(num_workers)
