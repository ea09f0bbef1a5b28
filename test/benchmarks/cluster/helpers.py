r"""Shared by the cluster tests: the documented seeding redone by hand, a brute-force
schedule, and hand-made traces."""

import numpy as np
import torch

from botorch_sketch.benchmarks.cluster.trace import ClusterTrace


def world(seed, horizon, sigma=1.0, mean=1.0):
    r"""Durations and noise of the ``k``-th started evaluation, drawn independently
    of the simulator's code path from the documented seeding."""
    g = torch.Generator().manual_seed(2 * seed + 1)
    z = torch.randn(horizon, generator=g, dtype=torch.float64)
    return (mean * torch.exp(sigma * z - sigma**2 / 2)).numpy()


def greedy_schedule(durations, workers):
    r"""Brute force: job ``k`` starts on the earliest free worker as soon as one is
    free (jobs in order, nobody waits); the completion times, sorted, and the last
    job's start."""
    free_at = [0.0] * workers
    ends = []
    for d in durations:
        i = int(np.argmin(free_at))
        start = free_at[i]
        free_at[i] += d
        ends.append(free_at[i])
    return np.sort(ends), start


def make_trace(times, values, method="m", seed=0):
    n = len(values)
    return ClusterTrace(
        "p", method, seed, 2, 1.0, 0.5, np.array(times, float), np.array(values),
        np.ones(n), 0.1, 0.1, 0.0, n, 0,
    )  # fmt: skip
