r"""Benchmark results: per-run traces (:class:`RunTrace`), their curves, seed bands
(:func:`seed_band`) and summaries (:func:`summarize`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from scipy.stats import t as student_t

from benchmarks.problems import Problem

#: Curves every trace provides, by name.
CURVES = (
    "cumulative_regret",
    "regret_ratio",
    "simple_regret",
    "cumulative_ask_time",
    "cumulative_tell_time",
    "cumulative_time",
    "time_per_evaluation",
    "batch_size",
)

#: ``time_per_evaluation`` averages over the last ``horizon // TIME_WINDOWS``
#: evaluations (after spreading each batch's time over its evaluations).
TIME_WINDOWS = 50

#: With fewer seeds than this, bands are the seeds' range, not a t-interval.
MIN_SEEDS_FOR_INTERVAL = 5

#: Final values a summary reports for every run.
_SUMMARY_KEYS = (
    "cumulative_regret",
    "regret_ratio",
    "simple_regret",
    "ask_seconds",
    "tell_seconds",
    "setup_seconds",
    "total_seconds",
    "num_batches",
    "max_batch_size",
    "peak_memory_mb",
)

#: Per-evaluation operator counts a run may hold in its metadata
#: (:func:`~benchmarks.runner.count_operations`), summarized with it.
OPERATION_COUNTS = ("aten_calls_per_evaluation", "syncs_per_evaluation")

#: Curves, final values and diagnostics that cannot be negative (bands stop at 0).
NONNEGATIVE = frozenset(CURVES + _SUMMARY_KEYS + OPERATION_COUNTS) | {
    "dictionary_size",
    "dictionary_churn",
    "gflop",
    "num_inducing",
    "reselections",
    "grid_points",
    "num_cubes",
    "epoch",
    "cube_level",
}


def expected_uniform_regret(
    problem: Problem, num_samples: int = 2**16, seed: int = 0
) -> float:
    r"""Expected per-step regret of uniform sampling: ``f* - mean(arm_values)``, or
    on a box ``f* - mean f(U)`` over ``num_samples`` uniform points drawn with
    ``seed``."""
    if problem.is_finite:
        return problem.optimum - float(problem.arm_values.double().mean())
    points = problem.uniform_points(num_samples, torch.Generator().manual_seed(seed))
    return problem.optimum - float(problem.objective(points).double().mean())


@dataclass
class RunTrace:
    r"""Everything one run recorded, per evaluation (arrays of length ``T``).

    Curves (:meth:`curve`): cumulative regret ``R_t``, regret ratio
    ``R_t / (t r_unif)`` (Calandriello et al., ICML 2020), simple regret, cumulative
    selection / update / total time, time per evaluation, batch size, diagnostics.

    Attributes:
        problem: Problem name.
        policy: Policy label.
        seed: Run seed.
        optimum: ``f*`` of the problem.
        uniform_regret: Expected per-step regret of uniform sampling.
        values: Noiseless value ``f(x_t)`` of each evaluated point.
        ask_seconds: Selection time, booked at the first evaluation of each batch.
        tell_seconds: Update time, booked at the last evaluation of each batch.
        batch_index: Index (from 0) of the batch holding each evaluation.
        diagnostics: Other per-evaluation records: the policy's diagnostics after
            the batch holding each evaluation (NaN where not reported), or a
            benchmark's own (e.g. the simulated cluster's ``simulated_time``).
        setup_seconds: Time of ``policy.reset`` (counted in the total time).
        peak_memory_mb: Peak memory growth during the run.
        memory_method: How it was measured (:class:`PeakMemoryMonitor`).
        environment: Where it ran, e.g. ``{"torch_threads": 1, "matmul_gflops":
            33.0}``.
        metadata: Per-run numbers a benchmark records beside these (e.g. the
            simulated cluster's ``workers``).
    """

    problem: str
    policy: str
    seed: int
    optimum: float
    uniform_regret: float
    values: np.ndarray
    ask_seconds: np.ndarray
    tell_seconds: np.ndarray
    batch_index: np.ndarray
    diagnostics: dict[str, np.ndarray] = field(default_factory=dict)
    setup_seconds: float = 0.0
    peak_memory_mb: float = math.nan
    memory_method: str = ""
    environment: dict[str, object] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return len(self.values)

    @property
    def num_batches(self) -> int:
        return int(self.batch_index[-1]) + 1 if self.horizon else 0

    def curve(self, name: str) -> np.ndarray:
        r"""The named curve (``T`` values): one of :data:`CURVES` or a diagnostic."""
        if name in self.diagnostics:
            return self.diagnostics[name]
        steps = np.arange(1, self.horizon + 1)
        if name == "cumulative_regret":
            return np.cumsum(self.optimum - self.values)
        if name == "regret_ratio":
            if not self.uniform_regret > 0:
                return np.full(self.horizon, math.nan)
            return self.curve("cumulative_regret") / (steps * self.uniform_regret)
        if name == "simple_regret":
            return self.optimum - np.maximum.accumulate(self.values)
        if name == "cumulative_ask_time":
            return np.cumsum(self.ask_seconds)
        if name == "cumulative_tell_time":
            return np.cumsum(self.tell_seconds)
        if name == "cumulative_time":
            return self.setup_seconds + np.cumsum(self.ask_seconds + self.tell_seconds)
        if name == "time_per_evaluation":
            window = max(1, self.horizon // TIME_WINDOWS)
            sizes = np.bincount(self.batch_index)
            batch_seconds = np.bincount(
                self.batch_index, weights=self.ask_seconds + self.tell_seconds
            )
            total = np.cumsum((batch_seconds / sizes)[self.batch_index])
            lagged = np.concatenate([np.zeros(window), total[:-window]])
            return (total - lagged) / np.minimum(steps, window)
        if name == "batch_size":
            return np.bincount(self.batch_index)[self.batch_index].astype(float)
        raise ValueError(f"Unknown curve {name!r}; known: {self.curve_names()}.")

    def curve_names(self) -> list[str]:
        return list(CURVES) + sorted(self.diagnostics)

    def to_dict(self) -> dict[str, object]:
        r"""Every field as strict-JSON values (arrays as lists, NaN as None)."""
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        for key in ("values", "ask_seconds", "tell_seconds", "batch_index"):
            data[key] = data[key].tolist()
        data["diagnostics"] = {key: v.tolist() for key, v in self.diagnostics.items()}
        return json_safe(data)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RunTrace:
        r"""Inverse of :meth:`to_dict` (None becomes NaN)."""

        def number(value: object) -> float:
            return math.nan if value is None else float(value)

        def floats(values: object) -> np.ndarray:
            return np.array([number(v) for v in values], dtype=float)

        return cls(
            problem=data["problem"],
            policy=data["policy"],
            seed=int(data["seed"]),
            optimum=number(data["optimum"]),
            uniform_regret=number(data["uniform_regret"]),
            values=floats(data["values"]),
            ask_seconds=floats(data["ask_seconds"]),
            tell_seconds=floats(data["tell_seconds"]),
            batch_index=np.array(data["batch_index"], dtype=np.int64),
            diagnostics={
                key: floats(values) for key, values in data["diagnostics"].items()
            },
            setup_seconds=number(data["setup_seconds"]),
            peak_memory_mb=number(data["peak_memory_mb"]),
            memory_method=data["memory_method"],
            environment=dict(data.get("environment") or {}),
            metadata={
                key: math.nan if value is None else value
                for key, value in (data.get("metadata") or {}).items()
            },
        )

    def summary(self) -> dict[str, float]:
        r"""Final values: regrets, times, batches, last diagnostics, memory, and the
        operator counts (:data:`OPERATION_COUNTS`) when the run has them."""
        sizes = np.bincount(self.batch_index)
        result = {
            "horizon": self.horizon,
            "cumulative_regret": float(self.curve("cumulative_regret")[-1]),
            "regret_ratio": float(self.curve("regret_ratio")[-1]),
            "simple_regret": float(self.curve("simple_regret")[-1]),
            "ask_seconds": float(self.ask_seconds.sum()),
            "tell_seconds": float(self.tell_seconds.sum()),
            "setup_seconds": self.setup_seconds,
            "total_seconds": float(self.curve("cumulative_time")[-1]),
            "num_batches": self.num_batches,
            "max_batch_size": int(sizes.max()),
            "peak_memory_mb": self.peak_memory_mb,
        }
        for key, values in sorted(self.diagnostics.items()):
            result[key] = float(values[-1])
        for key in OPERATION_COUNTS:
            if key in self.metadata:
                result[key] = float(self.metadata[key])
        return result


def mean_interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, ...]:
    r"""Mean and Student-t ``level`` interval over the first axis (the seeds) of
    ``samples``; with one seed the interval collapses to the mean."""
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[0]
    mean = samples.mean(axis=0)
    if n < 2:
        return mean, mean.copy(), mean.copy()
    half = student_t.ppf(0.5 + level / 2, n - 1) * samples.std(axis=0, ddof=1)
    half = half / math.sqrt(n)
    return mean, mean - half, mean + half


def seed_band(
    samples: np.ndarray,
    lower: float = -math.inf,
    level: float = 0.95,
    method: str = "auto",
) -> tuple[np.ndarray, ...]:
    r"""Mean and band over the first axis (the seeds), never below ``lower``.

    The band is the seeds' range ``[min, max]`` below :data:`MIN_SEEDS_FOR_INTERVAL`
    seeds, else the Student-t interval of :func:`mean_interval` clipped at ``lower``.

    Args:
        samples: ``n x ...`` values, one row per seed.
        lower: The quantity's lower bound (e.g. 0 for times and regrets).
        level: Coverage of the t-interval.
        method: ``"auto"`` as above, or ``"range"`` for ``[min, max]`` at any number
            of seeds (for logarithmic axes, where a band clipped at 0 would vanish).

    Returns:
        ``(mean, low, high)``, each of shape ``...``.
    """
    if method not in ("auto", "range"):
        raise ValueError(f"`method` must be 'auto' or 'range', got {method!r}.")
    samples = np.asarray(samples, dtype=float)
    if method == "range" or samples.shape[0] < MIN_SEEDS_FOR_INTERVAL:
        return samples.mean(axis=0), samples.min(axis=0), samples.max(axis=0)
    mean, low, high = mean_interval(samples, level)
    return mean, np.maximum(low, lower), high


def lower_bound(name: str) -> float:
    r"""0 for quantities in :data:`NONNEGATIVE`, else ``-inf``."""
    return 0.0 if name in NONNEGATIVE else -math.inf


def band_description(num_seeds: int, method: str = "auto") -> str:
    r"""What :func:`seed_band` shows for ``num_seeds`` seeds, in words."""
    if num_seeds == 1:
        return "1 seed"
    if method == "range" or num_seeds < MIN_SEEDS_FOR_INTERVAL:
        return f"mean and range (min, max) of {num_seeds} seeds"
    return f"mean and 95% t-interval of {num_seeds} seeds, clipped at 0"


def group_traces(traces: Iterable[RunTrace]) -> dict[tuple[str, str], list[RunTrace]]:
    r"""Group traces by ``(problem, policy)``, keeping first-seen order."""
    groups: dict[tuple[str, str], list[RunTrace]] = {}
    for trace in traces:
        groups.setdefault((trace.problem, trace.policy), []).append(trace)
    return groups


def aggregate_curve(
    traces: Sequence[RunTrace], name: str, method: str = "auto"
) -> tuple[np.ndarray, ...]:
    r"""``(t, mean, low, high)`` of a curve over seeds (common horizon), with the
    band of :func:`seed_band` (``method``)."""
    horizon = min(trace.horizon for trace in traces)
    stacked = np.stack([trace.curve(name)[:horizon] for trace in traces])
    band = seed_band(stacked, lower_bound(name), method=method)
    return (np.arange(1, horizon + 1), *band)


def summarize(
    traces: Iterable[RunTrace],
    reference: str = "exact-ucb",
    matmul_gflops: float | None = None,
) -> list[dict[str, object]]:
    r"""One row per ``(problem, policy)``: mean and :func:`seed_band` (``KEY_low``,
    ``KEY_high``; ``band`` in words) of the final values.

    Rows of a problem on which ``reference`` ran get ``time_vs_reference`` and
    ``regret_vs_reference`` (mean total time and cumulative regret over the
    reference's); with ``matmul_gflops``, rows with a ``gflop`` diagnostic get
    ``time_vs_flops`` (total time over the time those flops take at that rate).
    """
    rows = []
    for (problem, policy), group in group_traces(traces).items():
        finals = [trace.summary() for trace in group]
        keys = list(_SUMMARY_KEYS) + sorted(
            {key for final in finals for key in final}
            - set(_SUMMARY_KEYS)
            - {"horizon"}
        )
        row: dict[str, object] = {
            "problem": problem,
            "policy": policy,
            "horizon": min(final["horizon"] for final in finals),
            "seeds": len(group),
            "band": band_description(len(group)),
        }
        for key in keys:
            values = np.array([final.get(key, math.nan) for final in finals])
            mean, low, high = seed_band(values, lower_bound(key))
            row[key] = float(mean)
            row[f"{key}_low"] = float(low)
            row[f"{key}_high"] = float(high)
        rows.append(row)
    for row in rows:
        if matmul_gflops and row.get("gflop", 0) > 0:
            row["time_vs_flops"] = row["total_seconds"] / (row["gflop"] / matmul_gflops)
    references = {row["problem"]: row for row in rows if row["policy"] == reference}
    for row in rows:
        base = references.get(row["problem"])
        if base is not None:
            row["time_vs_reference"] = _ratio(
                row["total_seconds"], base["total_seconds"]
            )
            row["regret_vs_reference"] = _ratio(
                row["cumulative_regret"], base["cumulative_regret"]
            )
    return rows


def _ratio(value: float, base: float) -> float:
    return value / base if base > 0 else math.nan


def verdict(rows: Sequence[dict[str, object]], reference: str = "exact-ucb") -> str:
    r"""One line per BBKB (or BKB) row of :func:`summarize` beside ``reference``:
    its speed-up and regret ratio (empty when there is none)."""
    lines = []
    for row in rows:
        policy = str(row["policy"])
        if not policy.startswith(("bbkb", "bkb")) or "time_vs_reference" not in row:
            continue
        speed = 1 / row["time_vs_reference"]
        regret = row["regret_vs_reference"]
        pace = f"{speed:.1f}x faster" if speed >= 1 else f"{1 / speed:.1f}x slower"
        line = (
            f"{policy} on {row['problem']}: {pace} than the incremental exact "
            f"GP-UCB at {regret:.2f}x its cumulative regret"
        )
        if speed < 1 and policy.startswith("bkb"):
            line += (
                " (BKB updates its dictionary after every evaluation: O(A m) per "
                "step against the exact O(A t), so it pays only once m << t)"
            )
        lines.append(line + ".")
    return "\n".join(lines)


def json_safe(value: object) -> object:
    r"""Replace NaN/inf floats by None (strict JSON)."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
