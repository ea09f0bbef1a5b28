r"""Hyperparameter-tuning benchmark: the package's Ray Tune searchers and Optuna
samplers with default options against Optuna's samplers (TPE, GP, CMA-ES, random),
random search and Ax, at equal budgets.

Run ``python -m botorch_sketch.benchmarks.tuning --list`` for the presets. The
modules: :mod:`.space` (search spaces and their converters), :mod:`.problems`,
:mod:`.methods`, :mod:`.driver` (trials in flight), :mod:`.presets`, :mod:`.run`,
:mod:`.report` (tables, plots) and :mod:`.cli`. Needs the ``bench`` extra (optuna,
cmaes, scikit-learn, matplotlib, tqdm) and ray[tune]; Ax for the ``ax`` method.
"""
