r"""Arms refined near the best ones, so that a loop on a finite sample of a
continuous space is not capped by that sample's precision: the best of ``A``
scrambled Sobol points lies ``O(A^{-1/d})`` from the optimum, a gap no number of
evaluations closes. New points are drawn around the best arms at distances set by
the learned lengthscales (from a fraction of one down to a thousandth: coarse
moves while the lengthscales are rough, fine ones once the optimum is close), and
added to the loop (``add_arms``) at each refit; the Ray Tune searchers do this for
their continuous parameters."""

from __future__ import annotations

import torch
from torch import Tensor

from botorch_sketch.utils.validation import check_generator, check_int, check_matrix

#: Perturbation scales, relative to the lengthscales, span ``10^-a`` for ``a`` in
#: this range (drawn uniformly per point).
SCALE_EXPONENTS = (0.3, 3.0)


def best_arms(observed: Tensor, rewards: Tensor, count: int) -> Tensor:
    r"""The ``count`` (or fewer) distinct observed arms of the highest mean reward.

    Args:
        observed: ``t`` arm indices (repeats allowed).
        rewards: Their ``t`` rewards.
        count: How many arms at most.

    Returns:
        A LongTensor of at most ``count`` distinct arm indices, best first.
    """
    check_int(count, "count", 1)
    arms, inverse = observed.unique(return_inverse=True)
    totals = rewards.new_zeros(arms.shape[0]).index_add_(0, inverse, rewards)
    counts = rewards.new_zeros(arms.shape[0]).index_add_(
        0, inverse, torch.ones_like(rewards)
    )
    order = (totals / counts).argsort(descending=True)
    return arms[order[:count]]


def refinement_points(
    centers: Tensor, lengthscales: Tensor, count: int, generator: torch.Generator
) -> Tensor:
    r"""``count`` points near ``centers`` in the unit cube: center ``i mod c`` plus
    Gaussian noise of standard deviation ``10^{-a} l`` per coordinate (``l`` the
    lengthscales, ``a`` uniform in :data:`SCALE_EXPONENTS` per point), clipped to
    the cube, ``O(count d)``.

    Args:
        centers: ``c x d`` points in the unit cube (e.g. the best arms').
        lengthscales: ``d`` (or ``1 x d``, or one) positive lengthscales in the
            cube's units.
        count: Points to draw.
        generator: The source of every draw (on the CPU).

    Returns:
        ``count x d`` points in ``[0, 1]^d``, in ``centers``' dtype and device.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> refinement_points(torch.full((1, 2), 0.5), torch.tensor([0.2, 0.3]), 4, g)
    """
    check_matrix(centers, "centers")
    check_int(count, "count", 1)
    check_generator(generator)
    lengthscales = lengthscales.detach().reshape(-1).to(centers)
    if not bool((lengthscales > 0).all()) or lengthscales.numel() not in (
        1,
        centers.shape[-1],
    ):
        raise ValueError(
            f"`lengthscales` must be one or {centers.shape[-1]} positive values."
        )
    low, high = SCALE_EXPONENTS
    exponents = low + (high - low) * torch.rand(count, 1, generator=generator)
    steps = torch.randn(count, centers.shape[-1], generator=generator)
    steps = (steps * 10.0 ** (-exponents)).to(centers) * lengthscales
    rows = torch.arange(count, device=centers.device) % centers.shape[0]
    return (centers[rows] + steps).clamp(0.0, 1.0)
