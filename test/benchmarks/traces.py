r"""A small hand-made :class:`RunTrace` shared by the results and writers tests."""

import numpy as np

from benchmarks.results import RunTrace


def make_trace(policy="p", seed=0, values=(0.5, 1.0, 0.0, 0.75), **kwargs):
    r"""Four evaluations in two batches of two, ``f* = 1``; ``kwargs`` override."""
    values = np.array(values)
    defaults = {
        "problem": "toy",
        "policy": policy,
        "seed": seed,
        "optimum": 1.0,
        "uniform_regret": 0.5,
        "values": values,
        "ask_seconds": np.array([0.1, 0.2, 0.0, 0.3]),
        "tell_seconds": np.array([0.0, 0.4, 0.0, 0.5]),
        "batch_index": np.array([0, 0, 1, 1]),
        "diagnostics": {"dictionary_size": np.array([2.0, 2.0, 3.0, 3.0])},
        "setup_seconds": 1.0,
        "peak_memory_mb": 12.0,
    }
    return RunTrace(**(defaults | kwargs))


def make_seed_traces(policy, finals):
    r"""One trace per seed whose final cumulative regret is ``finals[i]`` (T = 4,
    regret only at the last step) and whose total time is ``1 + finals[i]``."""
    return [
        make_trace(
            policy=policy,
            seed=seed,
            values=(1.0, 1.0, 1.0, 1.0 - final),
            ask_seconds=np.array([0.0, 0.0, 0.0, final]),
            tell_seconds=np.zeros(4),
        )
        for seed, final in enumerate(finals)
    ]
