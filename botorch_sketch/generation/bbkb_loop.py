r"""Ask/tell BBKB (and BKB, ``ratio_threshold=1``) on a finite arm set, resumable."""

from __future__ import annotations

from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.acquisition.bkb import TheoryRadius
from botorch_sketch.generation.bbkb import RULES, BBKBBatch, gen_bbkb_batch
from botorch_sketch.models.nystrom import NystromGP, default_covar_module
from botorch_sketch.utils.validation import (
    check_at_least,
    check_finite,
    check_matrix,
    check_positive,
)


class BBKB:
    r"""The BBKB loop: ``ask()`` an adaptive batch of arm indices, evaluate them,
    ``tell(indices, Y)``; the model is conditioned and resparsified at each batch end.

    Everything needed to resume is in :meth:`state_dict`: observed arm indices and
    rewards, the dictionary, the kernel's and likelihood's parameters, the radius state
    and the generator state; ``load_state_dict`` on a loop built with the same arms
    and options continues with exactly the same choices.

    Example:
        >>> loop = BBKB(arms, covar_module=kernel, noise=1.0, beta=1.0, seed=0)
        >>> for _ in range(100):
        ...     indices = loop.ask()
        ...     loop.tell(indices, f(arms[indices]) + noise)
    """

    def __init__(
        self,
        arms: Tensor,
        *,
        covar_module: Kernel | None = None,
        noise: float = 1.0,
        beta: float | TheoryRadius = 1.0,
        ratio_threshold: float = 2.0,
        rule: str = "global",
        qbar: float = 2.0,
        residual_update: bool = False,
        max_batch_size: int | None = None,
        seed: int = 0,
    ) -> None:
        r"""
        Args:
            arms: ``A x d`` arm set.
            covar_module: Fixed kernel (default: NystromGP's default).
            noise: Regularization ``lambda > 0`` (the papers' ridge term; BBKB's
                theorems take ``lambda >= 1`` with the noise ``xi`` in the radius).
            beta: Papers'-scale radius or a :class:`TheoryRadius` (updated here).
            ratio_threshold: ``C~ >= 1``; 1 is BKB (one arm per batch).
            rule: Termination rule: ``"global"``, ``"local"`` or ``"global+local"``.
            qbar: Dictionary oversampling ``>= 1``.
            residual_update: In-batch updates along residual directions too.
            max_batch_size: Optional cap on the batch size.
            seed: Seed of the generator behind every random choice.
        """
        check_matrix(arms, "arms")
        check_positive(noise, "noise")
        check_at_least(ratio_threshold, "ratio_threshold", 1.0)
        check_at_least(qbar, "qbar", 1.0)
        if rule not in RULES:
            raise ValueError(f"`rule` must be one of {RULES}, got {rule!r}.")
        self.arms = arms
        self.covar_module = (
            covar_module
            if covar_module is not None
            else default_covar_module(arms.shape[-1])
        ).to(arms)
        self.noise = noise
        self.beta = beta
        self.batch_options = {
            "ratio_threshold": ratio_threshold,
            "rule": rule,
            "residual_update": residual_update,
            "max_batch_size": max_batch_size,
        }
        self.qbar = qbar
        self.generator = torch.Generator(device=arms.device).manual_seed(seed)
        self.model: NystromGP | None = None
        self.observed = torch.empty(0, dtype=torch.long, device=arms.device)
        self.rewards = torch.empty(0, dtype=arms.dtype, device=arms.device)
        self.pending: BBKBBatch | None = None

    @property
    def num_observations(self) -> int:
        return self.observed.shape[0]

    def ask(self) -> Tensor:
        r"""The next batch as a LongTensor of ``b >= 1`` arm indices (the first ask,
        with no data, draws one arm uniformly at random)."""
        if self.pending is not None:
            raise RuntimeError("`ask` called twice: `tell` the pending batch first.")
        if self.model is None:
            index = torch.randint(
                self.arms.shape[0],
                (1,),
                generator=self.generator,
                device=self.arms.device,
            )
            with torch.no_grad():
                variance = self.covar_module(self.arms[index], diag=True)
            self.pending = BBKBBatch(
                candidates=self.arms[index],
                indices=index,
                acquisition_values=torch.full_like(variance, float("nan")),
                start_variances=variance / self.noise,
                bound=1.0,
            )
        else:
            self.pending = gen_bbkb_batch(
                self.model, self.arms, beta=self.beta, **self.batch_options
            )
        return self.pending.indices

    def tell(self, indices: Tensor, rewards: Tensor) -> None:
        r"""Report rewards of the pending batch (or of its first ``b`` arms, e.g. when
        a horizon truncates it). ``indices`` must match the asked ones, in order.

        Args:
            indices: ``b`` arm indices (a prefix of the last ``ask()``).
            rewards: ``b`` (or ``b x 1``) observed rewards.
        """
        if self.pending is None:
            raise RuntimeError("`tell` called without a pending `ask`.")
        rewards = check_finite(rewards, "rewards").reshape(-1)
        b = indices.shape[0]
        if b == 0 or not torch.equal(indices, self.pending.indices[:b]):
            raise ValueError("`indices` must be a non-empty prefix of the asked batch.")
        if rewards.shape[0] != b:
            raise ValueError(f"`rewards` must hold {b} values, got {rewards.shape[0]}.")
        if isinstance(self.beta, TheoryRadius):
            self.beta.observe(self.pending.start_variances[:b])
        X, Y = self.arms[indices], rewards.unsqueeze(-1).to(self.arms)
        self.observed = torch.cat([self.observed, indices])
        self.rewards = torch.cat([self.rewards, Y.squeeze(-1)])
        self.pending = None
        if self.model is None:
            self.model = self._new_model(dictionary=None)
        else:
            self.model = self.model.condition_on_observations(
                X, Y, resparsify=True, generator=self.generator
            )

    def _new_model(self, dictionary: Tensor | None) -> NystromGP:
        return NystromGP(
            self.arms[self.observed],
            self.rewards.unsqueeze(-1),
            covar_module=self.covar_module,
            noise=self.noise,
            qbar=self.qbar,
            dictionary=dictionary,
            generator=self.generator,
        )

    def diagnostics(self) -> dict[str, float]:
        r"""Dictionary size and radius, for logging."""
        return {
            "dictionary_size": 0 if self.model is None else self.model.dictionary_size,
            "radius": self.beta.value
            if isinstance(self.beta, TheoryRadius)
            else float(self.beta),
        }

    def state_dict(self) -> dict[str, Any]:
        r"""Everything needed to resume the run exactly (pending batches excluded)."""
        if self.pending is not None:
            raise RuntimeError("`tell` the pending batch before saving.")
        return {
            "observed": self.observed.clone(),
            "rewards": self.rewards.clone(),
            "dictionary": None if self.model is None else self.model.dictionary.clone(),
            "model": None if self.model is None else self.model.state_dict(),
            "radius": self.beta.state_dict()
            if isinstance(self.beta, TheoryRadius)
            else None,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Resume from :meth:`state_dict` (the loop must use the same arms/options)."""
        self.observed = state["observed"].clone()
        self.rewards = state["rewards"].clone()
        self.pending = None
        if isinstance(self.beta, TheoryRadius) and state["radius"] is not None:
            self.beta.load_state_dict(state["radius"])
        if state["dictionary"] is None:
            self.model = None
        else:
            self.model = self._new_model(dictionary=state["dictionary"])
            self.model.load_state_dict(state["model"])
            self.model.train()
            self.model.eval()
        self.generator.set_state(state["generator"])
