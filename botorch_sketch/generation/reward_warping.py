r"""The targets a standardizing loop conditions on: its rewards standardized,
warped by a Yeo-Johnson power transform (Yeo and Johnson, Biometrika 2000) and
standardized again,

    y~ = standardize(psi_p(z)),    z = standardize(y),

with ``p = 1`` (``psi_1`` is the identity, so ``y~ = z``) until a refit of the
learned kernel fits ``p`` by maximum likelihood on the rewards so far
(:func:`fit_power`), as HEBO does for its outputs (Cowen-Rivers et al., JAIR 2022).

Why: the rewards of a black box are often heavy-tailed (a loss spanning orders of
magnitude, a few configurations far worse than the rest). Standardized, such
rewards put the region near the optimum within a sliver of the GP's range, below
its noise floor, and the fitted kernel explains the tail instead of the optimum.
``psi_p`` with ``p > 1`` spreads a long lower tail's bulk and compresses the tail;
on rewards without a lower tail the fitted ``p`` stays at or near 1. Powers below 1
are not considered: they would compress an upper tail, the best rewards, which an
optimizer must resolve most finely. The warp is increasing, so the best rewards
stay the best targets, and it is computed on standardized rewards rounded as the
fits' targets are (:func:`~botorch_sketch.generation.hyperparameters.units_free`):
rewards in other units give bit-identical targets."""

from __future__ import annotations

import torch
from torch import Tensor

from botorch_sketch.generation.hyperparameters import reward_statistics, units_free
from botorch_sketch.utils.validation import check_finite, check_number

#: The powers :func:`fit_power` chooses among, 1 to 6 in steps of 0.05: none
#: below 1, which would compress the best rewards (an upper tail), the region an
#: optimizer must resolve.
POWERS = tuple(round(1.0 + 0.05 * k, 2) for k in range(101))


def yeo_johnson(z: Tensor, power: float | Tensor) -> Tensor:
    r"""The Yeo-Johnson transform ``psi_p(z)``: ``((1 + z)^p - 1) / p`` for
    ``z >= 0`` and ``-((1 - z)^{2 - p} - 1) / (2 - p)`` for ``z < 0`` (the limits
    ``log(1 + z)`` and ``-log(1 - z)`` at ``p = 0`` and ``p = 2``), monotone
    increasing in ``z`` for every ``p``.

    Args:
        z: ``n`` values.
        power: One power ``p``, or ``k`` powers (a tensor) for a ``k x n`` result.

    Returns:
        ``n`` (or ``k x n``) transformed values, in ``z``'s dtype.
    """
    p = torch.as_tensor(power, dtype=z.dtype, device=z.device)
    p = p.unsqueeze(-1) if p.dim() else p
    upper = torch.log1p(z.clamp_min(0.0))  # log(1 + z) where z >= 0
    lower = torch.log1p((-z).clamp_min(0.0))  # log(1 - z) where z < 0
    q = 2.0 - p
    at_zero = p.abs() < 1e-12
    at_two = q.abs() < 1e-12
    above = torch.where(
        at_zero, upper, torch.expm1(p * upper) / torch.where(at_zero, 1.0, p)
    )
    below = torch.where(
        at_two, -lower, -torch.expm1(q * lower) / torch.where(at_two, 1.0, q)
    )
    return torch.where(z >= 0, above, below)


def _check_rewards(rewards: Tensor) -> None:
    r"""Raise unless ``rewards`` is a finite 1-d floating-point tensor."""
    check_finite(rewards, "rewards")
    if rewards.dim() != 1:
        raise ValueError(
            f"`rewards` must be a 1-d tensor, got shape {tuple(rewards.shape)}."
        )


def _standardized(values: Tensor) -> Tensor:
    r"""``(values - c) / s`` with :func:`reward_statistics`'s ``c`` and ``s``."""
    center, scale = reward_statistics(values)
    return (values - center) / scale


def fit_power(rewards: Tensor) -> float:
    r"""The power of :data:`POWERS` of the highest Gaussian profile log
    likelihood of ``psi_p(z)``, ``z`` the standardized rewards (rounded as
    :func:`~botorch_sketch.generation.hyperparameters.units_free` rounds):

        l(p) = -n/2 log var(psi_p(z)) + (p - 1) sum_i sign(z_i) log(1 + |z_i|),

    the log likelihood of Yeo and Johnson's model maximized over the normal's
    mean and variance. ``O(n |POWERS|)``. 1 for fewer than 3 rewards or no
    spread; ties go to the power nearest 1.

    Args:
        rewards: ``n`` finite rewards.

    Returns:
        The power ``p``.
    """
    _check_rewards(rewards)
    z = units_free(_standardized(rewards))
    if z.numel() < 3 or not bool((z != 0).any()):
        return 1.0
    powers = torch.tensor(POWERS, dtype=z.dtype, device=z.device)
    variances = yeo_johnson(z, powers).var(-1, unbiased=False)
    jacobian = (z.sign() * torch.log1p(z.abs())).sum()
    likelihood = -0.5 * z.numel() * variances.log() + (powers - 1.0) * jacobian
    likelihood = torch.where(variances > 0, likelihood, -torch.inf)
    best = likelihood.max()
    candidates = torch.nonzero(likelihood == best).squeeze(-1)
    nearest = candidates[(powers[candidates] - 1.0).abs().argmin()]
    return POWERS[int(nearest)]


def warped_rewards(rewards: Tensor, power: float) -> Tensor:
    r"""The targets ``standardize(psi_p(z))`` of ``n`` rewards, ``z`` their
    standardized values rounded as
    :func:`~botorch_sketch.generation.hyperparameters.units_free` rounds, ``O(n)``.
    At ``p = 1``, the standardized rewards themselves.

    Args:
        rewards: ``n`` finite rewards.
        power: The power ``p`` (e.g. :func:`fit_power`'s).

    Returns:
        ``n`` targets in ``rewards``' dtype and device.
    """
    _check_rewards(rewards)
    power = check_number(power, "power")
    z = units_free(_standardized(rewards))
    return z if power == 1.0 else _standardized(yeo_johnson(z, power))


def warped_values(rewards: Tensor, power: float, values: Tensor) -> Tensor:
    r"""The targets of reward ``values`` under the map :func:`warped_rewards`
    applies to ``rewards`` (the same centers, scales and power): for a reward
    level, e.g. a constraint's bound, on the targets' scale. ``O(n + v)``.

    Args:
        rewards: ``n`` finite rewards (the map's).
        power: The power ``p``.
        values: ``v`` reward values.

    Returns:
        ``v`` targets (``warped_rewards(rewards, power)`` at ``values =
        rewards``, up to the rounding of ``units_free``).
    """
    _check_rewards(rewards)
    power = check_number(power, "power")
    center, scale = reward_statistics(rewards)
    z = (values - center) / scale
    if power == 1.0:
        return z
    warped = yeo_johnson(units_free(_standardized(rewards)), power)
    center, scale = reward_statistics(warped)
    return (yeo_johnson(z, power) - center) / scale
