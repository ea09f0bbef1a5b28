r"""A trace's file: saved and loaded, also from before ``last_start`` existed."""

import math

import numpy as np
import pytest

from botorch_sketch.benchmarks.cluster.simulation import simulate
from botorch_sketch.benchmarks.cluster.trace import load_trace, save_trace


def test_traces_saved_before_the_last_start_was_recorded_load(tmp_path, problem):
    trace = simulate(problem, "uniform", workers=2, horizon=5, duration_sigma=0.0)
    # constant durations: starts at 0, 0, 1, 1, 2; busy 4 of 2 x 2 until then
    assert trace.last_start == 2.0
    assert trace.summary()["utilization_until_last_start"] == pytest.approx(1.0)
    assert trace.summary()["utilization"] == pytest.approx(5 / 6)
    path = save_trace(trace, tmp_path)
    with np.load(path) as data:
        old = {key: data[key] for key in data.files if key != "last_start"}
    np.savez(path, **old)
    loaded = load_trace(path)
    np.testing.assert_array_equal(loaded.times, trace.times)
    assert math.isnan(loaded.summary()["utilization_until_last_start"])
