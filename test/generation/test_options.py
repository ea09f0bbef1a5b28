r"""The loops' options objects: defaults, validation naming the field, frozen,
keyword overrides, and the round trip through ``state_dict``."""

import dataclasses
import math
import pickle
import threading

import pytest
import torch

from botorch_sketch.acquisition.bkb import TheoryRadius
from botorch_sketch.generation.bbkb import DEFAULT_MAX_BATCH_SIZE
from botorch_sketch.generation.bbkb_loop import (
    BBKB,
    WorkerRatioThreshold,
    asynchronous_options,
)
from botorch_sketch.generation.hyperparameters import DEFAULT_REFIT_GROWTH
from botorch_sketch.generation.options import (
    BBKBOptions,
    GPThreDSOptions,
    SGPTSOptions,
    merged_options,
    options_record,
)
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS
from botorch_sketch.generation.threds import GPThreDS
from botorch_sketch.models.nystrom import DEFAULT_QBAR

DTYPE = torch.float64
UNIT = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
F_RANGE = (0.5, 1.2)


def _arms(n: int = 40) -> torch.Tensor:
    return torch.rand(n, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)


def test_defaults():
    bbkb = BBKBOptions()
    assert (bbkb.noise, bbkb.radius, bbkb.standardize, bbkb.num_initial) == (None,) * 4
    assert bbkb.refit_growth == DEFAULT_REFIT_GROWTH and bbkb.qbar == DEFAULT_QBAR
    assert (bbkb.ratio_threshold, bbkb.rule, bbkb.resampling) == (
        2.0,
        "global",
        "coupled",
    )
    assert bbkb.max_batch_size == DEFAULT_MAX_BATCH_SIZE and bbkb.end_fraction == 0.0
    assert not bbkb.residual_update and not bbkb.retry_failed
    assert bbkb.cache_dtype is None
    sgpts = SGPTSOptions()
    assert (sgpts.num_inducing, sgpts.num_features, sgpts.alpha) == (100, 1000, 1.0)
    assert (sgpts.inducing_quality, sgpts.prior_block) == ("variance", 64)
    assert sgpts.memory_budget == 4 * 2**30 and sgpts.cache_dtype is None
    threds = GPThreDSOptions(f_range=F_RANGE)
    assert (threds.noise, threds.rkhs_bound, threds.noise_std) == (0.01, 0.5, 0.1)
    assert threds.gamma is math.log and threds.mode == "cube"
    assert (threds.grid_points, threds.cap, threds.max_depth) == (20, 50, None)
    assert not threds.reuse_observations and threds.readmit_after is None


def test_loops_use_the_defaults_of_the_options():
    arms = _arms()
    assert BBKB(arms).options == BBKBOptions()
    assert SGPTS(arms, num_features=20).options == SGPTSOptions(num_features=20)
    assert GPThreDS(UNIT, f_range=F_RANGE).options == GPThreDSOptions(f_range=F_RANGE)


@pytest.mark.parametrize(
    "cls, field, value, error",
    [
        (BBKBOptions, "noise", 0.0, ValueError),
        (BBKBOptions, "standardize", 1, TypeError),
        (BBKBOptions, "num_initial", -1, ValueError),
        (BBKBOptions, "num_initial", 2.0, TypeError),
        (BBKBOptions, "refit_growth", 1.0, ValueError),
        (BBKBOptions, "fit_inducing", 0, ValueError),
        (BBKBOptions, "fit_inducing", 50.0, TypeError),
        (BBKBOptions, "radius", -1.0, ValueError),
        (BBKBOptions, "ratio_threshold", 0.5, ValueError),
        (BBKBOptions, "ratio_threshold", lambda v: 0.5, ValueError),
        (BBKBOptions, "rule", "nearest", ValueError),
        (BBKBOptions, "qbar", 0.5, ValueError),
        (BBKBOptions, "resampling", "fresh", ValueError),
        (BBKBOptions, "max_batch_size", 0, ValueError),
        (BBKBOptions, "end_fraction", 1.5, ValueError),
        (BBKBOptions, "end_fraction", "half", TypeError),
        (BBKBOptions, "retry_failed", "yes", TypeError),
        (SGPTSOptions, "noise", -1.0, ValueError),
        (SGPTSOptions, "num_inducing", 0, ValueError),
        (SGPTSOptions, "num_features", 1, ValueError),
        (SGPTSOptions, "prior_block", 0, ValueError),
        (SGPTSOptions, "alpha", -1.0, ValueError),
        (SGPTSOptions, "alpha", lambda t: -1.0, ValueError),
        (GPThreDSOptions, "f_range", None, ValueError),
        (GPThreDSOptions, "f_range", (1.0, 0.0), ValueError),
        (GPThreDSOptions, "f_range", 5, TypeError),
        (GPThreDSOptions, "noise", 0.0, ValueError),
        (GPThreDSOptions, "rkhs_bound", -1.0, ValueError),
        (GPThreDSOptions, "noise_std", -1.0, ValueError),
        (GPThreDSOptions, "delta", 1.0, ValueError),
        (GPThreDSOptions, "walk_delta", 0.0, ValueError),
        (GPThreDSOptions, "gamma", 3.0, TypeError),
        (GPThreDSOptions, "gamma", lambda n: math.nan, ValueError),
        (GPThreDSOptions, "grid_points", 1, ValueError),
        (GPThreDSOptions, "cap", 0, ValueError),
        (GPThreDSOptions, "tol_coef", -0.1, ValueError),
        (GPThreDSOptions, "c_coef", -0.1, ValueError),
        (GPThreDSOptions, "max_depth", -1, ValueError),
        (GPThreDSOptions, "readmit_after", 0, ValueError),
        (GPThreDSOptions, "reuse_observations", 1, TypeError),
        (GPThreDSOptions, "mode", "walk", ValueError),
    ],
)
def test_validation_names_the_field(cls, field, value, error):
    needs_range = cls is GPThreDSOptions and field != "f_range"
    given = {"f_range": F_RANGE} if needs_range else {}
    with pytest.raises(error, match=f"`{field}`"):
        cls(**given, **{field: value})


@pytest.mark.parametrize(
    "options",
    [BBKBOptions(), SGPTSOptions(), GPThreDSOptions(f_range=F_RANGE)],
)
def test_frozen(options):
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.noise = 0.5


def test_overrides_replace_fields_and_are_validated():
    arms = _arms()
    base = BBKBOptions(qbar=3.0, end_fraction=0.05)
    loop = BBKB(arms, base, ratio_threshold=4.0)
    assert loop.options == BBKBOptions(qbar=3.0, end_fraction=0.05, ratio_threshold=4)
    assert base.ratio_threshold == 2.0  # the given object is unchanged
    with pytest.raises(ValueError, match="`qbar`"):
        BBKB(arms, base, qbar=0.5)
    with pytest.raises(TypeError, match=r"BBKB got unexpected .*\['nonsense'\]"):
        BBKB(arms, nonsense=1)
    with pytest.raises(TypeError, match=r"ExactGPTS got unexpected .*\['qbar'\]"):
        ExactGPTS(arms, qbar=1.0)
    with pytest.raises(TypeError, match="`options` must be a SGPTSOptions"):
        SGPTS(arms, BBKBOptions())
    with pytest.raises(TypeError, match="`options` must be a GPThreDSOptions"):
        GPThreDS(UNIT, {"f_range": F_RANGE})
    assert merged_options(SGPTSOptions, None, {"num_inducing": 5}).num_inducing == 5


class LockedSchedule:
    r"""A ratio threshold holding a lock: it cannot be deep-copied."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, scaled_prior_variance: float) -> float:
        return 2.0


def test_merged_options_are_a_deep_copy():
    radius = TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=1.0)
    options = BBKBOptions(radius=radius)
    for overrides in ({}, {"qbar": 2.0}):
        merged = merged_options(BBKBOptions, options, overrides)
        assert merged.radius is not radius and merged.radius.noise == radius.noise
    with pytest.raises(TypeError, match="`options` of BBKB must be deep-copyable"):
        BBKB(torch.rand(5, 2, dtype=DTYPE), ratio_threshold=LockedSchedule())


def test_asynchronous_options_build_options():
    options = BBKBOptions(**asynchronous_options(100))
    assert isinstance(options.ratio_threshold, WorkerRatioThreshold)
    assert (options.max_batch_size, options.end_fraction) == (105, 0.05)


def test_record_is_plain():
    record = options_record(
        BBKBOptions(
            radius=TheoryRadius(noise_std=0.1, rkhs_bound=1.0, delta=0.1, noise=1.0),
            ratio_threshold=WorkerRatioThreshold(8),
            cache_dtype=torch.float32,
        )
    )
    assert "ratio_threshold" not in record  # callables are left out
    assert record["radius"] == "TheoryRadius"
    assert record["cache_dtype"] == "torch.float32"
    record = options_record(GPThreDSOptions(f_range=F_RANGE))
    assert record["f_range"] == list(F_RANGE) and "gamma" not in record
    assert pickle.loads(pickle.dumps(record)) == record


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_state_dict_round_trip(loop_class):
    arms = _arms()
    extra = {"num_features": 20} if loop_class is SGPTS else {}
    options = loop_class.options_class(noise=0.1, num_initial=3, **extra)
    loop = loop_class(arms, options, seed=1)
    loop.tell(idx := loop.ask(3), torch.ones(3, dtype=DTYPE))
    state = loop.state_dict()
    assert state["options"] == options_record(options)
    twin = loop_class(arms, options, seed=5)
    twin.load_state_dict(state)
    assert torch.equal(twin.ask(2), loop.ask(2)) and idx.numel() == 3
    other = loop_class(arms, dataclasses.replace(options, refit_growth=3.0))
    with pytest.raises(ValueError, match=r"state\['options'\].*'refit_growth'"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="options"):
        twin.load_state_dict({k: v for k, v in state.items() if k != "options"})


def test_threds_state_dict_round_trip():
    options = GPThreDSOptions(f_range=F_RANGE, grid_points=6)
    gen = GPThreDS(UNIT, options)
    for _ in range(8):
        x = gen.ask()
        gen.tell(x, x.sum().reshape(1))
    state = gen.state_dict()
    assert state["options"] == options_record(options)
    twin = GPThreDS(UNIT, options)
    twin.load_state_dict(state)
    assert torch.equal(twin.ask(), gen.ask())
    other = GPThreDS(UNIT, options, cap=10)
    with pytest.raises(ValueError, match=r"state\['options'\].*'cap'"):
        other.load_state_dict(state)
    copy = pickle.loads(pickle.dumps(gen))
    assert copy.options == options and torch.equal(copy.ask(), gen.ask())
