r"""The closed-form BKB-UCB against BoTorch's ``BKBUpperConfidenceBound`` on the
loop's ``NystromGP`` (values, autograd gradients), and its maximization against a
brute-force grid."""

import pytest
import torch
from gpytorch.kernels import MaternKernel, ScaleKernel

from botorch_sketch import BKBUpperConfidenceBound
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.hyperparameters import cube_coordinates
from botorch_sketch.generation.ucb_polish import ClosedFormUCB, maximize_ucb
from botorch_sketch.models.nystrom import NystromGP

DTYPE = torch.float64


def fitted_loop(d: int, steps: int = 30, seed: int = 0) -> BBKB:
    r"""A learned-kernel BBKB loop on 400 arms in ``[-2, 2]^d`` after ``steps``
    sequential evaluations of a smooth bump."""
    generator = torch.Generator().manual_seed(seed)
    arms = torch.rand(400, d, generator=generator, dtype=DTYPE) * 4 - 2
    loop = BBKB(arms, seed=seed)
    for _ in range(steps):
        index = loop.ask(1)
        x = loop.arms[index]
        loop.tell(index, torch.exp(-(x - 0.3).square().sum(-1)) + 0.3 * x[:, 0])
    assert loop.refits.last is not None
    return loop


@pytest.mark.parametrize("d", [1, 3])
def test_value_and_gradient_are_botorchs_acquisition(d):
    loop = fitted_loop(d)
    acquisition = BKBUpperConfidenceBound(loop.model, radius=loop.ucb_radius)
    points = torch.cat([loop.arms[:5], torch.rand(5, d, dtype=DTYPE) * 4 - 2])
    points.requires_grad_(True)
    reference = acquisition(points.unsqueeze(-2))
    reference.sum().backward()
    low, high = loop.box
    values, gradients = ClosedFormUCB(loop.model, loop.ucb_radius)(
        cube_coordinates(points.detach(), loop.box)
    )
    torch.testing.assert_close(values, reference.detach(), rtol=1e-10, atol=1e-12)
    # the closed form is in the cube's coordinates: d/du = d/dx (high - low)
    torch.testing.assert_close(
        gradients, points.grad * (high - low), rtol=1e-8, atol=1e-10
    )


def test_the_loops_ucb_scores_are_its_acquisition_on_its_arms():
    loop = fitted_loop(2)
    acquisition = BKBUpperConfidenceBound(loop.model, radius=loop.ucb_radius)
    on_arms = acquisition(loop.arms.unsqueeze(-2)).detach()
    # the loop's state and a model rebuilt from scratch agree to the drift of its
    # in-place batch ends (see test_bbkb_loop)
    torch.testing.assert_close(loop.ucb_scores(), on_arms, rtol=0.0, atol=0.05)


def test_maximization_reaches_the_grids_maximum_from_the_best_coarse_points():
    loop = fitted_loop(2, steps=25, seed=1)
    ucb = ClosedFormUCB(loop.model, loop.ucb_radius)
    axis = torch.linspace(0, 1, 301, dtype=DTYPE)
    fine = torch.cartesian_prod(axis, axis)
    best_on_grid = float(ucb(fine)[0].max())
    coarse = torch.cartesian_prod(axis[::30], axis[::30])
    starts = coarse[ucb(coarse)[0].topk(4).indices]
    found = maximize_ucb(ucb, starts, max_iterations=50)
    values = ucb(found)[0]
    assert bool(((found >= 0) & (found <= 1)).all())
    assert bool((values >= ucb(starts)[0]).all())  # each start only improves
    assert float(values.max()) >= best_on_grid - 1e-6


def test_bad_arguments_are_refused():
    loop = fitted_loop(1, steps=12)
    model = loop.model
    other = NystromGP(
        model.train_inputs[0],
        model.train_targets.unsqueeze(-1),
        covar_module=ScaleKernel(MaternKernel()).to(DTYPE),
        noise=0.1,
    )
    with pytest.raises(TypeError, match="ScaleKernel\\(RBFKernel\\)"):
        ClosedFormUCB(other, 1.0)
    ucb = ClosedFormUCB(model, loop.ucb_radius)
    with pytest.raises(ValueError, match="max_iterations"):
        maximize_ucb(ucb, loop.kernel_inputs[:2], 0)
