r"""Problems of the tuning benchmark: a search space, a loss to minimize and its
minimum (docs/benchmarks.md, "Hyperparameter tuning with default options"), by name:
the keys of :data:`PROBLEMS`, and COCO's ``bbob`` functions named as
``bbob:function=F:dim=D:instance=I`` (:func:`bbob_suite` names several) and its
bi-objective ``bbob-biobj`` functions named as
``bbob-biobj:function=F:dim=D:instance=I``.

A problem may also have constraints (:data:`CONSTRAINED_PROBLEMS`: BoTorch's
constrained test functions) or several losses, all minimized
(:data:`MULTI_OBJECTIVE_PROBLEMS`: BoTorch's multi-objective test functions, with a
reference point and the largest hypervolume)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.tuning.space import Param, Space
from botorch_sketch.utils.validation import check_int

Config = dict[str, Any]


@dataclass(frozen=True)
class TuningProblem:
    r"""A search space, the loss of a configuration, the loss's minimum (None
    when unknown) and a SHA-256 of the data file it reads (None: none).

    With ``num_objectives > 1``, ``loss`` gives a tuple of that many losses, all
    minimized; ``optimum`` is None, ``reference_point`` the point (one coordinate a
    loss) that bounds the hypervolume of the observed losses, and
    ``max_hypervolume`` the largest (that of the Pareto front; None when unknown).
    ``constraints``, if given, gives the constraint values of a configuration,
    which is feasible when all are ``<= 0`` (Optuna's ``constraints_func``
    convention); ``optimum`` is then the smallest feasible loss."""

    name: str
    space: Space
    loss: Callable[[Config], float | tuple[float, ...]]
    optimum: float | None
    data_sha256: str | None = None
    num_objectives: int = 1
    constraints: Callable[[Config], Sequence[float]] | None = None
    reference_point: tuple[float, ...] | None = None
    max_hypervolume: float | None = None

    def __post_init__(self) -> None:
        check_int(self.num_objectives, "num_objectives", 1)
        multi = self.num_objectives > 1
        if multi != (self.reference_point is not None) or (
            multi and len(self.reference_point) != self.num_objectives
        ):
            raise ValueError(
                f"{self.name}: a reference point, one coordinate per loss, is "
                "needed with several losses (and only then)."
            )
        if multi and self.optimum is not None:
            raise ValueError(f"{self.name}: several losses have no single minimum.")


class MissingDataError(FileNotFoundError):
    r"""A problem's data file is not in the data folder."""


def box_space(bounds: list[tuple[float, float]]) -> Space:
    r"""A box of floats ``x0, x1, ...`` with the given ``(low, high)`` bounds."""
    return tuple(
        Param(f"x{i}", "float", float(low), float(high))
        for i, (low, high) in enumerate(bounds)
    )


def box_point(space: Space, config: Config) -> np.ndarray:
    r"""The point of a :func:`box_space` configuration (float64, in order)."""
    return np.array([float(config[p.name]) for p in space], dtype=np.float64)


def _test_function(name: str, class_name: str, **options: int) -> TuningProblem:
    r"""BoTorch's test function ``class_name`` on its native box, noiseless."""
    from botorch import test_functions

    function = getattr(test_functions, class_name)(**options).to(torch.float64)
    space = box_space(function.bounds.t().tolist())

    def loss(config: Config) -> float:
        point = torch.from_numpy(box_point(space, config)).unsqueeze(0)
        return float(function.evaluate_true(point))

    return TuningProblem(name, space, loss, float(function.optimal_value))


def _constrained_function(name: str, class_name: str, **options: int) -> TuningProblem:
    r"""BoTorch's constrained test function ``class_name`` on its native box,
    noiseless: its loss, and as constraint values its negated slacks (BoTorch's
    slack ``>= 0`` is feasible, a constraint value ``<= 0``); the minimum is
    BoTorch's ``optimal_value`` (the best value its references report)."""
    from botorch.test_functions import synthetic

    function = getattr(synthetic, class_name)(**options).to(torch.float64)
    space = box_space(function.bounds.t().tolist())

    def point(config: Config) -> torch.Tensor:
        return torch.from_numpy(box_point(space, config)).unsqueeze(0)

    def loss(config: Config) -> float:
        return float(function.evaluate_true(point(config)))

    def constraints(config: Config) -> list[float]:
        return (-function.evaluate_slack_true(point(config))).squeeze(0).tolist()

    return TuningProblem(
        name, space, loss, float(function.optimal_value), constraints=constraints
    )


def _multi_objective_function(
    name: str, class_name: str, **options: int
) -> TuningProblem:
    r"""BoTorch's multi-objective test function ``class_name`` on its native box,
    noiseless, every loss minimized (``negate=False``, BoTorch's default): its
    ``ref_point`` (given for these minimized losses; BoTorch negates it with the
    losses) and ``max_hv`` (the same either way; None when it has none)."""
    from botorch.test_functions import multi_objective

    function = getattr(multi_objective, class_name)(**options).to(torch.float64)
    space = box_space(function.bounds.t().tolist())

    def loss(config: Config) -> tuple[float, ...]:
        point = torch.from_numpy(box_point(space, config)).unsqueeze(0)
        return tuple(function.evaluate_true(point).squeeze(0).tolist())

    try:
        max_hypervolume = float(function.max_hv)
    except NotImplementedError:
        max_hypervolume = None
    return TuningProblem(
        name,
        space,
        loss,
        None,
        num_objectives=function.num_objectives,
        reference_point=tuple(function.ref_point.tolist()),
        max_hypervolume=max_hypervolume,
    )


#: COCO's ``bbob`` suite: its 24 noiseless functions, their box and the
#: dimensions and instances of this benchmark's presets.
BBOB_FUNCTIONS = tuple(range(1, 25))
BBOB_BOUNDS = (-5.0, 5.0)
BBOB_DIMENSIONS = (5, 10)
BBOB_INSTANCES = (1, 2, 3, 4, 5)
_BBOB_KEYS = ("function", "dim", "instance")
#: The number of functions of each COCO suite the benchmark runs: ``bbob``'s 24
#: and ``bbob-biobj``'s 55 (pairs of ``bbob`` functions, two losses each).
COCO_SUITES = {"bbob": 24, "bbob-biobj": 55}


@dataclass(frozen=True)
class BBOBSpec:
    r"""One problem of a COCO suite (:data:`COCO_SUITES`): ``bbob``'s function
    1-24 or ``bbob-biobj``'s 1-55, dimension >= 2 and instance >= 1 (each instance
    shifts and rotates the functions and their minima)."""

    function: int
    dim: int
    instance: int
    suite: str = "bbob"

    def __post_init__(self) -> None:
        if self.suite not in COCO_SUITES:
            raise ValueError(f"`suite` must be one of {list(COCO_SUITES)}.")
        check_int(self.function, "function", 1, COCO_SUITES[self.suite])
        check_int(self.dim, "dim", 2)
        check_int(self.instance, "instance", 1)

    @property
    def name(self) -> str:
        r"""``"SUITE:function=F:dim=D:instance=I"``: its problem name."""
        fields = ":".join(f"{key}={getattr(self, key)}" for key in _BBOB_KEYS)
        return f"{self.suite}:{fields}"


def parse_bbob(name: str) -> BBOBSpec | None:
    r"""The ``bbob`` problem ``name`` denotes (``bbob:function=F:dim=D:instance=I``,
    the fields in any order); None if it does not start with ``bbob:``; a
    ``ValueError`` naming ``name`` if it is malformed."""
    return _parse_coco(name, "bbob")


def _parse_coco(name: str, suite: str) -> BBOBSpec | None:
    r"""The problem of COCO's ``suite`` that ``name`` denotes
    (``SUITE:function=F:dim=D:instance=I``), as :func:`parse_bbob`."""
    prefix = f"{suite}:"
    if not name.startswith(prefix):
        return None
    pairs = [item.partition("=")[::2] for item in name[len(prefix) :].split(":")]
    if sorted(key for key, _ in pairs) != sorted(_BBOB_KEYS) or not all(
        value.isascii() and value.isdigit() for _, value in pairs
    ):
        raise ValueError(
            f"`name` {name!r}: a {suite} problem is "
            f"{suite}:function=F:dim=D:instance=I (positive integers)."
        )
    return BBOBSpec(**{key: int(value) for key, value in pairs}, suite=suite)


def bbob_suite(
    functions: tuple[int, ...] = BBOB_FUNCTIONS,
    dims: tuple[int, ...] = BBOB_DIMENSIONS,
    instances: tuple[int, ...] = BBOB_INSTANCES,
    suite: str = "bbob",
) -> tuple[str, ...]:
    r"""The names of the ``suite`` problems ``functions x dims x instances`` (by
    dimension, then function, then instance); the defaults name the ``bbob``
    suite of the presets: 24 functions, dimensions 5 and 10, instances 1-5."""
    return tuple(
        BBOBSpec(function, dim, instance, suite).name
        for dim in dims
        for function in functions
        for instance in instances
    )


def bbob_problem(spec: BBOBSpec) -> TuningProblem:
    r"""The ``bbob`` problem ``spec`` on ``[-5, 5]^dim``, evaluated by COCO's
    ``cocoex.BareProblem`` (no observer, no logging); its minimum ``f_opt`` is the
    problem's ``best_value()``, its value at ``best_parameter()``."""
    import cocoex

    function = cocoex.BareProblem("bbob", spec.function, spec.dim, spec.instance)
    space = box_space([BBOB_BOUNDS] * spec.dim)

    def loss(config: Config) -> float:
        return float(function(box_point(space, config)))

    return TuningProblem(spec.name, space, loss, float(function.best_value()))


def bbob_biobj_problem(spec: BBOBSpec) -> TuningProblem:
    r"""The ``bbob-biobj`` problem ``spec`` (two losses, both minimized) on
    ``[-5, 5]^dim``, COCO's region of interest, evaluated by ``cocoex`` (no
    observer); its reference point is COCO's nadir point
    (``largest_fvalues_of_interest``), its largest hypervolume unknown."""
    import cocoex

    options = f"dimensions:{spec.dim} instance_indices:{spec.instance}"
    suite = cocoex.Suite("bbob-biobj", "", options)
    function = suite.get_problem_by_function_dimension_instance(
        spec.function, spec.dim, spec.instance
    )
    space = box_space([BBOB_BOUNDS] * spec.dim)

    def loss(config: Config) -> tuple[float, float]:
        first, second = function(box_point(space, config))
        return float(first), float(second)

    loss.suite = suite  # the problem lives as long as its suite
    nadir = tuple(float(value) for value in function.largest_fvalues_of_interest)
    return TuningProblem(
        spec.name, space, loss, None, num_objectives=2, reference_point=nadir
    )


MIXED_SPACE: Space = (
    Param("learning_rate", "log-float", 1e-5, 1.0),
    Param("weight_decay", "log-float", 1e-7, 1e-1),
    Param("num_layers", "int", 1, 8),
    Param("activation", "choice", choices=("relu", "tanh", "gelu")),
    Param("dropout", "float", 0.0, 0.6),
)
#: Per activation: loss floor and the best ``log10`` learning rate at 4 layers.
_ACTIVATIONS = {"relu": (0.10, -2.5), "tanh": (0.13, -2.0), "gelu": (0.08, -3.0)}


def _mixed_discrete_part(num_layers: int, activation: str) -> float:
    floor, _ = _ACTIVATIONS[activation]
    return floor + 0.01 * (num_layers - 5) ** 2


def mixed_loss(config: Config) -> float:
    r"""A validation-loss-like function: a floor per activation, a quadratic
    penalty in the number of layers, and a saturating bowl in ``log10`` learning
    rate (whose best value shifts with depth), ``log10`` weight decay and dropout.

    For every ``(num_layers, activation)`` the bowl's centre lies inside the box, so
    the bowl term is 0 there and the minimum over the space is the smallest of the
    24 discrete parts, found by enumeration (:func:`mixed_optimum`)."""
    _, log_lr = _ACTIVATIONS[config["activation"]]
    layers = int(config["num_layers"])
    u = (math.log10(config["learning_rate"]) - (log_lr - 0.15 * (layers - 4))) / 0.6
    v = (math.log10(config["weight_decay"]) + 4.0) / 1.2
    w = (config["dropout"] - 0.2) / 0.15
    bowl = 1.0 - math.exp(-0.5 * (u * u + v * v + w * w + 0.5 * u * w))
    return _mixed_discrete_part(layers, config["activation"]) + 0.8 * bowl


def mixed_optimum() -> float:
    r"""The exact minimum of :func:`mixed_loss`: the smallest discrete part."""
    layers, activation = MIXED_SPACE[2], MIXED_SPACE[3]
    return min(
        _mixed_discrete_part(n, a)
        for n, a in product(
            range(int(layers.low), int(layers.high) + 1), activation.choices
        )
    )


HGB_SPACE: Space = (
    Param("learning_rate", "log-float", 1e-2, 1.0),
    Param("max_leaf_nodes", "int", 4, 64),
    Param("min_samples_leaf", "int", 2, 64),
    Param("l2_regularization", "log-float", 1e-6, 10.0),
    Param("max_features", "float", 0.3, 1.0),
)
#: Rows drawn from cadata, boosting iterations, folds (one evaluation ~0.1 s).
HGB_ROWS, HGB_ITERATIONS, HGB_FOLDS = 1500, 30, 3


def hgb_cadata(data_dir: str | Path) -> TuningProblem:
    r"""The gradient-boosting problem on ``data_dir/cadata.csv`` (last column the
    target, divided by 100,000); :class:`MissingDataError` if the file is absent."""
    path = Path(data_dir) / "cadata.csv"
    if not path.is_file():
        raise MissingDataError(f"{path} not found (pass --data-dir FOLDER)")
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import KFold, cross_val_score

    from benchmarks.problems import load_csv

    features, target = load_csv(path)
    rows = np.random.default_rng(0).choice(len(target), HGB_ROWS, replace=False)
    x, y = features.numpy()[rows], target.numpy()[rows] / 1e5
    folds = KFold(HGB_FOLDS, shuffle=True, random_state=0)

    def loss(config: Config) -> float:
        model = HistGradientBoostingRegressor(
            max_iter=HGB_ITERATIONS, random_state=0, **config
        )
        scores = cross_val_score(
            model, x, y, cv=folds, scoring="neg_root_mean_squared_error"
        )
        return float(-scores.mean())

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return TuningProblem("hgb-cadata", HGB_SPACE, loss, None, digest)


def make_tuning_problem(name: str, data_dir: str | Path = "data") -> TuningProblem:
    r"""The problem ``name``: a key of :data:`PROBLEMS`, a ``bbob`` problem
    (:func:`parse_bbob`) or a ``bbob-biobj`` one."""
    spec = parse_bbob(name)
    if spec is not None:
        return bbob_problem(spec)
    spec = _parse_coco(name, "bbob-biobj")
    if spec is not None:
        return bbob_biobj_problem(spec)
    if name not in PROBLEMS:
        raise ValueError(
            f"Unknown problem {name!r}; known: {sorted(PROBLEMS)}, "
            "bbob:function=F:dim=D:instance=I and "
            "bbob-biobj:function=F:dim=D:instance=I."
        )
    return PROBLEMS[name](data_dir)


#: Problem name -> factory of the data folder.
PROBLEMS: dict[str, Callable[[str | Path], TuningProblem]] = {
    "branin": lambda _: _test_function("branin", "Branin"),
    "hartmann6": lambda _: _test_function("hartmann6", "Hartmann", dim=6),
    "levy10": lambda _: _test_function("levy10", "Levy", dim=10),
    "mixed": lambda _: TuningProblem("mixed", MIXED_SPACE, mixed_loss, mixed_optimum()),
    "hgb-cadata": hgb_cadata,
    "pressure-vessel": lambda _: _constrained_function(
        "pressure-vessel", "PressureVessel"
    ),
    "welded-beam": lambda _: _constrained_function("welded-beam", "WeldedBeamSO"),
    "speed-reducer": lambda _: _constrained_function("speed-reducer", "SpeedReducer"),
    "constrained-hartmann": lambda _: _constrained_function(
        "constrained-hartmann", "ConstrainedHartmann", dim=6
    ),
    "constrained-gramacy": lambda _: _constrained_function(
        "constrained-gramacy", "ConstrainedGramacy"
    ),
    "branin-currin": lambda _: _multi_objective_function(
        "branin-currin", "BraninCurrin"
    ),
    "dtlz2": lambda _: _multi_objective_function(
        "dtlz2", "DTLZ2", dim=6, num_objectives=2
    ),
    "zdt1": lambda _: _multi_objective_function("zdt1", "ZDT1", dim=6),
}
#: The problems with constraints: BoTorch's constrained test functions (a
#: configuration is feasible when every constraint value is ``<= 0``).
CONSTRAINED_PROBLEMS = (
    "pressure-vessel",
    "welded-beam",
    "speed-reducer",
    "constrained-hartmann",
    "constrained-gramacy",
)
#: The problems with several losses: BoTorch's multi-objective test functions
#: (DTLZ2 and ZDT1 in 6 dimensions, 2 losses).
MULTI_OBJECTIVE_PROBLEMS = ("branin-currin", "dtlz2", "zdt1")
