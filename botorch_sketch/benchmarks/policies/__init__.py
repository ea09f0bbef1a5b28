r"""Bandit policies run by the benchmark: the package's algorithms and exact baselines."""
