r"""Geometry of GP-ThreDS: the binary domain tree, sub-cubes and local test grids.

All boxes live in the unit cube ``[0, 1]^d`` and are stored as ``2 x d`` tensors
(lower and upper corners, BoTorch's ``bounds`` layout); a set of ``m`` boxes is an
``m x 2 x d`` tensor. The tree is never stored: a node's two children halve its longest
edge (ties: lowest coordinate index), so ``d`` successive splits of a cube of edge ``L``
give its ``2^d`` sub-cubes of edge ``L / 2`` (its *leaves*). In that order the leaf
index is the binary number whose most significant bit says whether the leaf lies in the
upper half of coordinate 0, the next bit coordinate 1, and so on. Corners are dyadic
rationals, so every comparison below is exact in floating point.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def split_boxes(boxes: Tensor) -> Tensor:
    r"""Split boxes into their two children in the domain tree.

    Each box is halved across its longest edge; ties go to the lowest coordinate index.

    Args:
        boxes: ``m x 2 x d`` boxes (lower and upper corners).

    Returns:
        ``m x 2 x 2 x d``: for each box, its lower child then its upper child.

    Example:
        >>> split_boxes(torch.tensor([[[0.0, 0.0], [1.0, 1.0]]]))[0]
        tensor([[[0.0, 0.0], [0.5, 1.0]], [[0.5, 0.0], [1.0, 1.0]]])
    """
    edges = boxes[:, 1] - boxes[:, 0]
    # argmax returns the first maximal index, i.e. the lowest coordinate on ties.
    axis = edges.argmax(dim=-1, keepdim=True)
    middle = 0.5 * (boxes[:, 0].gather(-1, axis) + boxes[:, 1].gather(-1, axis))
    lower_child, upper_child = boxes.clone(), boxes.clone()
    lower_child[:, 1].scatter_(-1, axis, middle)
    upper_child[:, 0].scatter_(-1, axis, middle)
    return torch.stack([lower_child, upper_child], dim=1)


def sub_cubes(cubes: Tensor) -> Tensor:
    r"""Return the ``2^d`` leaves of each cube: ``d`` successive tree splits.

    Args:
        cubes: ``m x 2 x d`` cubes (all edges of a cube equal).

    Returns:
        ``m x 2^d x 2 x d`` sub-cubes of half the edge, in tree (leaf-index) order.

    Example:
        >>> sub_cubes(torch.tensor([[[0.0, 0.0], [1.0, 1.0]]])).shape
        torch.Size([1, 4, 2, 2])
    """
    num_cubes, _, dim = cubes.shape
    boxes = cubes
    for _ in range(dim):
        boxes = split_boxes(boxes)
        boxes = boxes.reshape(-1, 2, dim)  # children stay next to each other, in order
    return boxes.reshape(num_cubes, 2**dim, 2, dim)


def boxes_inside(inner: Tensor, outer: Tensor) -> Tensor:
    r"""Say which boxes of ``inner`` lie inside the single box ``outer``.

    Args:
        inner: ``m x 2 x d`` boxes.
        outer: ``2 x d`` box.

    Returns:
        ``m`` booleans.
    """
    return (inner[:, 0] >= outer[0]).all(dim=-1) & (inner[:, 1] <= outer[1]).all(dim=-1)


def cube_grid(cube: Tensor, grid_points: int) -> tuple[Tensor, Tensor]:
    r"""Local test grid of a cube and the leaf each grid point belongs to.

    With centre ``c`` and edge ``L``, every coordinate takes the ``g = grid_points``
    equally spaced offsets ``-L/2, ..., +L/2`` (inclusive); the grid is their tensor
    product, the last coordinate varying fastest. A point belongs to the leaf whose
    centre (``c +- L/4`` in each coordinate) is nearest in the max-norm, ties to the
    lowest leaf index. That rule reduces to "bit ``j`` of the leaf index is 1 iff the
    offset in coordinate ``j`` is > 0", which is evaluated on the integer grid indices
    (``2 i > g - 1``) so that no rounding can move a point between leaves.

    Args:
        cube: ``2 x d`` cube.
        grid_points: ``g >= 2`` points per dimension.

    Returns:
        A tuple ``(points, leaf)``: ``g^d x d`` grid points and ``g^d`` leaf indices in
        ``[0, 2^d)``.

    Example:
        >>> points, leaf = cube_grid(torch.tensor([[0.0, 0.0], [1.0, 1.0]]), 20)
        >>> points.shape, leaf.bincount().tolist()
        (torch.Size([400, 2]), [100, 100, 100, 100])
    """
    dim = cube.shape[-1]
    centre = 0.5 * (cube[0] + cube[1])
    edge = cube[1] - cube[0]
    steps = torch.arange(grid_points, device=cube.device)
    index = torch.cartesian_prod(*([steps] * dim)).reshape(-1, dim)
    fraction = index.to(cube.dtype) / (grid_points - 1) - 0.5
    points = centre + fraction * edge
    upper_half = (2 * index > grid_points - 1).long()
    weights = 2 ** torch.arange(dim - 1, -1, -1, device=cube.device)
    return points, (upper_half * weights).sum(dim=-1)  # no integer matmul on CUDA


def first_query_index(grid_points: int, dim: int) -> int:
    r"""Flat index in :func:`cube_grid` of a test's first query.

    It is the grid point with 1-based index ``ceil(g / 2)`` in every coordinate (the
    centre when ``g`` is odd, the point just below it when ``g`` is even).

    Args:
        grid_points: ``g``, points per dimension.
        dim: ``d``.

    Returns:
        An index in ``[0, g^d)``.
    """
    per_axis = math.ceil(grid_points / 2) - 1
    return sum(per_axis * grid_points**j for j in range(dim))
