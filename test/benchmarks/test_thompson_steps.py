import math
import re

import pytest
import torch
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths

from botorch_sketch.benchmarks.problems import make_sgpts_hartmann6
from botorch_sketch.benchmarks.thompson_steps import (
    METHODS,
    BoTorchPathGPTSPolicy,
    StepTimings,
    format_report,
    main,
    measure_thompson_steps,
)

TINY = {
    "num_inducing": 10,
    "num_features": 64,
    "num_arms": 200,
    "ts": (60, 30),
    "steps": 3,
    "exact_steps": 2,
    "progress": False,
}


@pytest.fixture(scope="module")
def results():
    return measure_thompson_steps(**TINY)


def test_result_structure_and_settings(results):
    assert set(results) == {"settings", "timings", "growth", "speedup"}
    assert results["settings"]["ts"] == [30, 60]  # sorted
    assert list(results["timings"]) == list(METHODS)
    assert set(results["speedup"]) == {"exact-gpts", "exact-gpts-botorch"}
    for ratios in [results["growth"], *results["speedup"]["exact-gpts"].values()]:
        assert set(ratios) == {"median", "min"}
        assert all(math.isfinite(v) and v > 0 for v in ratios.values())


def test_each_step_starts_at_t_observations_and_picks_a_valid_arm(results):
    for name, runs in results["timings"].items():
        steps = TINY["steps"] if name == "sgpts" else TINY["exact_steps"]
        assert sorted(runs) == [30, 60]
        for t, run in runs.items():
            assert isinstance(run, StepTimings) and run.method == name and run.t == t
            # One observation is added per step: step k sees exactly t + k.
            assert run.observations == [t + k for k in range(steps)]
            assert len(run.chosen) == steps
            assert all(0 <= i < TINY["num_arms"] for i in run.chosen)
            seconds = run.select_seconds + run.update_seconds
            assert len(seconds) == 2 * steps and all(s > 0 for s in seconds)
            assert run.min_ms <= run.median_ms
    for run in results["timings"]["sgpts"].values():
        assert 1 <= run.num_inducing <= TINY["num_inducing"]
    assert results["timings"]["exact-gpts"][30].num_inducing is None


def test_ratios_are_the_quotients_of_the_timings(results):
    timings = results["timings"]
    sgpts, exact = timings["sgpts"], timings["exact-gpts-botorch"]
    assert results["growth"]["median"] == pytest.approx(
        sgpts[60].median_ms / sgpts[30].median_ms
    )
    assert results["speedup"]["exact-gpts-botorch"][30]["min"] == pytest.approx(
        exact[30].min_ms / sgpts[30].min_ms
    )


def test_seeded_choices_repeat_and_report_lists_every_run(results):
    again = measure_thompson_steps(**{**TINY, "ts": (30,), "steps": 2})
    for name in METHODS:
        first, second = results["timings"][name][30], again["timings"][name][30]
        assert second.chosen == first.chosen[:2]
    assert again["growth"] is None
    report = format_report(results)
    for name, label in METHODS.items():
        for t in (30, 60):
            rows = re.findall(rf"^{re.escape(label)} +{t} ", report, re.MULTILINE)
            assert len(rows) == (1 if name == "sgpts" else 2)  # timing (+ speed-up)
    assert "step(t=60) / step(t=30)" in report


def test_botorch_path_policy_returns_the_argmax_of_its_path():
    problem = make_sgpts_hartmann6(num_arms=50, seed=1)
    policy = BoTorchPathGPTSPolicy(num_features=32, chunk_size=7)
    policy.reset(problem, 10, torch.Generator().manual_seed(3))
    policy.tell(torch.arange(8), problem.arm_values[:8])
    twin = torch.Generator()
    twin.set_state(policy.generator.get_state())
    seed = int(torch.randint(2**62, (1,), generator=twin))
    chosen = policy.ask()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        path = draw_matheron_paths(
            policy.model,
            sample_shape=torch.Size([1]),
            prior_sampler=lambda model, sample_shape: draw_kernel_feature_paths(
                model, sample_shape, num_features=32
            ),
        )
        values = path(problem.arms)  # all arms at once, no chunks
    assert chosen.dtype == torch.long and chosen.shape == (1,)
    assert int(chosen) == int(values.argmax())


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"ts": ()}, "`ts`"),
        ({"ts": (2,)}, "`ts`"),  # leaves no room for the 2 warm-up steps
        ({"ts": (30, 30)}, "`ts`"),
        ({"steps": 0}, "`steps`"),
        ({"exact_steps": 0}, "`exact_steps`"),
        ({"warmup": -1}, "`warmup`"),
        ({"seed": -1}, "`seed`"),
        ({"num_features": 63}, "`num_features`"),
        ({"num_inducing": 0}, "`num_inducing`"),
        ({"inducing_quality": "best"}, "`inducing_quality`"),
        ({"num_arms": 0}, "`num_arms`"),
    ],
)
def test_bad_arguments_raise(overrides, match):
    with pytest.raises(ValueError, match=match):
        measure_thompson_steps(**{**TINY, **overrides})


def test_command_line_prints_the_table(capsys):
    threads = torch.get_num_threads()
    try:
        main(["--smoke", "--skip-exact", "--steps", "1", "--no-progress"])
        out = capsys.readouterr().out
        assert "S-GP-TS" in out and "median ms" in out and "N = 200 arms" in out
        assert "exact GP-TS" not in out
        with pytest.raises(SystemExit):
            main(["--smoke", "--features", "7"])
        assert "`num_features`" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            main(["--smoke", "--threads", "-1"])
    finally:
        torch.set_num_threads(threads)
