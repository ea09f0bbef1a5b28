r"""Tune search spaces as arm sets: Sobol configurations against their domains by
hand, lists of configurations, points to evaluate, bad spaces and points."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.utils.extras import install_hint

pytest.importorskip("ray.tune", reason=install_hint("distributed"))

from ray import tune  # noqa: E402

from botorch_sketch.integrations.tune_space import ArmSpace  # noqa: E402

from .tune_spaces import POINT, SPACE  # noqa: E402


def test_arm_space_of_a_search_space():
    space = {**SPACE, "nested": {"k": 3, "z": tune.qrandint(0, 20, 5)}}
    arms = ArmSpace(space, num_arms=256, seed=0)
    unit = torch.quasirandom.SobolEngine(7, scramble=True, seed=0).draw(
        256, dtype=torch.float64
    )
    assert arms.features.shape == (arms.num_arms, 7) and arms.num_arms == 256 + 2
    for index in range(256):
        config, features, u = arms.config(index), arms.features[index], unit[index]
        assert set(config) == {"lr", "width", "depth", "act", "nested"}
        assert config["nested"]["k"] == 3
        # loguniform: exactly the Sobol coordinate, in log space
        expected_lr = math.exp(math.log(1e-4) + u[0].item() * math.log(1e3))
        assert config["lr"] == pytest.approx(expected_lr, rel=1e-12)
        assert features[0].item() == pytest.approx(u[0].item(), abs=1e-12)
        # quniform: the Sobol value rounded to a multiple of 0.05
        assert config["width"] == pytest.approx(round(u[1].item() / 0.05) * 0.05)
        assert features[1].item() == pytest.approx(config["width"])
        # randint: lower inclusive, upper exclusive
        assert config["depth"] == 1 + math.floor(5 * u[2].item())
        assert features[2].item() == pytest.approx((config["depth"] - 1) / 5)
        # choice: one coordinate per category, the largest Sobol coordinate wins
        category = int(u[3:6].argmax())
        assert config["act"] == ["relu", "tanh", "gelu"][category]
        assert features[3:6].tolist() == [float(c == category) for c in range(3)]
        # qrandint: an integer in [0, 20) rounded to a multiple of 5 (20 included)
        z = config["nested"]["z"]
        assert z == round(math.floor(20 * u[6].item()) / 5) * 5 and z in range(0, 21)
        assert isinstance(config["depth"], int) and isinstance(z, int)
    # then the arms of the end values: they span the features, so a loop's box
    # (the arms' bounding box) holds every configuration, the bounds included
    lowest, highest = arms.config(256), arms.config(257)
    nested = {"k": 3, "z": 0}
    assert lowest == {
        "lr": 1e-4,
        "width": 0.0,
        "depth": 1,
        "act": "relu",
        "nested": nested,
    }
    assert highest["lr"] == pytest.approx(1e-1, rel=1e-12)
    highest.pop("lr")
    nested = {"k": 3, "z": 20}
    assert highest == {"width": 1.0, "depth": 5, "act": "gelu", "nested": nested}
    numeric = arms.features[:, [0, 1, 2, 6]]  # the one-hot columns span [0, 1]
    assert torch.equal(numeric.min(0).values, numeric[256])
    assert torch.equal(numeric.max(0).values, numeric[257])


def test_discrete_spaces_drop_duplicates():
    arms = ArmSpace({"d": tune.randint(1, 6), "a": tune.choice("xyz")}, 500, seed=1)
    configs = [tuple(arms.config(i).values()) for i in range(arms.num_arms)]
    assert len(set(configs)) == arms.num_arms == 15
    assert not arms.continuous


def test_continuous_spaces_have_a_float_off_any_grid():
    assert ArmSpace(SPACE, 16, seed=0).continuous  # loguniform lr
    assert not ArmSpace({"w": tune.quniform(0.0, 1.0, 0.05)}, 16, seed=0).continuous
    assert not ArmSpace([{"lr": 0.1}, {"lr": 0.2}]).continuous


def test_arm_space_of_a_list_of_configurations():
    configs = [
        {"lr": 0.1, "opt": "adam", "sub": {"n": 2}},
        {"lr": 0.3, "opt": "sgd", "sub": {"n": 2}},
        {"lr": 0.2, "opt": "adam", "sub": {"n": 2}},
    ]
    arms = ArmSpace(configs)
    expected = [[0.0, 1.0, 0.0, 0.5], [1.0, 0.0, 1.0, 0.5], [0.5, 1.0, 0.0, 0.5]]
    assert torch.allclose(arms.features, torch.tensor(expected).double())
    assert [arms.config(i) for i in range(3)] == configs
    assert arms.config(0) is not arms.config(0)


@pytest.mark.parametrize(
    "space, error, match",
    [
        ({"a": tune.grid_search([1, 2])}, ValueError, "grid_search"),
        ({"a": tune.randn()}, ValueError, "a: only uniform"),
        ({"a": tune.sample_from(lambda _: 1)}, ValueError, "unsupported"),
        ({"a": 1}, ValueError, "no Tune domain"),
        ([{"a": 1}, {"b": 2}], ValueError, "same keys"),
        ("lr", TypeError, "space"),
        # invalid and degenerate domains, named by their key path
        ({"n": {"a": tune.uniform(1, 0)}}, ValueError, r"n/a: needs lower < upper"),
        ({"a": tune.uniform(0.5, 0.5)}, ValueError, r"a: .*\(a single value"),
        ({"a": tune.loguniform(1e-2, 1e-3)}, ValueError, "a: needs lower < upper"),
        ({"n": {"d": tune.randint(5, 1)}}, ValueError, r"n/d: .* \[lower, upper\)"),
        ({"d": tune.randint(5, 5)}, ValueError, "d: .* empty"),
        ({"d": tune.qrandint(8, 2, 2)}, ValueError, "d: .* empty"),
        ({"d": tune.lograndint(9, 3)}, ValueError, "d: .* empty"),
        (
            {"n": {"act": tune.choice([])}},
            ValueError,
            r"n/act: choice\(\[\]\) is empty",
        ),
    ],
)
def test_bad_spaces(space, error, match):
    with pytest.raises(error, match=match):
        ArmSpace(space)


def test_points_of_a_search_space_become_arms():
    base = ArmSpace(SPACE, num_arms=256, seed=0)
    arms = ArmSpace(SPACE, num_arms=256, seed=0, points_to_evaluate=[POINT])
    last = base.num_arms  # after the Sobol arms and the end values' two
    assert arms.point_indices == [last] and arms.num_arms == last + 1
    assert torch.equal(arms.features[:last], base.features)
    assert arms.config(last) == POINT and isinstance(arms.config(last)["depth"], int)
    expected = [1 / 2, 0.7, 2 / 5, 0.0, 1.0, 0.0]  # log-lr position, one-hot act
    assert arms.features[last].tolist() == pytest.approx(expected, abs=1e-12)
    # a point with the values of an arm is that arm; repeats are kept
    again = ArmSpace(
        SPACE, num_arms=256, seed=0, points_to_evaluate=[base.config(5), POINT, POINT]
    )
    assert again.point_indices == [5, last, last] and again.num_arms == last + 1
    nested = {"a": tune.uniform(0, 1), "sub": {"k": 3, "n": tune.randint(0, 4)}}
    point = {"a": 0.25, "sub": {"n": 3}}  # constants may be left out
    arms = ArmSpace(nested, num_arms=8, points_to_evaluate=[point])
    assert arms.config(arms.point_indices[0]) == {"a": 0.25, "sub": {"k": 3, "n": 3}}


def test_points_of_a_list_space_are_its_configurations():
    configs = [{"lr": 0.1, "opt": "adam"}, {"lr": 0.3, "opt": "sgd"}]
    arms = ArmSpace(configs, points_to_evaluate=[configs[1], configs[1]])
    assert arms.point_indices == [1, 1] and arms.num_arms == 2
    with pytest.raises(ValueError, match=r"points_to_evaluate`\[0\] is not"):
        ArmSpace(configs, points_to_evaluate=[{"lr": 0.2, "opt": "adam"}])


@pytest.mark.parametrize(
    "point, error, match",
    [
        (POINT | {"lr": 0.5}, ValueError, r"\[0\]: lr must lie in"),
        (POINT | {"lr": float("nan")}, ValueError, "lr must be a finite number"),
        (POINT | {"width": True}, ValueError, "width must be a finite number"),
        (POINT | {"depth": 6}, ValueError, r"depth must lie in \[1, 5\]"),
        (POINT | {"depth": 2.5}, ValueError, "depth must be an integer"),
        (POINT | {"act": "selu"}, ValueError, "act must be one of"),
        ({"lr": 1e-3}, ValueError, "missing"),
        (POINT | {"extra": 1}, ValueError, "unknown"),
    ],
)
def test_bad_points_to_evaluate(point, error, match):
    with pytest.raises(error, match=match):
        ArmSpace(SPACE, num_arms=16, points_to_evaluate=[point])


def test_points_must_keep_the_constants():
    with pytest.raises(ValueError, match="constant"):
        ArmSpace(
            {"a": tune.uniform(0, 1), "k": 3},
            4,
            points_to_evaluate=[{"a": 0.5, "k": 4}],
        )
