r"""When a loop may ask an arm again: the repeat rule of ``BBKB`` and ``SGPTS``.

Let ``sigma^2_t(x)`` be the posterior variance of ``f(x)`` given the told arms and
the arms asked and not yet told (hallucinated, without their outcomes), ``lambda``
the noise variance and ``sigma~^2_t(x) = sigma^2_t(x) / lambda`` the papers'
scale. One more evaluation of ``x`` gains ``1/2 log(1 + sigma~^2_t(x))`` nats and
removes the variance

.. math::

    \Delta_t(x) = \sigma^2_t(x) - \sigma^2_{t+1}(x)
    = \sigma^2_t(x) \frac{\tilde\sigma^2_t(x)}{1 + \tilde\sigma^2_t(x)}
    = \lambda \frac{\tilde\sigma^4_t(x)}{1 + \tilde\sigma^2_t(x)}

from ``f(x)``: the fraction ``1 - exp(-2 gain)`` of what is left. A *repeat*, an
arm already told, pending or chosen earlier in the same batch, is admitted only
while it removes at least a fraction ``delta`` of the prior variance,

.. math::

    \Delta_t(x) \ge \delta \, k(x, x);

an arm never measured is always eligible. A repeat of an arm whose variance is
far below ``lambda`` gains almost nothing (``Delta ~ sigma^4 / lambda``), and
after one evaluation ``sigma^2 <= lambda``, so with a small ``lambda`` (a nearly
deterministic objective) not even the first repeat pays: ``Delta ~ lambda / 2``.
After ``n`` evaluations of an isolated arm ``Delta ~ lambda / n^2``, so an arm is
measured at most about ``sqrt(lambda / (delta k))`` times: more often the noisier
the objective. ``delta`` only falls along a batch (variances only decrease), so
an arm it spends stays spent, and a batch ends when no eligible arm is left.
``delta = 0`` admits every repeat (the papers' batches), ``delta = inf`` none. A
self-tuning loop whose learned ``lambda`` sits at its floor takes the objective
as deterministic (the same configuration returns the same value: a repeat gains
nothing) and uses ``delta = inf``.
"""

from __future__ import annotations

import math

from torch import Tensor

#: ``delta`` of a self-tuning loop: a repeat must remove at least 0.1% of the
#: prior variance at the arm (its standard deviation about 3% of the prior's).
#: An arm is then measured again only when ``lambda > 0.002 k`` (noise standard
#: deviation above about 4.5% of the signal's); with ``lambda = 0.01 k`` at most
#: about three times, with ``lambda = 0.1 k`` about ten.
DEFAULT_MIN_REPEAT_REDUCTION = 1e-3

#: A learned ``lambda`` at most this (BoTorch's noise floor, up to the optimizer's
#: last steps; the loops' own floor is lower,
#: :data:`~botorch_sketch.generation.hyperparameters.MIN_LEARNED_NOISE`): the
#: objective is taken as deterministic.
DETERMINISTIC_NOISE = 1.01e-4


#: Repeated rewards of an arm closer than this fraction of the spread of all
#: rewards count as equal (:func:`repeats_agree`).
EQUAL_REPEATS = 1e-12


def repeat_threshold(
    option: float | None,
    *,
    learned_kernel: bool,
    learned_noise: float | None,
    repeats_agree: bool = False,
) -> float:
    r"""The ``delta`` a loop applies now.

    Args:
        option: ``min_repeat_reduction``, the user's ``delta``; None: the default.
        learned_kernel: Whether the loop learns its kernel (self-tuning).
        learned_noise: The learned ``lambda``, or None when ``lambda`` is fixed.
        repeats_agree: Whether the arms measured more than once (some) gave the
            same reward each time (:func:`repeats_agree`).

    Returns:
        ``option`` if given; else 0 with a fixed kernel (the papers' batches),
        ``inf`` while a learned ``lambda`` is at its floor or the repeats agree
        (a deterministic objective, whatever misfit the fit took for noise), and
        :data:`DEFAULT_MIN_REPEAT_REDUCTION` otherwise.
    """
    if option is not None:
        return option
    if not learned_kernel:
        return 0.0
    if repeats_agree or (
        learned_noise is not None and learned_noise <= DETERMINISTIC_NOISE
    ):
        return math.inf
    return DEFAULT_MIN_REPEAT_REDUCTION


def holds_told_arms(threshold: float) -> bool:
    r"""Whether the rule with ``delta = threshold`` holds arms already told: only
    on a deterministic objective (``delta = inf``). On a noisy one a told arm is
    eligible again (what a bandit with cumulative regret needs) and only its
    further copies in a batch or in flight must pay."""
    return threshold == math.inf


def repeats_agree(observed: Tensor, rewards: Tensor) -> bool:
    r"""Whether some arm of ``observed`` (``t`` indices) was measured more than
    once and every such arm's ``rewards`` (``t``) agree to
    :data:`EQUAL_REPEATS` of the rewards' range, ``O(t)``: the evidence that the
    objective is deterministic."""
    if observed.numel() < 2:
        return False
    _, inverse, counts = observed.unique(return_inverse=True, return_counts=True)
    repeated = counts > 1
    if not bool(repeated.any()):
        return False
    fill = rewards.new_full(counts.shape, math.nan)
    high = fill.scatter_reduce(0, inverse, rewards, "amax", include_self=False)
    low = fill.scatter_reduce(0, inverse, rewards, "amin", include_self=False)
    tolerance = EQUAL_REPEATS * float(rewards.max() - rewards.min())
    return bool(((high - low)[repeated] <= tolerance).all())


def repeat_reduction(
    scaled_variance: Tensor, prior_variance: Tensor, noise: Tensor | float
) -> Tensor:
    r"""``Delta_t(x) / k(x, x)``: the fraction of the prior variance one more
    evaluation removes from ``f(x)``, ``lambda sigma~^4 / ((1 + sigma~^2) k(x, x))``.

    Args:
        scaled_variance: ``n`` papers'-scale variances ``sigma~^2_t(x)``.
        prior_variance: ``n`` prior variances ``k(x, x) > 0``.
        noise: ``lambda``.
    """
    ratio = scaled_variance.square() / (1 + scaled_variance)
    return noise * ratio / prior_variance


def hallucinated_variance(scaled_variance: Tensor, copies: Tensor) -> Tensor:
    r"""Papers'-scale variances after ``c`` more evaluations at the arm itself,
    ``sigma~^2 / (1 + c sigma~^2)`` (Sherman-Morrison on one point).

    Args:
        scaled_variance: ``n`` variances ``sigma~^2_t(x)``.
        copies: ``n`` counts ``c >= 0``.
    """
    return scaled_variance / (1 + copies.to(scaled_variance) * scaled_variance)
