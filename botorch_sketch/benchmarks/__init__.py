r"""Benchmarks: problems, policies (ours and exact baselines), runner, results, plots.

Run ``python -m botorch_sketch.benchmarks --help`` (or ``botorch-sketch-bench``).
From Python::

    from botorch_sketch.benchmarks import PolicyConfig, make_problem, run_benchmark
    problem = make_problem("levy:dim=8:arms=20000")
    traces, notes = run_benchmark([problem], [PolicyConfig("exact-ucb")], 400, [0, 1])
"""

from botorch_sketch.benchmarks.plots import plot_all
from botorch_sketch.benchmarks.presets import PRESETS, Preset, get_preset
from botorch_sketch.benchmarks.problems import (
    make_dataset_problem,
    make_problem,
    make_sgpts_hartmann6,
    make_synthetic_problem,
    make_threds_problem,
)
from botorch_sketch.benchmarks.registry import (
    PolicyConfig,
    make_policy,
    register_policy,
)
from botorch_sketch.benchmarks.results import RunTrace, summarize
from botorch_sketch.benchmarks.runner import run_benchmark, run_policy
from botorch_sketch.benchmarks.writers import write_results

__all__ = [
    "PRESETS",
    "PolicyConfig",
    "Preset",
    "RunTrace",
    "get_preset",
    "make_dataset_problem",
    "make_policy",
    "make_problem",
    "make_sgpts_hartmann6",
    "make_synthetic_problem",
    "make_threds_problem",
    "plot_all",
    "register_policy",
    "run_benchmark",
    "run_policy",
    "summarize",
    "write_results",
]
