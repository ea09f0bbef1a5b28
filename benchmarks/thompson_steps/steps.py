r"""Timing Thompson steps after ``t`` observations on the Hartmann-6 arms
(:func:`measure_thompson_steps`), counting their flops (:func:`step_flops`), and
timing one batch on the continuous Hartmann-6 (:func:`time_box_batches`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor
from tqdm.auto import tqdm

from benchmarks.measurement import matmul_flops, max_rss_bytes
from benchmarks.methods import get_method
from benchmarks.policies.common import resolve_cache_dtype
from benchmarks.policies.thompson import (
    CachedExactGPTS,
    CachedSGPTS,
    ModelExactGPTS,
    ModelSGPTS,
)
from benchmarks.problems import Problem, make_sgpts_hartmann6
from botorch_sketch.utils.validation import check_int

#: The main benchmark's methods this tool times (records of
#: :data:`benchmarks.methods.METHODS`), in table order, with their table labels.
METHODS = {
    "sgpts-cached": "S-GP-TS, cached",
    "exact-gpts-incremental": "exact GP-TS, incremental",
}

#: The S-GP-TS method each exact method is compared with.
BASELINE_OF = {"exact-gpts-incremental": "sgpts-cached"}


@dataclass(frozen=True)
class StepTimings:
    r"""Measured Thompson steps of one method after ``t`` observations.

    Not a :class:`~benchmarks.results.RunTrace`: :func:`time_thompson_steps` times
    a few steps of a model already conditioned on ``t`` observations, so there is
    no run from the first step, no optimum and no regret curve, and what it records
    (step times at ``t``, the model's size and memory) is no run's trace.

    Attributes:
        method: A key of :data:`METHODS`.
        t: Observations before the first measured step (step ``k`` sees ``t + k``).
        select_seconds: ``ask()`` time per step (path draw and argmax).
        update_seconds: ``tell()`` time per step (conditioning on the new reward).
        observations: Observations the model held before each step's ``ask()``.
        chosen: Arm index chosen at each step.
        num_inducing: Inducing points ``m_t`` after the last step (S-GP-TS only).
        memory_gib: GiB the sampler holds after the last step.
        flops: Flops of the last timed step (:func:`step_flops`).
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


def check_ts(ts: Sequence[int], warmup: int) -> list[int]:
    r"""Distinct observation counts, each leaving room for ``warmup`` steps, sorted."""
    ts = list(ts)
    if not ts:
        raise ValueError("`ts` must hold at least one observation count.")
    for t in ts:
        check_int(t, "ts", warmup + 1)
    if len(set(ts)) != len(ts):
        raise ValueError(f"`ts` must not repeat a value, got {ts}.")
    return sorted(ts)


def timed_round(
    policy, rewards_of: Callable[[Tensor], Tensor]
) -> tuple[Tensor, float, float]:
    r"""One ``ask()`` and ``tell()`` of ``policy``, rewards by ``rewards_of(chosen)``
    (untimed). Returns the chosen arms or points and the ask and tell seconds."""
    start = time.perf_counter()
    chosen = policy.ask()
    middle = time.perf_counter()
    rewards = rewards_of(chosen)
    between = time.perf_counter()
    policy.tell(chosen, rewards)
    end = time.perf_counter()
    return chosen, middle - start, end - between


def _noisy(values: Tensor, noise_std: float, generator: torch.Generator) -> Tensor:
    r"""Noisy rewards ``values + noise_std * eps`` of objective ``values`` (``n``)."""
    noise = torch.randn(values.shape[0], generator=generator, dtype=torch.float64)
    return values + noise_std * noise.to(values)


def _arm_rewards(
    problem: Problem, indices: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Noisy rewards of the arms ``indices``."""
    return _noisy(problem.arm_values[indices], problem.noise_std, generator)


def _point_rewards(problem: Problem, X: Tensor, generator: torch.Generator) -> Tensor:
    r"""Noisy rewards of the points ``X`` (``n x d``)."""
    return _noisy(problem.objective(X), problem.noise_std, generator)


def step_flops(policy: CachedSGPTS | CachedExactGPTS, q: int = 1) -> float | None:
    r"""Flops of one step of a cached policy in its current state (None before its
    first observation).

    Counted (2 per multiply-add): the path values ``Phi_A W^T + K_AU V`` over the
    ``N`` arms with the ``c`` kernel columns actually multiplied (``2 N (M + c) q``;
    ``c`` rounds the used columns up to whole stored blocks; ``2 N c d q`` more when
    columns are recomputed); the prior at the update points ``2 s M q``; for exact
    GP-TS two triangular solves per path and one per update (``t^2`` each), for
    S-GP-TS the ``q(u)`` draw and update (``4 m^2 q``) and refresh (``m^3``).
    Kernel and feature evaluations of single points, argmax and Python overhead are
    left out.
    """
    sampler = policy.sampler
    if sampler.num_observations == 0:
        return None
    cache = sampler.cache
    N, M, d = cache.num_arms, cache.num_features, cache.arms.shape[-1]
    s = sampler.noise_size
    columns = cache.multiplied_columns(sampler.update_arms)
    recompute = 0.0 if cache.columns_stored else 2.0 * N * s * d * q
    draw = 2.0 * N * (M + columns) * q + recompute + 2.0 * s * M * q
    if isinstance(policy, CachedExactGPTS):
        return draw + 2.0 * s * s * q + 1.0 * s * s
    return draw + 4.0 * s * s * q + float(s) ** 3


def time_thompson_steps(
    problem: Problem,
    method: str,
    options: dict[str, object],
    t: int,
    steps: int,
    *,
    warmup: int = 2,
    seed: int = 0,
    progress: bool = True,
) -> StepTimings:
    r"""Time ``steps`` ask/tell rounds of ``method`` starting at ``t`` observations.

    Its own loop, not the main benchmark's :func:`~benchmarks.runner.run_policy`: it
    times single steps at a given ``t`` after an untimed start, where a run times
    every step from the first.

    The method (built with ``options``) is told ``t - warmup`` uniformly random arms
    with noisy rewards (untimed), then runs ``warmup`` untimed steps (one-time costs
    such as lazy imports and allocations) and ``steps`` timed ones. ``seed`` fixes the
    data, the method's generator and the reward noise, so all methods share them.

    Args:
        problem: A finite problem.
        method: A key of :data:`METHODS`.
        options: Its options.
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
    initial_rewards = _arm_rewards(problem, initial, base)
    policy_seed = int(torch.randint(2**62, (1,), generator=base))
    policy = get_method(method)(
        problem, t + steps, torch.Generator().manual_seed(policy_seed), **options
    )
    policy.tell(initial, initial_rewards)
    rewards_of = partial(_arm_rewards, problem, generator=base)
    select, update, observations, chosen = [], [], [], []
    label = f"{method} t={t}"
    reselections = None
    for step in tqdm(
        range(warmup + steps), desc=label, disable=not progress, leave=False
    ):
        if step == warmup:
            reselections = policy.diagnostics().get("reselections")
        held = policy.sampler.num_observations
        index, ask_seconds, tell_seconds = timed_round(policy, rewards_of)
        if step >= warmup:
            select.append(ask_seconds)
            update.append(tell_seconds)
            observations.append(held)
            chosen.append(int(index[0]))
    diagnostics = policy.diagnostics()
    inducing = diagnostics.get("num_inducing")
    memory = diagnostics.get("memory_gib")
    if reselections is not None:
        reselections = int(diagnostics["reselections"] - reselections)
    return StepTimings(
        method=method,
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
        exact_steps: Timed exact GP-TS steps per ``t``.
        warmup: Untimed steps before the timed ones.
        inducing_quality: S-GP-TS inducing selection, ``"variance"`` or
            ``"improvement"``.
        seed: Seed of the arms, the data, the paths and the reward noise.
        skip_exact: Time S-GP-TS only.
        methods: Keys of :data:`METHODS` to time (default all).
        memory_budget_gib: Cache budget of each method (GiB).
        cache_dtype: Cache storage, ``"float32"``, ``"float64"`` or None (the
            arms' dtype, float64).
        progress: Show tqdm progress bars.

    Returns:
        A dict with ``"settings"`` (the arguments; ``"gemv_flops"``, the measured
        throughput of ``N x (M + m)`` matrix-vector products in the cache dtype;
        ``"gemm_flops"``, that of a ``1024^3`` product; ``"peak_rss_gib"``, the peak
        resident memory before these measurements), ``"timings"`` (method key ->
        ``t`` -> :class:`StepTimings`), ``"growth"`` (S-GP-TS method -> its step time
        at the largest ``t`` over that at the smallest, ``{"median", "min"}``; empty
        for one ``t``) and ``"speedup"`` (exact method -> ``t`` -> its step time over
        that of its :data:`BASELINE_OF`, ``{"median", "min"}``).

    Example:
        >>> results = measure_thompson_steps(ts=(500, 5000), steps=20)
        >>> results["speedup"]["exact-gpts-incremental"][5000]["median"]
    """
    check_int(steps, "steps", 1)
    check_int(exact_steps, "exact_steps", 1)
    check_int(warmup, "warmup", 0)
    check_int(seed, "seed", 0)
    ts = check_ts(ts, warmup)
    methods = list(METHODS) if methods is None else list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(f"`methods` must be distinct keys of {list(METHODS)}.")
    if skip_exact:
        methods = [m for m in methods if m not in BASELINE_OF]
    dtype = resolve_cache_dtype(cache_dtype) or torch.float64
    # prior_block=1: every timed step computes its own prior part, else the median
    # step would be one of the 63 in 64 that a prior bank spares that product
    exact = {
        "num_features": num_features,
        "memory_budget_gib": memory_budget_gib,
        "cache_dtype": cache_dtype,
        "prior_block": 1,
    }
    sparse = {"num_inducing": num_inducing, "inducing_quality": inducing_quality}
    options = {"sgpts-cached": exact | sparse, "exact-gpts-incremental": exact}
    problem = make_sgpts_hartmann6(num_arms=num_arms, seed=seed)
    timings: dict[str, dict[int, StepTimings]] = {}
    for method in methods:
        count = exact_steps if method in BASELINE_OF else steps
        timings[method] = {
            t: time_thompson_steps(
                problem,
                method,
                options[method],
                t,
                count,
                warmup=warmup,
                seed=seed,
                progress=progress,
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

    At each ``t`` both policies (:class:`ModelSGPTS`, :class:`ModelExactGPTS`) are
    told the same ``t`` uniform points with noisy rewards (untimed), then ``ask()``
    one batch of ``batch_size`` points (one path each, maximized over the box by
    ``raw_samples`` Sobol points and ``num_restarts`` L-BFGS-B starts per path, the
    same budget for both) and ``tell()`` its rewards.

    Returns:
        Method key (``"sgpts"``, ``"exact-gpts"``) -> ``t`` -> ``{"select",
        "update", "batch"}`` seconds.

    Example:
        >>> time_box_batches(ts=(4150,))["exact-gpts"][4150]["batch"]
    """
    ts = check_ts(ts, 0)
    check_int(batch_size, "batch_size", 1)
    problem = make_sgpts_hartmann6(seed=seed)
    options = {
        "batch_size": batch_size,
        "num_features": num_features,
        "raw_samples": raw_samples,
        "num_restarts": num_restarts,
    }
    sparse = {"num_inducing": num_inducing, "inducing_quality": inducing_quality}
    builders = {
        "sgpts": partial(ModelSGPTS, **sparse, **options),
        "exact-gpts": partial(ModelExactGPTS, **options),
    }
    results: dict[str, dict[int, dict[str, float]]] = {}
    for name, build in builders.items():
        results[name] = {}
        for t in ts:
            base = torch.Generator().manual_seed(seed)
            X = problem.uniform_points(t, base)
            rewards = _point_rewards(problem, X, base)
            policy_seed = int(torch.randint(2**62, (1,), generator=base))
            policy = build(
                problem, t + batch_size, torch.Generator().manual_seed(policy_seed)
            )
            policy.tell(X, rewards)
            rewards_of = partial(_point_rewards, problem, generator=base)
            _, select, update = timed_round(policy, rewards_of)
            results[name][t] = {
                "select": select,
                "update": update,
                "batch": select + update,
            }
    return results
