r"""Per-step wall time of S-GP-TS against exact GP-TS on S-GP-TS's Hartmann-6.

One Thompson step (``q = 1``) draws one sample path with ``M`` random Fourier
features, takes its argmax over ``N`` candidate arms and conditions the model on the
new noisy observation. The benchmark times such steps after ``t`` observations for

- ``sgpts``: :class:`~.policies.thompson.SGPTSPolicy` (a
  :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` with ``m``
  inducing points; ``O((m + M) N)`` to select, ``O(t m^2)`` to update);
- ``exact-gpts``: :class:`~.policies.thompson.ExactGPTSPolicy` (a fresh
  ``SingleTaskGP`` per step and the same chunked pathwise argmax, ``O(t^3)``);
- ``exact-gpts-botorch``: the same model with BoTorch's own ``draw_matheron_paths``
  evaluated on the arms and an argmax.

Every method uses the problem's fixed kernel and noise and, at a given ``t``, starts
from the same random data and sees the same reward noise. The targets of the S-GP-TS
paper's setting (``m = 100``, ``M = 1000``, ``N = 10,000``) are a step time at
``t = 5000`` within 2x of that at ``t = 500`` and a speed-up of at least 10x over
exact GP-TS at ``t = 5000``.

Run ``python -m botorch_sketch.benchmarks.thompson_steps --help``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from botorch.sampling.pathwise.utils import get_train_inputs
from torch import Tensor
from tqdm.auto import tqdm

from botorch_sketch.benchmarks.policies.base import Problem
from botorch_sketch.benchmarks.policies.thompson import ExactGPTSPolicy, SGPTSPolicy
from botorch_sketch.benchmarks.problems import make_sgpts_hartmann6

#: Method keys of the results, in table order, with their table labels.
METHODS = {
    "sgpts": "S-GP-TS",
    "exact-gpts": "exact GP-TS, chunked paths",
    "exact-gpts-botorch": "exact GP-TS, BoTorch paths",
}

#: Sizes of the S-GP-TS paper's setting and of the quick ``--smoke`` variant.
FULL_SIZES = {
    "inducing": 100,
    "features": 1000,
    "arms": 10_000,
    "t": [500, 5000],
    "steps": 20,
    "exact_steps": 3,
}
SMOKE_SIZES = {
    "inducing": 10,
    "features": 64,
    "arms": 200,
    "t": [30, 60],
    "steps": 2,
    "exact_steps": 2,
}


class BoTorchPathGPTSPolicy(ExactGPTSPolicy):
    r"""Exact GP-TS choosing arms with BoTorch's own pathwise sampler.

    ``ask()`` draws one path with ``draw_matheron_paths`` (``num_features`` random
    Fourier features, BoTorch's default update), evaluates it on the arms in chunks
    and returns the argmax; BoTorch's sampler reads the global random state, so it
    runs under ``torch.random.fork_rng`` seeded from the policy's generator.

    Example:
        >>> policy = BoTorchPathGPTSPolicy(num_features=1000)
    """

    name = "exact-gpts-botorch"

    def ask(self) -> Tensor:
        if self.model is None or not self.problem.is_finite:
            return super().ask()
        seed = int(torch.randint(2**62, (1,), generator=self.generator))
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            path = draw_matheron_paths(
                self.model,
                sample_shape=torch.Size([1]),
                prior_sampler=partial(
                    draw_kernel_feature_paths, num_features=self.num_features
                ),
            )
            values = torch.cat(
                [path(chunk) for chunk in self.problem.arms.split(self.chunk_size, 0)],
                dim=-1,
            )
        return values.argmax(dim=-1)


@dataclass(frozen=True)
class StepTimings:
    r"""Measured Thompson steps of one method after ``t`` observations.

    Attributes:
        method: A key of :data:`METHODS`.
        t: Observations before the first measured step (step ``k`` sees ``t + k``).
        select_seconds: ``ask()`` time per step (path draw and argmax).
        update_seconds: ``tell()`` time per step (conditioning on the new reward).
        observations: Observations the model held before each step's ``ask()``.
        chosen: Arm index chosen at each step.
        num_inducing: Inducing points ``m_t`` after the last step (S-GP-TS only).
    """

    method: str
    t: int
    select_seconds: list[float]
    update_seconds: list[float]
    observations: list[int]
    chosen: list[int]
    num_inducing: int | None = None

    @property
    def step_seconds(self) -> list[float]:
        r"""Whole step times, ``select + update``."""
        return [
            a + b for a, b in zip(self.select_seconds, self.update_seconds, strict=True)
        ]

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.step_seconds)

    @property
    def min_ms(self) -> float:
        return 1e3 * min(self.step_seconds)


def _check_int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}.")
    return value


def _check_ts(ts: Sequence[int], warmup: int) -> list[int]:
    r"""Distinct observation counts, each leaving room for ``warmup`` steps, sorted."""
    ts = list(ts)
    if not ts:
        raise ValueError("`ts` must hold at least one observation count.")
    for t in ts:
        _check_int(t, "ts", warmup + 1)
    if len(set(ts)) != len(ts):
        raise ValueError(f"`ts` must not repeat a value, got {ts}.")
    return sorted(ts)


def _rewards(problem: Problem, indices: Tensor, generator: torch.Generator) -> Tensor:
    r"""Noisy rewards ``f(arm) + noise_std * eps`` of arm ``indices``."""
    noise = torch.randn(indices.shape[0], generator=generator, dtype=torch.float64)
    values = problem.arm_values[indices]
    return values + problem.noise_std * noise.to(values)


def _num_observations(policy: SGPTSPolicy | ExactGPTSPolicy) -> int:
    (train_X,) = get_train_inputs(policy.model, transformed=False)
    return train_X.shape[-2]


def time_thompson_steps(
    problem: Problem,
    policy: SGPTSPolicy | ExactGPTSPolicy,
    t: int,
    steps: int,
    *,
    warmup: int = 2,
    seed: int = 0,
    progress: bool = True,
) -> StepTimings:
    r"""Time ``steps`` ask/tell rounds of ``policy`` starting at ``t`` observations.

    The policy is told ``t - warmup`` uniformly random arms with noisy rewards
    (untimed), then runs ``warmup`` untimed steps (one-time costs such as lazy
    imports and allocations) and ``steps`` timed ones. ``seed`` fixes the data, the
    policy's generator and the reward noise, so all policies share them.

    Args:
        problem: A finite problem.
        policy: A Thompson-sampling policy (its model must expose train inputs).
        t: Observations before the first timed step (``> warmup``).
        steps: Timed steps.
        warmup: Untimed steps before them.
        seed: Seed of every random choice.
        progress: Show a tqdm progress bar.

    Returns:
        The :class:`StepTimings`.
    """
    base = torch.Generator().manual_seed(seed)
    initial = torch.randint(problem.arms.shape[0], (t - warmup,), generator=base)
    initial_rewards = _rewards(problem, initial, base)
    policy_seed = int(torch.randint(2**62, (1,), generator=base))
    policy.reset(problem, t + steps, torch.Generator().manual_seed(policy_seed))
    policy.tell(initial, initial_rewards)
    select, update, observations, chosen = [], [], [], []
    label = f"{policy.name} t={t}"
    for step in tqdm(
        range(warmup + steps), desc=label, disable=not progress, leave=False
    ):
        held = _num_observations(policy)
        start = time.perf_counter()
        index = policy.ask()
        middle = time.perf_counter()
        rewards = _rewards(problem, index, base)
        between = time.perf_counter()
        policy.tell(index, rewards)
        end = time.perf_counter()
        if step >= warmup:
            select.append(middle - start)
            update.append(end - between)
            observations.append(held)
            chosen.append(int(index[0]))
    inducing = policy.diagnostics().get("num_inducing")
    return StepTimings(
        method=policy.name,
        t=t,
        select_seconds=select,
        update_seconds=update,
        observations=observations,
        chosen=chosen,
        num_inducing=None if inducing is None else int(inducing),
    )


def _ratios(numerator: StepTimings, denominator: StepTimings) -> dict[str, float]:
    return {
        "median": numerator.median_ms / denominator.median_ms,
        "min": numerator.min_ms / denominator.min_ms,
    }


def measure_thompson_steps(
    num_inducing: int = 100,
    num_features: int = 1000,
    num_arms: int = 10_000,
    ts: Sequence[int] = (500, 5000),
    steps: int = 20,
    exact_steps: int = 3,
    *,
    warmup: int = 2,
    inducing_quality: str = "variance",
    seed: int = 0,
    skip_exact: bool = False,
    progress: bool = True,
) -> dict[str, object]:
    r"""Time S-GP-TS and exact GP-TS steps on S-GP-TS's Hartmann-6 at each ``t``.

    Args:
        num_inducing: S-GP-TS inducing points ``m``.
        num_features: Random Fourier features ``M`` per path (even).
        num_arms: Candidate arms ``N`` (seeded uniform points of ``[0, 1]^6``).
        ts: Observation counts ``t`` (distinct, each ``> warmup``).
        steps: Timed S-GP-TS steps per ``t``.
        exact_steps: Timed steps per ``t`` of each exact method.
        warmup: Untimed steps before the timed ones.
        inducing_quality: S-GP-TS inducing selection, ``"variance"`` or
            ``"improvement"``.
        seed: Seed of the arms, the data, the paths and the reward noise.
        skip_exact: Time S-GP-TS only.
        progress: Show tqdm progress bars.

    Returns:
        A dict with ``"settings"`` (the arguments), ``"timings"`` (method key ->
        ``t`` -> :class:`StepTimings`), ``"growth"`` (S-GP-TS step time at the
        largest ``t`` over that at the smallest, ``{"median", "min"}``; None for one
        ``t``) and ``"speedup"`` (exact method -> ``t`` -> exact over S-GP-TS step
        time, ``{"median", "min"}``).

    Example:
        >>> results = measure_thompson_steps(ts=(500, 5000), steps=20)
        >>> results["speedup"]["exact-gpts"][5000]["median"]
    """
    _check_int(steps, "steps", 1)
    _check_int(exact_steps, "exact_steps", 1)
    _check_int(warmup, "warmup", 0)
    _check_int(seed, "seed", 0)
    ts = _check_ts(ts, warmup)
    policies = [
        SGPTSPolicy(
            num_inducing=num_inducing,
            num_features=num_features,
            inducing_quality=inducing_quality,
        )
    ]
    if not skip_exact:
        policies += [
            ExactGPTSPolicy(num_features=num_features),
            BoTorchPathGPTSPolicy(num_features=num_features),
        ]
    problem = make_sgpts_hartmann6(num_arms=num_arms, seed=seed)
    timings: dict[str, dict[int, StepTimings]] = {}
    for policy in policies:
        count = steps if policy.name == "sgpts" else exact_steps
        timings[policy.name] = {
            t: time_thompson_steps(
                problem, policy, t, count, warmup=warmup, seed=seed, progress=progress
            )
            for t in ts
        }
    sgpts = timings["sgpts"]
    growth = _ratios(sgpts[ts[-1]], sgpts[ts[0]]) if len(ts) > 1 else None
    speedup = {
        name: {t: _ratios(runs[t], sgpts[t]) for t in ts}
        for name, runs in timings.items()
        if name != "sgpts"
    }
    return {
        "settings": {
            "num_inducing": num_inducing,
            "num_features": num_features,
            "num_arms": num_arms,
            "ts": ts,
            "steps": steps,
            "exact_steps": exact_steps,
            "warmup": warmup,
            "inducing_quality": inducing_quality,
            "seed": seed,
            "torch_threads": torch.get_num_threads(),
        },
        "timings": timings,
        "growth": growth,
        "speedup": speedup,
    }


def _span(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if values[-1] != values[0] else str(values[0])


def format_report(results: dict[str, object]) -> str:
    r"""The results of :func:`measure_thompson_steps` as a text table and summary."""
    s = results["settings"]
    lines = [
        f"S-GP-TS Hartmann-6: N = {s['num_arms']} arms, m = {s['num_inducing']}, "
        f"M = {s['num_features']}, quality {s['inducing_quality']}, seed {s['seed']}, "
        f"{s['torch_threads']} torch threads, {s['warmup']} warm-up steps",
        f"{'method':<28}{'t':>6}{'steps':>6}{'n':>12}{'m_t':>5}"
        f"{'select ms':>11}{'update ms':>11}{'median ms':>11}{'min ms':>9}",
    ]
    for name, runs in results["timings"].items():
        for t, run in runs.items():
            inducing = "-" if run.num_inducing is None else str(run.num_inducing)
            select = 1e3 * statistics.median(run.select_seconds)
            update = 1e3 * statistics.median(run.update_seconds)
            lines.append(
                f"{METHODS[name]:<28}{t:>6}{len(run.chosen):>6}"
                f"{_span(run.observations):>12}{inducing:>5}{select:>11.1f}"
                f"{update:>11.1f}{run.median_ms:>11.1f}{run.min_ms:>9.1f}"
            )
    ts = s["ts"]
    if results["growth"] is not None:
        g = results["growth"]
        lines.append(
            f"S-GP-TS step(t={ts[-1]}) / step(t={ts[0]}): median {g['median']:.2f}, "
            f"min {g['min']:.2f} (target <= 2)"
        )
    if results["speedup"]:
        lines += [
            "speed-up of S-GP-TS, exact over S-GP-TS step time (target >= 10x at "
            "t=5000):",
            f"{'versus':<28}{'t':>6}{'median':>9}{'min':>9}",
        ]
    for name, by_t in results["speedup"].items():
        for t, ratio in by_t.items():
            lines.append(
                f"{METHODS[name]:<28}{t:>6}{ratio['median']:>8.1f}x"
                f"{ratio['min']:>8.1f}x"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    r"""The argument parser; size flags default to the paper's setting."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = ", ".join(f"{k} {v}" for k, v in SMOKE_SIZES.items())
    parser.add_argument(
        "--smoke", action="store_true", help=f"tiny default sizes ({sizes})"
    )
    parser.add_argument("--inducing", type=int, help="inducing points m (100)")
    parser.add_argument("--features", type=int, help="random features M (1000)")
    parser.add_argument("--arms", type=int, help="candidate arms N (10000)")
    parser.add_argument(
        "--t", type=int, nargs="+", help="observation counts (500 5000)"
    )
    parser.add_argument("--steps", type=int, help="timed S-GP-TS steps per t (20)")
    parser.add_argument(
        "--exact-steps", type=int, help="timed exact GP-TS steps per t (3)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    parser.add_argument(
        "--quality", choices=("variance", "improvement"), default="variance"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1; 0 keeps torch's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-exact", action="store_true", help="time S-GP-TS only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
    sizes = {
        key: default if getattr(args, key) is None else getattr(args, key)
        for key, default in sizes.items()
    }
    if args.threads < 0:
        parser.error("--threads must be >= 0.")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        results = measure_thompson_steps(
            sizes["inducing"],
            sizes["features"],
            sizes["arms"],
            sizes["t"],
            sizes["steps"],
            sizes["exact_steps"],
            warmup=args.warmup,
            inducing_quality=args.quality,
            seed=args.seed,
            skip_exact=args.skip_exact,
            progress=not args.no_progress,
        )
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    print(format_report(results))


if __name__ == "__main__":
    main()
