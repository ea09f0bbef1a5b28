import itertools

import numpy as np
import pytest

from benchmarks.tuning.problems import (
    MIXED_SPACE,
    MissingDataError,
    make_tuning_problem,
    mixed_loss,
    mixed_optimum,
)
from benchmarks.tuning.space import sample


def test_mixed_optimum_is_reached_and_never_beaten():
    best = {
        "learning_rate": 10 ** (-3.0 - 0.15),  # gelu's centre at 5 layers
        "weight_decay": 1e-4,
        "num_layers": 5,
        "activation": "gelu",
        "dropout": 0.2,
    }
    assert mixed_loss(best) == pytest.approx(mixed_optimum())
    rng = np.random.default_rng(0)
    assert min(mixed_loss(sample(MIXED_SPACE, rng)) for _ in range(2000)) > (
        mixed_optimum()
    )
    for layers, activation in itertools.product(range(1, 9), ("relu", "tanh")):
        config = best | {"num_layers": layers, "activation": activation}
        assert mixed_loss(config) > mixed_optimum()


@pytest.mark.parametrize("name", ["branin", "hartmann6", "levy10"])
def test_test_functions_reach_their_optimum(name):
    problem = make_tuning_problem(name)
    from botorch.test_functions import Branin, Hartmann, Levy

    function = {
        "branin": Branin(),
        "hartmann6": Hartmann(dim=6),
        "levy10": Levy(dim=10),
    }
    point = function[name].optimizers[0].tolist()
    config = {f"x{i}": value for i, value in enumerate(point)}
    assert problem.loss(config) == pytest.approx(problem.optimum, abs=1e-4)


def test_missing_cadata_raises_and_unknown_names_fail(tmp_path):
    with pytest.raises(MissingDataError, match="cadata.csv"):
        make_tuning_problem("hgb-cadata", tmp_path)
    with pytest.raises(ValueError, match="Unknown problem"):
        make_tuning_problem("rosenbrock")
