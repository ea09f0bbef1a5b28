r"""Refined arms: the best observed arms and points drawn near them."""

import pytest
import torch

from botorch_sketch.generation.refinement import (
    SCALE_EXPONENTS,
    best_arms,
    refinement_points,
)

DTYPE = torch.float64


def test_best_arms_rank_distinct_arms_by_mean_reward():
    observed = torch.tensor([4, 2, 4, 7, 2, 9])
    rewards = torch.tensor([1.0, 3.0, 5.0, 2.5, 1.0, -1.0], dtype=DTYPE)
    # means: 4 -> 3.0, 2 -> 2.0, 7 -> 2.5, 9 -> -1.0
    assert best_arms(observed, rewards, 3).tolist() == [4, 7, 2]
    assert best_arms(observed, rewards, 10).tolist() == [4, 7, 2, 9]


def test_points_stay_in_the_cube_near_their_centers_at_the_stated_scales():
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[0.2, 0.5, 0.9], [0.6, 0.6, 0.6]], dtype=DTYPE)
    lengthscales = torch.tensor([0.1, 0.2, 0.4], dtype=DTYPE)
    points = refinement_points(centers, lengthscales, 4000, g)
    assert points.shape == (4000, 3) and points.dtype == DTYPE
    assert bool(((points >= 0) & (points <= 1)).all())
    steps = (points - centers[torch.arange(4000) % 2]) / lengthscales
    # unclipped coordinates: Gaussian steps of scale 10^-a l, a in the range
    inside = ((points > 0) & (points < 1)).all(-1)
    largest = steps[inside].abs().max(-1).values
    assert float(largest.max()) < 6 * 10 ** -SCALE_EXPONENTS[0]
    assert float(largest.min()) < 10 ** -SCALE_EXPONENTS[1] * 3
    # each step is one scale for all its coordinates: ratios stay Gaussian-like
    again = refinement_points(
        centers, lengthscales, 4000, torch.Generator().manual_seed(0)
    )
    assert torch.equal(points, again)


def test_bad_arguments_name_themselves():
    g = torch.Generator().manual_seed(0)
    centers = torch.rand(2, 2, dtype=DTYPE)
    with pytest.raises(ValueError, match="lengthscales"):
        refinement_points(centers, torch.tensor([0.1, -0.1]), 3, g)
    with pytest.raises(ValueError, match="lengthscales"):
        refinement_points(centers, torch.tensor([0.1, 0.1, 0.1]), 3, g)
    with pytest.raises(ValueError, match="count"):
        refinement_points(centers, torch.tensor([0.1]), 0, g)
    with pytest.raises(ValueError, match="centers"):
        refinement_points(centers[:0], torch.tensor([0.1]), 3, g)
