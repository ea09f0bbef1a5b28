r"""Named benchmark presets: the built-in comparison and the papers' setups.

``default``: BBKB vs BKB vs exact GP-UCB vs uniform on Rosenbrock-8 over 20,000 arms,
with the model noise (ridge) ``lambda = 1`` and the constant radius 1 on the Bayesian
scale for every GP policy. ``bbkb-abalone`` / ``bbkb-cadata``: Calandriello et al.
(ICML 2020), Appendix D. ``threds-branin`` / ``threds-rosenbrock``: Salgia et al.
(NeurIPS 2021). ``sgpts-hartmann6``: Vakili et al. (NeurIPS 2021). Each has a *smoke*
variant (small ``T``, one seed, smaller problems) that runs in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from benchmarks.methods import PerHorizon, PolicyConfig

ONE_OVER_T = PerHorizon(lambda horizon: 1.0 / horizon, "1/T")


@dataclass(frozen=True)
class Preset:
    r"""A reproducible benchmark configuration: problem specs, policies, horizon and
    seeds, and the smoke variant's horizon, problem settings (e.g. fewer arms) and
    extra policy options (by label); ``description`` is its ``--list`` line."""

    name: str
    description: str
    problems: tuple[str, ...]
    policies: tuple[PolicyConfig, ...]
    horizon: int
    seeds: tuple[int, ...]
    smoke_horizon: int
    smoke_problem_settings: Mapping[str, object] = field(default_factory=dict)
    smoke_options: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    needs_data: bool = False

    def variant(
        self, smoke: bool
    ) -> tuple[tuple[PolicyConfig, ...], int, tuple[int, ...], dict[str, object]]:
        r"""``(policies, horizon, seeds, problem settings)`` of the full/smoke run."""
        if not smoke:
            return self.policies, self.horizon, self.seeds, {}
        policies = tuple(
            config.with_options(self.smoke_options.get(config.label, {}))
            for config in self.policies
        )
        return (
            policies,
            self.smoke_horizon,
            self.seeds[:1],
            dict(self.smoke_problem_settings),
        )


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
        problems=(f"{dataset}:lengthscale={bandwidth}:noise_std=0.01:noise=1",),
        policies=(
            PolicyConfig("bbkb", options=_BBKB_OPTIONS),
            PolicyConfig("bkb", options=_BBKB_OPTIONS),
            PolicyConfig("bbkb", "bbkb-const", options={"qbar": 2.0}),
            PolicyConfig("exact-ucb"),
            PolicyConfig("exact-bucb"),
            PolicyConfig("epsilon-greedy"),
            PolicyConfig("uniform"),
        ),
        horizon=10_000,
        seeds=(0, 1, 2),
        smoke_horizon=30,
        smoke_problem_settings={"rows": 1000},
        needs_data=True,
    )


def _threds_paper(function: str) -> Preset:
    return Preset(
        name=f"threds-{function}",
        description=f"GP-ThreDS paper (NeurIPS 2021) on rescaled {function}: noise "
        "variance 0.01, T = 1000, 10 seeds; GP-ThreDS as in the paper and with the "
        "reused-observations extension (gp-threds-reuse); IGP-UCB with incremental "
        "updates (igp-ucb-incremental)",
        problems=(f"threds_{function}",),
        policies=(
            PolicyConfig("gp-threds"),
            PolicyConfig(
                "gp-threds",
                label="gp-threds-reuse",
                options={"reuse_observations": True},
            ),
            PolicyConfig("igp-ucb-incremental"),
            PolicyConfig("epsilon-greedy"),
            PolicyConfig("uniform"),
        ),
        horizon=1000,
        seeds=tuple(range(10)),
        smoke_horizon=30,
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
            problems=("rosenbrock:dim=8:arms=20000:noise=1",),
            policies=(
                PolicyConfig("bbkb"),
                PolicyConfig("bkb"),
                PolicyConfig("exact-ucb"),
                PolicyConfig("uniform"),
            ),
            horizon=2000,
            seeds=(0, 1),
            smoke_horizon=30,
            smoke_problem_settings={"arms": 1000},
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
            problems=("sgpts_hartmann6",),
            policies=(
                PolicyConfig("sgpts", options=_SGPTS_OPTIONS | {"num_inducing": 100}),
                PolicyConfig(
                    "sgpts",
                    label="sgpts-ei",
                    options=_SGPTS_OPTIONS
                    | {"num_inducing": 100, "inducing_quality": "improvement"},
                ),
                PolicyConfig("exact-gpts", options=_SGPTS_OPTIONS),
                PolicyConfig("uniform", options={"batch_size": 100}),
            ),
            horizon=4250,
            seeds=(0, 1, 2),
            smoke_horizon=30,
            smoke_options={
                "sgpts": _SGPTS_SMOKE | {"num_inducing": 10},
                "sgpts-ei": _SGPTS_SMOKE | {"num_inducing": 10},
                "exact-gpts": _SGPTS_SMOKE,
                "uniform": {"batch_size": 10},
            },
        ),
    )
}


def get_preset(name: str) -> Preset:
    r"""Return the preset ``name`` (ValueError listing the known ones otherwise)."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; known: {sorted(PRESETS)}.")
    return PRESETS[name]
