r"""A real ``run_parallel`` driver for the kill -9 tests (run as a subprocess).

``python test/fault_driver.py KIND WORKERS BUDGET CHECKPOINT EVALUATIONS PAUSE GO``
waits until the file ``GO`` exists (so a test can start it ahead), then runs a
self-tuning ``KIND`` loop (``bbkb`` or ``sgpts``, :func:`make_loop`) on
:func:`make_arms` with ``WORKERS`` threads until ``BUDGET`` evaluations, resuming
from and saving to the file ``CHECKPOINT``; each evaluation of
:func:`logged_reward` takes ``PAUSE`` seconds and appends its arm to the file
``EVALUATIONS``. The repository root must be on ``PYTHONPATH``.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time

import torch

from botorch_sketch.parallel import run_parallel
from test.fault_helpers import logged_objective, make_arms, make_loop


def main(argv: list[str]) -> None:
    kind, workers, budget, checkpoint, path, pause, go = argv
    torch.set_num_threads(1)
    deadline = time.monotonic() + 300
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} never appeared")
        time.sleep(0.005)
    arms = make_arms()
    loop = make_loop(kind, arms, workers=int(workers))
    with concurrent.futures.ThreadPoolExecutor(int(workers)) as executor:
        run_parallel(
            loop,
            logged_objective(path, arms, float(pause)),
            executor,
            num_workers=int(workers),
            budget=int(budget),
            checkpoint=checkpoint,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
