r"""Benchmark problems (maximization): BoTorch test functions on ``[0, 1]^d``, on a
seeded arm set or the box; regression datasets (one arm per row); the GP-ThreDS and
S-GP-TS papers' setups. :func:`make_problem` builds any of them from a text spec such
as ``"levy:dim=8:arms=20000"``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from botorch.test_functions import synthetic
from botorch.test_functions.synthetic import SyntheticTestFunction
from torch import Tensor

from botorch_sketch.utils.validation import check_int, check_positive


@dataclass
class Problem:
    r"""A noisy maximization problem.

    Attributes:
        name: Short identifier used in tables and file names.
        bounds: ``2 x d`` box containing the domain.
        objective: Maps ``n x d`` points to their noiseless values (``n``).
        noise_std: Standard deviation of the Gaussian reward noise.
        optimum: The maximum of ``objective`` over the domain (over ``arms`` if finite).
        arms: ``A x d`` finite arm set, or None for a continuous box.
        arm_values: ``A`` noiseless values of the arms (finite problems only).
        hyperparameters: Suggested fixed kernel settings shared by all policies, e.g.
            ``{"lengthscale": 3.0, "outputscale": 1.0}``.
    """

    name: str
    bounds: Tensor
    objective: Callable[[Tensor], Tensor]
    noise_std: float
    optimum: float
    arms: Tensor | None = None
    arm_values: Tensor | None = None
    hyperparameters: dict[str, float] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.bounds.shape[-1]

    @property
    def is_finite(self) -> bool:
        return self.arms is not None

    def uniform_points(self, num: int, generator: torch.Generator) -> Tensor:
        r"""``num x d`` uniform points in ``bounds`` (drawn on the CPU, then moved)."""
        return _uniform(num, self.bounds, generator)

    def uniform_choices(self, num: int, generator: torch.Generator) -> Tensor:
        r"""``num`` uniformly random choices: arm indices (a LongTensor on the arms'
        device) for finite problems, :meth:`uniform_points` for boxes."""
        if not self.is_finite:
            return self.uniform_points(num, generator)
        indices = torch.randint(self.arms.shape[0], (num,), generator=generator)
        return indices.to(self.arms.device)


#: Lower-case names accepted by :func:`make_synthetic_problem`.
SYNTHETIC_FUNCTIONS: dict[str, type[SyntheticTestFunction]] = {
    name.lower(): getattr(synthetic, name)
    for name in (
        "Ackley Beale Branin Bukin Cosine8 DixonPrice DropWave EggHolder Griewank "
        "Hartmann HolderTable Levy Michalewicz Powell Rastrigin Rosenbrock Shekel "
        "SixHumpCamel StyblinskiTang ThreeHumpCamel"
    ).split()
}

#: Dataset names resolved to ``<data_dir>/<name>.csv`` by :func:`make_problem`.
KNOWN_DATASETS = ("abalone", "cadata")

#: Paper problems built by :func:`make_problem`.
PAPER_PROBLEMS = ("threds_branin", "threds_rosenbrock", "sgpts_hartmann6")

_MC_SAMPLES = 2**14


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _unit_cube(
    dim: int, dtype: torch.dtype, device: torch.device | str | None
) -> Tensor:
    return torch.stack([torch.zeros(dim), torch.ones(dim)]).to(device, dtype)


def _uniform(num: int, bounds: Tensor, generator: torch.Generator) -> Tensor:
    r"""``num`` uniform points in ``bounds`` (drawn on the CPU, then moved)."""
    unit = torch.rand(num, bounds.shape[-1], generator=generator).to(bounds)
    return bounds[0] + unit * (bounds[1] - bounds[0])


def _arms(num_arms: int | None, bounds: Tensor, seed: int) -> Tensor | None:
    r"""``num_arms`` seeded uniform arms in ``bounds`` (None: the box problem)."""
    if num_arms is None:
        return None
    check_int(num_arms, "num_arms", 1)
    return _uniform(num_arms, bounds, _seeded(seed))


def _problem(
    name: str,
    bounds: Tensor,
    objective: Callable[[Tensor], Tensor],
    noise_std: float,
    box_optimum: float | None,
    arms: Tensor | None,
    hyperparameters: dict[str, float],
    noise: float | None = None,
) -> Problem:
    r"""The problem on ``arms`` (optimum: the best arm's value) or, for None, on the
    box (optimum ``box_optimum``); ``noise``: a suggested model noise variance (None:
    policies use ``noise_std^2``)."""
    if noise is not None:
        hyperparameters["noise"] = check_positive(noise, "noise")
    if arms is None and box_optimum is None:
        raise ValueError(f"`{name}` has no known optimum on the box; pass num_arms.")
    values = None if arms is None else objective(arms)
    return Problem(
        name=name,
        bounds=bounds,
        objective=objective,
        noise_std=noise_std,
        optimum=float(box_optimum if values is None else values.max()),
        arms=arms,
        arm_values=values,
        hyperparameters=hyperparameters,
    )


def _on_unit_cube(test_function: SyntheticTestFunction) -> Callable[[Tensor], Tensor]:
    r"""``x in [0, 1]^d -> f(lb + x (ub - lb))``, noiseless and with ``negate``
    (clamped to the native box, so points within rounding error of the unit cube
    pass BoTorch's bounds check)."""
    native = test_function.bounds

    def objective(X: Tensor) -> Tensor:
        point = (native[0] + X * (native[1] - native[0])).clamp(native[0], native[1])
        # forward() applies `negate` (evaluate_true does not); noise_std is None.
        return test_function(point)

    return objective


def make_synthetic_problem(
    function: str,
    *,
    dim: int | None = None,
    num_arms: int | None = None,
    noise_std: float = 0.01,
    rescale: bool = True,
    lengthscale: float | None = None,
    outputscale: float | None = None,
    noise: float | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    name: str | None = None,
) -> Problem:
    r"""A BoTorch test function (negated if it is minimized) on ``[0, 1]^d``.

    Points ``x`` map to ``lb + x (ub - lb)`` in the function's native box. With
    ``rescale``, values ``v`` become ``(v - lo) / (hi - lo)``, ``[lo, hi]`` being the
    range over the arms, or ``[Monte Carlo minimum, optimum]`` over the box.

    Args:
        function: A key of :data:`SYNTHETIC_FUNCTIONS` (e.g. ``"levy"``).
        dim: Input dimension for functions of any dimension (default: theirs).
        num_arms: Size ``A`` of a seeded uniform arm set; None for the box.
        noise_std: Reward noise standard deviation (on the rescaled scale).
        rescale: Rescale values to ``[0, 1]`` (see above).
        lengthscale: Suggested RBF lengthscale; default ``0.5 sqrt(d)``.
        outputscale: Suggested kernel variance; default 1 when rescaled, else the
            empirical variance of the values.
        noise: Suggested model noise variance (the ridge ``lambda``) of the GP
            policies; default (None) ``noise_std ** 2``.
        seed: Seed of the arm set (and of the Monte Carlo range estimate).
        dtype: Floating dtype of all tensors.
        device: Device of all tensors.
        name: Name in tables; default e.g. ``"levy8_20000"``.

    Returns:
        The problem.
    """
    key = function.lower()
    if key not in SYNTHETIC_FUNCTIONS:
        raise ValueError(
            f"`function` must be one of {sorted(SYNTHETIC_FUNCTIONS)}, "
            f"got {function!r}."
        )
    if dim is not None:
        check_int(dim, "dim", 1)
    check_positive(noise_std, "noise_std")
    cls = SYNTHETIC_FUNCTIONS[key]
    kwargs: dict[str, object] = {"negate": cls._is_minimization_by_default}
    if dim is not None:
        if "dim" in inspect.signature(cls.__init__).parameters:
            kwargs["dim"] = dim
        elif dim != cls.dim:
            raise ValueError(f"`{function}` is {cls.dim}-dimensional, got {dim=}.")
    test_function = cls(**kwargs).to(dtype=dtype, device=device)
    d = test_function.bounds.shape[-1]
    bounds = _unit_cube(d, dtype, test_function.bounds.device)
    arms = _arms(num_arms, bounds, seed)
    raw = _on_unit_cube(test_function)
    try:
        box_optimum: float | None = float(test_function.optimal_value)
    except (NotImplementedError, TypeError):
        box_optimum = None
    if arms is not None:
        sample = raw(arms)
        high = float(sample.max())
    else:
        sample = raw(_uniform(_MC_SAMPLES, bounds, _seeded(seed + 1)))
        high = box_optimum
    low = float(sample.min())
    if rescale and high is None:
        raise ValueError(
            f"`{function}` has no known optimum on the box; pass num_arms."
        )
    if rescale:
        span = high - low

        def objective(X: Tensor) -> Tensor:
            return (raw(X) - low) / span

        if box_optimum is not None:
            box_optimum = (box_optimum - low) / span
        default_outputscale = 1.0
    else:
        objective = raw
        default_outputscale = float(sample.var())
    if name is None:
        stem = key if key.endswith(str(d)) else f"{key}{d}"
        name = stem + ("" if num_arms is None else f"_{num_arms}")
    hyperparameters = {
        "lengthscale": 0.5 * math.sqrt(d) if lengthscale is None else lengthscale,
        "outputscale": default_outputscale if outputscale is None else outputscale,
    }
    return _problem(
        name, bounds, objective, noise_std, box_optimum, arms, hyperparameters, noise
    )


def load_csv(path: str | Path, target: int | str = -1) -> tuple[Tensor, Tensor]:
    r"""Read a numeric CSV (optional header row) into features and a target.

    Args:
        path: File path.
        target: Target column, as an index (negative counts from the end) or a header
            name; every other column is a feature.

    Returns:
        ``n x d`` features and ``n`` targets, float64.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"`path` {str(path)!r} is not a file.")
    with path.open() as handle:
        first = handle.readline().strip().split(",")
    try:
        [float(cell) for cell in first]
        header = None
    except ValueError:
        header = [cell.strip() for cell in first]
    data = np.loadtxt(path, delimiter=",", skiprows=0 if header is None else 1, ndmin=2)
    if data.shape[0] == 0 or data.shape[1] < 2:
        raise ValueError(f"`path` needs >= 1 row and >= 2 columns, got {data.shape}.")
    if not np.isfinite(data).all():
        raise ValueError(f"`path` {str(path)!r} holds NaN or infinite values.")
    if isinstance(target, str):
        if header is None or target not in header:
            raise ValueError(f"`target` column {target!r} not in the header {header}.")
        column = header.index(target)
    else:
        if not -data.shape[1] <= target < data.shape[1]:
            raise ValueError(f"`target` index {target} out of range.")
        column = target % data.shape[1]
    features = np.delete(data, column, axis=1)
    return torch.from_numpy(features), torch.from_numpy(data[:, column].copy())


def make_dataset_problem(
    path: str | Path,
    *,
    target: int | str = -1,
    noise_std: float = 0.01,
    lengthscale: float | None = None,
    outputscale: float = 1.0,
    noise: float | None = None,
    max_rows: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    name: str | None = None,
) -> Problem:
    r"""A regression dataset as a finite bandit (Calandriello et al., ICML 2020).

    Each row is an arm: standardized features (constant columns become 0), the
    target rescaled to ``[0, 1]``; ``objective`` maps points to the nearest arm's
    value.

    Args:
        path: CSV file (numbers only, optional header row).
        target: Target column (index or header name); default the last.
        noise_std: Reward noise standard deviation.
        lengthscale: Suggested RBF lengthscale; default ``sqrt(d)``.
        outputscale: Suggested kernel variance.
        noise: Suggested model noise variance (default ``noise_std ** 2``).
        max_rows: Keep a seeded random subset of this many rows (None: all).
        seed: Seed of that subset.
        dtype: Floating dtype of all tensors.
        device: Device of all tensors.
        name: Name in tables; default the file's stem.

    Returns:
        The problem.
    """
    check_positive(noise_std, "noise_std")
    check_positive(outputscale, "outputscale")
    if max_rows is not None:
        check_int(max_rows, "max_rows", 1)
    features, values = load_csv(path, target)
    if max_rows is not None and max_rows < features.shape[0]:
        keep = torch.randperm(features.shape[0], generator=_seeded(seed))[:max_rows]
        features, values = features[keep], values[keep]
    spread = values.max() - values.min()
    if not spread > 0:
        raise ValueError(f"The target of {str(path)!r} is constant; cannot rescale.")
    values = (values - values.min()) / spread
    std = features.std(dim=0, unbiased=False)
    arms = (features - features.mean(dim=0)) / torch.where(std > 0, std, 1.0)
    arms = arms.to(dtype=dtype, device=device)
    values = values.to(dtype=dtype, device=device)
    bounds = torch.stack([arms.min(dim=0).values, arms.max(dim=0).values])
    flat = bounds[0] == bounds[1]
    bounds[0, flat] -= 0.5
    bounds[1, flat] += 0.5

    def objective(X: Tensor) -> Tensor:
        nearest = torch.cdist(X.to(arms), arms).argmin(dim=-1)
        return values[nearest]

    d = arms.shape[-1]
    hyperparameters = {
        "lengthscale": math.sqrt(d) if lengthscale is None else lengthscale,
        "outputscale": outputscale,
    }
    if noise is not None:
        hyperparameters["noise"] = check_positive(noise, "noise")
    return Problem(
        name=Path(path).stem if name is None else name,
        bounds=bounds,
        objective=objective,
        noise_std=float(noise_std),
        optimum=float(values.max()),
        arms=arms,
        arm_values=values,
        hyperparameters=hyperparameters,
    )


def threds_branin(X: Tensor) -> Tensor:
    r"""GP-ThreDS's Branin on ``[0, 1]^2`` (max 1.047394 at three points)."""
    u = 15.0 * X[..., 0] - 5.0
    v = 15.0 * X[..., 1]
    inner = v - 5.1 * u**2 / (4.0 * math.pi**2) + 5.0 * u / math.pi - 6.0
    value = inner**2 + 10.0 * (1.0 - 1.0 / (8.0 * math.pi)) * torch.cos(u) - 44.81
    return -value / 51.95


def threds_rosenbrock(X: Tensor) -> Tensor:
    r"""GP-ThreDS's Rosenbrock on ``[0, 1]^2`` (max 10 at ``(2/3, 2/3)``)."""
    z = 0.8 + 0.3 * X
    return 10.0 - 100.0 * (z[..., 1] - z[..., 0] ** 2) ** 2 - (1.0 - z[..., 0]) ** 2


# Branin's minimum 0.397887 (Dixon and Szego) minus 10 + 44.81, negated and scaled.
_THREDS = {
    "branin": (threds_branin, (54.81 - 0.39788735772973816) / 51.95),
    "rosenbrock": (threds_rosenbrock, 10.0),
}


def make_threds_problem(
    function: str,
    *,
    num_arms: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Problem:
    r"""GP-ThreDS's ``"branin"`` or ``"rosenbrock"`` (Salgia et al., NeurIPS 2021),
    ``threds_<function>``: rescaled to ``[0, 1]^2``, reward noise variance 0.01, SE
    kernel lengthscale 0.2 and outputscale 1; on the box (the paper's) or on
    ``num_arms`` arms drawn with ``seed``."""
    if function not in _THREDS:
        raise ValueError(
            f"`function` must be 'branin' or 'rosenbrock', got {function!r}."
        )
    objective, optimum = _THREDS[function]
    bounds = _unit_cube(2, dtype, device)
    return _problem(
        f"threds_{function}",
        bounds,
        objective,
        0.1,
        optimum,
        _arms(num_arms, bounds, seed),
        {"lengthscale": 0.2, "outputscale": 1.0},
        noise=0.01,
    )


def make_sgpts_hartmann6(
    *,
    num_arms: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Problem:
    r"""S-GP-TS's Hartmann-6 (Vakili et al., NeurIPS 2021), ``sgpts_hartmann6``:
    negated, on ``[0, 1]^6`` (max 3.32237), noise variance 0.5, SE kernel with
    lengthscale 0.2 and variance ``Var(f)`` over a sample drawn with ``seed``; on the
    box (the paper's) or on ``num_arms`` arms drawn with ``seed``."""
    hartmann = synthetic.Hartmann(dim=6, negate=True).to(dtype=dtype, device=device)
    bounds = _unit_cube(6, dtype, device)
    objective = _on_unit_cube(hartmann)
    sample = objective(_uniform(_MC_SAMPLES, bounds, _seeded(seed + 1)))
    return _problem(
        "sgpts_hartmann6",
        bounds,
        objective,
        math.sqrt(0.5),
        float(hartmann.optimal_value),
        _arms(num_arms, bounds, seed),
        {"lengthscale": 0.2, "outputscale": float(sample.var())},
        noise=0.5,
    )


_SPEC_KEYS = {
    "dim": int,
    "arms": int,
    "noise_std": float,
    "lengthscale": float,
    "outputscale": float,
    "noise": float,
    "rescale": lambda text: _parse_bool(text, "rescale"),
    "seed": int,
    "target": lambda text: int(text) if text.lstrip("-").isdigit() else text,
    "rows": int,
}


def _parse_bool(text: str, name: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"`{name}` must be a boolean, got {text!r}.")


def parse_problem_spec(spec: str) -> tuple[str, dict[str, object]]:
    r"""Split ``"name:key=value:..."`` into the name and typed settings.

    Keys: ``dim``, ``arms`` (``0`` or ``none``: the box), ``noise_std``,
    ``lengthscale``, ``outputscale``, ``noise`` (suggested model noise), ``rescale``,
    ``seed``, ``target``, ``rows``.
    """
    name, *parts = spec.split(":")
    if not name:
        raise ValueError(f"Problem spec {spec!r} has no name.")
    settings: dict[str, object] = {}
    for part in parts:
        key, sep, text = part.partition("=")
        if not sep or key not in _SPEC_KEYS:
            raise ValueError(
                f"Problem spec {spec!r}: {part!r} is not key=value with key in "
                f"{sorted(_SPEC_KEYS)}."
            )
        if key == "arms" and text.lower() in ("0", "none", "box"):
            settings[key] = None
            continue
        try:
            settings[key] = _SPEC_KEYS[key](text)
        except ValueError as error:
            raise ValueError(
                f"Problem spec {spec!r}: bad value for {key}: {error}"
            ) from error
    return name, settings


def make_problem(
    spec: str,
    *,
    data_dir: str | Path | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    **overrides: object,
) -> Problem:
    r"""Build a problem from a spec string (see :func:`parse_problem_spec`).

    Names: a key of :data:`SYNTHETIC_FUNCTIONS` (a trailing number sets the
    dimension, e.g. ``hartmann6``), ``abalone`` / ``cadata`` (read from ``data_dir``),
    a path ending in ``.csv``, or one of :data:`PAPER_PROBLEMS`.

    Args:
        spec: E.g. ``"levy:dim=8:arms=20000"`` or ``"cadata:lengthscale=12.5"``.
        data_dir: Folder holding ``abalone.csv`` / ``cadata.csv``.
        dtype: Floating dtype.
        device: Device.
        overrides: Settings applied on top of the spec (same keys).
    """
    name, settings = parse_problem_spec(spec)
    unknown = set(overrides) - set(_SPEC_KEYS)
    if unknown:
        raise ValueError(f"Unknown problem settings {sorted(unknown)}.")
    settings.update(overrides)

    def take(allowed: str) -> dict[str, object]:
        r"""The builder's keyword arguments, if every setting is ``allowed``."""
        extra = set(settings) - set(allowed.split())
        if extra:
            raise ValueError(f"Problem {name!r} does not accept {sorted(extra)}.")
        renames = {"arms": "num_arms", "rows": "max_rows"}
        arguments = {renames.get(key, key): value for key, value in settings.items()}
        return arguments | {"dtype": dtype, "device": device}

    stem = name.lower().rstrip("0123456789")
    if name.lower() not in SYNTHETIC_FUNCTIONS and stem in SYNTHETIC_FUNCTIONS:
        # "hartmann6", "levy8": the trailing digits give the dimension.
        settings.setdefault("dim", int(name[len(stem) :]))
        name = stem
    if name.lower() in SYNTHETIC_FUNCTIONS:
        keys = "dim arms noise_std lengthscale outputscale noise rescale seed"
        return make_synthetic_problem(name, **take(keys))
    if name in KNOWN_DATASETS or name.endswith(".csv"):
        path = Path(name)
        if name in KNOWN_DATASETS:
            if data_dir is None:
                raise ValueError(
                    f"Problem {name!r} needs `data_dir` (its CSV's folder)."
                )
            path = Path(data_dir) / f"{name}.csv"
        if not path.is_file():
            raise ValueError(f"Dataset file {str(path)!r} not found.")
        keys = "noise_std lengthscale outputscale noise target rows seed"
        return make_dataset_problem(
            path, name=name if name in KNOWN_DATASETS else None, **take(keys)
        )
    if name in ("threds_branin", "threds_rosenbrock"):
        return make_threds_problem(name.removeprefix("threds_"), **take("arms seed"))
    if name == "sgpts_hartmann6":
        return make_sgpts_hartmann6(**take("arms seed"))
    raise ValueError(
        f"Unknown problem {name!r}: use one of {sorted(SYNTHETIC_FUNCTIONS)}, "
        f"{list(KNOWN_DATASETS)}, a .csv path, or {list(PAPER_PROBLEMS)}."
    )
