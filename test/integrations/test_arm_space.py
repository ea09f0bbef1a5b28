r"""The arm set of a search space: adding values and finding arms, against a
brute-force search over the rows."""

import torch

from botorch_sketch.integrations.arm_space import (
    ChoiceDomain,
    DomainArms,
    NumericDomain,
)


def brute_index(values: torch.Tensor, row: torch.Tensor) -> int | None:
    for index in range(values.shape[0]):
        if bool((values[index] == row).all()):
            return index
    return None


def test_added_values_are_new_rows_once_each_and_found_again():
    arms = DomainArms(
        [NumericDomain("n", 0, 6, integer=True), ChoiceDomain("c", ["a", "b", "c"])],
        num_arms=8,
        seed=0,
    )
    generator = torch.Generator().manual_seed(0)
    for _ in range(6):
        values = torch.stack(
            [
                torch.randint(0, 6, (10,), generator=generator),
                torch.randint(0, 3, (10,), generator=generator),
            ],
            -1,
        ).double()
        before = arms.values.clone()
        expected = []
        for row in values:
            known = brute_index(before, row) is not None
            if not known and all(not torch.equal(row, e) for e in expected):
                expected.append(row)
        features = arms.add_values(values)
        new = arms.values[before.shape[0] :]
        assert new.shape[0] == features.shape[0] == len(expected)
        if expected:
            assert torch.equal(new, torch.stack(expected))
        assert torch.equal(features, arms.features_of(new))
        assert torch.unique(arms.values, dim=0).shape[0] == arms.num_arms
        for row in values:
            assert arms.index_of(row) == brute_index(arms.values, row)
    assert arms.index_of(torch.tensor([7.0, 0.0], dtype=torch.float64)) is None


def test_continuous_means_a_float_off_any_grid():
    def arms(*domains):
        return DomainArms(list(domains), num_arms=4, seed=0)

    choice, integer = (
        ChoiceDomain("c", ["a", "b"]),
        NumericDomain("n", 0, 6, integer=True),
    )
    assert arms(NumericDomain("x", 0.0, 1.0)).continuous
    assert arms(NumericDomain("x", 1e-3, 1.0, log=True), choice).continuous
    assert not arms(integer, choice).continuous
    assert not arms(NumericDomain("x", 0.0, 1.0, step=0.1), integer).continuous
