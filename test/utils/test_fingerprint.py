r"""Fingerprints of a loop's problem: digests equal exactly for equal tensors."""

import pytest
import torch

from botorch_sketch.utils.fingerprint import (
    check_fingerprint,
    problem_fingerprint,
    tensor_digest,
)

from ..gp_helpers import rbf_kernel


def test_digest_tells_values_dtypes_and_shapes_apart():
    x = torch.arange(6, dtype=torch.float64)
    assert tensor_digest(x) == tensor_digest(x.clone())
    assert tensor_digest(x[::2]) == tensor_digest(x[::2].contiguous())
    for other in (x.float(), x.reshape(2, 3), x + 1e-12, x.flip(0)):
        assert tensor_digest(other) != tensor_digest(x)
    assert tensor_digest(x.bfloat16()) != tensor_digest(x.half())


def test_check_names_the_differing_entries():
    arms = torch.rand(5, 2, dtype=torch.float64)
    kernel = rbf_kernel(0.3, 1.0)
    saved = problem_fingerprint(arms, kernel, learned=False, noise=0.1)
    check_fingerprint(dict(saved), saved)
    other = problem_fingerprint(arms, rbf_kernel(0.4, 1.0), learned=False, noise=0.2)
    with pytest.raises(ValueError, match=r"differs in \['covar_module', 'noise'\]"):
        check_fingerprint(saved, other)
    learned = problem_fingerprint(arms, kernel, learned=True, noise=None)
    assert learned["covar_module"] == "learned"
    with pytest.raises(ValueError, match="fingerprint"):
        check_fingerprint(None, saved)
