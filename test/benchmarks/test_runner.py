from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from benchmarks import methods
from benchmarks.methods import (
    BenchmarkMethod,
    PolicyConfig,
    register_method,
)
from benchmarks.policies.baselines import Uniform
from benchmarks.problems import make_synthetic_problem
from benchmarks.runner import (
    RunStore,
    environment_metadata,
    run_benchmark,
    run_fingerprint,
    run_policy,
)


class Scripted:
    r"""Plays arms 0, 1, 2, ... in batches of ``size``; records what it was told.
    Every build is kept in :attr:`built` (the measured run's is the last)."""

    built: list[Scripted] = []

    def __init__(self, problem, horizon, generator, *, size=3, chosen=None):
        self.problem, self.horizon = problem, horizon
        self.size = size
        self.fixed = chosen
        self.next = 0
        self.told = []
        self.first_draw = int(torch.randint(10**6, (1,), generator=generator))
        Scripted.built.append(self)

    def ask(self, max_arms=None):
        if self.fixed is not None:
            return self.fixed
        if not self.problem.is_finite:
            return torch.full((self.size, self.problem.dim), 0.5, dtype=torch.float64)
        batch = torch.arange(self.next, self.next + self.size)
        self.next += self.size
        return batch

    def tell(self, chosen, rewards):
        self.told.append((chosen.clone(), rewards.clone()))

    def diagnostics(self):
        return {"told": float(len(self.told))}


@pytest.fixture(autouse=True)
def fake_registry(monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))
    register_method(BenchmarkMethod("scripted", "test", Scripted, box=True))
    register_method(BenchmarkMethod("scripted-finite", "test", Scripted))
    Scripted.built = []


def scripted(name="scripted", **options):
    return PolicyConfig(name, options=options)


@pytest.fixture(scope="module")
def problem():
    return make_synthetic_problem("ackley", dim=2, num_arms=40, noise_std=0.5)


def test_exact_horizon_truncation_and_records(problem):
    trace = run_policy(problem, scripted(size=3), horizon=10, seed=1, progress=False)
    policy = Scripted.built[-1]
    assert trace.horizon == 10 and trace.policy == "scripted"
    assert [len(c) for c, _ in policy.told] == [3, 3, 3, 1]  # last batch truncated
    assert torch.cat([c for c, _ in policy.told]).tolist() == list(range(10))
    np.testing.assert_allclose(trace.values, problem.arm_values[:10].numpy())
    assert trace.batch_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert trace.curve("batch_size").tolist() == [3] * 9 + [1]
    assert trace.diagnostics["told"].tolist() == [1] * 3 + [2] * 3 + [3] * 3 + [4]
    assert (trace.ask_seconds[[1, 2, 4, 5, 7, 8]] == 0).all()
    assert (trace.tell_seconds[[0, 1, 3, 4, 6, 7]] == 0).all()
    assert trace.setup_seconds >= 0 and trace.memory_method
    assert trace.uniform_regret == pytest.approx(
        problem.optimum - float(problem.arm_values.mean())
    )


def test_noise_and_seeds(problem):
    config = scripted(size=40, chosen=torch.arange(40))
    run_policy(problem, config, horizon=4000, seed=3, progress=False)
    policy = Scripted.built[-1]
    noise = torch.cat([r - problem.arm_values[c] for c, r in policy.told])
    assert abs(noise.mean().item()) < 0.03 and abs(noise.std().item() - 0.5) < 0.02
    run_policy(problem, config, horizon=4000, seed=3, progress=False)
    again = Scripted.built[-1]
    run_policy(problem, config, horizon=4000, seed=4, progress=False)
    other = Scripted.built[-1]
    # Same seed: same rewards and policy randomness; another seed: different ones.
    assert torch.equal(policy.told[5][1], again.told[5][1])
    assert policy.first_draw == again.first_draw != other.first_draw
    assert not torch.equal(policy.told[5][1], other.told[5][1])


def test_warm_up_rounds_do_not_change_the_run(problem):
    run_policy(problem, scripted(size=3), horizon=10, progress=False, warm_up_steps=2)
    # the warm-up's build, then the measured run's
    assert [policy.horizon for policy in Scripted.built] == [10, 10]
    assert len(Scripted.built[0].told) == 2
    told = Scripted.built[-1].told
    assert torch.cat([c for c, _ in told]).tolist() == list(range(10))
    runs = [
        run_policy(problem, "uniform", 20, seed=2, progress=False, **options)
        for options in ({"warm_up_steps": 0}, {"warm_up_steps": 3})
    ]
    np.testing.assert_array_equal(runs[0].values, runs[1].values)
    with pytest.raises(ValueError, match="warm_up_steps"):
        run_policy(problem, scripted(), 5, progress=False, warm_up_steps=-1)


def test_box_problem_uses_the_objective():
    box = make_synthetic_problem("branin")
    trace = run_policy(box, scripted(size=2), horizon=3, progress=False)
    centre = box.objective(torch.full((1, 2), 0.5, dtype=torch.float64)).item()
    np.testing.assert_allclose(trace.values, [centre] * 3)


@pytest.mark.parametrize(
    "chosen, match",
    [
        (torch.tensor([0, 40]), "outside"),
        (torch.tensor([[0, 1]]), "1-d LongTensor"),
        (torch.tensor([0.0]), "LongTensor"),
        (torch.tensor([], dtype=torch.long), "non-empty"),
        ([0, 1], "tensor"),
    ],
)
def test_invalid_batches_raise(problem, chosen, match):
    with pytest.raises((ValueError, TypeError), match=match):
        run_policy(problem, scripted(chosen=chosen), 5, progress=False)


def test_invalid_box_points_and_arguments(problem):
    box = make_synthetic_problem("branin")
    outside = torch.tensor([[0.5, 1.5]], dtype=torch.float64)
    with pytest.raises(ValueError, match="bounds"):
        run_policy(box, scripted(chosen=outside), 5, progress=False)
    with pytest.raises(ValueError, match="b x 2"):
        run_policy(box, scripted(chosen=torch.zeros(1, 3)), 5, progress=False)
    with pytest.raises(ValueError, match="horizon"):
        run_policy(problem, scripted(), 0, progress=False)
    with pytest.raises(ValueError, match="seed"):
        run_policy(problem, scripted(), 5, seed=-1, progress=False)
    with pytest.raises(TypeError, match="horizon"):
        run_policy(problem, scripted(), True, progress=False)
    with pytest.raises(ValueError, match="box"):
        run_policy(box, scripted("scripted-finite"), 5, progress=False)


def test_run_benchmark_skips_with_notes(problem):
    box = make_synthetic_problem("branin")
    lines = []
    traces, notes = run_benchmark(
        [problem, box],
        [
            PolicyConfig("scripted", options={"size": 2}),
            PolicyConfig("exact-ucb"),
        ],
        horizon=6,
        seeds=[0, 1],
        progress=False,
        log=lines.append,
    )
    runs = [(t.problem, t.policy, t.seed) for t in traces]
    assert runs == [
        ("ackley2_40", "scripted", 0),
        ("ackley2_40", "scripted", 1),
        ("ackley2_40", "exact-ucb", 0),
        ("ackley2_40", "exact-ucb", 1),
        ("branin2", "scripted", 0),
        ("branin2", "scripted", 1),
    ]
    assert len(notes) == 1 and "exact-ucb on branin2 (no box support)" in notes[0]
    assert lines == [f"note: {note}" for note in notes]


def test_run_benchmark_validates_before_running(problem):
    with pytest.raises(ValueError, match="no option"):
        run_benchmark(
            [problem],
            [PolicyConfig("scripted"), PolicyConfig("uniform", options={"typo": 1})],
            horizon=3,
            seeds=[0],
            progress=False,
        )
    with pytest.raises(ValueError, match="unique"):
        run_benchmark(
            [problem],
            [PolicyConfig("uniform"), PolicyConfig("uniform")],
            horizon=3,
            seeds=[0],
            progress=False,
        )
    with pytest.raises(ValueError, match="seeds"):
        run_benchmark([problem], [PolicyConfig("uniform")], 3, [], progress=False)


class StoppingPolicy(Uniform):
    r"""Uniform play that raises KeyboardInterrupt at its ``stop_at``-th ask (counted
    over every instance), as a user's Ctrl-C would."""

    asks = 0
    stop_at = 0

    def ask(self, max_arms=None):
        StoppingPolicy.asks += 1
        if StoppingPolicy.asks == StoppingPolicy.stop_at:
            raise KeyboardInterrupt
        return super().ask(max_arms)


def _deterministic(trace):
    return (
        trace.problem,
        trace.policy,
        trace.seed,
        trace.values.tolist(),
        trace.batch_index.tolist(),
        {key: value.tolist() for key, value in trace.diagnostics.items()},
    )


def test_interrupted_benchmark_resumes_to_the_uninterrupted_result(problem, tmp_path):
    register_method(BenchmarkMethod("stopper", "test", StoppingPolicy))
    policies = [
        PolicyConfig("exact-bucb", options={"batch_size": 3}),
        PolicyConfig("stopper", options={"batch_size": 2}),
    ]
    arguments = ([problem], policies, 8, [0, 1])
    StoppingPolicy.asks, StoppingPolicy.stop_at = 0, -1
    reference, _ = run_benchmark(*arguments, progress=False)
    store = RunStore(tmp_path / "runs")
    finished = []
    # Warm-up (2 asks) + 4 batches of 2 per run: the 7th ask is the second stopper
    # run's first, after 3 finished runs.
    StoppingPolicy.asks, StoppingPolicy.stop_at = 0, 7
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(*arguments, progress=False, store=store, on_trace=finished.append)
    assert [(t.policy, t.seed) for t in finished] == [
        ("exact-bucb", 0),
        ("exact-bucb", 1),
        ("stopper", 0),
    ]
    assert len(store) == 3
    StoppingPolicy.asks, StoppingPolicy.stop_at = 0, -1
    lines = []
    resumed, notes = run_benchmark(
        *arguments,
        progress="log",
        log=lines.append,
        store=store,
        resume=True,
        environment={"matmul_gflops": 3.0},
    )
    assert [t.environment for t in resumed] == [{}] * 3 + [{"matmul_gflops": 3.0}]
    assert "resuming: 3 of 4 runs already done" in notes
    assert StoppingPolicy.asks == 6  # only the missing run ran
    done = [line for line in lines if line.startswith("run ")]
    assert len(done) == 1
    assert re.fullmatch(
        r"run 4/4 done: stopper \| ackley2_40 \| seed 1 \(\d+\.\d s\)", done[0]
    )
    assert [_deterministic(t) for t in resumed] == [
        _deterministic(t) for t in reference
    ]
    assert len(store) == 4


def test_run_store_checks_the_settings(problem, tmp_path):
    config = PolicyConfig("uniform", options={"batch_size": 2})
    trace = run_policy(problem, config, 6, seed=1, progress=False)
    fingerprint = run_fingerprint(problem, config, 6, trace.uniform_regret)
    store = RunStore(tmp_path)
    path = store.save(trace, fingerprint)
    assert path.name == "ackley2_40__uniform__seed1.json"
    assert not list(tmp_path.glob("*.partial"))
    loaded, why = store.load(problem.name, "uniform", 1, fingerprint)
    assert why is None and _deterministic(loaded) == _deterministic(trace)
    np.testing.assert_array_equal(loaded.ask_seconds, trace.ask_seconds)
    assert store.load(problem.name, "uniform", 2, fingerprint) == (None, None)
    changed = [
        run_fingerprint(problem, config.with_options({"batch_size": 3}), 6, 1.0),
        run_fingerprint(problem, config, 7, trace.uniform_regret),
    ]
    other = make_synthetic_problem("ackley", dim=2, num_arms=40, noise_std=0.5, seed=9)
    changed.append(run_fingerprint(other, config, 6, trace.uniform_regret))
    for mismatch in changed:
        assert mismatch != fingerprint
        loaded, why = store.load(problem.name, "uniform", 1, mismatch)
        assert loaded is None and "other settings" in why
    path.write_text("{not json")
    loaded, why = store.load(problem.name, "uniform", 1, fingerprint)
    assert loaded is None and "unreadable" in why


def test_log_progress_lines(problem):
    lines = []
    run_policy(problem, "uniform", 5, progress="log", log=lines.append, log_every=0.0)
    assert lines[0].startswith("  uniform | ackley2_40 | seed 0: t = 1/5 (")
    assert len(lines) == 4  # t = 1..4; none at the end
    with pytest.raises(ValueError, match="progress"):
        run_policy(problem, "uniform", 5, progress="bars")


def test_environment_metadata():
    metadata = environment_metadata(torch.float64)
    assert metadata["matmul_gflops"] > 0 and metadata["dtype"] == "float64"
    assert metadata["torch_threads"] == torch.get_num_threads()
