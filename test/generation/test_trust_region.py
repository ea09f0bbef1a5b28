r"""The trust region around the incumbent: its side against a hand-worked
sequence of successes and failures, and its candidates against the box."""

import pytest
import torch

from botorch_sketch.generation.trust_region import (
    INITIAL_LENGTH,
    MAX_LENGTH,
    MIN_IMPROVEMENT,
    MIN_LENGTH,
    SUCCESS_TOLERANCE,
    TrustRegion,
)

DTYPE = torch.float64


def rewards(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=DTYPE)


def test_the_first_rewards_only_set_the_best():
    region = TrustRegion(3)
    region.observe(rewards(1.0, 5.0, 2.0), spread=1.0)
    assert region.best == 5.0
    assert (region.successes, region.failures, region.length) == (0, 0, 0.8)


def test_improvements_in_a_row_double_the_side_up_to_its_largest():
    region = TrustRegion(2)
    region.observe(rewards(0.0), spread=1.0)
    for step in range(1, 3 * SUCCESS_TOLERANCE + 1):
        region.observe(rewards(float(step)), spread=1.0)
    # 0.8 -> 1.6 after three, then capped
    assert region.length == MAX_LENGTH == 2 * INITIAL_LENGTH
    assert region.best == 3.0 * SUCCESS_TOLERANCE


def test_an_improvement_must_exceed_a_fraction_of_the_spread():
    region = TrustRegion(2)
    region.observe(rewards(1.0), spread=1.0)
    region.observe(rewards(1.0 + 0.5 * MIN_IMPROVEMENT), spread=1.0)
    assert (region.successes, region.failures) == (0, 1)
    region.observe(rewards(1.0 + 2 * MIN_IMPROVEMENT), spread=1.0)
    assert (region.successes, region.failures) == (1, 0)


def test_failures_halve_the_side_and_a_side_below_the_floor_restarts():
    dim = 6  # max(4, d) = 6 failures a halving
    region = TrustRegion(dim)
    region.observe(rewards(0.0), spread=1.0)
    region.observe(rewards(-1.0, -2.0, -3.0, -4.0, -5.0), spread=1.0)
    assert (region.failures, region.length) == (5, INITIAL_LENGTH)
    region.observe(rewards(-1.0), spread=1.0)  # a batch counts each trial
    assert (region.failures, region.length) == (0, INITIAL_LENGTH / 2)
    halvings = 1
    while INITIAL_LENGTH / 2**halvings >= MIN_LENGTH:
        for _ in range(dim):
            region.observe(rewards(-1.0), spread=1.0)
        halvings += 1
    # 0.8 / 2^7 < 2^-7: the seventh halving restarts the side
    assert halvings == 7
    assert (region.length, region.restarts) == (INITIAL_LENGTH, 1)
    assert region.best == 0.0


def test_the_side_is_the_same_in_any_units_of_the_rewards():
    torch.manual_seed(0)
    values = torch.randn(200, dtype=DTYPE).cumsum(0)

    def lengths(scale: float, offset: float) -> list[float]:
        region, out = TrustRegion(4), []
        scaled = scale * values + offset
        for t in range(len(values)):
            spread = float(scaled[: t + 1].std()) if t else 0.0
            region.observe(scaled[t : t + 1], spread)
            out.append(region.length)
        return out

    assert lengths(1.0, 0.0) == lengths(1000.0, 300.0) == lengths(1e-3, -5.0)
    assert len(set(lengths(1.0, 0.0))) > 2  # it moved


def test_candidates_lie_in_the_stretched_box_and_move_few_coordinates():
    dim = 40
    region = TrustRegion(dim)
    region.length = 0.2
    center = torch.full((dim,), 0.5, dtype=DTYPE)
    center[0] = 0.02  # its box is clipped at 0
    scales = torch.linspace(0.5, 2.0, dim, dtype=DTYPE)
    generator = torch.Generator().manual_seed(1)
    points = region.candidates(center, scales, 2000, generator)
    assert points.shape == (2000, dim) and points.dtype == DTYPE
    sides = 0.2 * scales / scales.log().mean().exp()
    low = (center - sides / 2).clamp(0, 1)
    high = (center + sides / 2).clamp(0, 1)
    assert bool(((points >= low) & (points <= high)).all())
    moved = points != center
    assert bool(moved.any(-1).all())  # at least one coordinate each
    # each coordinate moves with probability 20 / d = 1/2
    assert abs(float(moved.double().mean()) - 0.5) < 0.02
    again = region.candidates(center, scales, 2000, torch.Generator().manual_seed(1))
    assert torch.equal(points, again)


def test_in_few_dimensions_every_coordinate_moves():
    region = TrustRegion(3)
    center = torch.full((3,), 0.5, dtype=DTYPE)
    points = region.candidates(
        center, torch.ones(1, dtype=DTYPE), 500, torch.Generator().manual_seed(0)
    )
    assert bool((points != center).all())
    assert float((points - center).abs().max()) <= INITIAL_LENGTH / 2


def test_state_round_trip_and_bad_arguments():
    region = TrustRegion(5)
    region.observe(rewards(0.0), 1.0)
    region.observe(rewards(-1.0, -1.0), 1.0)
    copy = TrustRegion(5)
    copy.load_state_dict(region.state_dict())
    assert copy.state_dict() == region.state_dict()
    with pytest.raises(ValueError, match="dim"):
        TrustRegion(4).load_state_dict(region.state_dict())
    with pytest.raises(ValueError, match="length"):
        copy.load_state_dict({**region.state_dict(), "length": 5.0})
    with pytest.raises(ValueError, match="dim"):
        TrustRegion(0)
    g = torch.Generator().manual_seed(0)
    center = torch.full((5,), 0.5, dtype=DTYPE)
    with pytest.raises(ValueError, match="lengthscales"):
        region.candidates(center, torch.ones(3, dtype=DTYPE), 4, g)
    with pytest.raises(ValueError, match="lengthscales"):
        region.candidates(center, -torch.ones(5, dtype=DTYPE), 4, g)
    with pytest.raises(ValueError, match="count"):
        region.candidates(center, torch.ones(5, dtype=DTYPE), 0, g)
    with pytest.raises(ValueError, match="center"):
        region.candidates(center[:3], torch.ones(1, dtype=DTYPE), 4, g)
