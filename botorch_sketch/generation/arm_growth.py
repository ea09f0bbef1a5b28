r"""Arms added to a loop as it runs (e.g. refined configurations near good ones):
their checks."""

from __future__ import annotations

from torch import Tensor

from botorch_sketch.utils.validation import check_magnitude, check_matrix


def checked_new_arms(
    points: object,
    arms: Tensor,
    box: Tensor | None,
    name: str = "points",
    allow_empty: bool = False,
) -> Tensor:
    r"""Check arms to add to a loop on ``arms`` (``A x d``): a finite ``n x d``
    tensor (``n > 0`` unless ``allow_empty``) of the arms' dtype, inside ``box``
    when the kernel is learned (its unit cube was fixed by the first arms), on the
    arms' device; errors name ``name``.

    Returns:
        The ``n x d`` points, detached, on the arms' device.
    """
    check_matrix(points, name, num_cols=arms.shape[-1], allow_empty=allow_empty)
    check_magnitude(points, name)
    if points.dtype != arms.dtype:
        raise TypeError(
            f"`{name}` must have the arms' dtype {arms.dtype}, got {points.dtype}."
        )
    points = points.detach().to(arms.device)
    if box is not None:
        low, high = box
        tolerance = 1e-9 * (high - low)
        if bool(((points < low - tolerance) | (points > high + tolerance)).any()):
            raise ValueError(
                f"`{name}` must lie in the bounding box of the loop's first arms "
                "(its learned kernel works on their unit cube)."
            )
    return points
