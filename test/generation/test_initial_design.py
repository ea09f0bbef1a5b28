r"""The space-filling initial design over an arm set."""

from __future__ import annotations

import pytest
import torch
from torch.quasirandom import SobolEngine

from botorch_sketch.generation.initial_design import space_filling_arms


def test_design_is_the_nearest_distinct_arm_of_each_sobol_point():
    generator = torch.Generator().manual_seed(0)
    arms = torch.rand(500, 2, generator=generator, dtype=torch.float64)
    design = space_filling_arms(arms, 8, torch.Generator().manual_seed(3))
    seed = int(
        torch.randint(2**31 - 1, (1,), generator=torch.Generator().manual_seed(3))
    )
    targets = SobolEngine(2, scramble=True, seed=seed).draw(8).double()
    taken: list[int] = []
    for target in targets:  # brute force
        order = (arms - target).square().sum(-1).argsort().tolist()
        taken.append(next(i for i in order if i not in taken))
    assert design.tolist() == taken


def test_no_design_draws_nothing_and_bad_counts_raise():
    arms = torch.rand(5, 2, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    assert space_filling_arms(arms, 0, generator).numel() == 0
    assert torch.equal(generator.get_state(), state)
    assert sorted(space_filling_arms(arms, 5, generator).tolist()) == list(range(5))
    with pytest.raises(ValueError, match="count"):
        space_filling_arms(arms, 6, generator)
