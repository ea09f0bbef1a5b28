r"""The shared argument checks: each accepts what it documents and raises
ValueError/TypeError naming the argument otherwise."""

import math

import pytest
import torch
from botorch.models.transforms import Log, Standardize
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.utils import validation as v

DTYPE = torch.float64


def test_tensor_dtype_and_finiteness():
    X = torch.rand(3, 2, dtype=DTYPE)
    assert v.check_matrix(X, "X") is X
    for bad, error in (
        ([[1.0]], TypeError),
        (X.long(), TypeError),
        (X.bool(), TypeError),
        (X[0], ValueError),
        (X[:0], ValueError),
        (X.index_fill(0, torch.tensor([1]), math.nan), ValueError),
    ):
        with pytest.raises(error, match="`X`"):
            v.check_matrix(bad, "X")
    for bad in ([[1.0]], X.numpy(), X.long()):  # the error names the conversion
        with pytest.raises(TypeError, match=r"`X`.*torch\.as_tensor\(x, dtype="):
            v.check_matrix(bad, "X")
    assert v.check_matrix(X[:0], "X", allow_empty=True).shape == (0, 2)
    with pytest.raises(ValueError, match="`X`.*3 columns"):
        v.check_matrix(X, "X", num_cols=3)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match="`X`.*float32 or float64"):
            v.check_model_dtype(X.to(dtype), "X")
    assert v.check_model_dtype(X.float(), "X").dtype == torch.float32
    with pytest.raises(TypeError, match="`Y`.*dtype of `X`"):
        v.check_same_dtype(X.float(), "Y", X, "X")


def test_points_and_magnitude():
    X = torch.rand(4, 3, 2, dtype=DTYPE)
    assert v.check_points(X, "X", 2) is X
    for bad in (X[0, 0], torch.rand(4, 3, dtype=DTYPE)):
        with pytest.raises(ValueError, match="`X`"):
            v.check_points(bad, "X", 2)
    limit64 = torch.finfo(torch.float64).max ** 0.25
    limit32 = torch.finfo(torch.float32).max ** 0.25
    v.check_magnitude(torch.tensor([limit64, -limit64], dtype=DTYPE), "X")
    with pytest.raises(ValueError, match="`X`"):
        v.check_magnitude(torch.tensor([0.0, -1.01 * limit64], dtype=DTYPE), "X")
    with pytest.raises(ValueError, match="`X`"):
        v.check_magnitude(torch.tensor([1.01 * limit32]), "X")
    assert 1e77 < limit64 < 1e78 and 4e9 < limit32 < 5e9


def test_numbers_flags_integers_indices():
    assert v.check_positive(2, "a") == 2.0 and v.check_at_least(0, "a", 0.0) == 0.0
    assert v.check_number(-3, "a") == -3.0
    for check in (
        lambda x: v.check_positive(x, "a"),
        lambda x: v.check_number(x, "a"),
        lambda x: v.check_int(x, "a", 0),
    ):
        for bad in (True, "1", None):
            with pytest.raises(TypeError, match="`a`"):
                check(bad)
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="`a`"):
            v.check_positive(bad, "a")
    with pytest.raises(TypeError, match="`a`"):
        v.check_int(1.0, "a", 0)
    with pytest.raises(ValueError, match="`a`.*>= 1"):
        v.check_int(0, "a", 1)
    assert v.check_int(5, "a", 1, 5) == 5
    with pytest.raises(ValueError, match="`a`.*<= 5"):
        v.check_int(6, "a", 1, 5)
    assert v.check_bool(False, "flag") is False
    for bad in (0, 1, "yes", None, torch.tensor(True)):
        with pytest.raises(TypeError, match="`flag`"):
            v.check_bool(bad, "flag")
    assert v.check_index(torch.tensor(2), "i", 3) == 2 and v.check_index(0, "i", 3) == 0
    for bad, error in ((3, ValueError), (-1, ValueError), (1.0, TypeError)):
        with pytest.raises(error, match="`i`"):
            v.check_index(bad, "i", 3)
    for bad in (True, torch.tensor(1.0), torch.tensor(True), torch.tensor([1])):
        with pytest.raises(TypeError, match="`i`"):
            v.check_index(bad, "i", 3)
    assert v.check_scalar(torch.tensor([0.5], dtype=DTYPE), "y") == 0.5
    with pytest.raises(ValueError, match="`y`"):
        v.check_scalar(torch.ones(2, dtype=DTYPE), "y")
    with pytest.raises(TypeError, match="`y`"):
        v.check_scalar("0.5", "y")


def test_generator_kernel_bounds():
    v.check_generator(None)
    v.check_generator(torch.Generator())
    for bad in (0, "seed", True):
        with pytest.raises(TypeError, match="`generator`"):
            v.check_generator(bad)
    kernel = ScaleKernel(RBFKernel())
    assert v.check_kernel(kernel) is kernel
    with pytest.raises(TypeError, match="`covar_module`"):
        v.check_kernel("rbf")
    with pytest.raises(ValueError, match="`kernel`.*batch shape"):
        v.check_kernel(RBFKernel(batch_shape=torch.Size([2])), "kernel")
    bounds = torch.tensor([[0.0, 1.0], [1.0, 2.0]], dtype=DTYPE)
    assert v.check_bounds(bounds) is bounds
    for bad in (bounds.flip(0), torch.zeros(3, 2, dtype=DTYPE), bounds.T.reshape(1, 4)):
        with pytest.raises(ValueError, match="`bounds`"):
            v.check_bounds(bad)


def test_fitted_outcome_transform_works_on_a_copy():
    Y = torch.tensor([[1.0], [2.0], [4.0]], dtype=DTYPE)
    transform = Standardize(1)
    untouched = {k: b.clone() for k, b in transform.state_dict().items()}
    fitted, Y_t, _ = v.fitted_outcome_transform(transform, Y, "Y", fit=True)
    assert fitted is not transform and not fitted.training
    # exact: (Y - mean) / std (unbiased)
    torch.testing.assert_close(Y_t, (Y - 7 / 3) / Y.std(), rtol=1e-14, atol=0)
    assert transform.training
    assert all(torch.equal(b, untouched[k]) for k, b in transform.state_dict().items())
    with pytest.raises(ValueError, match="`Y`"):
        v.fitted_outcome_transform(Log(), -Y, "Y", fit=True)
    with pytest.raises(ValueError, match="`Y`"):
        v.fitted_outcome_transform(Standardize(1), Y * 1e300, "Y", fit=True)
    # fit=None keeps the transform's own mode: an eval-mode copy is not re-fitted
    fitted_again, Y_again, _ = v.fitted_outcome_transform(fitted, 2 * Y, "Y", fit=None)
    torch.testing.assert_close(Y_again, (2 * Y - 7 / 3) / Y.std(), rtol=1e-14, atol=0)
    assert torch.equal(fitted_again.means, fitted.means)


def test_allocation_bound_is_half_the_device_memory():
    half = v.device_memory(torch.device("cpu")) // 2
    v.check_allocation(half // 8, "`n`")  # float64: exactly half is allowed
    with pytest.raises(ValueError, match="`n`"):
        v.check_allocation(half // 8 + 1, "`n`")
    like = torch.zeros(1, dtype=torch.float32)
    v.check_allocation(half // 4, "`n`", like)
    with pytest.raises(ValueError, match="`n` x `m`"):
        v.check_allocation(2**62, "`n` x `m`", like)


def test_index_tensors():
    indices = torch.tensor([0, 3, 3])
    assert v.check_indices(indices, "indices", 4) is indices
    assert v.check_indices(indices[:0], "indices", 4).numel() == 0
    for value, error in (
        ([0, 1], TypeError),
        (torch.tensor([0.0]), TypeError),
        (torch.tensor([[0]]), ValueError),
        (torch.tensor([4]), ValueError),
        (torch.tensor([-1]), ValueError),
    ):
        with pytest.raises(error, match="indices"):
            v.check_indices(value, "indices", 4)
