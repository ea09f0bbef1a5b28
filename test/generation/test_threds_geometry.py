import itertools

import pytest
import torch

from botorch_sketch.generation.threds_geometry import (
    boxes_inside,
    cube_grid,
    first_query_index,
    split_boxes,
    sub_cubes,
)

DTYPE = torch.float64


def box(lower, upper):
    return torch.tensor([lower, upper], dtype=DTYPE)


def test_split_halves_the_longest_edge():
    children = split_boxes(box([0.0, 0.0, 0.0], [0.5, 1.0, 0.25]).unsqueeze(0))[0]
    assert torch.equal(children[0], box([0.0, 0.0, 0.0], [0.5, 0.5, 0.25]))
    assert torch.equal(children[1], box([0.0, 0.5, 0.0], [0.5, 1.0, 0.25]))


def test_split_ties_go_to_the_lowest_coordinate():
    # Edges 0.5, 0.5, 0.25: coordinates 0 and 1 tie, coordinate 0 is split.
    children = split_boxes(box([0.5, 0.0, 0.0], [1.0, 0.5, 0.25]).unsqueeze(0))[0]
    assert torch.equal(children[0], box([0.5, 0.0, 0.0], [0.75, 0.5, 0.25]))
    assert torch.equal(children[1], box([0.75, 0.0, 0.0], [1.0, 0.5, 0.25]))
    # A cube: coordinate 0 first, then (edges L/2, L) coordinate 1.
    cube = box([0.0, 0.0], [1.0, 1.0]).unsqueeze(0)
    first = split_boxes(cube)[0]
    assert torch.equal(first[0], box([0.0, 0.0], [0.5, 1.0]))
    second = split_boxes(first)
    assert torch.equal(second[0, 1], box([0.0, 0.5], [0.5, 1.0]))


def test_split_batches_boxes_independently():
    boxes = torch.stack([box([0.0, 0.0], [1.0, 0.5]), box([0.0, 0.0], [0.5, 1.0])])
    children = split_boxes(boxes)
    assert torch.equal(children[0, 0], box([0.0, 0.0], [0.5, 0.5]))
    assert torch.equal(children[1, 0], box([0.0, 0.0], [0.5, 0.5]))
    assert torch.equal(children[1, 1], box([0.0, 0.5], [0.5, 1.0]))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_sub_cubes_are_the_binary_ordered_half_cubes(dim):
    lower = torch.tensor([0.25, 0.5, 0.0][:dim], dtype=DTYPE)
    cube = torch.stack([lower, lower + 0.25]).unsqueeze(0)
    leaves = sub_cubes(cube)[0]
    assert leaves.shape == (2**dim, 2, dim)
    # Hand construction: bit j (most significant first) = upper half of coordinate j.
    for index, bits in enumerate(itertools.product([0, 1], repeat=dim)):
        bits = torch.tensor(bits, dtype=DTYPE)
        expected_lower = lower + 0.125 * bits
        assert torch.equal(leaves[index, 0], expected_lower)
        assert torch.equal(leaves[index, 1], expected_lower + 0.125)


def test_sub_cubes_partition_the_cube():
    cube = box([0.5, 0.25], [0.75, 0.5]).unsqueeze(0)
    leaves = sub_cubes(cube)[0]
    volume = (leaves[:, 1] - leaves[:, 0]).prod(dim=-1).sum()
    assert float(volume) == pytest.approx(0.25**2)
    assert boxes_inside(leaves, cube[0]).all()


def test_boxes_inside():
    boxes = torch.stack([box([0.0, 0.0], [0.5, 0.5]), box([0.25, 0.5], [0.75, 1.0])])
    assert boxes_inside(boxes, box([0.0, 0.0], [0.5, 1.0])).tolist() == [True, False]


@pytest.mark.parametrize("grid_points", [2, 5, 20, 21])
def test_cube_grid_offsets(grid_points):
    cube = box([0.25, 0.5], [0.75, 1.0])  # centre (0.5, 0.75), edge 0.5
    points, _ = cube_grid(cube, grid_points)
    assert points.shape == (grid_points**2, 2)
    offsets = torch.linspace(-0.25, 0.25, grid_points, dtype=DTYPE)
    expected = torch.cartesian_prod(0.5 + offsets, 0.75 + offsets)
    torch.testing.assert_close(points, expected, rtol=0, atol=1e-15)
    # Last coordinate fastest; end points included.
    assert torch.equal(points[0], cube[0])
    assert torch.equal(points[-1], cube[1])


@pytest.mark.parametrize(("dim", "grid_points"), [(1, 7), (2, 20), (2, 21), (3, 5)])
def test_grid_points_belong_to_the_nearest_leaf_centre(dim, grid_points):
    lower = torch.full((dim,), 0.5, dtype=DTYPE)
    cube = torch.stack([lower, lower + 0.5])
    points, leaf = cube_grid(cube, grid_points)
    centres = sub_cubes(cube.unsqueeze(0))[0].mean(dim=1)
    # Brute force on exact offsets (grid index units): max-norm distance to every
    # leaf centre, first (lowest) index among ties.
    steps = torch.cartesian_prod(*[torch.arange(grid_points)] * dim).reshape(-1, dim)
    offset = 2 * steps - (grid_points - 1)  # grid offset in units of L / (2 (g - 1))
    signs = (centres - cube.mean(dim=0)).sign().long()  # +-1 per leaf and coordinate
    distance = (2 * offset.unsqueeze(1) - signs * (grid_points - 1)).abs().amax(-1)
    expected = torch.tensor([int(row.argmin()) for row in distance])
    assert torch.equal(leaf, expected)
    # And the float geometry agrees wherever the nearest centre is unique.
    float_distance = (points.unsqueeze(1) - centres).abs().amax(-1)
    unique = (distance == distance.min(-1, keepdim=True).values).sum(-1) == 1
    assert torch.equal(float_distance.argmin(-1)[unique], leaf[unique])
    # Points of the centre planes (odd g) go to the lower half: ties -> lowest index.
    if grid_points % 2 == 1:
        assert leaf[first_query_index(grid_points, dim)] == 0


def test_grid_leaves_balanced_for_even_grid():
    _, leaf = cube_grid(box([0.0, 0.0], [1.0, 1.0]), 20)
    assert leaf.bincount().tolist() == [100, 100, 100, 100]


def test_first_query_index():
    cube = box([0.0, 0.0], [1.0, 1.0])
    points, _ = cube_grid(cube, 20)
    # ceil(20 / 2) = 10th point (1-based) in each coordinate: offset -1/38.
    expected = torch.full((2,), 9 / 19, dtype=DTYPE)
    torch.testing.assert_close(points[first_query_index(20, 2)], expected)
    points, _ = cube_grid(cube, 21)
    torch.testing.assert_close(points[first_query_index(21, 2)], cube.mean(dim=0))
    assert first_query_index(5, 3) == 2 * 25 + 2 * 5 + 2
