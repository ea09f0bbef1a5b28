r"""Optuna distributions as the neutral domains of
:mod:`~botorch_sketch.integrations.arm_space` (the mapping the Ray Tune searchers
use), for the samplers of :mod:`botorch_sketch.integrations.optuna`.

- ``FloatDistribution(low, high, log, step)``: a float in ``[low, high]``, on a log
  scale for ``log``, on the grid ``low + k step`` for a ``step``;
- ``IntDistribution(low, high, log, step)``: an integer in ``[low, high]`` (a
  coordinate floored in ``[low, high + 1)``), on a log scale for ``log``, on the grid
  ``low + k step``;
- ``CategoricalDistribution(choices)``: one coordinate per choice (one-hot).

Needs the optional dependency optuna (``pip install -e ".[optuna]"`` from the
repository root).
"""

from __future__ import annotations

try:
    import optuna  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without optuna
    from botorch_sketch.utils.extras import missing_dependency

    raise missing_dependency(
        "optuna", "optuna", "botorch_sketch.integrations.optuna"
    ) from error

from collections.abc import Mapping

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from botorch_sketch.integrations.arm_space import (
    ChoiceDomain,
    DomainArms,
    NumericDomain,
)

__all__ = ["arms_of_space", "domain_of"]


def domain_of(
    name: str, distribution: BaseDistribution
) -> NumericDomain | ChoiceDomain:
    r"""The domain of an Optuna distribution (TypeError naming the parameter for
    another kind of distribution)."""
    if isinstance(distribution, CategoricalDistribution):
        return ChoiceDomain(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return NumericDomain(
            name,
            distribution.low,
            distribution.high + 1,  # floored: [low, high]
            log=distribution.log,
            integer=True,
            step=None if distribution.step == 1 else distribution.step,
            origin=distribution.low,
        )
    if isinstance(distribution, FloatDistribution):
        return NumericDomain(
            name,
            distribution.low,
            distribution.high,
            log=distribution.log,
            step=distribution.step,
            origin=distribution.low,
        )
    raise TypeError(
        f"Parameter {name!r}: unsupported distribution {type(distribution).__name__}."
    )


def arms_of_space(
    space: Mapping[str, BaseDistribution], num_arms: int, seed: int
) -> DomainArms:
    r"""The arm set of an Optuna search space: its parameters in sorted name
    order, ``num_arms`` scrambled Sobol points and the two arms of the domains'
    end values (:class:`~botorch_sketch.integrations.arm_space.DomainArms`).

    Args:
        space: Parameter name -> distribution (none single-valued).
        num_arms: Sobol points drawn before duplicates are dropped.
        seed: Seed of the Sobol sequence.
    """
    return DomainArms(
        [domain_of(name, space[name]) for name in sorted(space)], num_arms, seed
    )
