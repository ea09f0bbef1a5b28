r"""The preset type of every benchmark tool, and the main benchmark's presets.

A :class:`Preset` is named blocks of runs (:class:`Block`); each tool reads the
fields it uses and resolves the method names against its own registry: the main
benchmark (``python -m benchmarks``, :data:`PRESETS`) and the simulated cluster
(``benchmarks.cluster.cli.PRESETS``) run one block, the tuning benchmark
(``benchmarks.tuning.presets.PRESETS``) several, with the budgets its tables report.

The main benchmark's presets: ``default``: BBKB vs BKB vs exact GP-UCB vs uniform on
Rosenbrock-8 over 20,000 arms, with the model noise (ridge) ``lambda = 1`` and the
constant radius 1 on the Bayesian scale for every GP policy. ``bbkb-abalone`` /
``bbkb-cadata``: Calandriello et al. (ICML 2020), Appendix D. ``threds-branin`` /
``threds-rosenbrock``: Salgia et al. (NeurIPS 2021). ``sgpts-hartmann6``: Vakili et
al. (NeurIPS 2021). Each has a *smoke* variant (small ``T``, one seed, smaller
problems) that runs in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from benchmarks.methods import PerHorizon, PolicyConfig

ONE_OVER_T = PerHorizon(lambda horizon: 1.0 / horizon, "1/T")

#: Keyword options by method label.
Options = Mapping[str, Mapping[str, object]]


@dataclass(frozen=True)
class Block:
    r"""Runs of ``methods x problems x seeds``, each of ``horizon`` evaluations (the
    tuning benchmark's trials, a budget its methods are not told) with ``in_flight``
    of them running at once (the cluster's workers ``W``; the main benchmark runs
    one step at a time).

    A method is a registry name, or ``LABEL=NAME`` to run NAME under LABEL (as in
    ``--methods``); ``options`` holds the main benchmark's keyword options by label.
    A tuning run stops early once the method's own time passes
    ``max_optimizer_seconds`` (None: never).
    """

    problems: tuple[str, ...]
    methods: tuple[str, ...]
    horizon: int
    in_flight: int = 1
    seeds: tuple[int, ...] = (0,)
    max_optimizer_seconds: float | None = None
    options: Options = field(default_factory=dict)


@dataclass(frozen=True)
class Smoke:
    r"""A main preset's smoke variant: its ``horizon`` and first seed, problem
    settings (e.g. fewer arms) and extra options by label."""

    horizon: int
    problem_settings: Mapping[str, object] = field(default_factory=dict)
    options: Options = field(default_factory=dict)


@dataclass(frozen=True)
class Preset:
    r"""A named, reproducible benchmark configuration: its ``blocks`` of runs;
    ``description`` is its ``--list`` line. The tuning benchmark reports its
    ``budgets`` (trials) and the median optimizer time per trial in its ``windows``
    (``(first, last)`` trials, 1-based, both included; none: no such table); the
    main benchmark runs its ``smoke`` variant under ``--smoke`` (``needs_data``: its
    problems read data files)."""

    name: str
    description: str
    blocks: tuple[Block, ...]
    budgets: tuple[int, ...] = ()
    windows: tuple[tuple[int, int], ...] = ()
    smoke: Smoke | None = None
    needs_data: bool = False

    @property
    def block(self) -> Block:
        r"""The one block of a main or cluster preset."""
        if len(self.blocks) != 1:
            raise ValueError(f"Preset {self.name!r} has {len(self.blocks)} blocks.")
        return self.blocks[0]

    def variant(
        self, smoke: bool
    ) -> tuple[tuple[PolicyConfig, ...], int, tuple[int, ...], dict[str, object]]:
        r"""The main benchmark's ``(policies, horizon, seeds, problem settings)`` of
        the full or smoke run (ValueError for a method not in its registry)."""
        block = self.block
        if not smoke:
            return _policies(block, {}), block.horizon, block.seeds, {}
        if self.smoke is None:
            raise ValueError(f"Preset {self.name!r} has no smoke variant.")
        return (
            _policies(block, self.smoke.options),
            self.smoke.horizon,
            block.seeds[:1],
            dict(self.smoke.problem_settings),
        )


def _policies(block: Block, extra: Options) -> tuple[PolicyConfig, ...]:
    r"""The block's methods as policies with their options, then ``extra``'s."""
    policies = []
    for method in block.methods:
        config = PolicyConfig.parse(method)
        label = config.label
        options = {**block.options.get(label, {}), **extra.get(label, {})}
        policies.append(config.with_options(options))
    return tuple(policies)


_BBKB_OPTIONS = {
    "bayes_radius": "theory",
    "qbar": 2.0,
    "rkhs_bound": 1.0,
    "delta": ONE_OVER_T,
}


def _bbkb_paper(dataset: str, bandwidth: float) -> Preset:
    return Preset(
        name=f"bbkb-{dataset}",
        description=f"BBKB paper (ICML 2020, App. D) on {dataset}: bandwidth "
        f"{bandwidth}, noise std 0.01, T = 10^4",
        blocks=(
            Block(
                problems=(f"{dataset}:lengthscale={bandwidth}:noise_std=0.01:noise=1",),
                methods=(
                    "bbkb",
                    "bkb",
                    "bbkb-const=bbkb",
                    "exact-ucb",
                    "exact-bucb",
                    "epsilon-greedy",
                    "uniform",
                ),
                horizon=10_000,
                seeds=(0, 1, 2),
                options={
                    "bbkb": _BBKB_OPTIONS,
                    "bkb": _BBKB_OPTIONS,
                    "bbkb-const": {"qbar": 2.0},
                },
            ),
        ),
        smoke=Smoke(30, problem_settings={"rows": 1000}),
        needs_data=True,
    )


def _threds_paper(function: str) -> Preset:
    return Preset(
        name=f"threds-{function}",
        description=f"GP-ThreDS paper (NeurIPS 2021) on rescaled {function}: noise "
        "variance 0.01, T = 1000, 10 seeds; GP-ThreDS as in the paper and with the "
        "reused-observations extension (gp-threds-reuse); IGP-UCB with incremental "
        "updates (igp-ucb-incremental)",
        blocks=(
            Block(
                problems=(f"threds_{function}",),
                methods=(
                    "gp-threds",
                    "gp-threds-reuse=gp-threds",
                    "igp-ucb-incremental",
                    "epsilon-greedy",
                    "uniform",
                ),
                horizon=1000,
                seeds=tuple(range(10)),
                options={"gp-threds-reuse": {"reuse_observations": True}},
            ),
        ),
        smoke=Smoke(30),
    )


_SGPTS_OPTIONS = {"batch_size": 100, "num_initial": 250, "num_features": 1000}
_SGPTS_SMOKE = {
    "batch_size": 10,
    "num_initial": 10,
    "num_features": 128,
    "raw_samples": 256,
    "num_restarts": 2,
}

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="default",
            description="BBKB vs BKB vs exact GP-UCB (O(A t) per step) vs uniform, "
            "Rosenbrock-8 on 20,000 arms, T = 2,000, 2 seeds: long enough for the "
            "dictionary (m ~ 240) to fall well below t",
            blocks=(
                Block(
                    problems=("rosenbrock:dim=8:arms=20000:noise=1",),
                    methods=("bbkb", "bkb", "exact-ucb", "uniform"),
                    horizon=2000,
                    seeds=(0, 1),
                ),
            ),
            smoke=Smoke(30, problem_settings={"arms": 1000}),
        ),
        _bbkb_paper("abalone", 17.5),
        _bbkb_paper("cadata", 12.5),
        _threds_paper("branin"),
        _threds_paper("rosenbrock"),
        Preset(
            name="sgpts-hartmann6",
            description="S-GP-TS paper (NeurIPS 2021): Hartmann-6, noise variance 0.5, "
            "250 initial points + 40 batches of 100; S-GP-TS as in the paper (m = 100, "
            "conditional-variance inducing points) and improvement-weighted (m = 100)",
            blocks=(
                Block(
                    problems=("sgpts_hartmann6",),
                    methods=("sgpts", "sgpts-ei=sgpts", "exact-gpts", "uniform"),
                    horizon=4250,
                    seeds=(0, 1, 2),
                    options={
                        "sgpts": _SGPTS_OPTIONS | {"num_inducing": 100},
                        "sgpts-ei": _SGPTS_OPTIONS
                        | {"num_inducing": 100, "inducing_quality": "improvement"},
                        "exact-gpts": _SGPTS_OPTIONS,
                        "uniform": {"batch_size": 100},
                    },
                ),
            ),
            smoke=Smoke(
                30,
                options={
                    "sgpts": _SGPTS_SMOKE | {"num_inducing": 10},
                    "sgpts-ei": _SGPTS_SMOKE | {"num_inducing": 10},
                    "exact-gpts": _SGPTS_SMOKE,
                    "uniform": {"batch_size": 10},
                },
            ),
        ),
    )
}


def get_preset(name: str) -> Preset:
    r"""Return the preset ``name`` (ValueError listing the known ones otherwise)."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; known: {sorted(PRESETS)}.")
    return PRESETS[name]
