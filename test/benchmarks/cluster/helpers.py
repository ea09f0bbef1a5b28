r"""Shared by the cluster tests: the documented seeding redone by hand, a brute-force
schedule, hand-made traces and the event loop the simulation replaced."""

import heapq
import math

import numpy as np
import torch

from benchmarks.cluster.methods import METHODS, method_options
from benchmarks.results import RunTrace


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


def make_trace(times, values, method="m", seed=0, last_start=math.nan):
    r"""A run on 2 workers with busy worker-time 1 at every completion (``f* = 1``,
    ``r_unif = 0.5``)."""
    n = len(values)
    return RunTrace(
        problem="p",
        policy=method,
        seed=seed,
        optimum=1.0,
        uniform_regret=0.5,
        values=np.array(values, float),
        ask_seconds=np.full(n, 0.1 / n),
        tell_seconds=np.full(n, 0.1 / n),
        batch_index=np.arange(n),
        diagnostics={
            "simulated_time": np.array(times, float),
            "busy_worker_time": np.ones(n),
        },
        metadata={
            "workers": 2,
            "num_asks": n,
            "empty_asks": 0,
            "wall_seconds": math.nan,
            "gflop": math.nan,
            "last_start": last_start,
            "ask_p99_ms": math.nan,
            "refit_seconds": math.nan,
        },
    )


def heap_simulation(problem, method, workers, horizon, seed, mean=1.0, sigma=1.0):
    r"""The cluster's event loop before it ran on ``run_parallel`` (a heap of end
    times, one completion told at a time, an ask whenever workers are free): the
    oracle of the simulation's numbers. Returns the completion times, the values,
    the busy worker-time, the asked arms, the asks, the empty asks and the last
    start."""
    durations = world(seed, horizon, sigma, mean).tolist()
    g = torch.Generator().manual_seed(2 * seed + 1)
    torch.randn(horizon, generator=g, dtype=torch.float64)  # the durations' draws
    noise = problem.noise_std * torch.randn(horizon, generator=g, dtype=torch.float64)
    generator = torch.Generator().manual_seed(2 * seed)
    runner = METHODS[method](
        problem, horizon, generator, **method_options(method, workers)
    )
    arm_values = problem.arm_values.double()
    running, asked, times, values, busy = [], [], [], [], []
    now = busy_time = 0.0
    last_start, num_asks, empty_asks = math.nan, 0, 0
    while len(times) < horizon:
        free = min(workers - len(running), horizon - len(asked))
        if free > 0:
            chosen = runner.ask(free).tolist()
            num_asks, empty_asks = num_asks + 1, empty_asks + (not chosen)
            for arm in chosen:
                heapq.heappush(running, (now + durations[len(asked)], len(asked), arm))
                asked.append(arm)
            if len(asked) == horizon and math.isnan(last_start):
                last_start = now
        end, order, arm = heapq.heappop(running)
        busy_time += (len(running) + 1) * (end - now)
        now = end
        value = float(arm_values[arm])
        reward = torch.tensor([value + float(noise[order])], dtype=torch.float64)
        runner.tell(torch.tensor([arm]), reward.to(problem.arms))
        times.append(now), values.append(value), busy.append(busy_time)
    return times, values, busy, asked, num_asks, empty_asks, last_start
