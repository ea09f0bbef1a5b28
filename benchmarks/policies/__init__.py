r"""Bandit policies run by the benchmark: our algorithms and exact baselines."""
