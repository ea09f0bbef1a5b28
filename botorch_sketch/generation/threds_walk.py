r"""The random walk on the domain tree of GP-ThreDS (mode ``"rwt"``).

Salgia, Vakili and Zhao (NeurIPS 2021, section 6) find the high-performing leaves of an
epoch's tree with a biased random walk driven by local tests; the finer details are not
in the paper's main text, so this module reconstructs them as follows.

The tree's leaves are the epoch's candidate cubes; its inner nodes are the nodes of the
domain tree (halve the longest edge, ties to the lowest coordinate) that still contain
active (undeclared) leaves. A node with a single active child is skipped (the child
covers the same active region), so every inner node on the walk has two active
children. Starting at the root, the walk

- at an inner node, tests its active children in turn (a low-confidence ``"child"``
  test, which only needs to be right with probability above 1/2) and moves to the first
  one that passes, or back to the parent when none does;
- at a leaf, runs a high-confidence ``"leaf"`` test: a pass declares the leaf and the
  walk restarts from the root without it, a failure sends the walk to the parent;
- when no child of the root passes, runs a high-confidence ``"terminate"`` test on the
  whole active region: a failure (no point above the threshold) ends the epoch, a pass
  restarts the walk.

The walk is a Python generator: it yields :class:`WalkRequest` objects and is sent back
whether each test passed; its return value marks the declared leaves. It runs no test
itself, so its logic can be driven by any sequence of outcomes.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_sketch.generation.threds_geometry import boxes_inside, split_boxes


@dataclass(frozen=True)
class WalkRequest:
    r"""A local test the walk asks for.

    Attributes:
        box: ``2 x d`` tree node to test.
        leaves: Boolean mask over the epoch's leaves: the active leaves inside ``box``
            (the region actually tested).
        kind: ``"child"``, ``"leaf"`` or ``"terminate"`` (see the module docstring).
    """

    box: Tensor
    leaves: Tensor
    kind: str


def random_walk(leaves: Tensor) -> Generator[WalkRequest, bool, Tensor]:
    r"""Run one epoch's random walk over ``leaves``.

    Args:
        leaves: ``N x 2 x d`` equal-sized cubes of the domain tree (in the unit cube).

    Returns:
        (as the generator's return value) ``N`` booleans marking the declared leaves.

    Example:
        >>> walk = random_walk(leaves)
        >>> request = next(walk)
        >>> try:
        ...     while True:
        ...         request = walk.send(run_test(request))
        ... except StopIteration as stop:
        ...     declared = stop.value
    """
    dim = leaves.shape[-1]
    active = torch.ones(leaves.shape[0], dtype=torch.bool, device=leaves.device)
    declared = torch.zeros_like(active)
    leaf_edge = float((leaves[0, 1] - leaves[0, 0]).max())
    unit_box = torch.stack([leaves.new_zeros(dim), leaves.new_ones(dim)])

    def inside(box: Tensor) -> Tensor:
        return boxes_inside(leaves, box) & active

    def is_leaf(box: Tensor) -> bool:
        return float((box[1] - box[0]).max()) <= leaf_edge

    def active_children(box: Tensor) -> list[Tensor]:
        return [child for child in split_boxes(box[None])[0] if inside(child).any()]

    def skip_single_children(box: Tensor) -> Tensor:
        while not is_leaf(box):
            children = active_children(box)
            if len(children) != 1:
                break
            box = children[0]
        return box

    while active.any():
        root = skip_single_children(unit_box)
        path = [root]
        found = False
        while path and not found:
            node = path[-1]
            if is_leaf(node):
                if (yield WalkRequest(node, inside(node), "leaf")):
                    declared |= inside(node)
                    active &= ~declared
                    found = True
                else:
                    path.pop()
                continue
            for child in active_children(node):
                if (yield WalkRequest(child, inside(child), "child")):
                    path.append(skip_single_children(child))
                    break
            else:
                path.pop()
        if not found and not (yield WalkRequest(root, inside(root), "terminate")):
            break
    return declared
