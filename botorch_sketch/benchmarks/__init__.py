r"""Benchmarks: problems, policies (ours and exact baselines), runner, metrics, plots.

Run ``python -m botorch_sketch.benchmarks --help``.
"""
