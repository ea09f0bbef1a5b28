r"""Space-filling initial designs over a finite arm set."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_sketch.utils.validation import check_generator, check_int


def space_filling_arms(
    points: Tensor, count: int, generator: torch.Generator
) -> Tensor:
    r"""``count`` distinct arms, each the arm nearest to one point of a scrambled
    Sobol sequence in the unit cube (as Ax's and Optuna's quasi-random starts,
    restricted to the arms), ``O(A d count)``.

    Args:
        points: ``A x d`` arms in the unit cube.
        count: Arms to choose, ``0 <= count <= A``.
        generator: Seeds the Sobol scrambling.

    Returns:
        A LongTensor of ``count`` distinct arm indices, in design order.

    Example:
        >>> arms = torch.rand(1000, 3, dtype=torch.float64)
        >>> space_filling_arms(arms, 6, torch.Generator().manual_seed(0)).shape
        torch.Size([6])
    """
    check_int(count, "count", 0, points.shape[0])
    check_generator(generator)
    if count == 0:  # no draw: the generator is left as it was
        return torch.empty(0, dtype=torch.long, device=points.device)
    seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
    targets = SobolEngine(points.shape[-1], scramble=True, seed=seed).draw(count)
    targets = targets.to(points)
    taken = torch.zeros(points.shape[0], dtype=torch.bool, device=points.device)
    chosen = []
    for target in targets:
        distances = (points - target).square().sum(-1).masked_fill(taken, torch.inf)
        index = int(distances.argmin())
        taken[index] = True
        chosen.append(index)
    return torch.tensor(chosen, dtype=torch.long, device=points.device)
