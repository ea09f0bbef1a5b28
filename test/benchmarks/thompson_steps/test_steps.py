r"""Step timings: structure, observation counts, seeded repeats, ratios and the
flop counts of a step, by hand."""

import math
import re

import pytest
import torch

from benchmarks.policies.thompson import (
    CachedExactGPTS,
    CachedSGPTS,
)
from benchmarks.problems import make_sgpts_hartmann6
from benchmarks.thompson_steps.report import format_report
from benchmarks.thompson_steps.steps import (
    BASELINE_OF,
    METHODS,
    StepTimings,
    measure_thompson_steps,
    step_flops,
)
from botorch_sketch.sampling.arm_features import BLOCK_COLUMNS

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
    assert set(results["speedup"]) == set(BASELINE_OF)
    assert set(results["growth"]) == {"sgpts-cached"}
    assert results["settings"]["gemv_flops"] > 0
    assert results["settings"]["peak_rss_gib"] > 0
    for ratios in [
        *results["growth"].values(),
        *results["speedup"]["exact-gpts-incremental"].values(),
    ]:
        assert set(ratios) == {"median", "min"}
        assert all(math.isfinite(v) and v > 0 for v in ratios.values())


def test_each_step_starts_at_t_observations_and_picks_a_valid_arm(results):
    for name, runs in results["timings"].items():
        steps = TINY["exact_steps"] if name in BASELINE_OF else TINY["steps"]
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
    for run in results["timings"]["sgpts-cached"].values():
        assert 1 <= run.num_inducing <= TINY["num_inducing"]
    assert results["timings"]["exact-gpts-incremental"][30].num_inducing is None
    for name in METHODS:
        for run in results["timings"][name].values():
            assert run.memory_gib > 0 and run.flops > 0
    assert results["timings"]["sgpts-cached"][60].reselections >= 0


def test_ratios_are_the_quotients_of_the_timings(results):
    timings = results["timings"]
    cached, incremental = timings["sgpts-cached"], timings["exact-gpts-incremental"]
    assert results["growth"]["sgpts-cached"]["median"] == pytest.approx(
        cached[60].median_ms / cached[30].median_ms
    )
    assert results["speedup"]["exact-gpts-incremental"][30]["min"] == pytest.approx(
        incremental[30].min_ms / cached[30].min_ms
    )
    assert results["speedup"]["exact-gpts-incremental"][60]["median"] == (
        pytest.approx(incremental[60].median_ms / cached[60].median_ms)
    )


def test_seeded_choices_repeat_and_report_lists_every_run(results):
    again = measure_thompson_steps(**{**TINY, "ts": (30,), "steps": 2})
    for name in METHODS:
        first, second = results["timings"][name][30], again["timings"][name][30]
        assert second.chosen == first.chosen[:2]
    assert again["growth"] == {}
    report = format_report(results)
    for name, label in METHODS.items():
        for t in (30, 60):
            rows = re.findall(rf"^{re.escape(label)} +{t} ", report, re.MULTILINE)
            # timing (+ speed-up)
            assert len(rows) == (2 if name in BASELINE_OF else 1)
    assert "step(t=60) / step(t=30)" in report


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
        ({"methods": ["sgpts-cached", "ucb"]}, "`methods`"),
        ({"methods": ["exact-gpts"]}, "`methods`"),  # removed from-scratch reference
        ({"methods": []}, "`methods`"),
        ({"cache_dtype": "half"}, "`cache_dtype`"),
        ({"memory_budget_gib": 0}, "`memory_budget_gib`"),
    ],
)
def test_bad_arguments_raise(overrides, match):
    with pytest.raises(ValueError, match=match):
        measure_thompson_steps(**{**TINY, **overrides})


def test_step_flops_count_the_products_of_a_step():
    problem = make_sgpts_hartmann6(num_arms=300, seed=2)
    N, M, d = 300, 32, 6
    exact = CachedExactGPTS(
        problem, 10, torch.Generator().manual_seed(0), num_features=M
    )
    assert step_flops(exact) is None
    exact.tell(torch.tensor([1, 2, 2, 7]), torch.zeros(4, dtype=torch.float64))
    # 3 distinct arms in one stored block; t = 4 observations.
    c, t = BLOCK_COLUMNS, 4
    assert step_flops(exact) == 2 * N * (M + c) + 2 * t * M + 2 * t * t + t * t
    sparse = CachedSGPTS(
        problem,
        10,
        torch.Generator().manual_seed(0),
        num_inducing=2,
        num_features=M,
        memory_budget_gib=1e-9,
    )
    sparse.tell(torch.tensor([1, 50, 90]), torch.zeros(3, dtype=torch.float64))
    assert sparse.sampler.cache.features is None  # over budget: recomputed
    m = sparse.sampler.noise_size
    expected = 2 * N * (M + m) + 2 * N * m * d + 2 * m * M + 4 * m * m + m**3
    assert m == 2 and step_flops(sparse) == expected
