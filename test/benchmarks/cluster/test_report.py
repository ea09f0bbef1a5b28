r"""Regret ratios, times to reach a reference and the summary rows, by hand; the
trade-off plot's points and what it leaves out."""

import math

import numpy as np
import pytest

from benchmarks.cluster.report import (
    plot_tradeoff,
    summarize,
    time_to_find,
    time_to_reach,
    value_on_grid,
)

from .helpers import make_trace


def test_time_to_reach_and_summary():
    # regret ratios 2 * (1 - v) averaged: 1.0, 0.6, 0.6667, 0.5
    trace = make_trace([1, 2, 3, 4], [0.5, 0.9, 0.6, 1.0])
    np.testing.assert_allclose(trace.curve("regret_ratio"), [1.0, 0.6, 2 / 3, 0.5])
    assert time_to_reach(trace, 0.65) == 4.0  # dips at t=2, stays below from t=4
    assert time_to_reach(trace, 1.0) == 1.0
    assert time_to_reach(trace, 0.4) == math.inf
    reference = make_trace([2, 4, 6, 8], [0.65] * 4, method="bbkb-sync")  # ratio 0.7
    rows = summarize([trace, reference])
    mine = next(r for r in rows if r["method"] == "m")
    assert mine["time_to_reference"] == pytest.approx(2.0 / 8.0)  # <= 0.7 from t=2
    # simple regrets 0.5, 0.1, 0.1, 0: as good as the reference's 0.35 at t = 2
    assert time_to_find(trace, 0.1) == 2.0
    assert time_to_find(trace, 0.0) == 4.0
    assert time_to_find(trace, -0.1) == math.inf
    assert mine["time_to_reference_best"] == pytest.approx(2.0 / 8.0)
    # the reference's ratio at t = 4 (its 2nd completion); NaN before its first
    assert mine["reference_at_makespan"] == pytest.approx(0.7)
    ratio = reference.curve("regret_ratio")
    assert math.isnan(value_on_grid(reference, ratio, [1.0])[0])
    assert mine["utilization"] == pytest.approx(1 / (2 * 4))  # busy 1 of 2 x 4


def test_tradeoff_plot_needs_a_reference_and_names_what_it_leaves_out():
    reference = make_trace([2, 4], [0.9, 0.9], method="bbkb-sync")
    close = make_trace([1, 2], [0.9, 0.8], method="close", last_start=1.0)
    far = make_trace([1, 2], [0.0, 0.0], method="far")  # 10x the reference's regret
    assert plot_tradeoff([close, far]) is None  # no reference
    assert plot_tradeoff([reference, far]) is None  # nothing drawn
    figure = plot_tradeoff([reference, close, far])
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert texts == ["not drawn (above 2): far"]
    (points,) = figure.axes[0].collections
    # busy 1 of 2 workers until t = 1; regret ratios 0.3 / 0.2
    np.testing.assert_allclose(points.get_offsets(), [[0.5, 1.5]])
