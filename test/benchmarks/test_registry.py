import pytest

from botorch_sketch.benchmarks import registry
from botorch_sketch.benchmarks.policies.baselines import ExactBUCBPolicy
from botorch_sketch.benchmarks.registry import (
    REGISTRY,
    PerHorizon,
    PolicyConfig,
    make_policy,
    parse_option,
    parse_value,
    policy_options,
    policy_status,
    register_policy,
)


def test_all_issue_names_are_registered():
    expected = {
        "bbkb",
        "bkb",
        "exact-ucb",
        "botorch-ucb",
        "exact-bucb",
        "uniform",
        "epsilon-greedy",
        "sgpts",
        "exact-gpts",
        "gp-threds",
        "igp-ucb",
    }
    assert expected <= set(REGISTRY)
    for name in ("exact-ucb", "botorch-ucb", "exact-bucb", "uniform", "epsilon-greedy"):
        assert policy_status(name) is None


def test_make_policy_with_options():
    policy = make_policy("exact-bucb", {"radius": 2.0, "batch_size": 4})
    assert isinstance(policy, ExactBUCBPolicy)
    assert policy.radius == 2.0 and policy.batch_size == 4
    assert policy_options("exact-bucb")["max_variance_ratio"] == 2.0
    with pytest.raises(ValueError, match=r"no option\(s\) \['radius'\].*accepted"):
        make_policy("uniform", {"radius": 1.0})
    with pytest.raises(ValueError, match="Unknown policy"):
        make_policy("nope")


def test_missing_modules_are_reported_not_raised(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", dict(REGISTRY))
    register_policy("ghost", "botorch_sketch.benchmarks.policies.ghost", "G", "x")
    register_policy("noattr", "botorch_sketch.benchmarks.policies.baselines", "G", "x")
    assert "does not exist" in policy_status("ghost")
    assert "has no G" in policy_status("noattr")
    with pytest.raises(registry.PolicyUnavailableError):
        make_policy("ghost")
    with pytest.raises(ValueError, match="name"):
        register_policy("a,b", "m", "A", "x")


def test_parse_value_and_option():
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("0.5") == 0.5 and parse_value("1e-4") == 1e-4
    assert parse_value("true") is True and parse_value("None") is None
    assert parse_value("0.5,1.2") == (0.5, 1.2)
    assert parse_value("theory") == "theory"
    assert parse_option("radius=2") == (None, "radius", 2)
    assert parse_option("bbkb:rule=local") == ("bbkb", "rule", "local")
    with pytest.raises(ValueError, match="key=value"):
        parse_option("radius")
    with pytest.raises(ValueError, match="option name"):
        parse_option("bbkb:1x=2")


def test_policy_config_resolves_per_horizon_values():
    config = PolicyConfig(
        "exact-ucb", options={"delta": PerHorizon(lambda T: 1 / T, "1/T")}
    )
    assert config.label == "exact-ucb"
    assert config.resolved_options(200) == {"delta": 0.005}
    assert str(config.options["delta"]) == "1/T"
    updated = config.with_options({"radius": 3.0})
    assert updated.resolved_options(10) == {"delta": 0.1, "radius": 3.0}
    assert config.options.keys() == {"delta"}  # unchanged
    assert updated.build(10).delta == 0.1
    with pytest.raises(ValueError, match="Unknown policy"):
        PolicyConfig("nope")
