r"""Hyperparameter-tuning benchmark: the package's Ray Tune searchers and Optuna
samplers with default options against Optuna's samplers, random search and Ax, at
equal budgets (``python -m benchmarks.tuning --list``). Needs the
``bench`` extra and ray[tune]; Ax for the ``ax`` method.
"""
