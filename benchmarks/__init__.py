r"""The benchmark harness: problems, methods (ours and exact baselines), runner,
results, plots. It lives beside the package in the repository and is not installed:
run ``python -m benchmarks --help`` from the repository root. From Python (with the
repository root on ``sys.path``)::

    from benchmarks import PolicyConfig, make_problem, run_benchmark
    problem = make_problem("levy:dim=8:arms=20000")
    traces, notes = run_benchmark([problem], [PolicyConfig("exact-ucb")], 400, [0, 1])

The names below are imported on first use, so that importing this package (and its
``scoring`` command) needs no ``bench`` extra (matplotlib, tqdm).
"""

from __future__ import annotations

from botorch_sketch.utils.lazy_exports import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "PRESETS": "presets",
    "BenchmarkMethod": "methods",
    "Block": "presets",
    "METHODS": "methods",
    "PolicyConfig": "methods",
    "Preset": "presets",
    "RunTrace": "results",
    "get_preset": "presets",
    "make_dataset_problem": "problems",
    "make_problem": "problems",
    "make_sgpts_hartmann6": "problems",
    "make_synthetic_problem": "problems",
    "make_threds_problem": "problems",
    "plot_all": "plots",
    "register_method": "methods",
    "run_benchmark": "runner",
    "run_policy": "runner",
    "summarize": "results",
    "write_results": "writers",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
