r"""Per-step wall time of S-GP-TS against exact GP-TS on S-GP-TS's Hartmann-6.

One Thompson step (``q = 1``) draws one sample path with ``M`` random Fourier
features, takes its argmax over ``N`` candidate arms and conditions the model on the
new noisy observation. The benchmark times such steps after ``t`` observations for

- ``sgpts-cached``: :class:`~.policies.thompson.CachedSGPTSPolicy` (prior features of
  all arms computed once, kernel columns of the ``m`` inducing arms cached, rank-one
  ``q(u)`` statistics): ``O(N (M + m) + m^3)`` per step while the inducing set holds;
- ``exact-gpts-incremental``: :class:`~.policies.thompson.IncrementalExactGPTSPolicy`
  (the same prior features, one cached kernel column per observed arm, Cholesky factor
  grown by rows): ``O(N (M + t) + t^2)`` per step, ``O(N (M + t) + t^2)`` memory;
  past the memory budget the columns are recomputed at every step, ``O(N t d)``;
- ``sgpts``: :class:`~.policies.thompson.SGPTSPolicy` (a
  :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` rebuilt per
  step and a fresh feature basis per path: ``O((m + M) N d)`` to select, ``O(t m^2)``
  to update);
- ``exact-gpts``: :class:`~.policies.thompson.ExactGPTSPolicy` (a fresh
  ``SingleTaskGP`` per step and the same chunked pathwise argmax, ``O(t^3)``);
- ``exact-gpts-botorch``: the same model with BoTorch's own ``draw_matheron_paths``
  evaluated on the arms and an argmax.

Every method uses the problem's fixed kernel and noise and, at a given ``t``, starts
from the same random data and sees the same reward noise. Each run also reports the
step's flop count (the dominant matrix products and solves, :func:`step_flops`) as a
time at the measured throughput of the same products
(:func:`~.measurement.matmul_flops`) and the memory the sampler holds. The S-GP-TS
section of ``docs/benchmarks.md`` lists the targets and the measured figures.

Run ``python -m botorch_sketch.benchmarks thompson_steps --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial

import torch
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from botorch.sampling.pathwise.utils import get_train_inputs
from torch import Tensor
from tqdm.auto import tqdm

from botorch_sketch.benchmarks.arguments import OneLineParser
from botorch_sketch.benchmarks.measurement import matmul_flops, max_rss_bytes
from botorch_sketch.benchmarks.policies.thompson import (
    CachedSGPTSPolicy,
    ExactGPTSPolicy,
    IncrementalExactGPTSPolicy,
    SGPTSPolicy,
)
from botorch_sketch.benchmarks.problems import Problem, make_sgpts_hartmann6
from botorch_sketch.utils.validation import check_int

#: Method keys of the results, in table order, with their table labels.
METHODS = {
    "sgpts-cached": "S-GP-TS, cached",
    "exact-gpts-incremental": "exact GP-TS, incremental",
    "sgpts": "S-GP-TS",
    "exact-gpts": "exact GP-TS, chunked paths",
    "exact-gpts-botorch": "exact GP-TS, BoTorch paths",
}

#: The S-GP-TS method each exact method is compared with.
BASELINE_OF = {
    "exact-gpts-incremental": "sgpts-cached",
    "exact-gpts": "sgpts",
    "exact-gpts-botorch": "sgpts",
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
        memory_gib: GiB the sampler holds after the last step (cached methods only).
        flops: Flops of the last timed step (cached methods only, :func:`step_flops`).
        reselections: Inducing re-selections during the timed steps (``sgpts-cached``).
    """

    method: str
    t: int
    select_seconds: list[float]
    update_seconds: list[float]
    observations: list[int]
    chosen: list[int]
    num_inducing: int | None = None
    memory_gib: float | None = None
    flops: float | None = None
    reselections: int | None = None

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


def _check_ts(ts: Sequence[int], warmup: int) -> list[int]:
    r"""Distinct observation counts, each leaving room for ``warmup`` steps, sorted."""
    ts = list(ts)
    if not ts:
        raise ValueError("`ts` must hold at least one observation count.")
    for t in ts:
        check_int(t, "ts", warmup + 1)
    if len(set(ts)) != len(ts):
        raise ValueError(f"`ts` must not repeat a value, got {ts}.")
    return sorted(ts)


def _rewards(problem: Problem, indices: Tensor, generator: torch.Generator) -> Tensor:
    r"""Noisy rewards ``f(arm) + noise_std * eps`` of arm ``indices``."""
    noise = torch.randn(indices.shape[0], generator=generator, dtype=torch.float64)
    values = problem.arm_values[indices]
    return values + problem.noise_std * noise.to(values)


Timed = SGPTSPolicy | ExactGPTSPolicy | CachedSGPTSPolicy | IncrementalExactGPTSPolicy


def _num_observations(policy: Timed) -> int:
    sampler = getattr(policy, "sampler", None)
    if sampler is not None:
        return sampler.num_observations
    (train_X,) = get_train_inputs(policy.model, transformed=False)
    return train_X.shape[-2]


def step_flops(policy: Timed, q: int = 1) -> float | None:
    r"""Flops of one step of a cached policy in its current state (None otherwise).

    Counted (2 per multiply-add): the path values ``Phi_A W^T + K_AU V`` over the
    ``N`` arms with the ``c`` kernel columns actually multiplied (``2 N (M + c) q``;
    ``c`` rounds the used columns up to whole stored blocks; ``2 N c d q`` more when
    columns are recomputed); the prior at the update points ``2 s M q``; for exact
    GP-TS two triangular solves per path and one per update (``t^2`` each), for
    S-GP-TS the ``q(u)`` draw and update (``4 m^2 q``) and refresh (``m^3``).
    Kernel and feature evaluations of single points, argmax and Python overhead are
    left out.
    """
    sampler = getattr(policy, "sampler", None)
    if sampler is None or sampler.num_observations == 0:
        return None
    cache = sampler.cache
    N, M, d = cache.num_arms, cache.num_features, cache.arms.shape[-1]
    s = sampler.noise_size
    columns = cache.multiplied_columns(sampler.update_arms)
    recompute = 0.0 if cache.columns_stored else 2.0 * N * s * d * q
    draw = 2.0 * N * (M + columns) * q + recompute + 2.0 * s * M * q
    if isinstance(policy, IncrementalExactGPTSPolicy):
        return draw + 2.0 * s * s * q + 1.0 * s * s
    return draw + 4.0 * s * s * q + float(s) ** 3


def time_thompson_steps(
    problem: Problem,
    policy: Timed,
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
    reselections = None
    for step in tqdm(
        range(warmup + steps), desc=label, disable=not progress, leave=False
    ):
        if step == warmup:
            reselections = policy.diagnostics().get("reselections")
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
    diagnostics = policy.diagnostics()
    inducing = diagnostics.get("num_inducing")
    memory = diagnostics.get("memory_gib")
    if reselections is not None:
        reselections = int(diagnostics["reselections"] - reselections)
    return StepTimings(
        method=policy.name,
        t=t,
        select_seconds=select,
        update_seconds=update,
        observations=observations,
        chosen=chosen,
        num_inducing=None if inducing is None else int(inducing),
        memory_gib=memory,
        flops=step_flops(policy),
        reselections=reselections,
    )


def _ratios(numerator: StepTimings, denominator: StepTimings) -> dict[str, float]:
    return {
        "median": numerator.median_ms / denominator.median_ms,
        "min": numerator.min_ms / denominator.min_ms,
    }


_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64}


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
    methods: Sequence[str] | None = None,
    memory_budget_gib: float = 8.0,
    cache_dtype: str | None = None,
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
        skip_exact: Time the S-GP-TS methods only.
        methods: Keys of :data:`METHODS` to time (default all).
        memory_budget_gib: Cache budget of the cached methods (GiB).
        cache_dtype: Their cache storage, ``"float32"``, ``"float64"`` or None (the
            arms' dtype, float64).
        progress: Show tqdm progress bars.

    Returns:
        A dict with ``"settings"`` (the arguments, the measured matrix-vector
        throughput ``"gemv_flops"`` for ``N x (M + m)`` products in the cache dtype,
        that of a ``1024^3`` product ``"gemm_flops"`` and the process's peak
        resident memory ``"peak_rss_gib"`` before these throughput measurements),
        ``"timings"``
        (method key -> ``t`` -> :class:`StepTimings`), ``"growth"`` (S-GP-TS method
        -> its step time at the largest ``t`` over that at the smallest,
        ``{"median", "min"}``; empty for one ``t``) and ``"speedup"`` (exact method
        -> ``t`` -> exact over S-GP-TS step time of :data:`BASELINE_OF`,
        ``{"median", "min"}``).

    Example:
        >>> results = measure_thompson_steps(ts=(500, 5000), steps=20)
        >>> results["speedup"]["exact-gpts-incremental"][5000]["median"]
    """
    check_int(steps, "steps", 1)
    check_int(exact_steps, "exact_steps", 1)
    check_int(warmup, "warmup", 0)
    check_int(seed, "seed", 0)
    ts = _check_ts(ts, warmup)
    methods = list(METHODS) if methods is None else list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(f"`methods` must be distinct keys of {list(METHODS)}.")
    if skip_exact:
        methods = [m for m in methods if m not in BASELINE_OF]
    if cache_dtype not in _DTYPES:
        raise ValueError(f"`cache_dtype` must be one of {list(_DTYPES)}.")
    sgpts = {
        "num_inducing": num_inducing,
        "num_features": num_features,
        "inducing_quality": inducing_quality,
    }
    # prior_block=1: every timed step computes its own prior part, else the median
    # step would be one of the 63 in 64 that a prior bank spares that product
    cached = {
        "memory_budget_gib": memory_budget_gib,
        "cache_dtype": cache_dtype,
        "prior_block": 1,
    }
    builders = {
        "sgpts-cached": lambda: CachedSGPTSPolicy(**sgpts, **cached),
        "exact-gpts-incremental": lambda: IncrementalExactGPTSPolicy(
            num_features=num_features, **cached
        ),
        "sgpts": lambda: SGPTSPolicy(**sgpts),
        "exact-gpts": lambda: ExactGPTSPolicy(num_features=num_features),
        "exact-gpts-botorch": lambda: BoTorchPathGPTSPolicy(num_features=num_features),
    }
    for method in methods:
        builders[method]()  # checks the options before anything runs
    problem = make_sgpts_hartmann6(num_arms=num_arms, seed=seed)
    timings: dict[str, dict[int, StepTimings]] = {}
    for method in methods:
        policy = builders[method]()  # the previous one (and its cache) is freed
        count = exact_steps if method in BASELINE_OF else steps
        timings[method] = {
            t: time_thompson_steps(
                problem, policy, t, count, warmup=warmup, seed=seed, progress=progress
            )
            for t in ts
        }
    growth = {
        name: _ratios(runs[ts[-1]], runs[ts[0]])
        for name, runs in timings.items()
        if name not in BASELINE_OF and len(ts) > 1
    }
    speedup = {
        name: {t: _ratios(runs[t], timings[BASELINE_OF[name]][t]) for t in ts}
        for name, runs in timings.items()
        if name in BASELINE_OF and BASELINE_OF[name] in timings
    }
    peak_rss_gib = max_rss_bytes() / 2**30
    dtype = _DTYPES[cache_dtype] or torch.float64
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
            "memory_budget_gib": memory_budget_gib,
            "cache_dtype": str(dtype).removeprefix("torch."),
            "torch_threads": torch.get_num_threads(),
            "gemv_flops": matmul_flops(
                num_arms, num_features + num_inducing, 1, repeats=5, dtype=dtype
            ),
            "gemm_flops": matmul_flops(1024, 1024, 1024, repeats=5, dtype=dtype),
            "peak_rss_gib": peak_rss_gib,
        },
        "timings": timings,
        "growth": growth,
        "speedup": speedup,
    }


def time_box_batches(
    ts: Sequence[int] = (250, 4150),
    batch_size: int = 100,
    *,
    num_inducing: int = 100,
    num_features: int = 1000,
    inducing_quality: str = "variance",
    raw_samples: int | None = None,
    num_restarts: int = 10,
    seed: int = 0,
) -> dict[str, dict[int, dict[str, float]]]:
    r"""Time one batch of S-GP-TS and exact GP-TS on S-GP-TS's continuous Hartmann-6.

    At each ``t`` both policies are told the same ``t`` uniform points with noisy
    rewards (untimed), then ``ask()`` one batch of ``batch_size`` points (one path
    each, maximized over the box by ``raw_samples`` Sobol points and ``num_restarts``
    L-BFGS-B starts per path, the same budget for both) and ``tell()`` its rewards.

    Returns:
        Method key (``"sgpts"``, ``"exact-gpts"``) -> ``t`` -> ``{"select",
        "update", "batch"}`` seconds.

    Example:
        >>> time_box_batches(ts=(4150,))["exact-gpts"][4150]["batch"]
    """
    ts = _check_ts(ts, 0)
    check_int(batch_size, "batch_size", 1)
    problem = make_sgpts_hartmann6(seed=seed)
    options = {
        "batch_size": batch_size,
        "num_features": num_features,
        "raw_samples": raw_samples,
        "num_restarts": num_restarts,
    }
    builders = {
        "sgpts": lambda: SGPTSPolicy(
            num_inducing=num_inducing, inducing_quality=inducing_quality, **options
        ),
        "exact-gpts": lambda: ExactGPTSPolicy(**options),
    }
    results: dict[str, dict[int, dict[str, float]]] = {}
    for name, build in builders.items():
        results[name] = {}
        for t in ts:
            base = torch.Generator().manual_seed(seed)
            X = problem.uniform_points(t, base)
            noise = torch.randn(t, generator=base, dtype=X.dtype)
            policy_seed = int(torch.randint(2**62, (1,), generator=base))
            policy = build()
            policy.reset(
                problem, t + batch_size, torch.Generator().manual_seed(policy_seed)
            )
            policy.tell(X, problem.objective(X) + problem.noise_std * noise)
            start = time.perf_counter()
            batch = policy.ask()
            middle = time.perf_counter()
            noise = torch.randn(batch.shape[0], generator=base, dtype=X.dtype)
            rewards = problem.objective(batch) + problem.noise_std * noise
            between = time.perf_counter()
            policy.tell(batch, rewards)
            end = time.perf_counter()
            results[name][t] = {
                "select": middle - start,
                "update": end - between,
                "batch": middle - start + end - between,
            }
    return results


def format_box_report(results: dict[str, dict[int, dict[str, float]]]) -> str:
    r"""The results of :func:`time_box_batches` as a table with the speed-up."""
    lines = [
        "continuous Hartmann-6, one batch (seconds):",
        f"{'method':<28}{'t':>6}{'select s':>10}{'update s':>10}{'batch s':>10}",
    ]
    for name, by_t in results.items():
        for t, run in by_t.items():
            lines.append(
                f"{METHODS[name]:<28}{t:>6}{run['select']:>10.2f}"
                f"{run['update']:>10.2f}{run['batch']:>10.2f}"
            )
    for t, run in results["exact-gpts"].items():
        ratio = run["batch"] / results["sgpts"][t]["batch"]
        lines.append(f"exact GP-TS / S-GP-TS batch time at t={t}: {ratio:.1f}x")
    return "\n".join(lines)


def _span(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if values[-1] != values[0] else str(values[0])


def _optional(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_report(results: dict[str, object]) -> str:
    r"""The results of :func:`measure_thompson_steps` as a text table and summary.

    ``flop x`` is the median step time over the time of its flop count at the
    measured ``N x (M + m)`` matrix-vector throughput.
    """
    s = results["settings"]
    lines = [
        f"S-GP-TS Hartmann-6: N = {s['num_arms']} arms, m = {s['num_inducing']}, "
        f"M = {s['num_features']}, quality {s['inducing_quality']}, seed {s['seed']}, "
        f"{s['torch_threads']} torch threads, {s['warmup']} warm-up steps, cache "
        f"{s['cache_dtype']} within {s['memory_budget_gib']:g} GiB, matrix-vector "
        f"throughput {s['gemv_flops'] / 1e9:.2f} GFlop/s (1024^3 matrix product "
        f"{s.get('gemm_flops', math.nan) / 1e9:.2f}), peak RSS "
        f"{s['peak_rss_gib']:.2f} GiB",
        f"{'method':<28}{'t':>6}{'steps':>6}{'n':>12}{'m_t':>5}"
        f"{'select ms':>11}{'update ms':>11}{'median ms':>11}{'min ms':>9}"
        f"{'GiB':>7}{'flop x':>8}{'resel':>6}",
    ]
    for name, runs in results["timings"].items():
        for t, run in runs.items():
            select = 1e3 * statistics.median(run.select_seconds)
            update = 1e3 * statistics.median(run.update_seconds)
            flop_x = None
            if run.flops is not None:
                flop_x = run.median_ms / (1e3 * run.flops / s["gemv_flops"])
            lines.append(
                f"{METHODS[name]:<28}{t:>6}{len(run.chosen):>6}"
                f"{_span(run.observations):>12}{_optional(run.num_inducing, 'd'):>5}"
                f"{select:>11.1f}{update:>11.1f}{run.median_ms:>11.1f}"
                f"{run.min_ms:>9.1f}{_optional(run.memory_gib, '.2f'):>7}"
                f"{_optional(flop_x, '.2f'):>8}{_optional(run.reselections, 'd'):>6}"
            )
    ts = s["ts"]
    for name, g in results["growth"].items():
        lines.append(
            f"{METHODS[name]} step(t={ts[-1]}) / step(t={ts[0]}): median "
            f"{g['median']:.2f}, min {g['min']:.2f}"
        )
    if results["speedup"]:
        lines += [
            "speed-up of S-GP-TS, exact over S-GP-TS step time:",
            f"{'versus':<28}{'t':>6}{'median':>9}{'min':>9}",
        ]
    for name, by_t in results["speedup"].items():
        for t, ratio in by_t.items():
            lines.append(
                f"{METHODS[name]:<28}{t:>6}{ratio['median']:>8.1f}x"
                f"{ratio['min']:>8.1f}x"
            )
    return "\n".join(lines)


def save_results(results: Sequence[dict[str, object]], path: str) -> None:
    r"""Write runs of :func:`measure_thompson_steps` (e.g. one per ``N``) as JSON."""
    data = [
        {
            **result,
            "timings": {
                name: {str(t): asdict(run) for t, run in runs.items()}
                for name, runs in result["timings"].items()
            },
            "speedup": {
                name: {str(t): ratio for t, ratio in by_t.items()}
                for name, by_t in result["speedup"].items()
            },
        }
        for result in results
    ]
    with open(path, "w") as file:
        json.dump(data, file, indent=1)


def load_results(path: str) -> list[dict[str, object]]:
    r"""Read runs written by :func:`save_results`."""
    with open(path) as file:
        data = json.load(file)
    for result in data:
        result["timings"] = {
            name: {int(t): StepTimings(**run) for t, run in runs.items()}
            for name, runs in result["timings"].items()
        }
        result["speedup"] = {
            name: {int(t): ratio for t, ratio in by_t.items()}
            for name, by_t in result["speedup"].items()
        }
    return data


#: Line style and marker of each method in :func:`plot_step_times`.
_METHOD_STYLES = {
    "sgpts-cached": ("-", "o"),
    "exact-gpts-incremental": ("--", "s"),
    "sgpts": ("-.", "^"),
    "exact-gpts": (":", "D"),
    "exact-gpts-botorch": (":", "v"),
}


def plot_step_times(results: Sequence[dict[str, object]], path: str) -> None:
    r"""Write a PNG of median step time against ``t`` (left, one line per method and
    ``N``) and against ``N`` (right, one line per method and ``t``) from runs of
    :func:`measure_thompson_steps` at one or more ``N``.

    The color is ``N`` (left) or ``t`` (right), the line style and marker the
    method, so lines that coincide stay visible; legends sit below the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 5.6), layout="constrained")
    FigureCanvasAgg(figure)
    by_t, by_n = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    points: dict[tuple[str, int], dict[int, float]] = {}
    sizes = sorted({result["settings"]["num_arms"] for result in results})
    for result in results:
        N = result["settings"]["num_arms"]
        for name, runs in result["timings"].items():
            ts = sorted(runs)
            style, marker = _METHOD_STYLES[name]
            by_t.plot(
                ts,
                [runs[t].median_ms for t in ts],
                linestyle=style,
                marker=marker,
                color=f"C{sizes.index(N) % 10}",
                label=f"{METHODS[name]}, N = {N:,}",
            )
            for t in ts:
                points.setdefault((name, t), {})[N] = runs[t].median_ms
    ts_all = sorted({t for _, t in points})
    for (name, t), by_size in sorted(points.items()):
        if len(by_size) > 1:
            arms = sorted(by_size)
            style, marker = _METHOD_STYLES[name]
            by_n.plot(
                arms,
                [by_size[n] for n in arms],
                linestyle=style,
                marker=marker,
                color=f"C{ts_all.index(t) % 10}",
                label=f"{METHODS[name]}, t = {t:,}",
            )
    for axes, xlabel in ((by_t, "observations t"), (by_n, "arms N")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel("median step time [ms]")
        axes.grid(True, which="both", alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(
                fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2
            )
    figure.suptitle(
        "Thompson step time (q = 1), Hartmann-6 arms, one thread; "
        "solid: S-GP-TS, cached; dashed: exact GP-TS, incremental"
    )
    figure.savefig(path, dpi=120)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    r"""The argument parser; size flags default to the paper's setting."""
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    sizes = ", ".join(f"{k} {v}" for k, v in SMOKE_SIZES.items())
    parser.add_argument(
        "--smoke", action="store_true", help=f"tiny default sizes ({sizes})"
    )
    parser.add_argument("--inducing", type=int, help="inducing points m (100)")
    parser.add_argument("--features", type=int, help="random features M (1000)")
    parser.add_argument(
        "--arms", type=int, nargs="+", help="candidate arms N, one run each (10000)"
    )
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
        "--methods", nargs="+", choices=list(METHODS), help="methods (default all)"
    )
    parser.add_argument(
        "--memory-budget",
        type=float,
        default=8.0,
        help="GiB of cached features and columns per cached method (8)",
    )
    parser.add_argument(
        "--cache-dtype", choices=("float32", "float64"), help="cache storage dtype"
    )
    parser.add_argument("--plot", help="write a PNG of step time vs t and N here")
    parser.add_argument("--json", help="write the results (one per N) as JSON here")
    parser.add_argument(
        "--plot-from",
        nargs="+",
        metavar="JSON",
        help="instead of measuring: plot (--plot) results saved by --json",
    )
    parser.add_argument(
        "--box-batch",
        type=int,
        nargs="+",
        metavar="T",
        help="instead: time one batch on the continuous Hartmann-6 after T points",
    )
    parser.add_argument(
        "--batch-size", type=int, default=100, help="box batch size (100)"
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


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    r"""Parse ``argv`` and run the measurement, plot or box timing it asks for."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
    sizes = {
        key: default if getattr(args, key) is None else getattr(args, key)
        for key, default in sizes.items()
    }
    arms = sizes["arms"] if isinstance(sizes["arms"], list) else [sizes["arms"]]
    if args.threads < 0:
        parser.error("--threads must be >= 0.")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.plot_from:
        if not args.plot:
            parser.error("--plot-from needs --plot.")
        loaded = [r for path in args.plot_from for r in load_results(path)]
        plot_step_times(loaded, args.plot)
        print(f"wrote {args.plot}")
        return
    if args.box_batch:
        try:
            box = time_box_batches(
                args.box_batch,
                args.batch_size,
                num_inducing=sizes["inducing"],
                num_features=sizes["features"],
                inducing_quality=args.quality,
                seed=args.seed,
            )
        except (ValueError, TypeError) as error:
            parser.error(str(error))
        print(format_box_report(box))
        return
    results = []
    for num_arms in arms:
        try:
            result = measure_thompson_steps(
                sizes["inducing"],
                sizes["features"],
                num_arms,
                sizes["t"],
                sizes["steps"],
                sizes["exact_steps"],
                warmup=args.warmup,
                inducing_quality=args.quality,
                seed=args.seed,
                skip_exact=args.skip_exact,
                methods=args.methods,
                memory_budget_gib=args.memory_budget,
                cache_dtype=args.cache_dtype,
                progress=not args.no_progress,
            )
        except (ValueError, TypeError) as error:
            parser.error(str(error))
        print(format_report(result), flush=True)
        results.append(result)
    if args.json:
        save_results(results, args.json)
    if args.plot:
        plot_step_times(results, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
