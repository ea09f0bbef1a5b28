import math

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("ray.tune")

from benchmarks.tuning.problems import HGB_SPACE, MIXED_SPACE
from benchmarks.tuning.space import Param, sample, to_optuna, to_tune

from .helpers import contains


@pytest.mark.parametrize("space", [MIXED_SPACE, HGB_SPACE], ids=["mixed", "hgb"])
def test_tune_and_optuna_spaces_agree(space):
    from ray.tune.search.sample import Categorical, Integer, LogUniform

    tune_space, optuna_space = to_tune(space), to_optuna(space)
    assert list(tune_space) == list(optuna_space) == [p.name for p in space]
    for param in space:
        domain, distribution = tune_space[param.name], optuna_space[param.name]
        if param.kind == "choice":
            assert isinstance(domain, Categorical)
            assert list(domain.categories) == list(distribution.choices)
            assert tuple(distribution.choices) == param.choices
            continue
        log = isinstance(domain.get_sampler(), LogUniform)
        assert log == distribution.log == (param.kind == "log-float")
        assert isinstance(domain, Integer) == (param.kind == "int")
        # tune.randint's upper end is exclusive, Optuna's inclusive
        top = domain.upper - 1 if isinstance(domain, Integer) else domain.upper
        assert (domain.lower, top) == (distribution.low, distribution.high)
        assert (distribution.low, distribution.high) == (param.low, param.high)


def test_ax_parameters_agree():
    pytest.importorskip("ax")
    from benchmarks.tuning.space import to_ax

    for param, config in zip(MIXED_SPACE, to_ax(MIXED_SPACE), strict=True):
        assert config.name == param.name
        if param.kind == "choice":
            assert tuple(config.values) == param.choices
        else:
            assert tuple(config.bounds) == (param.low, param.high)
            assert (config.scaling == "log") == (param.kind == "log-float")
            assert (config.parameter_type == "int") == (param.kind == "int")


def test_samples_lie_in_the_space_and_cover_it():
    rng = np.random.default_rng(0)
    draws = [sample(MIXED_SPACE, rng) for _ in range(400)]
    assert all(contains(MIXED_SPACE, config) for config in draws)
    assert {d["activation"] for d in draws} == {"relu", "tanh", "gelu"}
    assert {d["num_layers"] for d in draws} == set(range(1, 9))
    logs = np.log10([d["learning_rate"] for d in draws])  # log-uniform on [-5, 0]
    assert abs(logs.mean() + 2.5) < 0.3


def test_contains_rejects_outside_values_and_bad_params():
    good = sample(MIXED_SPACE, np.random.default_rng(1))
    assert contains(MIXED_SPACE, good)
    for key, value in [
        ("num_layers", 9),
        ("num_layers", 2.5),
        ("activation", "sigmoid"),
        ("learning_rate", 2.0),
    ]:
        assert not contains(MIXED_SPACE, good | {key: value})
    assert not contains(MIXED_SPACE, {"dropout": 0.1})
    with pytest.raises(ValueError, match="bounds"):
        Param("lr", "log-float", 0.0, 1.0)
    with pytest.raises(ValueError, match="kind"):
        Param("lr", "uniform")
    assert math.isclose(MIXED_SPACE[0].high, 1.0)
