r"""One batch on the continuous Hartmann-6 for both methods."""

import pytest

from benchmarks.thompson_steps.report import format_box_report
from benchmarks.thompson_steps.steps import time_box_batches


def test_box_batches_time_both_methods_on_the_same_points():
    results = time_box_batches(
        (6, 12),
        batch_size=2,
        num_inducing=4,
        num_features=32,
        raw_samples=64,
        num_restarts=2,
    )
    assert set(results) == {"sgpts", "exact-gpts"}
    for by_t in results.values():
        assert sorted(by_t) == [6, 12]
        for run in by_t.values():
            assert run["batch"] == pytest.approx(run["select"] + run["update"])
            assert run["select"] > 0
    report = format_box_report(results)
    assert "exact GP-TS / S-GP-TS batch time at t=12" in report
    with pytest.raises(ValueError, match="batch_size"):
        time_box_batches((6,), batch_size=0)
