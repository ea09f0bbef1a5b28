r"""The trade-off plot: its points by hand, what it leaves out."""

import numpy as np

from botorch_sketch.benchmarks.cluster.figures import plot_tradeoff

from .helpers import make_trace


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
