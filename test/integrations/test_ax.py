r"""Tests of botorch_sketch.integrations.ax: real Ax ``Client`` loops (Branin on its
native box [-5, 10] x [0, 15]) with each strategy, parallel pending trials, JSON
save/load, a user kernel, the BBKB batch-size helper against a brute-force BBKB batch
and the strategies' option checks (the registrations: test_ax_registry.py)."""

import importlib
import logging
import math
import re
import sys

import pytest

pytest.importorskip("ax")

import torch
from ax.adapter.cross_validation import cross_validate
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
from ax.api.utils.structs import GenerationStrategyDispatchStruct
from ax.generators.torch.botorch_modular.kernels import (
    ScaleMaternKernel,
)
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.utils.common.logger import set_ax_logger_levels
from botorch.acquisition.input_constructors import (
    ACQF_INPUT_CONSTRUCTOR_REGISTRY,
)
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.test_functions import Branin
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.kernels import MaternKernel, RBFKernel

from botorch_sketch.acquisition.bkb import BKBUpperConfidenceBound
from botorch_sketch.acquisition.thompson import (
    ScaledPathThompsonSampling,
)
from botorch_sketch.integrations.ax import (
    MODEL_NODE,
    bbkb_batch_in_model_space,
    bkb_generation_strategy,
    next_bbkb_batch_size,
    sgpts_generation_strategy,
)
from botorch_sketch.models.nystrom import (
    DEFAULT_QBAR,
    NystromGP,
    NystromMarginalLogLikelihood,
)
from botorch_sketch.models.variational import (
    CollapsedTitsiasBound,
    DecomposedSamplingSVGP,
)

from .ax_helpers import UserMatern

DTYPE = torch.float64
BOUNDS = [(-5.0, 10.0), (0.0, 15.0)]  # Branin's box: not the unit cube
FAST_OPTIMIZER = {"num_restarts": 2, "raw_samples": 64}
INITIALIZATION = 5  # center + 4 Sobol points
BRANIN = Branin()

# Ax (pandas 3) deprecation noise is not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def quiet_single_threaded_ax():
    r"""Ax logs every trial; and the small matrices here run faster on one thread
    (and much faster on a busy shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    set_ax_logger_levels(logging.WARNING)
    yield
    set_ax_logger_levels(logging.INFO)
    torch.set_num_threads(threads)


def branin(parameters):
    x = torch.tensor([[parameters["x1"], parameters["x2"]]], dtype=DTYPE)
    return float(BRANIN(x))


def make_client(strategy):
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i + 1}", parameter_type="float", bounds=b)
            for i, b in enumerate(BOUNDS)
        ]
    )
    client.configure_optimization(objective="-branin")
    client.set_generation_strategy(strategy)
    return client


def run_trials(client, max_trials):
    r"""Request up to ``max_trials`` trials, evaluate and complete them all."""
    trials = client.get_next_trials(max_trials=max_trials)
    for index, parameters in trials.items():
        client.complete_trial(index, raw_data={"branin": branin(parameters)})
    return trials


def run_loop(client, num_trials, parallel):
    r"""Sequential trials up to ``num_trials - parallel``, then ``parallel`` at once
    (all pending while the later ones are generated)."""
    trials = {}
    while len(trials) < num_trials - parallel:
        trials.update(run_trials(client, 1))
    batch = run_trials(client, parallel)
    trials.update(batch)
    return trials, batch


def fitted_model(strategy):
    return strategy.adapter.generator.surrogate.model


@pytest.fixture(scope="module")
def bkb_run(tmp_path_factory):
    r"""One BKB loop of 15 trials (the last 3 generated while pending), recording the
    ``X_pending`` the acquisition received, then saved to JSON."""
    strategy = bkb_generation_strategy(
        noise=1e-2,  # the ridge regime, where BBKB batches grow beyond one arm
        optimizer_options=FAST_OPTIMIZER,
        initialization_budget=INITIALIZATION,
    )
    client = make_client(strategy)
    pending_sizes = []
    constructor = ACQF_INPUT_CONSTRUCTOR_REGISTRY[BKBUpperConfidenceBound]

    def recording_constructor(**kwargs):
        X_pending = kwargs.get("X_pending")
        pending_sizes.append(0 if X_pending is None else X_pending.shape[0])
        return constructor(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(
            ACQF_INPUT_CONSTRUCTOR_REGISTRY,
            BKBUpperConfidenceBound,
            recording_constructor,
        )
        trials, batch = run_loop(client, num_trials=15, parallel=3)
    path = tmp_path_factory.mktemp("ax") / "bkb.json"
    client.save_to_json_file(str(path))
    return {
        "client": client,
        "strategy": strategy,
        "trials": trials,
        "batch": batch,
        "pending_sizes": pending_sizes,
        "path": path,
    }


# ----------------------------------------------------------------- import guard
def test_import_without_ax_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ax", None)
    for name in list(sys.modules):
        if name.startswith("botorch_sketch.integrations.ax"):
            monkeypatch.delitem(sys.modules, name)
    for module in ("ax", "ax_registry"):
        with pytest.raises(ImportError) as raised:
            importlib.import_module(f"botorch_sketch.integrations.{module}")
        assert str(raised.value) == (
            "botorch_sketch.integrations.ax needs the optional dependency "
            'ax-platform. Install it with: pip install -e ".[ax]" (from the '
            "repository root)."
        )


# --------------------------------------------------------------- client loops
def test_bkb_loop_uses_nystrom_gp_on_the_normalized_box(bkb_run):
    strategy, trials = bkb_run["strategy"], bkb_run["trials"]
    assert len(trials) == 15
    assert strategy.current_node_name == "MBM"
    model = fitted_model(strategy)
    assert isinstance(model, NystromGP)
    assert float(model.noise) == pytest.approx(1e-2)
    assert type(model.covar_module) is RBFKernel  # the Ax default kernel
    # Ax's default input transform maps Branin's box onto the unit cube.
    assert isinstance(model.input_transform, Normalize)
    corners = torch.tensor(BOUNDS, dtype=DTYPE).T
    expected = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    assert torch.allclose(model.input_transform(corners), expected)
    for parameters in trials.values():
        for i, (low, high) in enumerate(BOUNDS):
            assert low <= parameters[f"x{i + 1}"] <= high
    # The model saw every completed trial but the last batch.
    assert model.train_inputs[0].shape[0] == 15 - 3


def test_bkb_pending_trials_reach_the_acquisition(bkb_run):
    # One acquisition per model-based trial; the last three trials were generated
    # while the earlier ones of their batch were pending.
    sizes = bkb_run["pending_sizes"]
    assert sizes[-3:] == [0, 1, 2]
    assert all(size == 0 for size in sizes[:-3])
    points = torch.tensor(
        [[p["x1"], p["x2"]] for p in bkb_run["batch"].values()], dtype=DTYPE
    )
    assert torch.pdist(points).min() > 1e-6  # three distinct arms


def test_bkb_save_load_round_trip_continues(bkb_run):
    loaded = Client.load_from_json_file(str(bkb_run["path"]))
    strategy = loaded._generation_strategy
    assert strategy.name == bkb_run["strategy"].name
    spec = strategy.nodes_by_name["MBM"].generator_specs[0]
    assert spec.generator_kwargs["botorch_acqf_class"] is BKBUpperConfidenceBound
    assert spec.generator_kwargs["botorch_acqf_options"] == {}
    config = spec.generator_kwargs["surrogate_spec"].model_configs[0]
    assert config.botorch_model_class is NystromGP
    assert config.mll_class is NystromMarginalLogLikelihood
    assert config.model_options == {"qbar": DEFAULT_QBAR, "noise": 1e-2}
    trials = run_trials(loaded, 2)
    assert len(trials) == 2
    assert strategy.current_node_name == "MBM"
    assert isinstance(fitted_model(strategy), NystromGP)


@pytest.fixture(scope="module")
def sgpts_run():
    r"""One S-GP-TS loop of 12 trials, the last 3 generated while pending."""
    strategy = sgpts_generation_strategy(
        num_inducing=8,
        num_features=256,
        optimizer_options=FAST_OPTIMIZER,
        initialization_budget=INITIALIZATION,
    )
    client = make_client(strategy)
    trials, batch = run_loop(client, num_trials=12, parallel=3)
    return {"client": client, "strategy": strategy, "trials": trials, "batch": batch}


def test_sgpts_loop_with_pending_trials_and_save_load(sgpts_run, tmp_path):
    strategy, trials = sgpts_run["strategy"], sgpts_run["trials"]
    assert len(trials) == 12
    assert strategy.current_node_name == "MBM"
    model = fitted_model(strategy)
    assert isinstance(model, DecomposedSamplingSVGP)
    assert isinstance(model.input_transform, Normalize)
    assert model.inducing_points.shape[0] <= 8
    points = torch.tensor(
        [[p["x1"], p["x2"]] for p in sgpts_run["batch"].values()], dtype=DTYPE
    )
    assert torch.pdist(points).min() > 1e-6  # three independent samples
    path = tmp_path / "sgpts.json"
    sgpts_run["client"].save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    spec = loaded._generation_strategy.nodes_by_name["MBM"].generator_specs[0]
    assert spec.generator_kwargs["botorch_acqf_class"] is ScaledPathThompsonSampling
    assert spec.generator_kwargs["botorch_acqf_options"] == {
        "alpha": 1.0,
        "num_features": 256,
    }
    config = spec.generator_kwargs["surrogate_spec"].model_configs[0]
    assert config.botorch_model_class is DecomposedSamplingSVGP
    assert config.mll_class is CollapsedTitsiasBound
    assert len(run_trials(loaded, 1)) == 1
    assert isinstance(fitted_model(loaded._generation_strategy), DecomposedSamplingSVGP)


def test_user_kernel_passes_through_and_is_stored(tmp_path):
    strategy = bkb_generation_strategy(
        covar_module_class=UserMatern,
        covar_module_options={"ard_num_dims": 2, "nu": 1.5},
        optimizer_options=FAST_OPTIMIZER,
        initialization_budget=3,
        min_observed_initialization_trials=3,
    )
    client = make_client(strategy)
    for _ in range(4):
        run_trials(client, 1)
    kernel = fitted_model(strategy).covar_module
    assert isinstance(kernel, UserMatern)
    assert kernel.base_kernel.nu == 1.5
    assert kernel.base_kernel.lengthscale.shape[-1] == 2
    path = tmp_path / "kernel.json"
    client.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    config = (
        loaded._generation_strategy.nodes_by_name["MBM"]
        .generator_specs[0]
        .generator_kwargs["surrogate_spec"]
        .model_configs[0]
    )
    assert config.covar_module_class is UserMatern
    assert config.covar_module_options == {"ard_num_dims": 2, "nu": 1.5}
    run_trials(loaded, 1)
    assert isinstance(
        fitted_model(loaded._generation_strategy).covar_module, UserMatern
    )


def test_ax_cross_validation_with_nystrom_gp(bkb_run):
    results = cross_validate(bkb_run["strategy"].adapter)
    assert len(results) == 15 - 3
    for result in results:
        assert torch.isfinite(torch.tensor(result.predicted.means)).all()


def test_ax_cross_validation_with_decomposed_sampling_svgp(sgpts_run):
    results = cross_validate(sgpts_run["strategy"].adapter)
    assert len(results) == 12 - 3
    for result in results:
        assert torch.isfinite(torch.tensor(result.predicted.means)).all()


def test_bkb_loop_survives_nearly_repeated_arms():
    strategy = bkb_generation_strategy(
        optimizer_options=FAST_OPTIMIZER,
        initialization_budget=3,
        min_observed_initialization_trials=3,
    )
    client = make_client(strategy)
    trials = run_trials(client, 3)
    first = next(iter(trials.values()))
    for shift in (1e-9, 2e-9):
        nearby = {name: value + shift for name, value in first.items()}
        index = client.attach_trial(parameters=nearby)
        client.complete_trial(index, raw_data={"branin": branin(nearby)})
    assert len(run_trials(client, 1)) == 1


# ------------------------------------------------------------- BBKB batch size
def brute_force_bbkb_batch(model, choices, radius, ratio_threshold, maximize):
    r"""BBKB's greedy batch with the global rule, recomputed from scratch at every
    step with BKB-UCB (minimizing or maximizing) and the batch so far as
    ``X_pending``."""
    with torch.no_grad():
        start = model.posterior(choices.unsqueeze(-2)).variance.squeeze() / model.noise
    chosen, total = [], 1.0
    while True:
        pending = choices[chosen] if chosen else None
        acqf = BKBUpperConfidenceBound(
            model, radius=radius, X_pending=pending, maximize=maximize
        )
        with torch.no_grad():
            index = int(acqf(choices.unsqueeze(-2)).argmax())
        if chosen and total + float(start[index]) > ratio_threshold:
            return chosen
        total += float(start[index])
        chosen.append(index)


BATCH_OPTIONS = {"rule": "global", "num_candidates": 256, "seed": 3}


def test_next_bbkb_batch_size_matches_brute_force_and_sizes_the_request(bkb_run):
    client = Client.load_from_json_file(str(bkb_run["path"]))
    strategy = client._generation_strategy
    (running,) = client.get_next_trials(max_trials=1)
    with pytest.raises(ValueError, match=rf"trials \[{running}\] are still running"):
        next_bbkb_batch_size(strategy)
    client.mark_trial_abandoned(running)
    ratio_threshold = 40.0
    batch, candidates = bbkb_batch_in_model_space(
        strategy, ratio_threshold=ratio_threshold, max_batch_size=None, **BATCH_OPTIONS
    )
    # Float parameters: Ax's model space is the parameter box itself.
    bounds = torch.tensor(BOUNDS, dtype=DTYPE).T
    sobol = draw_sobol_samples(bounds, n=256, q=1, seed=3).squeeze(-2)
    assert torch.equal(candidates, sobol)
    model = fitted_model(strategy)
    # "-branin": the objective is minimized; the default radius for lambda = 1e-2.
    radius = math.sqrt(0.2 * 1e-2)
    expected = brute_force_bbkb_batch(model, candidates, radius, ratio_threshold, False)
    assert batch.indices.tolist() == expected
    assert batch.batch_size > 1  # the threshold is loose enough for a real batch
    size = next_bbkb_batch_size(
        strategy, ratio_threshold=ratio_threshold, **BATCH_OPTIONS
    )
    assert size == batch.batch_size
    assert next_bbkb_batch_size(strategy, ratio_threshold=1.0) == 1  # C~ = 1: BKB
    capped = next_bbkb_batch_size(
        strategy, ratio_threshold=ratio_threshold, max_batch_size=2, seed=3
    )
    assert capped == 2
    trials = client.get_next_trials(max_trials=size)
    assert len(trials) == size


def test_bbkb_batch_rejects_the_former_radius_key(bkb_run):
    # A strategy stored before the rename holds {"beta": ...}: rejected, not ignored.
    client = Client.load_from_json_file(str(bkb_run["path"]))
    strategy = client._generation_strategy
    spec = strategy.nodes_by_name[MODEL_NODE].generator_specs[0]
    spec.generator_kwargs["botorch_acqf_options"] = {"beta": 0.2}
    with pytest.raises(ValueError, match="radius=") as raised:
        bbkb_batch_in_model_space(
            strategy, ratio_threshold=2.0, max_batch_size=None, **BATCH_OPTIONS
        )
    assert "`beta`" in str(raised.value)


def test_bbkb_batch_uses_the_objective_model_of_a_model_list():
    strategy = bkb_generation_strategy(
        optimizer_options=FAST_OPTIMIZER,
        initialization_budget=4,
        min_observed_initialization_trials=4,
    )
    client = Client(random_seed=1)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i + 1}", parameter_type="float", bounds=b)
            for i, b in enumerate(BOUNDS)
        ]
    )
    client.configure_optimization(objective="branin")  # maximized this time
    client.configure_tracking_metrics(["x1_squared"])
    client.set_generation_strategy(strategy)
    for _ in range(5):
        for index, parameters in client.get_next_trials(max_trials=1).items():
            client.complete_trial(
                index,
                raw_data={
                    "branin": branin(parameters),
                    "x1_squared": parameters["x1"] ** 2,
                },
            )
    batch, candidates = bbkb_batch_in_model_space(
        strategy, ratio_threshold=40.0, max_batch_size=None, **BATCH_OPTIONS
    )
    surrogate = strategy.adapter.generator.surrogate
    model = surrogate.model.models[surrogate.outcomes.index("branin")]
    assert isinstance(model, NystromGP)
    # The default radius: sqrt(0.2 lambda) for the fitted lambda.
    radius = math.sqrt(0.2 * float(model.noise.detach()))
    expected = brute_force_bbkb_batch(model, candidates, radius, 40.0, True)
    assert batch.indices.tolist() == expected


def test_next_bbkb_batch_size_in_initialization_and_bad_input():
    strategy = bkb_generation_strategy(initialization_budget=INITIALIZATION)
    with pytest.raises(ValueError, match="no experiment yet"):
        next_bbkb_batch_size(strategy)
    client = make_client(strategy)
    assert next_bbkb_batch_size(strategy) == 1  # the center point
    run_trials(client, 1)
    assert next_bbkb_batch_size(strategy) == INITIALIZATION - 1  # the Sobol points
    assert next_bbkb_batch_size(strategy, max_batch_size=2) == 2
    run_trials(client, 2)
    assert next_bbkb_batch_size(strategy) == INITIALIZATION - 3
    with pytest.raises(ValueError, match="ratio_threshold"):
        next_bbkb_batch_size(strategy, ratio_threshold=0.5)
    with pytest.raises(ValueError, match="rule"):
        next_bbkb_batch_size(strategy, rule="nearest")
    with pytest.raises(ValueError, match="num_candidates"):
        next_bbkb_batch_size(strategy, num_candidates=0)
    with pytest.raises(TypeError, match="GenerationStrategy"):
        next_bbkb_batch_size(client)


BAD_STRATEGY_OPTIONS = [
    # (builder, options, error type, argument named in the message)
    (bkb_generation_strategy, {"radius": -1.0}, ValueError, "radius"),
    (bkb_generation_strategy, {"radius": math.inf}, ValueError, "radius"),
    (bkb_generation_strategy, {"radius": True}, TypeError, "radius"),
    (bkb_generation_strategy, {"noise": 0.0}, ValueError, "noise"),
    (bkb_generation_strategy, {"noise": 1e-300}, ValueError, "noise"),
    (bkb_generation_strategy, {"noise": 1e3}, ValueError, "noise"),
    (bkb_generation_strategy, {"noise": "0.01"}, TypeError, "noise"),
    (bkb_generation_strategy, {"qbar": 0.5}, ValueError, "qbar"),
    (sgpts_generation_strategy, {"num_inducing": 0}, ValueError, "num_inducing"),
    (sgpts_generation_strategy, {"num_inducing": 10.0}, TypeError, "num_inducing"),
    (sgpts_generation_strategy, {"num_features": 3}, ValueError, "num_features"),
    (sgpts_generation_strategy, {"num_features": True}, TypeError, "num_features"),
    (sgpts_generation_strategy, {"alpha": -0.1}, ValueError, "alpha"),
    (sgpts_generation_strategy, {"noise": 1e-9}, ValueError, "noise"),
    (
        sgpts_generation_strategy,
        {"randomized_selection": 1},
        TypeError,
        "randomized_selection",
    ),
    # kernel class and options
    (bkb_generation_strategy, {"covar_module_class": "rbf"}, TypeError, "covar_mo"),
    (bkb_generation_strategy, {"covar_module_class": SingleTaskGP}, TypeError, "cov"),
    (
        bkb_generation_strategy,
        {"covar_module_options": {"nu": 2.5}},
        ValueError,
        "covar_module_class",
    ),
    (
        sgpts_generation_strategy,
        {"covar_module_class": UserMatern, "covar_module_options": [("nu", 0.5)]},
        TypeError,
        "covar_module_options",
    ),
    (
        bkb_generation_strategy,
        {"covar_module_class": UserMatern, "covar_module_options": {"lengthscale": 1}},
        ValueError,
        "covar_module_options",
    ),
    (
        bkb_generation_strategy,
        {"covar_module_class": MaternKernel, "covar_module_options": {"nu": 0.3}},
        ValueError,
        "covar_module_options",
    ),
    (
        bkb_generation_strategy,
        {
            "covar_module_class": ScaleMaternKernel,
            "covar_module_options": {"batch_shape": torch.Size([2])},
        },
        ValueError,
        "batch-shaped",
    ),
    # optimizer options
    (bkb_generation_strategy, {"optimizer_options": 4}, TypeError, "optimizer_opt"),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"num_restart": 4}},
        ValueError,
        "optimizer_options",
    ),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"num_restarts": 0}},
        ValueError,
        "num_restarts",
    ),
    (
        sgpts_generation_strategy,
        {"optimizer_options": {"raw_samples": 64.0}},
        TypeError,
        "raw_samples",
    ),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"options": "fast"}},
        TypeError,
        "optimizer_options['options']",
    ),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"options": {"maxiter": True}}},
        TypeError,
        "maxiter",
    ),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"sequential": False}},
        ValueError,
        "sequential",
    ),
    (
        bkb_generation_strategy,
        {"optimizer_options": {"timeout_sec": -1.0}},
        ValueError,
        "timeout_sec",
    ),
    # seeds, budgets, flags, device, unknown fields
    (
        bkb_generation_strategy,
        {"initialization_random_seed": True},
        TypeError,
        "initialization_random_seed",
    ),
    (
        sgpts_generation_strategy,
        {"initialization_random_seed": 1.0},
        TypeError,
        "initialization_random_seed",
    ),
    (
        bkb_generation_strategy,
        {"initialization_random_seed": -1},
        ValueError,
        "initialization_random_seed",
    ),
    (
        bkb_generation_strategy,
        {"initialization_budget": -1},
        ValueError,
        "initialization_budget",
    ),
    (
        sgpts_generation_strategy,
        {"initialization_budget": 5.0},
        TypeError,
        "initialization_budget",
    ),
    (
        bkb_generation_strategy,
        {"min_observed_initialization_trials": True},
        TypeError,
        "min_observed_initialization_trials",
    ),
    (
        bkb_generation_strategy,
        {"initialize_with_center": 1},
        TypeError,
        "initialize_with_center",
    ),
    (
        bkb_generation_strategy,
        {"allow_exceeding_initialization_budget": "yes"},
        TypeError,
        "allow_exceeding_initialization_budget",
    ),
    (bkb_generation_strategy, {"torch_device": 0}, TypeError, "torch_device"),
    (bkb_generation_strategy, {"torch_device": "gpu0"}, ValueError, "torch_device"),
    (bkb_generation_strategy, {"torch_device": "meta"}, ValueError, "torch_device"),
    (
        sgpts_generation_strategy,
        {"torch_device": f"cuda:{torch.cuda.device_count()}"},
        ValueError,
        "torch_device",
    ),
    # unknown names: the TypeError of Ax's GenerationStrategyDispatchStruct
    (bkb_generation_strategy, {"method": "fast"}, TypeError, "method"),
    (bkb_generation_strategy, {"initialisation_budget": 5}, TypeError, "initialisa"),
]


@pytest.mark.parametrize(
    ("builder", "options", "error", "argument"),
    BAD_STRATEGY_OPTIONS,
    ids=[f"{b.__name__[:4]}-{next(iter(o))}" for b, o, _, _ in BAD_STRATEGY_OPTIONS],
)
def test_strategy_options_are_checked_before_a_run(builder, options, error, argument):
    with pytest.raises(error, match=re.escape(argument)):
        builder(**options)


def test_valid_strategy_options_reach_the_strategy():
    options = {"num_restarts": 3, "raw_samples": 32, "options": {"maxiter": 50}}
    strategy = bkb_generation_strategy(
        radius=0.1,
        noise=1e-3,
        covar_module_class=ScaleMaternKernel,
        covar_module_options={"ard_num_dims": 2},
        optimizer_options=options,
        initialization_budget=4,
        initialization_random_seed=3,
        min_observed_initialization_trials=2,
        torch_device="cpu",
    )
    spec = strategy.nodes_by_name["MBM"].generator_specs[0]
    assert spec.generator_kwargs["botorch_acqf_options"] == {"radius": 0.1}
    (config,) = spec.generator_kwargs["surrogate_spec"].model_configs
    assert config.model_options == {"qbar": DEFAULT_QBAR, "noise": 1e-3}
    assert config.covar_module_class is ScaleMaternKernel
    assert config.covar_module_options == {"ard_num_dims": 2}
    assert spec.generator_gen_kwargs["model_gen_options"] == {
        "optimizer_kwargs": options
    }
    # the defaults leave radius and lambda to the Ax input constructors
    default = bkb_generation_strategy().nodes_by_name["MBM"].generator_specs[0]
    assert default.generator_kwargs["botorch_acqf_options"] == {}
    (config,) = default.generator_kwargs["surrogate_spec"].model_configs
    assert config.model_options == {"qbar": DEFAULT_QBAR}
    assert config.covar_module_class is None


def test_generic_route_with_no_options_uses_the_ax_defaults():
    r"""``ModelConfig(botorch_model_class=NystromGP)`` and BKB-UCB with no options:
    learned lambda, the Ax default kernel and ``mu + sqrt(0.2) sigma`` (also with a
    pending trial)."""
    struct = GenerationStrategyDispatchStruct(
        method="custom", initialization_budget=INITIALIZATION
    )
    strategy = choose_generation_strategy(
        struct,
        model_config=ModelConfig(botorch_model_class=NystromGP),
        botorch_acqf_class=BKBUpperConfidenceBound,
    )
    spec = strategy.nodes_by_name["MBM"].generator_specs[0]
    spec.generator_gen_kwargs["model_gen_options"] = {
        "optimizer_kwargs": FAST_OPTIMIZER
    }
    client = make_client(strategy)
    constructor = ACQF_INPUT_CONSTRUCTOR_REGISTRY[BKBUpperConfidenceBound]
    built = []

    def recording_constructor(**kwargs):
        built.append(constructor(**kwargs))
        return built[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(
            ACQF_INPUT_CONSTRUCTOR_REGISTRY,
            BKBUpperConfidenceBound,
            recording_constructor,
        )
        run_loop(client, num_trials=INITIALIZATION + 3, parallel=2)
    assert len(built) == 3 and built[-1]["X_pending"].shape == (1, 2)
    for inputs in built:
        model = inputs["model"]
        assert isinstance(model, NystromGP)
        assert type(model.covar_module) is RBFKernel
        assert model.likelihood.raw_noise.requires_grad
        noise = float(model.noise.detach())
        assert inputs["radius"] == pytest.approx(math.sqrt(0.2 * noise), rel=1e-12)
