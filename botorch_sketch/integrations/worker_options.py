r"""BBKB's options for ``W`` asynchronous workers on a given arm set, shared by the
Ray Tune searcher (``max_concurrent``) and the Optuna sampler (``num_workers``)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options


def bbkb_worker_options(
    num_workers: int | None, features: Tensor, seed: int, loop_options: dict[str, Any]
) -> dict[str, Any]:
    r""":func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options` for
    ``num_workers`` and the largest prior variance over ``lambda`` of a BBKB loop
    with ``loop_options`` on ``features`` (``A x D``); none for None or one
    worker."""
    if num_workers is None or num_workers == 1:
        return {}
    prior = BBKB(features, seed=seed, **loop_options)
    scaled = float(prior.state.scaled_variance.max())
    return asynchronous_options(num_workers, scaled)
