r"""Ax integration: BKB-UCB and S-GP-TS as Ax generation strategies.

Needs the optional dependency ax-platform (``pip install -e ".[ax]"`` from the
repository root).
Importing this module registers the package's models, fitting routines, acquisition
input constructors and storage entries with Ax and BoTorch
(:mod:`~botorch_sketch.integrations.ax_registry`); import it before loading an
experiment that uses them.

- :func:`bkb_generation_strategy`: center point and Sobol initialization, then a
  BoTorch modular generator with :class:`~botorch_sketch.models.nystrom.NystromGP` and
  :class:`~botorch_sketch.acquisition.bkb.BKBUpperConfidenceBound`. Ax's running
  trials and the arms already chosen for a batch enter as ``X_pending``: BBKB's
  hallucinated variance.
- :func:`sgpts_generation_strategy`: the same initialization, then
  :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` and
  :class:`~botorch_sketch.acquisition.thompson.ScaledPathThompsonSampling` (a
  fresh scaled sample path per arm).
- :func:`next_bbkb_batch_size`: how many trials BBKB's adaptive batch rule admits
  next, to pass to ``Client.get_next_trials(max_trials=...)``.

Example:
    >>> from ax.api.client import Client
    >>> from ax.api.configs import RangeParameterConfig
    >>> client = Client(random_seed=0)
    >>> client.configure_experiment(parameters=[
    ...     RangeParameterConfig(name="x1", parameter_type="float", bounds=(-5, 10)),
    ...     RangeParameterConfig(name="x2", parameter_type="float", bounds=(0, 15)),
    ... ])
    >>> client.configure_optimization(objective="-branin")
    >>> strategy = bkb_generation_strategy(radius=0.2, noise=1e-2)
    >>> client.set_generation_strategy(strategy)
    >>> for _ in range(10):
    ...     size = next_bbkb_batch_size(strategy, ratio_threshold=2.0)
    ...     for index, parameters in client.get_next_trials(max_trials=size).items():
    ...         client.complete_trial(index, raw_data={"branin": branin(parameters)})
"""

from __future__ import annotations

try:
    import ax  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without ax installed
    from botorch_sketch.utils.extras import missing_dependency

    raise missing_dependency(
        "ax-platform", "ax", "botorch_sketch.integrations.ax"
    ) from error

import inspect
import math
from typing import Any

import torch
from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
from ax.api.utils.structs import GenerationStrategyDispatchStruct
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generators.torch.botorch_modular.generator import BoTorchGenerator
from ax.generators.torch.botorch_modular.utils import ModelConfig
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.models.model import Model, ModelList
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.kernels import Kernel
from gpytorch.mlls import MarginalLogLikelihood
from torch import Tensor

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound
from botorch_sketch.acquisition.thompson import ScaledPathThompsonSampling
from botorch_sketch.generation.bbkb import RULES, BBKBBatch, gen_bbkb_batch
from botorch_sketch.integrations.ax_registry import default_bkb_radius  # registers
from botorch_sketch.models.nystrom import (
    DEFAULT_QBAR,
    NystromGP,
    NystromMarginalLogLikelihood,
)
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)
from botorch_sketch.utils.validation import (
    check_at_least,
    check_bool,
    check_int,
    check_positive,
)

__all__ = [
    "bbkb_batch_in_model_space",
    "bkb_generation_strategy",
    "next_bbkb_batch_size",
    "sgpts_generation_strategy",
]

#: Name of the model-based node in the strategies built here (Ax's convention).
MODEL_NODE = "MBM"

#: ``optimize_acqf`` options the strategies accept (Ax sets the bounds, ``q``,
#: constraints and fixed features itself).
OPTIMIZER_OPTIONS = (
    "num_restarts",
    "raw_samples",
    "options",
    "sequential",
    "timeout_sec",
    "retry_on_optimization_warning",
)

#: Fixed noise variances the strategies accept, in Ax's standardized outcome units
#: (unit variance): below, the kernel matrices' factorizations lose all precision;
#: above, the data would be a hundred times noisier than the objective varies.
NOISE_RANGE = (1e-6, 1e2)

#: The ``GenerationStrategyDispatchStruct`` fields the strategies accept and what
#: each must be: ``"count"`` (int >= 0 or None), ``"seed"`` (int >= 0 or None),
#: ``"flag"`` (bool), ``"device"`` (a torch device string or None).
DISPATCH_FIELDS = {
    "initialization_budget": "count",
    "initialization_random_seed": "seed",
    "initialize_with_center": "flag",
    "use_existing_trials_for_initialization": "flag",
    "min_observed_initialization_trials": "count",
    "allow_exceeding_initialization_budget": "flag",
    "torch_device": "device",
    "simplify_parameter_changes": "flag",
}


def _check_noise(value: float | None, name: str) -> float | None:
    r"""None (learned) or a fixed noise variance inside :data:`NOISE_RANGE`."""
    if value is None:
        return None
    check_positive(value, name)
    low, high = NOISE_RANGE
    if not low <= value <= high:
        raise ValueError(
            f"`{name}` must be in [{low:g}, {high:g}] (Ax's standardized outcome "
            f"units) or None to learn it, got {value!r}."
        )
    return float(value)


def _check_options_dict(value: object, name: str) -> dict[str, Any]:
    r"""A copy of ``value`` if it is a dict with string keys."""
    if not isinstance(value, dict):
        raise TypeError(f"`{name}` must be a dict, got {type(value).__name__}.")
    if not all(isinstance(key, str) for key in value):
        raise TypeError(f"`{name}` must have string keys, got {list(value)}.")
    return dict(value)


def _init_arguments(cls: type) -> set[str]:
    r"""The keyword arguments a class's constructor chain names: its own
    ``__init__``'s, and its parents' as long as each forwards ``**kwargs``."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in klass.__dict__ or klass is torch.nn.Module:
            continue
        parameters = inspect.signature(klass.__dict__["__init__"]).parameters
        names.update(
            p.name
            for p in parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            break
    return names - {"self"}


def check_kernel(
    covar_module_class: object, covar_module_options: object
) -> dict[str, Any]:
    r"""Check a strategy's kernel class and options before a run starts.

    The class must be a GPyTorch ``Kernel`` subclass; the options must be a dict
    whose keys the class's constructor names, and the class must build an unbatched
    kernel from them (tried once here, one lengthscale when the class takes
    ``ard_num_dims`` and the options leave it out: Ax fills in the input dimension).

    Args:
        covar_module_class: None (the model's default under Ax) or a kernel class.
        covar_module_options: None or the class's keyword arguments.

    Returns:
        A copy of the options (``{}`` for None).

    Example:
        >>> check_kernel(ScaleMaternKernel, {"ard_num_dims": 2})
        {'ard_num_dims': 2}
    """
    options = (
        {}
        if covar_module_options is None
        else _check_options_dict(covar_module_options, "covar_module_options")
    )
    if covar_module_class is None:
        if options:
            raise ValueError(
                "`covar_module_options` needs a `covar_module_class`; the default "
                "kernel takes no options."
            )
        return options
    if not (
        isinstance(covar_module_class, type) and issubclass(covar_module_class, Kernel)
    ):
        raise TypeError(
            "`covar_module_class` must be a gpytorch Kernel class, got "
            f"{covar_module_class!r}."
        )
    known = _init_arguments(covar_module_class)
    if unknown := sorted(set(options) - known):
        raise ValueError(
            f"`covar_module_options` has {unknown}, which "
            f"{covar_module_class.__name__} does not take (it takes {sorted(known)})."
        )
    trial = dict(options)
    if "ard_num_dims" in known:
        trial.setdefault("ard_num_dims", 1)
    try:
        kernel = covar_module_class(**trial)
    except Exception as error:  # the user's class: any failure means bad options
        raise ValueError(
            f"`covar_module_options` do not build a {covar_module_class.__name__}: "
            f"{error}"
        ) from error
    if kernel.batch_shape != torch.Size([]):
        raise ValueError(
            "`covar_module_options` give a batch-shaped kernel (batch_shape="
            f"{tuple(kernel.batch_shape)}); the models are single-output, unbatched."
        )
    return options


def check_optimizer_options(optimizer_options: object) -> dict[str, Any] | None:
    r"""Check a strategy's ``optimize_acqf`` options before a run starts.

    Keys must be among :data:`OPTIMIZER_OPTIONS`; ``num_restarts`` and
    ``raw_samples`` positive ints, ``options`` a dict with string keys (its
    ``maxiter``, ``batch_limit`` and ``init_batch_limit`` positive ints),
    ``sequential`` True (both acquisitions pick a batch one arm at a time),
    ``timeout_sec`` a positive number, ``retry_on_optimization_warning`` a bool.

    Args:
        optimizer_options: None (Ax's defaults) or the options.

    Returns:
        A copy of the options, or None.

    Example:
        >>> check_optimizer_options({"num_restarts": 4, "raw_samples": 256})
        {'num_restarts': 4, 'raw_samples': 256}
    """
    if optimizer_options is None:
        return None
    options = _check_options_dict(optimizer_options, "optimizer_options")
    if unknown := sorted(set(options) - set(OPTIMIZER_OPTIONS)):
        raise ValueError(
            f"`optimizer_options` has {unknown}; the strategies accept "
            f"{list(OPTIMIZER_OPTIONS)}."
        )
    for key in ("num_restarts", "raw_samples"):
        if key in options:
            check_int(options[key], f"optimizer_options['{key}']", 1)
    if "options" in options:
        inner = _check_options_dict(options["options"], "optimizer_options['options']")
        for key in ("maxiter", "batch_limit", "init_batch_limit"):
            if key in inner:
                check_int(inner[key], f"optimizer_options['options']['{key}']", 1)
    if "sequential" in options:
        if not check_bool(options["sequential"], "optimizer_options['sequential']"):
            raise ValueError(
                "`optimizer_options['sequential']` must be True: BKB-UCB and S-GP-TS "
                "choose a batch one arm at a time, the earlier ones pending."
            )
    if "timeout_sec" in options:
        check_positive(options["timeout_sec"], "optimizer_options['timeout_sec']")
    if "retry_on_optimization_warning" in options:
        check_bool(
            options["retry_on_optimization_warning"],
            "optimizer_options['retry_on_optimization_warning']",
        )
    return options


def check_dispatch_options(dispatch_options: dict[str, Any]) -> dict[str, Any]:
    r"""Check the ``GenerationStrategyDispatchStruct`` fields a strategy passes on
    (see :data:`DISPATCH_FIELDS`) before a run starts.

    Budgets and seeds must be ints (not bools or floats) ``>= 0`` or None, flags
    bools, ``torch_device`` None or a device string this machine has (``"cpu"``,
    ``"cuda"`` or ``"cuda:k"`` only with that many GPUs): Ax takes them unchecked
    and would fail, or silently misbehave, only during the run. Other names
    (``method`` included: the strategies set it) are left to Ax's
    ``GenerationStrategyDispatchStruct``, whose constructor raises a ``TypeError``
    naming them.

    Args:
        dispatch_options: Field names and values.

    Returns:
        The same options.

    Example:
        >>> check_dispatch_options({"initialization_budget": 8})
        {'initialization_budget': 8}
    """
    for name, value in dispatch_options.items():
        kind = DISPATCH_FIELDS.get(name)
        if kind == "flag":
            check_bool(value, name)
        elif value is None:
            continue
        elif kind in ("count", "seed"):
            check_int(value, name, 0)
        elif kind == "device":
            _check_device(value, name)
    return dispatch_options


def _check_device(value: object, name: str) -> None:
    r"""A torch device string naming a device this machine has."""
    if not isinstance(value, str):  # torch.device(0) would be cuda:0
        raise TypeError(f"`{name}` must be a device string, got {value!r}.")
    try:
        device = torch.device(value)
    except RuntimeError as error:
        raise ValueError(f"`{name}` is not a torch device: {value!r}.") from error
    if device.type == "cpu":
        return
    if device.type != "cuda":
        raise ValueError(f"`{name}` must be 'cpu' or a CUDA device, got {value!r}.")
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if (device.index or 0) >= available:
        raise ValueError(
            f"`{name}` is {value!r} but this machine has {available} CUDA device(s)."
        )


def _strategy(
    model_class: type[Model],
    mll_class: type[MarginalLogLikelihood],
    model_options: dict[str, Any],
    acqf_class: type[AcquisitionFunction],
    acqf_options: dict[str, Any],
    *,
    covar_module_class: type[Kernel] | None,
    covar_module_options: dict[str, Any] | None,
    optimizer_options: dict[str, Any] | None,
    **dispatch_options: Any,
) -> GenerationStrategy:
    r"""Ax's own center + Sobol + model-based strategy, with our model (fitted on
    ``mll_class``) and acquisition (and its options) in the model-based node.

    ``dispatch_options`` are fields of Ax's ``GenerationStrategyDispatchStruct``
    (the initialization settings and the caller's extra options). Every option is
    checked before anything is built.
    """
    kernel_options = check_kernel(covar_module_class, covar_module_options)
    optimizer_options = check_optimizer_options(optimizer_options)
    check_dispatch_options(dispatch_options)
    model_config = ModelConfig(
        botorch_model_class=model_class,
        model_options=model_options,
        mll_class=mll_class,
        covar_module_class=covar_module_class,
        covar_module_options=kernel_options,
        name=model_class.__name__,
    )
    struct = GenerationStrategyDispatchStruct(method="custom", **dispatch_options)
    strategy = choose_generation_strategy(
        struct, model_config=model_config, botorch_acqf_class=acqf_class
    )
    spec = strategy.nodes_by_name[MODEL_NODE].generator_specs[0]
    spec.generator_kwargs["botorch_acqf_options"] = acqf_options
    if optimizer_options is not None:
        spec.generator_gen_kwargs["model_gen_options"] = {
            "optimizer_kwargs": optimizer_options
        }
    return strategy


def bkb_generation_strategy(
    *,
    radius: float | None = None,
    noise: float | None = None,
    qbar: float = DEFAULT_QBAR,
    covar_module_class: type[Kernel] | None = None,
    covar_module_options: dict[str, Any] | None = None,
    optimizer_options: dict[str, Any] | None = None,
    initialization_budget: int | None = None,
    initialization_random_seed: int | None = None,
    initialize_with_center: bool = True,
    **dispatch_options: Any,
) -> GenerationStrategy:
    r"""An Ax ``GenerationStrategy``: initialization, then BKB-UCB on a ``NystromGP``.

    The model-based node refits a ``NystromGP`` on all (Ax-standardized) data at each
    generation, on its collapsed bound, and maximizes
    ``mu(x) + (radius / sqrt(lambda)) sigma(x)`` with BoTorch's ``optimize_acqf``,
    one arm at a time with the pending arms as ``X_pending``. Inputs are normalized
    to the unit cube by Ax's default ``Normalize`` input transform. With no options
    this is Ax's generic route with ``NystromGP`` and ``BKBUpperConfidenceBound``
    (the Ax defaults of :mod:`~botorch_sketch.integrations.ax_registry`: learned
    ``lambda``, an RBF kernel with Ax's dimension-scaled lengthscale prior, and
    ``mu + sqrt(0.2) sigma``, BoTorch's UCB default). Every option is checked here,
    before a run starts.

    Args:
        radius: The papers'-scale radius ``beta~ >= 0`` (a constant: Ax stores it as
            JSON; the theory radius is not available from Ax), not BoTorch's
            ``beta`` (that is ``radius**2 / lambda``); None:
            ``radius = sqrt(0.2 lambda)`` for the fitted ``lambda``, i.e.
            ``mu + sqrt(0.2) sigma``.
        noise: Fixed regularization ``lambda`` in Ax's standardized outcome units,
            in :data:`NOISE_RANGE`; None learns it on the collapsed bound (or, when
            every observation has a reported sem, uses their mean variance).
        qbar: Oversampling factor ``>= 1`` of the dictionary.
        covar_module_class: Kernel class (e.g. Ax's ``DefaultRBFKernel`` or your own,
            registered with ``ax.storage.botorch_modular_registry.register_kernel``
            for storage); None: the Ax default kernel (see above).
        covar_module_options: Keyword arguments of the kernel class (checked by
            :func:`check_kernel`).
        optimizer_options: ``optimize_acqf`` options (keys in
            :data:`OPTIMIZER_OPTIONS`, checked by :func:`check_optimizer_options`);
            None: Ax's defaults.
        initialization_budget: Initialization trials ``>= 0``, center point
            included (Ax's default 5).
        initialization_random_seed: Seed ``>= 0`` of the Sobol initialization.
        initialize_with_center: Start with the center of the search space.
        dispatch_options: Other fields of Ax's ``GenerationStrategyDispatchStruct``
            (:data:`DISPATCH_FIELDS`: e.g. ``min_observed_initialization_trials``,
            ``allow_exceeding_initialization_budget``, ``torch_device``).

    Returns:
        A strategy for ``Client.set_generation_strategy``.

    Example:
        >>> client.set_generation_strategy(bkb_generation_strategy())
    """
    acqf_options: dict[str, Any] = {}
    if radius is not None:
        acqf_options["radius"] = check_at_least(radius, "radius", 0.0)
    model_options: dict[str, Any] = {"qbar": check_at_least(qbar, "qbar", 1.0)}
    if noise is not None:
        model_options["noise"] = _check_noise(noise, "noise")
    return _strategy(
        NystromGP,
        NystromMarginalLogLikelihood,
        model_options,
        BKBUpperConfidenceBound,
        acqf_options,
        covar_module_class=covar_module_class,
        covar_module_options=covar_module_options,
        optimizer_options=optimizer_options,
        initialization_budget=initialization_budget,
        initialization_random_seed=initialization_random_seed,
        initialize_with_center=initialize_with_center,
        **dispatch_options,
    )


def sgpts_generation_strategy(
    *,
    num_inducing: int = 100,
    alpha: float = 1.0,
    num_features: int = 1024,
    noise: float | None = None,
    randomized_selection: bool = False,
    covar_module_class: type[Kernel] | None = None,
    covar_module_options: dict[str, Any] | None = None,
    optimizer_options: dict[str, Any] | None = None,
    initialization_budget: int | None = None,
    initialization_random_seed: int | None = None,
    initialize_with_center: bool = True,
    **dispatch_options: Any,
) -> GenerationStrategy:
    r"""An Ax ``GenerationStrategy``: initialization, then S-GP-TS.

    The model-based node refits a ``DecomposedSamplingSVGP`` (at most
    ``num_inducing`` inducing points chosen from the data, closed-form ``q(u)``) on
    its collapsed bound and gives every arm the maximizer of a fresh scaled sample
    path ``mu + alpha (f - mu)`` (``num_features`` random Fourier features). Every
    option is checked here, before a run starts.

    Args:
        num_inducing: Maximal number ``m >= 1`` of inducing points.
        alpha: Exploration scale ``>= 0`` (a constant, stored as JSON).
        num_features: Random Fourier features per path (even, ``>= 2``).
        noise: Fixed noise variance in standardized units, in
            :data:`NOISE_RANGE`; None learns it (or uses the reported observation
            noise).
        randomized_selection: Randomized instead of greedy inducing selection.
        covar_module_class: Kernel class; None: the model's default.
        covar_module_options: Keyword arguments of the kernel class.
        optimizer_options: ``optimize_acqf`` options; None: Ax's defaults.
        initialization_budget: Initialization trials ``>= 0``, center point
            included.
        initialization_random_seed: Seed ``>= 0`` of the Sobol initialization.
        initialize_with_center: Start with the center of the search space.
        dispatch_options: Other fields of Ax's ``GenerationStrategyDispatchStruct``.

    Returns:
        A strategy for ``Client.set_generation_strategy``.

    Example:
        >>> client.set_generation_strategy(sgpts_generation_strategy(num_inducing=50))
    """
    check_int(num_inducing, "num_inducing", 1)
    check_int(num_features, "num_features", 2)
    if num_features % 2:
        raise ValueError(f"`num_features` must be even, got {num_features}.")
    model_options: dict[str, Any] = {
        "num_inducing": num_inducing,
        "randomized_selection": check_bool(
            randomized_selection, "randomized_selection"
        ),
    }
    if noise is not None:
        model_options["noise"] = _check_noise(noise, "noise")
    acqf_options = {
        "alpha": check_at_least(alpha, "alpha", 0.0),
        "num_features": num_features,
    }
    return _strategy(
        DecomposedSamplingSVGP,
        CollapsedTitsiasBound,
        model_options,
        ScaledPathThompsonSampling,
        acqf_options,
        covar_module_class=covar_module_class,
        covar_module_options=covar_module_options,
        optimizer_options=optimizer_options,
        initialization_budget=initialization_budget,
        initialization_random_seed=initialization_random_seed,
        initialize_with_center=initialize_with_center,
        **dispatch_options,
    )


def next_bbkb_batch_size(
    generation_strategy: GenerationStrategy,
    *,
    ratio_threshold: float = 2.0,
    rule: str = "global",
    num_candidates: int = 1024,
    max_batch_size: int | None = None,
    seed: int | None = None,
) -> int:
    r"""How many trials to request next so that they form one BBKB adaptive batch.

    In the initialization phase this is the number of initialization trials Ax
    admits now (1 for the center point, or when Ax sets no limit). In the BKB phase
    the strategy's ``NystromGP`` is fitted to all data (``GenerationStrategy.fit``;
    the following ``get_next_trials`` reuses the fit) and
    :func:`~botorch_sketch.generation.bbkb.gen_bbkb_batch` runs BBKB's greedy batch
    with the strategy's ``radius`` on ``num_candidates`` scrambled Sobol points of the
    search space; its size is returned. Ax then picks that many arms itself with
    BKB-UCB and the batch so far as ``X_pending``: the same greedy batch, optimized
    over the continuous space instead of the Sobol points, so the size is an estimate
    from the candidate set.

    BBKB batches are synchronous: no trial may be running (complete, fail or
    abandon them first).

    Args:
        generation_strategy: A strategy from :func:`bkb_generation_strategy` that has
            generated at least one trial (so it knows its experiment).
        ratio_threshold: BBKB's ``C~ >= 1`` (1: batches of one, BKB).
        rule: ``"global"``, ``"local"`` or ``"global+local"``.
        num_candidates: Size of the Sobol candidate set.
        max_batch_size: Cap on the returned size (default: BBKB's
            :data:`~botorch_sketch.generation.bbkb.DEFAULT_MAX_BATCH_SIZE`, 1,000).
        seed: Seed of the Sobol candidates.

    Returns:
        The number of trials to request (``>= 1``; 0 only when the strategy is
        complete).

    Example:
        >>> size = next_bbkb_batch_size(strategy, ratio_threshold=2.0)
        >>> trials = client.get_next_trials(max_trials=size)
    """
    check_at_least(ratio_threshold, "ratio_threshold", 1.0)
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}, got {rule!r}.")
    for name, value in (
        ("num_candidates", num_candidates),
        ("max_batch_size", max_batch_size),
    ):
        if value is not None:
            check_int(value, name, 1)
    if not isinstance(generation_strategy, GenerationStrategy):
        raise TypeError(
            "`generation_strategy` must be an Ax GenerationStrategy, got "
            f"{type(generation_strategy).__name__}."
        )
    try:
        experiment = generation_strategy.experiment
    except ValueError as error:
        raise ValueError(
            "`generation_strategy` has no experiment yet: request the first "
            "(initialization) trials with Client.get_next_trials before sizing a "
            "BBKB batch."
        ) from error
    running = experiment.trial_indices_by_status[TrialStatus.RUNNING]
    if running:
        raise ValueError(
            f"BBKB batches are synchronous but trials {sorted(running)} are still "
            "running: complete, fail or abandon them before sizing the next batch."
        )
    limit, complete = generation_strategy.current_generator_run_limit()
    if complete:
        return 0
    cap = [size for size in (limit, max_batch_size) if size is not None and size > 0]
    if generation_strategy.current_node_name != MODEL_NODE:
        initialization = limit if limit > 0 else 1
        return (
            initialization
            if max_batch_size is None
            else min(initialization, max_batch_size)
        )
    batch, _ = bbkb_batch_in_model_space(
        generation_strategy,
        ratio_threshold=ratio_threshold,
        rule=rule,
        num_candidates=num_candidates,
        max_batch_size=min(cap) if cap else None,
        seed=seed,
    )
    return batch.batch_size


def bbkb_batch_in_model_space(
    generation_strategy: GenerationStrategy,
    *,
    ratio_threshold: float,
    rule: str,
    num_candidates: int,
    max_batch_size: int | None,
    seed: int | None,
) -> tuple[BBKBBatch, Tensor]:
    r"""The BBKB batch behind :func:`next_bbkb_batch_size` (BKB phase only).

    The strategy's fitted ``NystromGP`` of the objective (the objective's model of a
    model list) is re-expressed as a model of the maximized objective: the same
    dictionary, kernel and ``lambda`` on its transformed inputs, targets times the
    sign of the objective's weight (Ax minimizes by weight -1). ``gen_bbkb_batch`` then
    runs on ``num_candidates`` Sobol points of Ax's (transformed) search space.

    Args:
        generation_strategy: A strategy in its BKB phase, with an experiment.
        ratio_threshold: BBKB's ``C~``.
        rule: The termination rule.
        num_candidates: Number of Sobol candidates.
        max_batch_size: Cap on the batch size.
        seed: Seed of the Sobol candidates.

    Returns:
        ``(batch, candidates)``: the :class:`BBKBBatch` (indices into the candidates)
        and the ``num_candidates x d`` candidates in Ax's model space.

    Example:
        >>> batch, candidates = bbkb_batch_in_model_space(
        ...     strategy, ratio_threshold=2.0, rule="global", num_candidates=1024,
        ...     max_batch_size=None, seed=0)
    """
    spec = generation_strategy.nodes_by_name[MODEL_NODE].generator_specs[0]
    acqf_options = spec.generator_kwargs.get("botorch_acqf_options", {})
    if "beta" in acqf_options:
        raise ValueError(
            "The strategy's acquisition options hold `beta`, the radius's former "
            "name: rebuild it with bkb_generation_strategy(radius=...)."
        )
    experiment = generation_strategy.experiment
    adapter = generation_strategy.fit(experiment=experiment)
    generator = None if adapter is None else adapter.generator
    if not isinstance(generator, BoTorchGenerator):
        raise TypeError(
            "The strategy's model-based node must use Ax's BoTorch modular generator."
        )
    model, sign = _objective_model(experiment, generator)
    train_X = model.train_inputs[0]
    bounds = train_X.new_tensor(generator.search_space_digest.bounds).transpose(0, 1)
    candidates = draw_sobol_samples(bounds, n=num_candidates, q=1, seed=seed)
    candidates = candidates.squeeze(-2)
    maximized = NystromGP(
        train_X,
        sign * model.train_targets.unsqueeze(-1),
        covar_module=model.covar_module,
        noise=float(model.noise.detach()),
        dictionary=model.dictionary,
        qbar=model.qbar,
    )
    radius = acqf_options.get("radius")
    if radius is None:  # the Ax input constructor's default radius
        radius = default_bkb_radius(model)
    with torch.no_grad():
        choices = model.transform_inputs(candidates)
    batch = gen_bbkb_batch(
        maximized,
        choices,
        ratio_threshold=ratio_threshold,
        rule=rule,
        radius=radius,
        max_batch_size=max_batch_size,
    )
    return batch, candidates


def _objective_model(
    experiment: Experiment, generator: BoTorchGenerator
) -> tuple[NystromGP, float]:
    r"""The ``NystromGP`` of the single objective and the sign of its weight."""
    if experiment.optimization_config is None:
        raise ValueError("The experiment has no optimization config.")
    objective = experiment.optimization_config.objective
    if not objective.is_single_objective:
        raise ValueError("BBKB batches need a single objective.")
    ((signature, weight),) = objective.metric_weights
    model = generator.surrogate.model
    if isinstance(model, ModelList):
        model = model.models[generator.surrogate.outcomes.index(signature)]
    if not isinstance(model, NystromGP):
        raise TypeError(
            "`generation_strategy` must model the objective with a NystromGP "
            f"(bkb_generation_strategy), got {type(model).__name__}."
        )
    return model, math.copysign(1.0, weight)
