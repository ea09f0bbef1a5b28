r"""The Tune search space and point the Ray Tune tests share (import after
``pytest.importorskip("ray.tune")``)."""

from ray import tune

SPACE = {
    "lr": tune.loguniform(1e-4, 1e-1),
    "width": tune.quniform(0.0, 1.0, 0.05),
    "depth": tune.randint(1, 6),
    "act": tune.choice(["relu", "tanh", "gelu"]),
}

#: A configuration off the Sobol arms (its lr is not drawn) and one in their grid.
POINT = {"lr": 10**-2.5, "width": 0.7, "depth": 3, "act": "tanh"}
