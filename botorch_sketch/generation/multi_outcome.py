r"""Several objectives and constraints on one finite arm set: one ask/tell loop per
outcome (:class:`~botorch_sketch.generation.bbkb_loop.BBKB` or
:class:`~botorch_sketch.generation.sgpts_loop.SGPTS`, each with its own kernel,
noise and scale) and one rule that picks an arm from their values.

After the initial design, an ask reads every outcome loop's ``ask_values()`` (BBKB:
its UCB, an optimistic value; S-GP-TS: a Thompson path) as ``A x (o + k)`` values
``v``, ``o`` objectives (maximized) then ``k`` constraints (their loops are told
``-c``, so an arm is feasible where ``v_j >= 0``), and takes

- among the arms whose constraint values are all at least their bound (the
  target of ``c = 0``: optimistically feasible), the maximizer of the
  objectives' random scalarization ``s_w(v) = min_i (v_i - r_i) / w_i``, ``r_i``
  the smallest target of objective ``i``, ``w`` drawn uniformly on the positive
  unit sphere at each ask (the hypervolume scalarization of Golovin &
  Zhang, ICML 2020; Paria, Kandasamy & Poczos, UAI 2019, show that UCB and
  Thompson sampling on random scalarizations keep their regret bounds);
  ``s_w(v) = v_1`` for one objective;
- when no arm is optimistically feasible, the arm of least total violation
  of the bounds.

The values are in each loop's target units (its rewards standardized, and warped
when it learns its kernel): comparable across outcomes, whatever their scales.

The chosen arm is marked asked in every loop (``ask_arms``), so each loop
hallucinates it as its own ask would.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from botorch_sketch.generation.ask_tell import ArmLoop
from botorch_sketch.utils.validation import check_bool, check_finite, check_int

__all__ = ["MultiOutcomeLoop"]


class MultiOutcomeLoop:
    r"""An ask/tell loop over ``o`` objectives (maximized) and ``k`` constraints
    (an outcome is feasible where every constraint value is ``<= 0``, Optuna's
    and BoTorch's convention), one loop per outcome on the same arms (see the
    module's docstring for the rule).

    Args:
        loops: ``o + k`` loops built on the same arms with the same options,
            objectives first (a different seed each: their draws are independent).
        num_objectives: ``o >= 1``.
        seed: Seed of the scalarizations' weights.

    Example:
        >>> loops = [BBKB(arms, seed=i) for i in range(3)]
        >>> loop = MultiOutcomeLoop(loops, num_objectives=2)
        >>> index = loop.ask()
        >>> loop.tell(index, torch.tensor([[f1, f2, c]]))  # c <= 0: feasible
    """

    def __init__(
        self, loops: list[ArmLoop], num_objectives: int, seed: int = 0
    ) -> None:
        check_int(num_objectives, "num_objectives", 1)
        if not isinstance(loops, (list, tuple)) or len(loops) < num_objectives:
            raise ValueError(
                f"`loops` must be a list of at least `num_objectives` = "
                f"{num_objectives} loops, got {loops!r}."
            )
        lead = loops[0]
        for loop in loops[1:]:
            if type(loop) is not type(lead) or not torch.equal(loop.arms, lead.arms):
                raise ValueError("`loops` must be loops of one class on the same arms.")
            if loop.num_observations or loop.pending.numel():
                raise ValueError("`loops` must be fresh loops (nothing asked yet).")
        check_int(seed, "seed", 0)
        #: The outcome loops: objectives first, then constraints (told ``-c``)
        self.loops = list(loops)
        self.num_objectives = num_objectives
        self.num_constraints = len(loops) - num_objectives
        #: The draws of the scalarizations' weights
        self.generator = torch.Generator().manual_seed(seed)
        #: ``t x (o + k)`` told outcomes as given (constraints as ``c``)
        self.outcomes = lead.arms.new_zeros(0, len(loops))
        #: The weights of the last scalarization (equal before the first)
        self.weights = torch.full((num_objectives,), num_objectives**-0.5).to(
            self.outcomes
        )
        self._forget_fronts()

    # -- what the arm refiners read (the first objective's loop) ---------------

    @property
    def lead(self) -> ArmLoop:
        r"""The first objective's loop: the arms, the design, the kernel inputs."""
        return self.loops[0]

    def __getattr__(self, name: str) -> Any:
        r"""``arms``, ``observed``, ``pending``, ``failed``, ``kernel_inputs``,
        ``box``, ``covar_module``, ``refits``, ``num_observations`` ...: the lead
        loop's (the same arms and asks in every loop)."""
        if name in _LEAD_ATTRIBUTES:
            return getattr(self.lead, name)
        raise AttributeError(name)

    @property
    def num_outcomes(self) -> int:
        r"""``o + k``: the outcomes each :meth:`tell` takes per arm (what
        :func:`~botorch_sketch.parallel.run_parallel` asks the objective for)."""
        return len(self.loops)

    @property
    def feasible(self) -> Tensor:
        r"""``t`` booleans: the told outcomes whose constraints are all ``<= 0``."""
        return (self.outcomes[:, self.num_objectives :] <= 0).all(-1)

    @property
    def rewards(self) -> Tensor:
        r"""``t`` merits of the told outcomes, larger better (for the refiners'
        best arms and trust regions): the objective (``o = 1``), or (``o > 1``)
        the last scalarization ``min_i (y_i - r_i) / (w_i s_i)`` with ``r_i`` and
        ``s_i`` the worst value and the range of objective ``i`` on the Pareto
        front of the feasible outcomes (of all, if none is feasible), so that
        the trust region follows the weights along the front; an infeasible
        outcome sits below every feasible one, by its violation."""
        objectives = self.outcomes[:, : self.num_objectives]
        if objectives.shape[0] == 0:
            return objectives[:, 0]
        if self.num_objectives == 1:
            merit = objectives[:, 0]
        else:
            low, spread = _low_and_spread(self.pareto_front())
            merit = ((objectives - low) / (spread * self.weights)).min(-1).values
        if self.num_constraints == 0:
            return merit
        constraints = self.outcomes[:, self.num_objectives :]
        violation = (constraints.clamp_min(0) / _low_and_spread(constraints)[1]).sum(-1)
        floor = merit.min() - merit.std(correction=0) - 1.0
        return torch.where(self.feasible, merit, floor - violation)

    def pareto_front(self) -> Tensor:
        r"""``f x o``: the Pareto front of the feasible told objectives (of all
        of them, if none is feasible). Kept up to date by merging the outcomes
        told since the last call into the fronts so far, ``O(f b)`` for ``b``
        new outcomes, so that reading it stays flat as ``t`` grows (the front of
        a union is the front of the parts' fronts). The front of all outcomes
        is kept only while none is feasible: it is not read after."""
        seen, (every, feasible_front) = self._fronts
        new = self.outcomes[seen:]
        if new.shape[0]:
            objectives = new[:, : self.num_objectives]
            feasible = (new[:, self.num_objectives :] <= 0).all(-1)
            feasible_front = _merged_front(feasible_front, objectives[feasible])
            if feasible_front.shape[0] == 0:
                every = _merged_front(every, objectives)
            self._fronts = (self.outcomes.shape[0], (every, feasible_front))
        return feasible_front if feasible_front.shape[0] else every

    def _forget_fronts(self) -> None:
        r"""Make :meth:`pareto_front` rebuild its fronts from every outcome."""
        empty = self.outcomes.new_zeros(0, self.num_objectives)
        self._fronts = (0, (empty, empty))

    # -- ask and tell ------------------------------------------------------------

    def ask(self, max_arms: int | None = None, *, wait: bool = True) -> Tensor:
        r"""``max_arms`` (default 1) arms, one after the other, each marked asked
        in every loop before the next is chosen: the lead loop's initial design
        (or a random arm before any outcome), then the rule's choice. It never
        waits (``wait`` is checked and ignored).

        Returns:
            A LongTensor of ``max_arms`` arm indices.
        """
        count = 1 if max_arms is None else check_int(max_arms, "max_arms", 1)
        check_bool(wait, "wait")
        chosen = []
        lead = self.lead
        for _ in range(count):
            if lead.design_left or lead.num_observations == 0:
                index = lead.ask(1, wait=False)
                others = self.loops[1:]
            else:
                values = torch.stack([loop.ask_values() for loop in self.loops], -1)
                index = self.choose(values).reshape(1)
                others = self.loops
            for loop in others:
                loop.ask_arms(index)
            chosen.append(index)
        return torch.cat(chosen)

    def choose(self, values: Tensor) -> Tensor:
        r"""The arm the rule picks from the outcome loops' ``A x (o + k)``
        ``ask_values`` (in each loop's target units; a constraint's loop is told
        ``-c``, so its bound ``c = 0`` sits at the target of reward 0); draws the
        weights of a scalarization when ``o > 1``.

        Returns:
            A 0-dim LongTensor.
        """
        o = self.num_objectives
        zero = values.new_zeros(1)
        bounds = [loop.targets_at(zero) for loop in self.loops[o:]]
        slack = values[:, o:] - torch.cat(bounds) if bounds else values[:, o:]
        finite = values.isfinite().all(-1)
        feasible = (slack >= 0).all(-1) & finite
        if not bool(feasible.any()):
            violation = (-slack).clamp_min(0).sum(-1)
            return violation.masked_fill(~finite, torch.inf).argmin()
        score = values[:, 0]
        if o > 1:
            low = torch.stack(
                [loop.targets_of(loop.rewards).min() for loop in self.loops[:o]]
            )
            self.weights = self.scalarization_weights()
            score = ((values[:, :o] - low) / self.weights).min(-1).values
        return score.masked_fill(~feasible, -torch.inf).argmax()

    def scalarization_weights(self) -> Tensor:
        r"""``o`` weights drawn uniformly on the positive unit sphere (absolute
        values of a normal vector, normalized), from :attr:`generator`."""
        normal = torch.randn(self.num_objectives, generator=self.generator)
        weights = normal.abs().clamp_min(1e-12)
        return (weights / weights.norm()).to(self.outcomes)

    def tell(self, indices: Tensor, outcomes: Tensor) -> None:
        r"""Report ``b x (o + k)`` finite outcomes of pending arms: objectives,
        then constraint values ``c`` (feasible where all ``<= 0``). Each loop is
        told its column (a constraint's as ``-c``). Checked before any loop
        changes.

        Args:
            indices: ``b`` pending arm indices.
            outcomes: ``b x (o + k)`` finite values.
        """
        num_outcomes = len(self.loops)
        if not isinstance(outcomes, Tensor) or outcomes.shape != (
            indices.shape[0],
            num_outcomes,
        ):
            shape = getattr(outcomes, "shape", type(outcomes).__name__)
            raise ValueError(
                f"`outcomes` must be a b x {num_outcomes} tensor for b = "
                f"{indices.shape[0]} indices (objectives, then constraints), got "
                f"{shape}."
            )
        check_finite(outcomes, "outcomes")
        outcomes = outcomes.to(self.outcomes)
        signs = torch.ones(num_outcomes, dtype=outcomes.dtype)
        signs[self.num_objectives :] = -1.0
        for loop, column in zip(self.loops, (outcomes * signs).unbind(-1), strict=True):
            loop.tell(indices, column)
        self.outcomes = torch.cat([self.outcomes, outcomes])

    def fail(self, indices: Tensor) -> None:
        r"""Record pending arms whose evaluation failed, in every loop."""
        for loop in self.loops:
            loop.fail(indices)

    def ask_arms(self, indices: Tensor) -> None:
        r"""Mark arms of the caller's choice asked, in every loop."""
        for loop in self.loops:
            loop.ask_arms(indices)

    def add_arms(self, points: Tensor) -> Tensor:
        r"""Add ``n x d`` arms to every loop; their indices."""
        indices = [loop.add_arms(points) for loop in self.loops]
        return indices[0]

    def state_dict(self) -> dict[str, Any]:
        r"""Every loop's state, the told outcomes and the weights' generator."""
        return {
            "loops": [loop.state_dict() for loop in self.loops],
            "num_objectives": self.num_objectives,
            "outcomes": self.outcomes.clone(),
            "weights": self.weights.clone(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (loops built as those saved)."""
        if state["num_objectives"] != self.num_objectives or len(state["loops"]) != len(
            self.loops
        ):
            raise ValueError(
                "`state` was saved by a loop with other numbers of objectives or "
                "constraints."
            )
        for loop, saved in zip(self.loops, state["loops"], strict=True):
            loop.load_state_dict(saved)
        self.outcomes = state["outcomes"].to(self.outcomes)
        self._forget_fronts()
        self.weights = state["weights"].to(self.outcomes)
        self.generator.set_state(state["generator"])


#: The attributes a :class:`MultiOutcomeLoop` reads from its lead loop.
_LEAD_ATTRIBUTES = frozenset(
    {
        "arms",
        "observed",
        "pending",
        "failed",
        "kernel_inputs",
        "box",
        "covar_module",
        "refits",
        "num_observations",
    }
)


def _low_and_spread(values: Tensor) -> tuple[Tensor, Tensor]:
    r"""Each column's smallest value and its range (1 where it is 0 or there
    are no values) of ``t x c`` ``values``."""
    if values.shape[0] == 0:
        return values.new_zeros(values.shape[-1]), values.new_ones(values.shape[-1])
    low, high = values.min(0).values, values.max(0).values
    spread = high - low
    return low, torch.where(spread > 0, spread, torch.ones_like(spread))


def _merged_front(front: Tensor, points: Tensor) -> Tensor:
    r"""The Pareto front (larger better, one copy of equal rows) of the rows of
    ``front`` (a front) and ``points``, one point at a time: a point at most as
    good as a front row in every column is left out; else it joins the front and
    the rows at most as good as it leave. ``O(f b o)`` for ``f`` and ``b`` rows
    of ``o`` columns, where recomputing the front of every outcome is
    ``O(t^2 o)``."""
    for point in points:
        if bool((front >= point).all(-1).any()):
            continue
        front = torch.cat([front[~(point >= front).all(-1)], point.unsqueeze(0)])
    return front
