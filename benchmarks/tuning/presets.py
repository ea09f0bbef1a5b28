r"""Presets of the tuning benchmark: blocks of runs and the budgets to report
(docs/benchmarks.md lists what each ran). No method is told the budget, so the
figures at a smaller budget are read off the same runs (their first ``b`` trials)."""

from __future__ import annotations

from benchmarks.presets import Block, Preset
from benchmarks.tuning.problems import (
    CONSTRAINED_PROBLEMS,
    MULTI_OBJECTIVE_PROBLEMS,
    bbob_suite,
)

ALL_PROBLEMS = ("branin", "hartmann6", "levy10", "mixed", "hgb-cadata")
BRANIN_MIXED = ("branin", "mixed")
OURS_AND_BASELINES = ("bbkb", "sgpts", "tpe", "gp", "random")
SEEDS = (0, 1, 2, 3, 4)
#: The package's Optuna samplers and Optuna's own (``gp`` is timed separately).
OPTUNA_METHODS = ("bbkb-optuna", "sgpts-optuna", "tpe", "cmaes", "random-optuna")
#: ``GPSampler``'s optimizer-time caps in the ``optuna`` (and ``optuna-parallel``)
#: and ``optuna-large`` presets (seconds per run).
GP_SECONDS_SMALL, GP_SECONDS_LARGE = 120.0, 300.0
#: On COCO's ``bbob`` suite: the package's samplers and searchers, Optuna's TPE
#: (defaults, multivariate and independent), CMA-ES and random search (``gp``: its
#: own block, :data:`BBOB_GP_TRIALS` trials capped at :data:`GP_SECONDS_LARGE` s).
BBOB_BASELINES = ("tpe", "tpe-multivariate", "tpe-independent", "cmaes", "random")
BBOB_METHODS = ("bbkb-optuna", "sgpts-optuna", "bbkb", "sgpts", *BBOB_BASELINES)
BBOB_BUDGETS = (50, 100, 300, 1000, 5000)
BBOB_GP_TRIALS = 300
#: Budgets of the instance-1 ``bbob`` presets run to 5,000 trials, and TPE's
#: budget there (its time per trial grows with the trials).
BBOB_LONG_BUDGETS = (50, 100, 300, 1000, 2000, 5000)
LONG_TPE_TRIALS = 1000
#: On constrained problems (the best feasible loss) and problems of several losses
#: (the hypervolume): the package's Optuna samplers (given ``constraints_func``
#: as Optuna's are), Optuna's TPE and random sampler, and NSGA-II on several
#: losses only (``gp``: its own block, as in the ``bbob`` presets).
CONSTRAINED_METHODS = ("bbkb-optuna", "sgpts-optuna", "tpe", "random-optuna")
MULTI_OBJECTIVE_METHODS = (*CONSTRAINED_METHODS, "nsga2")
OUTCOME_BUDGETS = (100, 300, 1000, 5000)
#: COCO's 55 bi-objective functions in 5-D, instance 1 (preset
#: ``multi-objective-bbob-biobj``).
BIOBJ_5D = bbob_suite(tuple(range(1, 56)), (5,), (1,), "bbob-biobj")


def _gp_seconds(budget: int) -> float:
    r"""``GPSampler``'s time cap in the instance-1 ``bbob`` presets:
    :data:`GP_SECONDS_SMALL` when the budget is 100 trials (as in the ``optuna``
    preset), :data:`GP_SECONDS_LARGE` when it runs more (up to
    :data:`BBOB_GP_TRIALS`)."""
    return GP_SECONDS_SMALL if budget <= 100 else GP_SECONDS_LARGE


def _outcome_preset(
    kind: str, problems: tuple[str, ...], methods: tuple[str, ...], budget: int, k: int
) -> Preset:
    r"""The ``kind`` (``constrained`` or ``multi-objective``) preset of ``budget``
    trials with ``k`` in flight, 5 seeds: ``methods`` to ``budget`` (TPE to
    :data:`LONG_TPE_TRIALS` at most), ``GPSampler`` to :data:`BBOB_GP_TRIALS` at
    most, capped as in the ``bbob`` presets; named ``KIND``, ``KIND-parallel``
    (``k > 1``) at 300 trials and ``KIND-BUDGET`` above."""
    name = kind + (f"-{budget}" if budget > 300 else "") + ("-parallel" * (k > 1))
    long_tpe = budget > LONG_TPE_TRIALS and "tpe" in methods
    gp_trials = min(budget, BBOB_GP_TRIALS)
    description = (
        f"{kind}: {', '.join(problems)}; {k} in flight, {budget:,} trials, 5 seeds: "
        f"{', '.join(methods)}"
        + (f" (tpe {LONG_TPE_TRIALS:,} trials)" if long_tpe else "")
        + f"; GPSampler {gp_trials} trials capped at {_gp_seconds(budget):g} s"
    )
    blocks = [
        Block(
            problems,
            tuple(m for m in methods if not (long_tpe and m == "tpe")),
            budget,
            k,
            SEEDS,
        )
    ]
    if long_tpe:
        blocks.append(Block(problems, ("tpe",), LONG_TPE_TRIALS, k, SEEDS))
    blocks.append(Block(problems, ("gp",), gp_trials, k, SEEDS, _gp_seconds(budget)))
    budgets = tuple(b for b in OUTCOME_BUDGETS if b <= budget)
    return Preset(name, description, tuple(blocks), budgets)


#: The problems and methods of the ``constrained-smoke`` and
#: ``multi-objective-smoke`` presets.
OUTCOME_SMOKE = (
    (
        "constrained",
        ("pressure-vessel", "constrained-gramacy"),
        ("tpe", "random-optuna"),
    ),
    ("multi-objective", ("branin-currin", "zdt1"), ("tpe", "nsga2", "random-optuna")),
)


PRESETS = {
    preset.name: preset
    for preset in (
        Preset(
            "sequential",
            "5 problems, 1 in flight, 200 trials (Ax 50), 5 seeds",
            (
                Block(ALL_PROBLEMS, OURS_AND_BASELINES, 200, 1, SEEDS),
                Block(ALL_PROBLEMS, ("ax",), 50, 1, SEEDS[:3]),
            ),
            (50, 200),
        ),
        Preset(
            "parallel",
            "4 problems, 8 in flight, 200 trials, 5 seeds",
            (Block(ALL_PROBLEMS[:4], OURS_AND_BASELINES, 200, 8, SEEDS),),
            (50, 200),
        ),
        Preset(
            "long",
            "Branin and mixed, 1 in flight, 1,000 trials, 5 seeds (GPSampler 1)",
            (
                Block(BRANIN_MIXED, ("bbkb", "sgpts", "tpe", "random"), 1000, 1, SEEDS),
                Block(BRANIN_MIXED, ("gp",), 1000, 1, (0,), 300.0),
            ),
            (50, 200, 1000),
        ),
        Preset(
            "smoke",
            "Branin and mixed, 8 trials, 1 and 2 in flight, 2 seeds (seconds)",
            tuple(
                Block(BRANIN_MIXED, OURS_AND_BASELINES, 8, k, (0, 1)) for k in (1, 2)
            ),
            (4, 8),
        ),
        *(
            Preset(
                name,
                f"4 problems, Optuna samplers, 500 trials, {k} in flight, 5 seeds "
                "(GPSampler 100 trials)",
                (
                    Block(ALL_PROBLEMS[:4], OPTUNA_METHODS, 500, k, SEEDS),
                    Block(ALL_PROBLEMS[:4], ("gp",), 100, k, SEEDS, GP_SECONDS_SMALL),
                ),
                (100, 500),
            )
            for name, k in (("optuna", 1), ("optuna-parallel", 4))
        ),
        Preset(
            "optuna-large",
            "Branin and mixed, Optuna samplers, 5,000 trials, 1 in flight, 3 seeds "
            f"(GPSampler 1, capped at {GP_SECONDS_LARGE:g} s)",
            (
                Block(BRANIN_MIXED, OPTUNA_METHODS, 5000, 1, SEEDS[:3]),
                Block(BRANIN_MIXED, ("gp",), 5000, 1, (0,), GP_SECONDS_LARGE),
            ),
            (100, 500, 1000, 5000),
            ((1, 100), (401, 500), (901, 1000), (1001, 2000), (4001, 5000)),
        ),
        *(
            Preset(
                f"bbob-{dim}d" + ("-parallel" if k > 1 else ""),
                f"COCO bbob, 24 functions, {dim}-D, instances 1-5, {k} in flight, "
                f"5,000 trials, seed 0 (GPSampler {BBOB_GP_TRIALS} trials, capped "
                f"at {GP_SECONDS_LARGE:g} s)",
                (
                    Block(bbob_suite(dims=(dim,)), BBOB_METHODS, 5000, k, (0,)),
                    Block(
                        bbob_suite(dims=(dim,)),
                        ("gp",),
                        BBOB_GP_TRIALS,
                        k,
                        (0,),
                        GP_SECONDS_LARGE,
                    ),
                ),
                BBOB_BUDGETS,
            )
            for dim in (5, 10)
            for k in (1, 8)
        ),
        *(
            Preset(
                f"bbob-{dim}d-{budget}" + ("-parallel" if k > 1 else ""),
                f"COCO bbob, 24 functions, {dim}-D, instance 1, {k} in flight, "
                f"{budget} trials, seed 0, our Optuna samplers, TPE (3), CMA-ES, "
                f"random; GPSampler {min(budget, BBOB_GP_TRIALS)} trials capped at "
                f"{_gp_seconds(budget):g} s",
                (
                    Block(
                        bbob_suite(dims=(dim,), instances=(1,)),
                        ("bbkb-optuna", "sgpts-optuna", *BBOB_BASELINES),
                        budget,
                        k,
                        (0,),
                    ),
                    Block(
                        bbob_suite(dims=(dim,), instances=(1,)),
                        ("gp",),
                        min(budget, BBOB_GP_TRIALS),
                        k,
                        (0,),
                        _gp_seconds(budget),
                    ),
                ),
                tuple(b for b in BBOB_BUDGETS if b <= budget),
            )
            for dim, budget, k in (
                (5, 100, 1),
                (5, 300, 1),
                (10, 100, 1),
                (5, 1000, 1),
                (5, 100, 8),
            )
        ),
        *(
            Preset(
                f"bbob-{dim}d-5000" + ("-parallel" if k > 1 else ""),
                f"COCO bbob, 24 functions, {dim}-D, instance 1, {k} in flight, "
                f"seed 0: BBKBSampler and CMA-ES to 5,000 trials, TPE to "
                f"{LONG_TPE_TRIALS:,} (about 30 ms a trial at 5,000)",
                (
                    Block(
                        bbob_suite(dims=(dim,), instances=(1,)),
                        ("bbkb-optuna", "cmaes"),
                        5000,
                        k,
                        (0,),
                    ),
                    Block(
                        bbob_suite(dims=(dim,), instances=(1,)),
                        ("tpe",),
                        LONG_TPE_TRIALS,
                        k,
                        (0,),
                    ),
                ),
                BBOB_LONG_BUDGETS,
            )
            for dim in (5, 10)
            for k in (1, 8)
        ),
        *(
            _outcome_preset(kind, problems, methods, budget, k)
            for kind, problems, methods in (
                ("constrained", CONSTRAINED_PROBLEMS, CONSTRAINED_METHODS),
                ("multi-objective", MULTI_OBJECTIVE_PROBLEMS, MULTI_OBJECTIVE_METHODS),
            )
            for budget, k in ((300, 1), (300, 8), (1000, 1), (5000, 1))
        ),
        Preset(
            "multi-objective-bbob-biobj",
            "COCO bbob-biobj, 55 functions, 5-D, instance 1, 1 in flight, 300 "
            f"trials, seed 0: {', '.join(MULTI_OBJECTIVE_METHODS)}; GPSampler 300 "
            f"trials capped at {GP_SECONDS_LARGE:g} s",
            tuple(
                Block(BIOBJ_5D, methods, 300, 1, (0,), seconds)
                for methods, seconds in (
                    (MULTI_OBJECTIVE_METHODS, None),
                    (("gp",), GP_SECONDS_LARGE),
                )
            ),
            (100, 300),
        ),
        Preset(
            "bbob-smoke",
            "COCO bbob f1, f8, f21, 5-D, instance 1, 12 trials, 1 and 2 in flight, "
            "TPE, CMA-ES and random search (seconds)",
            tuple(
                Block(
                    bbob_suite((1, 8, 21), (5,), (1,)),
                    ("tpe", "cmaes", "random"),
                    12,
                    k,
                    (0,),
                )
                for k in (1, 2)
            ),
            (6, 12),
        ),
        *(
            Preset(
                f"{kind}-smoke",
                f"{', '.join(problems)}; {', '.join(methods)}; 12 trials, 1 and 2 in "
                "flight, 2 seeds (seconds)",
                tuple(Block(problems, methods, 12, k, (0, 1)) for k in (1, 2)),
                (6, 12),
            )
            for kind, problems, methods in OUTCOME_SMOKE
        ),
        Preset(
            "optuna-smoke",
            "Branin and mixed, Optuna samplers, 8 trials, 1 and 2 in flight, 2 seeds",
            tuple(
                Block(BRANIN_MIXED, (*OPTUNA_METHODS, "gp"), 8, k, (0, 1))
                for k in (1, 2)
            ),
            (4, 8),
            ((1, 4), (5, 8)),
        ),
    )
}
