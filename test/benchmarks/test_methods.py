r"""The benchmark methods as records (:mod:`benchmarks.methods`):
the registry, options, BBKB/BKB and GP-ThreDS built on the library loops."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks import methods
from benchmarks.methods import (
    METHODS,
    BenchmarkMethod,
    PerHorizon,
    PolicyConfig,
    build_bbkb,
    get_method,
    parse_option,
    parse_value,
    register_method,
)
from benchmarks.policies.baselines import ExactBUCB, Uniform
from benchmarks.policies.common import (
    KernelHyperparameters,
    draw_seed,
)
from benchmarks.problems import Problem
from botorch_sketch.generation.bbkb_loop import BBKB

DTYPE = torch.float64


def make_problem(num_arms=400, d=2):
    arms = torch.rand(
        num_arms, d, generator=torch.Generator().manual_seed(0), dtype=DTYPE
    )

    def objective(X):
        return -((X - 0.3) ** 2).sum(-1)

    values = objective(arms)
    return Problem(
        name="bowl",
        bounds=torch.tensor([[0.0] * d, [1.0] * d], dtype=DTYPE),
        objective=objective,
        noise_std=0.01,
        optimum=float(values.max()),
        arms=arms,
        arm_values=values,
        hyperparameters={"lengthscale": 0.3, "outputscale": 1.0, "noise": 1.0},
    )


def make_box(problem):
    return dataclasses.replace(problem, name="box", arms=None, arm_values=None)


def drive(optimizer, problem, evaluations, seed=0):
    r"""Run ``optimizer`` as the runner does (asks capped by the horizon left)."""
    noise = torch.Generator().manual_seed(seed + 1)
    pulled = []
    while (done := sum(p.numel() for p in pulled)) < evaluations:
        chosen = optimizer.ask(evaluations - done)[: evaluations - done]
        rewards = problem.arm_values[chosen] + problem.noise_std * torch.randn(
            chosen.shape[0], generator=noise, dtype=DTYPE
        )
        optimizer.tell(chosen, rewards)
        pulled.append(chosen)
    return torch.cat(pulled)


def build(name, problem, horizon, seed=0, **options):
    return METHODS[name](
        problem, horizon, torch.Generator().manual_seed(seed), **options
    )


def test_all_issue_names_are_registered_as_records():
    expected = {
        "bbkb",
        "bkb",
        "exact-ucb",
        "exact-bucb",
        "uniform",
        "epsilon-greedy",
        "sgpts",
        "exact-gpts",
        "sgpts-cached",
        "exact-gpts-incremental",
        "gp-threds",
        "igp-ucb-incremental",
    }
    assert set(METHODS) == expected
    for name, method in METHODS.items():
        assert isinstance(method, BenchmarkMethod) and method.name == name
        assert method.finite or method.box
    assert METHODS["uniform"].box and METHODS["uniform"].finite
    assert not METHODS["gp-threds"].finite and not METHODS["bbkb"].box


def test_options_are_the_builders_keywords_less_the_fixed_ones():
    assert METHODS["exact-bucb"].options()["max_variance_ratio"] == 2.0
    assert METHODS["uniform"].options() == {"batch_size": 1}
    bkb = METHODS["bkb"].options()
    assert "bayes_radius" in bkb and "qbar" in bkb
    assert not {"ratio_threshold", "rule", "max_batch_size"} & set(bkb)
    problem = make_problem(num_arms=50)
    bucb = build("exact-bucb", problem, 10, bayes_radius=2.0, batch_size=4)
    assert isinstance(bucb, ExactBUCB) and bucb.batch_size == 4
    with pytest.raises(
        ValueError, match=r"no option\(s\) \['bayes_radius'\].*accepted"
    ):
        build("uniform", problem, 10, bayes_radius=1.0)
    with pytest.raises(ValueError, match="ratio_threshold"):
        build("bkb", problem, 10, ratio_threshold=2.0)
    with pytest.raises(ValueError, match="Unknown policy"):
        get_method("nope")


def test_register_method(monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(METHODS))
    record = BenchmarkMethod("mine", "uniform twice", Uniform, box=True)
    register_method(record)
    assert methods.METHODS["mine"] is record and "mine" not in METHODS
    with pytest.raises(ValueError, match="name"):
        BenchmarkMethod("a,b", "x", Uniform)
    with pytest.raises(TypeError):
        register_method(Uniform)


def test_parse_value_and_option():
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("0.5") == 0.5 and parse_value("1e-4") == 1e-4
    assert parse_value("true") is True and parse_value("None") is None
    assert parse_value("0.5,1.2") == (0.5, 1.2)
    assert parse_value("theory") == "theory"
    assert parse_option("bayes_radius=2") == (None, "bayes_radius", 2)
    assert parse_option("bbkb:rule=local") == ("bbkb", "rule", "local")
    with pytest.raises(ValueError, match="key=value"):
        parse_option("bayes_radius")
    with pytest.raises(ValueError, match="option name"):
        parse_option("bbkb:1x=2")


def test_policy_config_resolves_per_horizon_values():
    config = PolicyConfig(
        "exact-ucb", options={"delta": PerHorizon(lambda T: 1 / T, "1/T")}
    )
    assert config.label == "exact-ucb" and config.method is METHODS["exact-ucb"]
    assert config.resolved_options(200) == {"delta": 0.005}
    assert str(config.options["delta"]) == "1/T"
    updated = config.with_options({"bayes_radius": "srinivas"})
    assert updated.resolved_options(10) == {"delta": 0.1, "bayes_radius": "srinivas"}
    assert config.options.keys() == {"delta"}  # unchanged
    problem = make_problem(num_arms=50)
    ucb = updated.build(problem, 10, torch.Generator())
    expected = (2 * torch.log(torch.tensor(50 * torch.pi**2 / (6 * 0.1)))).sqrt()
    assert ucb.schedule(1) == pytest.approx(float(expected))
    with pytest.raises(ValueError, match="Unknown policy"):
        PolicyConfig("nope")


def test_draw_seed_is_one_draw_from_the_generator():
    generator = torch.Generator().manual_seed(3)
    expected = int(torch.randint(2**31 - 1, (1,), generator=generator))
    assert draw_seed(torch.Generator().manual_seed(3)) == expected


def test_bbkb_method_is_the_loop_built_by_hand():
    r"""The ``bbkb`` record builds the BBKB loop on the problem's kernel."""
    problem = make_problem(num_arms=200)
    optimizer = build("bbkb", problem, 30, seed=5, bayes_radius=1.0)
    assert isinstance(optimizer, BBKB)
    hp = KernelHyperparameters.from_problem(problem)
    loop = BBKB(
        problem.arms,
        covar_module=hp.kernel(dtype=problem.arms.dtype),
        noise=hp.noise,
        radius=hp.noise**0.5,
        seed=draw_seed(torch.Generator().manual_seed(5)),
        ratio_threshold=2.0,
    )
    assert torch.equal(drive(optimizer, problem, 30), drive(loop, problem, 30))
    assert optimizer.diagnostics() == loop.diagnostics()


def test_bkb_equals_bbkb_with_ratio_one():
    problem = make_problem()
    a = drive(build("bkb", problem, 25, bayes_radius=1.0), problem, 25)
    b = drive(
        build("bbkb", problem, 25, bayes_radius=1.0, ratio_threshold=1.0), problem, 25
    )
    assert torch.equal(a, b)


@pytest.mark.parametrize("bayes_radius", [0.5, "theory"])
def test_bbkb_pulls_exactly_the_horizon_and_learns(bayes_radius):
    problem = make_problem()
    loop = build("bbkb", problem, 300, bayes_radius=bayes_radius, ratio_threshold=4.0)
    pulled = drive(loop, problem, 300)
    assert pulled.shape == (300,)
    diagnostics = loop.diagnostics()
    assert diagnostics["dictionary_size"] >= 1
    if bayes_radius == "theory":
        # Theorem 2 with lambda = 1, F = 1: (1 + sqrt 2) dominates; it over-explores
        assert diagnostics["radius"] > 1 + 2**0.5
        return
    regret = problem.optimum - problem.arm_values[pulled[-50:]].mean()
    uniform = problem.optimum - problem.arm_values.mean()
    assert regret < 0.5 * uniform


@pytest.mark.parametrize("name", ["bbkb", "gp-threds"])
def test_rejected_problem_leaves_the_generator_untouched(name):
    finite = make_problem(num_arms=20)
    wrong = make_box(finite) if name == "bbkb" else finite
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    with pytest.raises(ValueError, match="finite|box"):
        METHODS[name](wrong, 10, generator)
    with pytest.raises(ValueError, match="finite|box"):
        METHODS[name].build(wrong, 10, generator)
    assert torch.equal(generator.get_state(), state)


def test_bad_radius_fails_when_built():
    with pytest.raises(ValueError, match="bayes_radius"):
        build_bbkb(make_problem(num_arms=20), 10, torch.Generator(), bayes_radius=-1.0)


def test_end_fraction_reaches_the_loop():
    # a full batch with one arm done: the default loop ends it and asks on; with
    # end_fraction = 1 the loop waits for the whole batch; a bad value fails when
    # built, naming the option
    problem = make_problem()
    asks = []
    for fraction in (0.0, 1.0):
        loop = build(
            "bbkb",
            problem,
            40,
            bayes_radius=0.5,
            ratio_threshold=4.0,
            end_fraction=fraction,
        )
        drive(loop, problem, 20)
        assert loop.options.end_fraction == fraction
        batch = loop.ask()
        assert batch.numel() >= 2 and loop.ask().numel() == 0
        loop.tell(batch[:1], problem.arm_values[batch[:1]])
        asks.append(loop.ask().numel())
    assert asks[0] >= 1 and asks[1] == 0
    for bad, error in ((1.5, ValueError), ("0.1", TypeError)):
        with pytest.raises(error, match="end_fraction"):  # checked when built
            build("bbkb", problem, 20, end_fraction=bad)


def test_bbkb_cache_dtype_option():
    problem = make_problem(num_arms=50)
    loop = build("bbkb", problem, 10, cache_dtype="float32")
    assert loop.options.cache_dtype == torch.float32
    assert build("bbkb", problem, 10, cache_dtype="float64").options.cache_dtype == (
        torch.float64
    )
    assert build("bbkb", problem, 10).options.cache_dtype is None
    with pytest.raises(ValueError, match="cache_dtype"):
        build("bbkb", problem, 10, cache_dtype="single")
