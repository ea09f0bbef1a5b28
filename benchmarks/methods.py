r"""The benchmark methods: one :class:`BenchmarkMethod` per name in :data:`METHODS`.

``method(problem, horizon, generator, **options)`` builds a run's ask/tell object
(:class:`BenchmarkOptimizer`): a library loop (:class:`~botorch_sketch.BBKB`,
GP-ThreDS) or an exact baseline of :mod:`.policies`. Options are the builder's
keyword arguments; :class:`PolicyConfig` names a method with its options.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import Tensor

from benchmarks.policies.baselines import (
    EpsilonGreedy,
    ExactBUCB,
    ExactUCB,
    Uniform,
)
from benchmarks.policies.common import (
    BENCHMARK_BAYES_RADIUS,
    KernelHyperparameters,
    check_finite,
    draw_seed,
    resolve_cache_dtype,
)
from benchmarks.policies.thompson import (
    CachedExactGPTS,
    CachedSGPTS,
    ModelExactGPTS,
    ModelSGPTS,
)
from benchmarks.policies.threds import (
    IncrementalIGPUCBGrid,
    build_gp_threds,
)
from benchmarks.problems import Problem
from botorch_sketch.acquisition.bkb import TheoryRadius
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.options import BBKBOptions
from botorch_sketch.models.nystrom import DEFAULT_QBAR
from botorch_sketch.utils.validation import check_positive


class BenchmarkOptimizer(Protocol):
    r"""What a :class:`BenchmarkMethod` builds for one run: ``ask(max_arms)`` returns
    arm indices (finite problems) or ``b x d`` points (boxes), ``tell`` takes their
    rewards; an optional ``diagnostics()`` returns a dict of floats."""

    def ask(self, max_arms: int | None = None, /) -> Tensor: ...

    def tell(self, chosen: Tensor, rewards: Tensor, /) -> None: ...


@dataclass(frozen=True)
class BenchmarkMethod:
    r"""A benchmark method: how to build its ask/tell object for a run.

    Attributes:
        name: Registry name (as in ``--methods``).
        description: One line for ``--list``.
        build: ``build(problem, horizon, generator, **options)``: the run's ask/tell
            object; draws its randomness from ``generator``.
        finite: Takes finite problems (an arm set).
        box: Takes box problems.
        fixed: Options this method sets and does not accept (e.g. BKB's
            ``ratio_threshold=1`` on BBKB's builder).
        requires: Modules ``build`` imports, which a driver imports before it
            times a build.

    The other benchmark tools keep their methods in the same records, with the
    build their driver calls: the cluster's ``build(problem, horizon, generator,
    *, workers)``, the tuning benchmark's ``build(space, seed, in_flight,
    num_objectives, sampler_options)``, the Ax comparison's ``build(seed)``.
    """

    name: str
    description: str
    build: Callable[..., Any]
    finite: bool = True
    box: bool = False
    fixed: Mapping[str, object] = field(default_factory=dict)
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or any(ch in self.name for ch in ",:= "):
            raise ValueError(
                f"`name` must be non-empty without ',:= ', got {self.name!r}."
            )

    def options(self) -> dict[str, object]:
        r"""Accepted options with their defaults (None where there is none): the
        keyword-only arguments of ``build`` (of a class: of its ``__init__`` and,
        while one passes ``**settings`` on, of its bases'), less the fixed ones."""
        if isinstance(self.build, type):
            classes = self.build.__mro__[:-1]
            builds = [vars(c)["__init__"] for c in classes if "__init__" in vars(c)]
        else:
            builds = [self.build]
        found: dict[str, object] = {}
        for build in builds:
            parameters = inspect.signature(build).parameters.values()
            for p in parameters:
                if p.kind is p.KEYWORD_ONLY and p.name not in self.fixed:
                    found.setdefault(
                        p.name, None if p.default is p.empty else p.default
                    )
            if all(p.kind is not p.VAR_KEYWORD for p in parameters):
                break
        return found

    def check(self, options: Mapping[str, object]) -> None:
        r"""Raise a ValueError naming the accepted options if any is unknown."""
        accepted = self.options()
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ValueError(
                f"Policy {self.name!r} has no option(s) {unknown}; accepted: "
                f"{sorted(accepted)}."
            )

    def supports(self, problem: Problem) -> bool:
        r"""Whether the method takes ``problem`` (finite or box)."""
        return self.finite if problem.is_finite else self.box

    def __call__(
        self, problem: Problem, horizon: int, generator: torch.Generator, **options: Any
    ) -> BenchmarkOptimizer:
        r"""The ask/tell object of a fresh run (options checked first)."""
        self.check(options)
        if not self.supports(problem):
            kind = "finite" if problem.is_finite else "box"
            raise ValueError(f"`{self.name}` does not support {kind} problems.")
        return self.build(problem, horizon, generator, **self.fixed, **options)


def build_bbkb(
    problem: Problem,
    horizon: int,
    generator: torch.Generator,
    *,
    bayes_radius: float | str = BENCHMARK_BAYES_RADIUS,
    ratio_threshold: Any = 2.0,
    rule: str = "global",
    qbar: float = DEFAULT_QBAR,
    resampling: str = "coupled",
    residual_update: bool = False,
    max_batch_size: int | None = None,
    end_fraction: float = 0.0,
    cache_dtype: str | None = None,
    lengthscale: float | None = None,
    outputscale: float | None = None,
    noise: float | None = None,
    rkhs_bound: float = 1.0,
    delta: float | None = None,
) -> BBKB:
    r"""BBKB (:class:`~botorch_sketch.BBKB`) on the problem's fixed kernel.

    ``bayes_radius`` is on the Bayesian scale (index ``mu + bayes_radius * sigma``,
    the loop's ``radius = bayes_radius * sqrt(lambda)``), or ``"theory"``: BBKB's
    Theorem 2 (:class:`~botorch_sketch.TheoryRadius`) with ``rkhs_bound`` and
    ``delta`` (default ``1 / T``).

    Args:
        ratio_threshold: ``C~ >= 1`` of the batch rule (1: BKB).
        rule, qbar, resampling, residual_update, end_fraction: See
            :class:`~botorch_sketch.generation.options.BBKBOptions`.
        max_batch_size: Cap on batch sizes (default: the loop's, 1,000).
        cache_dtype: ``"float32"`` or ``"float64"``: storage dtype of the cached
            ``A x m`` features (default: the arms' dtype; the rest stays in it).
        lengthscale, outputscale: Overrides of the problem's kernel.
        noise: The regularization ``lambda`` (default: the problem's).
    """
    if bayes_radius != "theory":
        check_positive(bayes_radius, "bayes_radius")
    options = BBKBOptions(
        ratio_threshold=ratio_threshold,
        rule=rule,
        qbar=qbar,
        resampling=resampling,
        residual_update=residual_update,
        end_fraction=end_fraction,
        cache_dtype=resolve_cache_dtype(cache_dtype),
        # None: the loop's default cap
        **({} if max_batch_size is None else {"max_batch_size": max_batch_size}),
    )
    check_finite(problem, "bbkb")
    hp = KernelHyperparameters.from_problem(
        problem, lengthscale=lengthscale, outputscale=outputscale, noise=noise
    )
    noise = hp.noise
    if bayes_radius == "theory":
        papers_radius: float | TheoryRadius = TheoryRadius(
            noise_std=problem.noise_std,
            rkhs_bound=rkhs_bound,
            delta=delta if delta is not None else 1.0 / horizon,
            noise=noise,
            ratio_threshold=options.ratio_threshold,
        )
    else:
        papers_radius = float(bayes_radius) * math.sqrt(noise)
    return BBKB(
        problem.arms,
        replace(options, noise=noise, radius=papers_radius),
        covar_module=hp.kernel(dtype=problem.arms.dtype, device=problem.arms.device),
        seed=draw_seed(generator),
    )


#: BKB's settings on BBKB's builder: one arm per step, no batch options.
_BKB = {
    "ratio_threshold": 1.0,
    "rule": "global",
    "residual_update": False,
    "max_batch_size": None,
    "end_fraction": 0.0,
}

#: All benchmark methods, by name.
METHODS: dict[str, BenchmarkMethod] = {
    method.name: method
    for method in (
        BenchmarkMethod("bbkb", "BBKB adaptive batches", build_bbkb),
        BenchmarkMethod("bkb", "BKB (Nystrom GP-UCB)", build_bbkb, fixed=_BKB),
        BenchmarkMethod("exact-ucb", "exact GP-UCB, O(A t) updates", ExactUCB),
        BenchmarkMethod("exact-bucb", "exact GP-BUCB / GP-AUCB batches", ExactBUCB),
        BenchmarkMethod("uniform", "uniform", Uniform, box=True),
        BenchmarkMethod("epsilon-greedy", "epsilon-greedy", EpsilonGreedy, box=True),
        BenchmarkMethod("sgpts", "S-GP-TS", ModelSGPTS, box=True),
        BenchmarkMethod(
            "exact-gpts", "exact GP Thompson sampling", ModelExactGPTS, box=True
        ),
        BenchmarkMethod("sgpts-cached", "S-GP-TS, cached (finite arms)", CachedSGPTS),
        BenchmarkMethod(
            "exact-gpts-incremental",
            "exact GP-TS, O(N (M + t)) incremental (finite arms)",
            CachedExactGPTS,
        ),
        BenchmarkMethod(
            "gp-threds", "GP-ThreDS", build_gp_threds, finite=False, box=True
        ),
        BenchmarkMethod(
            "igp-ucb-incremental",
            "IGP-UCB on a growing grid, O(A t) incremental updates",
            IncrementalIGPUCBGrid,
            finite=False,
            box=True,
        ),
    )
}


def register_method(method: BenchmarkMethod) -> None:
    r"""Add (or replace) ``method`` under its name."""
    if not isinstance(method, BenchmarkMethod):
        raise TypeError("`method` must be a BenchmarkMethod.")
    METHODS[method.name] = method


def get_method(name: str) -> BenchmarkMethod:
    r"""The method registered as ``name`` (a ValueError lists the known ones)."""
    if name not in METHODS:
        raise ValueError(f"Unknown policy {name!r}; known: {sorted(METHODS)}.")
    return METHODS[name]


def parse_value(text: str) -> object:
    r"""Parse an option value: int, float, bool, None, a comma list, or a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    if "," in text:
        return tuple(parse_value(part) for part in text.split(","))
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_option(text: str) -> tuple[str | None, str, object]:
    r"""Parse ``[target:]key=value`` into ``(target, key, value)``.

    ``target`` (a policy label or name) is None when the option applies to every
    policy that accepts ``key``.
    """
    head, sep, value = text.partition("=")
    if not sep or not head:
        raise ValueError(f"Option {text!r} must look like [policy:]key=value.")
    target, colon, key = head.rpartition(":")
    if not key.isidentifier():
        raise ValueError(f"Option {text!r}: {key!r} is not a valid option name.")
    return (target if colon else None), key, parse_value(value)


@dataclass(frozen=True)
class PerHorizon:
    r"""An option value computed from the horizon ``T`` by ``function``, printed as
    ``text`` (e.g. ``delta = 1/T``)."""

    function: Callable[[int], object]
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class PolicyConfig:
    r"""A method to run: registry ``name``, table ``label`` and keyword ``options``.

    :class:`PerHorizon` option values are resolved by :meth:`resolved_options`.
    """

    name: str
    label: str = ""
    options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        get_method(self.name)
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @classmethod
    def parse(cls, text: str) -> PolicyConfig:
        r"""``NAME``, or ``LABEL=NAME`` for NAME under LABEL (as in ``--methods``)."""
        label, _, name = text.strip().rpartition("=")
        if not name:
            raise ValueError(f"Empty policy name in {text!r}.")
        return cls(name, label)

    @property
    def method(self) -> BenchmarkMethod:
        return get_method(self.name)

    def resolved_options(self, horizon: int) -> dict[str, object]:
        return {
            key: value.function(horizon) if isinstance(value, PerHorizon) else value
            for key, value in self.options.items()
        }

    def with_options(self, options: Mapping[str, object]) -> PolicyConfig:
        return PolicyConfig(self.name, self.label, {**self.options, **options})

    def build(
        self, problem: Problem, horizon: int, generator: torch.Generator
    ) -> BenchmarkOptimizer:
        r"""The run's ask/tell object."""
        return self.method(
            problem, horizon, generator, **self.resolved_options(horizon)
        )
