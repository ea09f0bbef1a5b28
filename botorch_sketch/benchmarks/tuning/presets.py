r"""Presets of the tuning benchmark: blocks of runs and the budgets to report.

A :class:`Block` runs every method on every problem for every seed, with ``budget``
trials and ``in_flight`` of them running at once. No method is told the budget, so
the figures at a smaller budget are read off the same runs (the first ``b`` told
trials).

- ``sequential``: the five problems, 1 in flight, 200 trials, seeds 0-4, every method
  but Ax; Ax's default strategy at 50 trials only (its time per trial grows fast);
- ``parallel``: the four problems without data, 8 in flight, 200 trials, seeds 0-4,
  every method but Ax;
- ``long``: Branin and the mixed space, 1 in flight, 1,000 trials, seeds 0-4;
  Optuna's ``GPSampler`` for seed 0 only, stopped once its own time passes 300 s;
- ``smoke``: Branin and the mixed space, 8 trials, 1 and 2 in flight, seeds 0-1,
  every method but Ax (seconds; for CI).
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_PROBLEMS = ("branin", "hartmann6", "levy10", "mixed", "hgb-cadata")
OURS_AND_BASELINES = ("bbkb", "sgpts", "tpe", "gp", "random")
SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Block:
    r"""Runs of ``methods x problems x seeds``, each of ``budget`` trials with
    ``in_flight`` running; a run stops early once the method's own time passes
    ``max_optimizer_seconds`` (None: never)."""

    problems: tuple[str, ...]
    methods: tuple[str, ...]
    budget: int
    in_flight: int
    seeds: tuple[int, ...]
    max_optimizer_seconds: float | None = None


@dataclass(frozen=True)
class TuningPreset:
    r"""A named list of blocks and the budgets its tables report."""

    name: str
    description: str
    blocks: tuple[Block, ...]
    budgets: tuple[int, ...]


PRESETS = {
    preset.name: preset
    for preset in (
        TuningPreset(
            "sequential",
            "5 problems, 1 in flight, 200 trials (Ax 50), 5 seeds",
            (
                Block(ALL_PROBLEMS, OURS_AND_BASELINES, 200, 1, SEEDS),
                Block(ALL_PROBLEMS, ("ax",), 50, 1, SEEDS[:3]),
            ),
            (50, 200),
        ),
        TuningPreset(
            "parallel",
            "4 problems, 8 in flight, 200 trials, 5 seeds",
            (Block(ALL_PROBLEMS[:4], OURS_AND_BASELINES, 200, 8, SEEDS),),
            (50, 200),
        ),
        TuningPreset(
            "long",
            "Branin and mixed, 1 in flight, 1,000 trials, 5 seeds (GPSampler 1)",
            (
                Block(
                    ("branin", "mixed"),
                    ("bbkb", "sgpts", "tpe", "random"),
                    1000,
                    1,
                    SEEDS,
                ),
                Block(("branin", "mixed"), ("gp",), 1000, 1, (0,), 300.0),
            ),
            (50, 200, 1000),
        ),
        TuningPreset(
            "smoke",
            "Branin and mixed, 8 trials, 1 and 2 in flight, 2 seeds (seconds)",
            tuple(
                Block(("branin", "mixed"), OURS_AND_BASELINES, 8, k, (0, 1))
                for k in (1, 2)
            ),
            (4, 8),
        ),
    )
}
