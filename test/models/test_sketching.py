r"""Leverage-score inclusion probabilities and Bernoulli dictionary draws."""

import torch

from botorch_sketch.models.sketching import inclusion_probabilities, sample_dictionary


def test_inclusion_probabilities_by_hand():
    variances = torch.tensor([0.1, 0.3, 2.0, 0.05], dtype=torch.float64)
    counts = torch.tensor([1.0, 2.0, 1.0, 3.0], dtype=torch.float64)
    p = inclusion_probabilities(variances, counts, qbar=2.0)
    # min(1, qbar * count * variance)
    expected = torch.tensor([0.2, 1.0, 1.0, 0.3], dtype=torch.float64)
    torch.testing.assert_close(p, expected)


def test_sample_dictionary_frequencies_and_seed():
    p = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    hits = torch.zeros(4, dtype=torch.float64)
    draws = 4000
    for _ in range(draws):
        hits[sample_dictionary(p, gen)] += 1
    # binomial standard error at most 0.008: a 0.04 tolerance is five of them
    torch.testing.assert_close(hits / draws, p, atol=0.04, rtol=0)
    a = sample_dictionary(p, torch.Generator().manual_seed(5))
    b = sample_dictionary(p, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_sample_dictionary_never_empty():
    p = torch.tensor([1e-12, 3e-12, 2e-12], dtype=torch.float64)
    selected = sample_dictionary(p, torch.Generator().manual_seed(0))
    assert selected.tolist() == [1]
