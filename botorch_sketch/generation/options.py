r"""One frozen options object per loop: :class:`BBKBOptions`, :class:`SGPTSOptions`
and :class:`GPThreDSOptions`, each field with its default, validated once when the
object is built (``ValueError`` / ``TypeError`` naming the field).

The rule for all three loops: the problem (the arms or the box), the kernel
(``covar_module``, a module, not a setting) and the seed are the loop's own
arguments; every other setting is an option. A loop takes ``options=`` and, for
convenience, any field as a keyword override (``BBKB(arms, qbar=2.0)`` builds
``BBKBOptions(qbar=2.0)``), so each default is spelled once, here. Integrations
and benchmarks build an options object and pass it on (:func:`merged_options`).

Example:
    >>> options = BBKBOptions(ratio_threshold=4.0, end_fraction=0.05)
    >>> loop = BBKB(arms, options=options, seed=0)
    >>> loop.state_dict()["options"]["ratio_threshold"]
    4.0
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from botorch_sketch.acquisition.bkb import TheoryRadius
from botorch_sketch.acquisition.thompson import resolve_alpha
from botorch_sketch.generation.bbkb import DEFAULT_MAX_BATCH_SIZE, RULES
from botorch_sketch.generation.hyperparameters import DEFAULT_REFIT_GROWTH
from botorch_sketch.generation.threds_local import threds_radius
from botorch_sketch.models.nystrom import DEFAULT_QBAR
from botorch_sketch.utils.validation import (
    MIN_NOISE,
    check_allocation,
    check_at_least,
    check_bool,
    check_int,
    check_number,
    check_positive,
)

#: BBKB's dictionary resampling schemes.
RESAMPLING = ("coupled", "independent")

#: How S-GP-TS chooses its inducing points.
INDUCING_QUALITIES = ("variance", "improvement")

#: GP-ThreDS's modes.
THREDS_MODES = ("cube", "rwt")

Options = TypeVar("Options", "BBKBOptions", "SGPTSOptions", "GPThreDSOptions")


def _set(options: object, name: str, value: object) -> None:
    r"""Store a normalized value on a frozen dataclass (from ``__post_init__``)."""
    object.__setattr__(options, name, value)


@dataclass(frozen=True, kw_only=True)
class ArmLoopOptions:
    r"""The self-tuning options that BBKB and S-GP-TS share (see
    :class:`~botorch_sketch.generation.ask_tell.ArmLoop`)."""

    #: Fixed ``lambda > 0``; None: learned with a learned kernel, 1 with a fixed one.
    noise: float | None = None
    #: Condition on standardized rewards (with a learned kernel, also warped by
    #: the power fitted at each refit,
    #: :mod:`~botorch_sketch.generation.reward_warping`); None: iff the kernel is
    #: learned.
    standardize: bool | None = None
    #: Arms of the space-filling design asked first; None: ``max(5, 2 d)`` with a
    #: learned kernel (Ax's count), else 0.
    num_initial: int | None = None
    #: Factor ``> 1`` the observations grow by between refits of a learned kernel.
    refit_growth: float = DEFAULT_REFIT_GROWTH
    #: Most inducing points ``>= 1`` a refit of a learned kernel fits on; None:
    #: the loop's ``default_fit_inducing``, 50 for ``BBKB`` used directly (a
    #: bandit, judged by its cumulative regret:
    #: :data:`~botorch_sketch.generation.hyperparameters.UCB_FIT_INDUCING`), else
    #: 100 (:data:`~botorch_sketch.generation.hyperparameters.FIT_INDUCING`; the
    #: Optuna samplers and Ray Tune searchers set it, judged by the best value).
    #: Fewer pull the fit towards longer lengthscales and a larger ``lambda``.
    fit_inducing: int | None = None
    #: ``delta >= 0`` (``inf`` allowed) of the repeat rule
    #: (:mod:`~botorch_sketch.generation.repeats`): a told, pending or already
    #: chosen arm is asked again only while one more evaluation would remove at
    #: least ``delta k(x, x)`` from the variance of ``f(x)`` (0: always, ``inf``:
    #: never). None: 0 with a fixed kernel (the papers' batches); with a learned
    #: one ``inf`` while the learned ``lambda`` is at its floor (a deterministic
    #: objective), else ``DEFAULT_MIN_REPEAT_REDUCTION``.
    min_repeat_reduction: float | None = None

    def __post_init__(self) -> None:
        if self.noise is not None:
            check_at_least(self.noise, "noise", MIN_NOISE)
        if self.standardize is not None:
            check_bool(self.standardize, "standardize")
        if self.num_initial is not None:
            check_int(self.num_initial, "num_initial", 0)
        if self.fit_inducing is not None:
            check_int(self.fit_inducing, "fit_inducing", 1)
        if check_at_least(self.refit_growth, "refit_growth", 1.0) == 1.0:
            raise ValueError(f"`refit_growth` must be > 1, got {self.refit_growth}.")
        if self.min_repeat_reduction is not None:
            _set(self, "min_repeat_reduction", _check_repeat(self.min_repeat_reduction))


@dataclass(frozen=True, kw_only=True)
class BBKBOptions(ArmLoopOptions):
    r"""Options of :class:`~botorch_sketch.generation.bbkb_loop.BBKB` (with those of
    :class:`ArmLoopOptions`); the arms, ``covar_module`` and ``seed`` are the
    loop's.

    Example:
        >>> BBKBOptions(**asynchronous_options(100)).max_batch_size
        105
    """

    #: Papers'-scale radius ``>= 0`` or a :class:`TheoryRadius` (each loop
    #: updates its own copy, :attr:`BBKB.radius`); None: ``2 sqrt(lambda)`` with a
    #: learned kernel (``mu + 2 sigma``,
    #: :data:`~botorch_sketch.generation.bbkb_loop.DEFAULT_BAYES_RADIUS`), else 1.
    radius: float | TheoryRadius | None = None
    #: Papers'-scale radius ``>= 0`` of a batch that opens with arms pending (an
    #: asynchronous ask: its picks see other trials in flight, hallucinated); None:
    #: ``0.5 sqrt(lambda)`` with a learned kernel and the default ``radius``
    #: (:data:`~botorch_sketch.generation.bbkb_loop.DEFAULT_PENDING_BAYES_RADIUS`),
    #: else ``radius``.
    pending_radius: float | None = None
    #: ``C~ >= 1`` (1: BKB), or a function of ``v = max k(x, x) / lambda``
    #: evaluated at each batch (e.g. ``WorkerRatioThreshold``).
    ratio_threshold: float | Callable[[float], float] = 2.0
    #: Termination rule: ``"global"``, ``"local"`` or ``"global+local"``.
    rule: str = "global"
    #: Dictionary oversampling ``>= 1`` (the papers' 2 lost up to a factor 2 in
    #: regret in our benchmarks).
    qbar: float = DEFAULT_QBAR
    #: ``"coupled"`` (persistent draws, low churn) or ``"independent"`` (fresh
    #: draws at every batch end, as in the papers).
    resampling: str = "coupled"
    #: In-batch updates along residual directions too.
    residual_update: bool = False
    #: Cap on the arms of one batch, pending ones included (the rules alone admit
    #: unboundedly many copies of an arm whose variance vanishes).
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    #: A full batch ends once this fraction in ``[0, 1]`` of its arms (at least
    #: one) are told or failed; 0: at the first.
    end_fraction: float = 0.0
    #: Whether failed arms may be asked again (a crashing configuration keeps its
    #: high UCB, so by default it is not).
    retry_failed: bool = False
    #: Storage dtype of the cached ``A x m`` features (``torch.float32`` halves
    #: them; the name ``SGPTSOptions`` uses for its cache); None: the arms'.
    cache_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self.retry_failed, "retry_failed")
        if self.radius is not None and not isinstance(self.radius, TheoryRadius):
            check_at_least(self.radius, "radius", 0.0)
        if self.pending_radius is not None:
            check_at_least(self.pending_radius, "pending_radius", 0.0)
        threshold = self.ratio_threshold
        check_at_least(
            threshold(1.0) if callable(threshold) else threshold,
            "ratio_threshold",
            1.0,
        )
        check_at_least(self.qbar, "qbar", 1.0)
        if self.rule not in RULES:
            raise ValueError(f"`rule` must be one of {RULES}, got {self.rule!r}.")
        if self.resampling not in RESAMPLING:
            raise ValueError(
                f"`resampling` must be one of {RESAMPLING}, got {self.resampling!r}."
            )
        check_int(self.max_batch_size, "max_batch_size", 1)
        _check_cache_dtype(self.cache_dtype)
        fraction = check_number(self.end_fraction, "end_fraction")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"`end_fraction` must lie in [0, 1], got {fraction}.")
        _set(self, "end_fraction", fraction)


@dataclass(frozen=True, kw_only=True)
class SGPTSOptions(ArmLoopOptions):
    r"""Options of :class:`~botorch_sketch.generation.sgpts_loop.SGPTS` (and
    ``ExactGPTS``, which ignores ``num_inducing`` and ``inducing_quality``), with
    those of :class:`ArmLoopOptions`; the arms, ``covar_module`` and ``seed`` are
    the loop's.

    Example:
        >>> SGPTSOptions(num_inducing=50).num_features
        1000
    """

    #: Maximal number ``m >= 1`` of inducing points.
    num_inducing: int = 100
    #: Even number ``M >= 2`` of random Fourier features.
    num_features: int = 1000
    #: Exploration scale: a constant ``>= 0`` or a schedule ``t -> alpha_t`` of
    #: the observations plus one.
    alpha: float | Callable[[int], float] = 1.0
    #: How inducing points are chosen: ``"variance"`` or ``"improvement"``.
    inducing_quality: str = "variance"
    #: Bytes the cached features and kernel columns may take (4 GiB).
    memory_budget: float = 4 * 2**30
    #: Storage dtype of that cache; None: the arms'.
    cache_dtype: torch.dtype | None = None
    #: Prior parts of paths computed ahead in one pass over the features, for asks
    #: of fewer arms (``prior_block x A`` more memory; 1: none ahead).
    prior_block: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.num_inducing, "num_inducing", 1)
        if check_int(self.num_features, "num_features", 2) % 2:
            raise ValueError(f"`num_features` must be even, got {self.num_features}.")
        check_int(self.prior_block, "prior_block", 1)
        # the prior_block x M weights of the paths computed ahead
        check_allocation(
            self.num_features * self.prior_block, "`num_features` and `prior_block`"
        )
        if self.inducing_quality not in INDUCING_QUALITIES:
            raise ValueError(
                f"`inducing_quality` must be one of {INDUCING_QUALITIES}, got "
                f"{self.inducing_quality!r}."
            )
        check_positive(self.memory_budget, "memory_budget")
        _check_cache_dtype(self.cache_dtype)
        resolve_alpha(self.alpha, 1)  # a schedule is probed too


@dataclass(frozen=True, kw_only=True)
class GPThreDSOptions:
    r"""Options of :class:`~botorch_sketch.generation.threds.GPThreDS`; the box
    (``bounds``), ``covar_module`` and ``seed`` are the loop's. ``f_range`` has no
    default: the threshold search starts at its middle.

    Example:
        >>> GPThreDSOptions(f_range=(0.5, 1.2), mode="rwt").grid_points
        20
    """

    #: ``(a, b)``, an interval believed to contain ``max f`` (required).
    f_range: tuple[float, float] | None = None
    #: Noise variance ``lambda`` of the local GPs.
    noise: float = 0.01
    #: RKHS-norm bound ``B >= 0`` in the tests' confidence radius.
    rkhs_bound: float = 0.5
    #: Sub-Gaussian noise scale ``R >= 0`` in the radius.
    noise_std: float = 0.1
    #: Confidence parameter of the radius, in ``(0, 1)``.
    delta: float = 1e-3
    #: ``n -> gamma(n)``, the information-gain stand-in of the radius
    #: (``math.sqrt`` suits Matern-like kernels).
    gamma: Callable[[int], float] = math.log
    #: Points per dimension of a local test's grid (``>= 2``).
    grid_points: int = 20
    #: Queries without a decision before the leaf of largest LCB is declared.
    cap: int = 50
    #: Negative-stop tolerance, a multiple ``>= 0`` of the tested edge.
    tol_coef: float = 0.2
    #: After a success the threshold's lower end is ``tau - c_coef 2^{-k} W0``.
    c_coef: float = 0.4
    #: Deepest level of the cubes (edge ``2^{-max_depth}``); None: unlimited.
    max_depth: int | None = None
    #: ``"cube"`` (each cube tested once per epoch, the paper's experiments) or
    #: ``"rwt"`` (random walk on the tree).
    mode: str = "cube"
    #: Mode ``"rwt"``: confidence of the walk's inner tests, in ``(0, 1)``.
    walk_delta: float = 0.25
    #: Extension: restore the previous level's cubes after this many failed
    #: epochs in a row; None: never, as in the paper.
    readmit_after: int | None = None
    #: Extension: condition every test on the earlier observations in its box;
    #: False: each test sees only its own, as in the paper.
    reuse_observations: bool = False

    def __post_init__(self) -> None:
        _check_f_range(self.f_range)
        _set(self, "f_range", tuple(self.f_range))
        check_at_least(self.noise, "noise", MIN_NOISE)
        check_at_least(self.rkhs_bound, "rkhs_bound", 0.0)
        check_at_least(self.noise_std, "noise_std", 0.0)
        for name in ("delta", "walk_delta"):
            value = getattr(self, name)
            check_positive(value, name)
            if value >= 1:
                raise ValueError(f"`{name}` must lie in (0, 1), got {value}.")
        if not callable(self.gamma):
            raise TypeError("`gamma` must be a callable n -> float.")
        # a gamma that fails at once fails here
        threds_radius(1, self.rkhs_bound, self.noise_std, self.delta, self.gamma)
        check_int(self.grid_points, "grid_points", 2)
        check_int(self.cap, "cap", 1)
        check_at_least(self.tol_coef, "tol_coef", 0.0)
        check_at_least(self.c_coef, "c_coef", 0.0)
        if self.max_depth is not None:
            check_int(self.max_depth, "max_depth", 0)
        if self.readmit_after is not None:
            check_int(self.readmit_after, "readmit_after", 1)
        check_bool(self.reuse_observations, "reuse_observations")
        if self.mode not in THREDS_MODES:
            raise ValueError(f"`mode` must be 'cube' or 'rwt', got {self.mode!r}.")


def _check_repeat(value: object) -> float:
    r"""``min_repeat_reduction`` as a float in ``[0, inf]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"`min_repeat_reduction` must be a number, got {type(value).__name__}."
        )
    if not value >= 0:  # NaN too
        raise ValueError(f"`min_repeat_reduction` must be >= 0, got {value}.")
    return float(value)


def _check_cache_dtype(value: object) -> None:
    r"""Raise ``TypeError`` unless ``cache_dtype`` is None or a floating dtype."""
    if value is not None and not (
        isinstance(value, torch.dtype) and value.is_floating_point
    ):
        raise TypeError(
            f"`cache_dtype` must be a floating dtype or None, got {value!r}."
        )


def _check_f_range(f_range: object) -> None:
    r"""Raise unless ``f_range`` is a pair ``(a, b)`` of numbers with ``a < b`` and a
    finite width (there is no default: the threshold search starts at its middle)."""
    if f_range is None:
        raise ValueError(
            "`f_range` is required: give an interval (a, b) believed to contain "
            "the maximum of f. There is no safe default; the threshold search "
            "starts at its middle and can only slide down by halves."
        )
    if not isinstance(f_range, (tuple, list)) or len(f_range) != 2:
        raise TypeError(f"`f_range` must be a pair (a, b), got {f_range!r}.")
    for value in f_range:
        check_number(value, "f_range")
    if not f_range[0] < f_range[1]:
        raise ValueError(f"`f_range` must satisfy a < b, got {f_range}.")
    if not math.isfinite(f_range[1] - f_range[0]):
        raise ValueError(f"`f_range` must have a finite width, got {f_range}.")


def merged_options(
    cls: type[Options],
    options: Options | None = None,
    overrides: Mapping[str, Any] | None = None,
    owner: str | None = None,
) -> Options:
    r"""A deep copy of ``options`` (default ``cls()``) with the fields in
    ``overrides`` replaced, validated once.

    The copy is the caller's own: a loop built with it updates its stateful parts
    (a :class:`TheoryRadius`, a callable that keeps state) without touching those
    of ``options`` or of any other loop built from it.

    Args:
        cls: The options class.
        options: A ``cls`` instance or None.
        overrides: Field names and values (e.g. a loop's keyword arguments).
        owner: Who takes the options, for the message of an unknown keyword
            (default ``cls``'s name).

    Raises:
        TypeError: ``options`` is not a ``cls``, a key is not one of its fields,
            or a value cannot be deep-copied.
    """
    overrides = dict(overrides or {})
    if options is not None and not isinstance(options, cls):
        raise TypeError(
            f"`options` must be a {cls.__name__}, got {type(options).__name__}."
        )
    if unknown := sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)}):
        raise TypeError(
            f"{owner or cls.__name__} got unexpected keyword argument(s) {unknown}; "
            f"its options are the fields of {cls.__name__}."
        )
    if options is None:
        options = cls(**overrides)
    elif overrides:
        options = dataclasses.replace(options, **overrides)
    return _own_copy(options, owner or cls.__name__)


def _own_copy(options: Options, owner: str) -> Options:
    r"""A deep copy of ``options``; TypeError naming ``owner`` if a field's value
    cannot be copied."""
    try:
        return copy.deepcopy(options)
    except Exception as error:  # deepcopy raises whatever the value's hooks raise
        raise TypeError(
            f"`options` of {owner} must be deep-copyable (each loop keeps its own "
            f"copy of their stateful parts): {error}"
        ) from error


def options_record(options: object) -> dict[str, Any]:
    r"""The options as a plain dict (``dataclasses.asdict``) that ``torch.save``,
    pickle and JSON keep: numbers, strings, bools and None as they are, tuples as
    lists and a dtype as its name; a callable (a schedule, ``gamma``, a
    ``WorkerRatioThreshold``) is left out, as the fingerprint leaves it out, and
    another object (a :class:`TheoryRadius`, whose state the loop saves itself)
    is kept as its type's name."""
    return {
        field.name: _plain(value)
        for field in dataclasses.fields(options)
        if not callable(value := getattr(options, field.name))
    }


def _plain(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.dtype):
        return str(value)
    return type(value).__name__
