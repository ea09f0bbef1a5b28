r"""The resumable BBKB ask/tell loop."""

from __future__ import annotations

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BBKB, TheoryRadius

DTYPE = torch.float64


def objective(X):
    return -((X - 0.4) ** 2).sum(-1)


def make_loop(arms, seed=0, beta=0.5):
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.5
    # without a horizon, batches of copies of a well-pulled arm grow geometrically
    return BBKB(
        arms, covar_module=kernel, noise=1.0, beta=beta, seed=seed, max_batch_size=64
    )


def run(loop, arms, steps, noise_gen):
    history = []
    for _ in range(steps):
        indices = loop.ask()
        noise = 0.01 * torch.randn(indices.shape[0], generator=noise_gen, dtype=DTYPE)
        loop.tell(indices, objective(arms[indices]) + noise)
        history.append(indices)
    return history


def test_loop_observes_everything_and_learns():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(500, 3, generator=gen, dtype=DTYPE)
    loop = make_loop(arms)
    history = run(loop, arms, 100, torch.Generator().manual_seed(1))
    pulled = torch.cat(history)
    assert loop.num_observations == pulled.shape[0]
    assert loop.model.train_inputs[0].shape[0] == pulled.shape[0]
    # with lambda = 1 learning is slow (exact GP-UCB is no better at t = 100), but
    # after 100 batches the pulls are far better than a uniform arm's
    assert objective(arms[pulled[-20:]]).mean() > objective(arms).mean() + 0.2


def test_save_and_load_resume_exactly():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    radius = TheoryRadius(
        noise_std=0.01, rkhs_bound=0.5, delta=0.1, noise=1.0, ratio_threshold=2.0
    )
    loop = make_loop(arms, beta=radius)
    run(loop, arms, 10, torch.Generator().manual_seed(1))
    state = loop.state_dict()
    continued = run(loop, arms, 8, torch.Generator().manual_seed(2))
    fresh_radius = TheoryRadius(
        noise_std=0.01, rkhs_bound=0.5, delta=0.1, noise=1.0, ratio_threshold=2.0
    )
    resumed = make_loop(arms, seed=123, beta=fresh_radius)
    resumed.load_state_dict(state)
    replayed = run(resumed, arms, 8, torch.Generator().manual_seed(2))
    for a, b in zip(continued, replayed, strict=True):
        assert torch.equal(a, b)
    assert fresh_radius.value == pytest.approx(radius.value)


def test_truncated_tell_and_protocol_errors():
    arms = torch.rand(100, 2, dtype=DTYPE)
    loop = make_loop(arms)
    with pytest.raises(RuntimeError, match="tell"):
        loop.tell(torch.tensor([0]), torch.zeros(1, dtype=DTYPE))
    first = loop.ask()
    with pytest.raises(RuntimeError, match="ask"):
        loop.ask()
    with pytest.raises(ValueError, match="rewards"):
        loop.tell(first, torch.tensor([float("nan")], dtype=DTYPE))
    with pytest.raises(ValueError, match="indices"):
        loop.tell(first + 1, torch.zeros(1, dtype=DTYPE))
    loop.tell(first, torch.zeros(1, dtype=DTYPE))
    assert loop.num_observations == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise": 0.0}, "noise"),
        ({"ratio_threshold": 0.9}, "ratio_threshold"),
        ({"rule": "any"}, "rule"),
        ({"qbar": 0.1}, "qbar"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BBKB(torch.rand(10, 2, dtype=DTYPE), **kwargs)
    with pytest.raises(ValueError, match="arms"):
        BBKB(torch.zeros(0, 2, dtype=DTYPE))
