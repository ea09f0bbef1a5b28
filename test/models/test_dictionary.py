r"""Ridge-leverage-score dictionary sampling: inclusion probabilities by hand,
inclusion frequencies against the probabilities, the persistent draws' marginals and
churn, bad arguments."""

import pytest
import torch

from botorch_sketch.models.dictionary import inclusion_probabilities, sample_dictionary

from ..gp_helpers import assert_close


def test_inclusion_probabilities_by_hand(tkwargs):
    variances = torch.tensor([0.1, 0.3, 2.0, 0.05], **tkwargs)
    counts = torch.tensor([1.0, 2.0, 1.0, 3.0], **tkwargs)
    p = inclusion_probabilities(variances, counts, qbar=2.0)
    # min(1, qbar * count * variance)
    assert_close(p, torch.tensor([0.2, 1.0, 1.0, 0.3]))


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


def test_persistent_draws_keep_every_steps_marginals_and_churn_less():
    # a fixed sequence of probability vectors (independent of the draws): with one
    # persistent uniform per point, each step includes point i with probability p_i,
    # exactly as fresh draws do. The last point (p = 1) keeps the never-empty
    # fallback out of play. Each of the 4 x 6 random frequencies is checked at 4.5
    # binomial standard errors: a false alarm rate below 2e-4 for the test.
    gen = torch.Generator().manual_seed(11)
    steps = torch.tensor(
        [
            [0.9, 0.5, 0.2, 0.05, 0.7, 0.3, 1.0],
            [0.8, 0.6, 0.1, 0.05, 0.2, 0.35, 1.0],
            [0.7, 0.4, 0.3, 0.5, 0.2, 0.3, 1.0],
            [0.95, 0.3, 0.3, 0.02, 0.9, 0.25, 1.0],
        ],
        dtype=torch.float64,
    )
    runs = 4000
    hits = torch.zeros_like(steps)
    churn = {"coupled": 0, "independent": 0}
    for _ in range(runs):
        draws = torch.rand(steps.shape[1], generator=gen, dtype=torch.float64)
        previous = {"coupled": None, "independent": None}
        for t, p in enumerate(steps):
            coupled = set(sample_dictionary(p, draws=draws).tolist())
            fresh = set(sample_dictionary(p, gen).tolist())
            hits[t, list(coupled)] += 1
            for kind, now in (("coupled", coupled), ("independent", fresh)):
                if previous[kind] is not None:
                    churn[kind] += len(now ^ previous[kind])
                previous[kind] = now
    standard_error = (steps * (1 - steps) / runs).sqrt()
    assert ((hits / runs - steps).abs() <= 4.5 * standard_error).all()
    assert churn["coupled"] < 0.5 * churn["independent"]


def test_persistent_draws_shape_is_checked():
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    with pytest.raises(ValueError, match="draws"):
        sample_dictionary(p, draws=torch.rand(3, dtype=torch.float64))


def test_bad_sampling_arguments_are_named():
    # Issue 14 item 9: NaN probabilities gave an arbitrary "most probable" point.
    p = torch.tensor([0.2, 0.5], dtype=torch.float64)
    with pytest.raises(ValueError, match="`probabilities`"):
        sample_dictionary(torch.tensor([float("nan"), 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="`probabilities`"):
        sample_dictionary(p[:0])
    with pytest.raises(TypeError, match="`generator`"):
        sample_dictionary(p, 0)
    with pytest.raises(ValueError, match="`draws`"):
        sample_dictionary(p, draws=torch.tensor([0.5, 1.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="`qbar`"):
        inclusion_probabilities(p, torch.ones(2, dtype=torch.float64), qbar=0.5)
    with pytest.raises(ValueError, match="`counts`"):
        inclusion_probabilities(p, torch.ones(3, dtype=torch.float64), qbar=2.0)
    with pytest.raises(ValueError, match="`scaled_variances`"):
        inclusion_probabilities(-p, torch.ones(2, dtype=torch.float64), qbar=2.0)
