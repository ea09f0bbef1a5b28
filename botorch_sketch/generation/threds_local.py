r"""The local sequential test of GP-ThreDS.

A test scores a fixed grid whose points are split into *groups* (the ``2^d`` leaves of a
cube in mode ``"cube"``, a single group in mode ``"rwt"``). It fits an exact GP to its
own observations only and, after each one, compares the confidence bounds

    UCB = mu + radius_n sigma,     LCB = mu - radius_n sigma,
    radius_n = rkhs_bound + noise_std sqrt(2 (gamma(n) + 1 + log(1 / delta)))

(the paper's ``beta_n = B + R sqrt(...)``, ``n`` observations so far) on the points of
groups not yet declared with the threshold ``tau``: a negative stop if
``max UCB < tau - tolerance``, else the group of ``argmax LCB`` is declared when
``max LCB > tau`` (positive) or when ``cap`` queries passed since the last declaration
(the asymmetric default: inconclusive groups are kept). The next query is the
``argmax UCB`` point. Both argmaxes take the lowest grid index among near-ties (within
``sqrt(eps)`` relative, see :func:`first_argmax`): after a test's first observation the
bounds are symmetric about it, and exact ties broken by rounding would make the run
depend on the order of floating-point operations.

Extension (not in the paper): a test may start from *reused* observations, made
earlier in the run inside the tested box. They condition the GP and count in ``n``;
the first query is then the ``argmax UCB`` point instead of a fixed one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.models.incremental_exact import IncrementalExactGP


def threds_radius(
    n: int,
    rkhs_bound: float,
    noise_std: float,
    delta: float,
    gamma: Callable[[int], float] = math.log,
) -> float:
    r"""Confidence radius ``rkhs_bound + noise_std sqrt(2 (gamma(n) + 1 + log(1/d)))``.

    The paper's ``beta_n`` (``d = delta``): it multiplies the Bayesian ``sigma`` of the
    test's GP.

    Args:
        n: Number of observations of the test so far (``>= 1``).
        rkhs_bound: Bound ``B`` on the RKHS norm of the objective.
        noise_std: Sub-Gaussian scale ``R`` of the noise.
        delta: Confidence parameter in ``(0, 1)``.
        gamma: Stand-in for the maximal information gain, ``n -> gamma(n)``.

    Returns:
        The radius; e.g. ``0.8977`` for ``n = 1`` and the defaults
        ``rkhs_bound = 0.5, noise_std = 0.1, delta = 1e-3, gamma = log``.
    """
    information = gamma(n)
    if isinstance(information, bool) or not isinstance(information, (int, float)):
        raise TypeError(
            f"`gamma` must return a number, got {type(information).__name__} at n={n}."
        )
    spread = 2.0 * (information + 1.0 + math.log(1.0 / delta))
    if not (math.isfinite(spread) and spread >= 0.0):
        raise ValueError(
            f"`gamma` returned {information} at n={n}: the radius needs a finite "
            "gamma(n) + 1 + log(1/delta) >= 0."
        )
    return rkhs_bound + noise_std * math.sqrt(spread)


@dataclass(frozen=True)
class Decision:
    r"""Outcome of one step of a local test.

    Attributes:
        kind: ``"stop"`` (negative stop), ``"positive"`` (``max LCB > tau``),
            ``"cap"`` (declaration forced by the cap) or ``"continue"``.
        group: The declared group for ``"positive"`` and ``"cap"``, else None.
        next_index: Grid index of ``max UCB`` (the next query; near-ties to the
            lowest index).
    """

    kind: str
    group: int | None
    next_index: int


def first_argmax(values: Tensor) -> int:
    r"""Lowest index whose value is within rounding of the maximum.

    Args:
        values: ``A`` values (``-inf`` allowed, at least one finite).

    Returns:
        The first ``i`` with ``values[i] >= max - sqrt(eps) (1 + |max|)``, ``eps`` the
        machine epsilon of ``values``' dtype.
    """
    top = values.max()
    slack = math.sqrt(torch.finfo(values.dtype).eps) * (1.0 + top.abs())
    return int((values >= top - slack).nonzero()[0, 0])


def decide(
    ucb: Tensor,
    lcb: Tensor,
    group: Tensor,
    open_points: Tensor,
    threshold: float,
    tolerance: float,
    since_declaration: int,
    cap: int,
) -> Decision:
    r"""Apply the three stopping rules, in order, to one posterior of a test.

    Args:
        ucb: ``A`` upper confidence bounds on the grid.
        lcb: ``A`` lower confidence bounds on the grid.
        group: ``A`` group indices of the grid points.
        open_points: ``A`` booleans, True for points of groups not yet declared (at
            least one).
        threshold: ``tau``.
        tolerance: Negative-stop tolerance (``tol_coef`` times the tested edge).
        since_declaration: Queries since the last declaration (or the start),
            counting the one just observed.
        cap: Queries without a declaration after which one is forced.

    Returns:
        The :class:`Decision`.
    """
    ucb = ucb.masked_fill(~open_points, -math.inf)
    lcb = lcb.masked_fill(~open_points, -math.inf)
    best_ucb = first_argmax(ucb)
    best_lcb = first_argmax(lcb)
    if float(ucb[best_ucb]) < threshold - tolerance:
        return Decision("stop", None, best_ucb)
    if float(lcb[best_lcb]) > threshold:
        return Decision("positive", int(group[best_lcb]), best_ucb)
    if since_declaration >= cap:
        return Decision("cap", int(group[best_lcb]), best_ucb)
    return Decision("continue", None, best_ucb)


class LocalTest:
    r"""One local sequential test, driven one observation at a time.

    Attributes:
        grid: ``A x d`` grid in the unit cube.
        group: ``A`` group indices in ``[0, num_groups)``.
        box: ``2 x d`` box tested (for inspection).
        threshold: ``tau`` of the test.
        declared: Groups declared so far, in order.
        decisions: Kind of every declaration (``"positive"`` or ``"cap"``), in order.
        stopped: True once a negative stop ended the test.
        finished: True once the test is over (negative stop or every group declared).

    Example:
        >>> test = LocalTest(grid, group, 4, box, threshold=0.85, tolerance=0.2,
        ...                  radius=lambda n: threds_radius(n, 0.5, 0.1, 1e-3),
        ...                  kernel=kernel, noise=0.01, cap=50, first_index=189)
        >>> while not test.finished:
        ...     test.observe(float(f(test.next_point)))
    """

    def __init__(
        self,
        grid: Tensor,
        group: Tensor,
        num_groups: int,
        box: Tensor,
        *,
        threshold: float,
        tolerance: float,
        radius: Callable[[int], float],
        kernel: Kernel,
        noise: float,
        cap: int,
        first_index: int,
        reused_X: Tensor | None = None,
        reused_Y: Tensor | None = None,
    ) -> None:
        r"""Start a test at the prior, or at the posterior given reused observations.

        Args:
            grid: ``A x d`` grid points.
            group: ``A`` group indices; every group in ``[0, num_groups)`` non-empty.
            num_groups: Number of groups.
            box: ``2 x d`` box tested.
            threshold: ``tau``.
            tolerance: Negative-stop tolerance.
            radius: ``n -> radius_n`` (e.g. :func:`threds_radius`).
            kernel: GPyTorch kernel with fixed hyperparameters.
            noise: Noise variance of the test's GP.
            cap: Queries without a declaration after which one is forced.
            first_index: Grid index of the first query without reused observations.
            reused_X: ``n0 x d`` earlier observed points to condition on (extension;
                None: the test's own observations only, as in the paper).
            reused_Y: ``n0`` values observed at ``reused_X``.
        """
        if (reused_X is None) != (reused_Y is None):
            raise ValueError("Give both `reused_X` and `reused_Y`, or neither.")
        if reused_X is not None and (
            reused_X.shape[1:] != grid.shape[1:] or reused_Y.shape != reused_X.shape[:1]
        ):
            raise ValueError(
                "`reused_X` must be n0 x d (d of `grid`) and `reused_Y` of shape n0, "
                f"got {tuple(reused_X.shape)} and {tuple(reused_Y.shape)}."
            )
        self.grid = grid
        self.group = group
        self.num_groups = num_groups
        self.box = box
        self.threshold = threshold
        self.tolerance = tolerance
        self.radius = radius
        self.cap = cap
        self.open_points = torch.ones_like(group, dtype=torch.bool)
        self.next_index = first_index
        if reused_X is None or reused_X.shape[0] == 0:
            self.gp = IncrementalExactGP.from_kernel(grid, kernel, noise)
        else:
            # Reused points are scored too (they sit after the grid) but never queried.
            points = torch.cat([grid, reused_X])
            self.gp = IncrementalExactGP.from_kernel(points, kernel, noise)
            for offset, y in enumerate(reused_Y.tolist()):
                self.gp.observe(grid.shape[0] + offset, y)
            ucb, _ = self._bounds()
            self.next_index = first_argmax(ucb)
        self.since_declaration = 0
        self.declared: list[int] = []
        self.decisions: list[str] = []
        self.stopped = False
        self.finished = False

    @property
    def next_point(self) -> Tensor:
        r"""The next query, ``1 x d`` (unit-cube coordinates)."""
        return self.grid[self.next_index : self.next_index + 1]

    @property
    def num_observations(self) -> int:
        r"""Observations conditioned on: the test's queries plus any reused ones."""
        return self.gp.num_observations

    def observe(self, y: float) -> Decision:
        r"""Feed the observation at :attr:`next_point` and apply the stopping rules.

        Args:
            y: Noisy value observed at :attr:`next_point`.

        Returns:
            The :class:`Decision` taken.
        """
        if self.finished:
            raise RuntimeError("This local test is finished; start a new one.")
        self.gp.observe(self.next_index, y)
        self.since_declaration += 1
        ucb, lcb = self._bounds()
        decision = decide(
            ucb,
            lcb,
            self.group,
            self.open_points,
            self.threshold,
            self.tolerance,
            self.since_declaration,
            self.cap,
        )
        self.next_index = decision.next_index
        if decision.kind == "stop":
            self.stopped = self.finished = True
        elif decision.group is not None:
            self.declared.append(decision.group)
            self.decisions.append(decision.kind)
            self.open_points &= self.group != decision.group
            self.since_declaration = 0
            self.finished = len(self.declared) == self.num_groups
        return decision

    def _bounds(self) -> tuple[Tensor, Tensor]:
        r"""``(UCB, LCB)`` on the grid, each of shape ``A``."""
        size = self.grid.shape[0]
        mean, variance = self.gp.mean[:size], self.gp.variance[:size]
        width = self.radius(self.num_observations) * variance.sqrt()
        return mean + width, mean - width
