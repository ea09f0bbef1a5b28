r"""BKB and BBKB as benchmark policies (finite arm sets), on the
:class:`~botorch_sketch.BBKB` ask/tell loop with the problem's fixed kernel.

The policies' ``radius`` option is on the Bayesian scale, ``mu + radius * sigma``
(as the exact baselines); the loop's papers'-scale radius (``BBKB(radius=...)``, the
papers' ``beta~``) is ``radius * sqrt(lambda)``.
``radius="theory"`` uses BBKB's Theorem 2 value (:class:`~botorch_sketch.TheoryRadius`)
with ``delta = 1 / T`` unless given.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from botorch_sketch.acquisition.bkb import TheoryRadius
from botorch_sketch.benchmarks.policies.base import AskTellPolicy, draw_seed
from botorch_sketch.benchmarks.policies.common import (
    DEFAULT_RADIUS,
    KernelHyperparameters,
)
from botorch_sketch.benchmarks.problems import Problem
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.options import BBKBOptions
from botorch_sketch.models.nystrom import DEFAULT_QBAR
from botorch_sketch.utils.validation import check_positive

_PRECISIONS = {"double": None, "single": torch.float32}


class BBKBPolicy(AskTellPolicy):
    r"""BBKB adaptive batches with resparsification at every batch end.

    Example:
        >>> policy = BBKBPolicy(radius=1.0, ratio_threshold=2.0, noise_variance=1.0)
    """

    name = "bbkb"

    def __init__(
        self,
        radius: float | str = DEFAULT_RADIUS,
        ratio_threshold: float = 2.0,
        rule: str = "global",
        qbar: float = DEFAULT_QBAR,
        resampling: str = "coupled",
        residual_update: bool = False,
        max_batch_size: int | None = None,
        end_fraction: float = 0.0,
        feature_precision: str = "double",
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise_variance: float | None = None,
        rkhs_bound: float = 1.0,
        delta: float | None = None,
    ) -> None:
        r"""
        Args:
            radius: Constant radius on the Bayesian scale (index
                ``mu + radius * sigma``; the loop gets ``radius * sqrt(lambda)``)
                or ``"theory"``.
            ratio_threshold: ``C~ >= 1`` of the batch rule.
            rule: ``"global"``, ``"local"`` or ``"global+local"``.
            qbar: Dictionary oversampling.
            resampling: ``"coupled"`` (persistent draws) or ``"independent"``.
            residual_update: In-batch updates along residual directions too.
            max_batch_size: Cap on batch sizes (default: the loop's, 1,000).
            end_fraction: A full batch ends once this fraction of its arms are
                done (asynchronous use; see
                :func:`~botorch_sketch.asynchronous_options`).
            feature_precision: ``"double"`` or ``"single"``: precision of the
                cached ``A x m`` features (the rest stays in the arms' dtype).
            lengthscale: Override of the problem's kernel lengthscale.
            outputscale: Override of the kernel variance.
            noise_variance: The regularization ``lambda`` (default: the problem's).
            rkhs_bound: ``F`` of the theory radius.
            delta: Confidence of the theory radius (default ``1 / T``).
        """
        if radius != "theory":
            check_positive(radius, "radius")
        self.radius = radius
        if feature_precision not in _PRECISIONS:
            raise ValueError(
                f"`feature_precision` must be one of {sorted(_PRECISIONS)}, got "
                f"{feature_precision!r}."
            )
        #: The loop's options but its ``noise`` and ``radius`` (set per problem)
        self.options = BBKBOptions(
            ratio_threshold=ratio_threshold,
            rule=rule,
            qbar=qbar,
            resampling=resampling,
            residual_update=residual_update,
            end_fraction=end_fraction,
            feature_dtype=_PRECISIONS[feature_precision],
            # None: the loop's default cap
            **({} if max_batch_size is None else {"max_batch_size": max_batch_size}),
        )
        self.feature_precision = feature_precision
        self.overrides = {
            "lengthscale": lengthscale,
            "outputscale": outputscale,
            "noise_variance": noise_variance,
        }
        self.rkhs_bound = rkhs_bound
        self.delta = delta

    def build(self, problem: Problem, horizon: int, generator: torch.Generator) -> BBKB:
        if not problem.is_finite:
            raise ValueError(f"`{self.name}` needs a finite problem (arms).")
        hp = KernelHyperparameters.from_problem(problem, **self.overrides)
        noise = hp.noise_variance
        if self.radius == "theory":
            papers_radius: float | TheoryRadius = TheoryRadius(
                noise_std=problem.noise_std,
                rkhs_bound=self.rkhs_bound,
                delta=self.delta if self.delta is not None else 1.0 / horizon,
                noise=noise,
                ratio_threshold=self.options.ratio_threshold,
            )
        else:
            papers_radius = float(self.radius) * math.sqrt(noise)
        return BBKB(
            problem.arms,
            replace(self.options, noise=noise, radius=papers_radius),
            covar_module=hp.kernel(
                dtype=problem.arms.dtype, device=problem.arms.device
            ),
            seed=draw_seed(generator),
        )

    def ask(self) -> Tensor:
        # a batch never needs more arms than the horizon has left
        return self.loop.ask(max(self.horizon - self.loop.num_observations, 1))

    def diagnostics(self) -> dict[str, float]:
        return self.loop.diagnostics()


class BKBPolicy(BBKBPolicy):
    r"""BKB: BBKB with ``C~ = 1`` (one arm per step, resparsified at every step).

    Example:
        >>> policy = BKBPolicy(radius=1.0, noise_variance=1.0)
    """

    name = "bkb"

    def __init__(
        self,
        radius: float | str = DEFAULT_RADIUS,
        qbar: float = DEFAULT_QBAR,
        resampling: str = "coupled",
        feature_precision: str = "double",
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise_variance: float | None = None,
        rkhs_bound: float = 1.0,
        delta: float | None = None,
    ) -> None:
        super().__init__(
            radius=radius,
            ratio_threshold=1.0,
            qbar=qbar,
            resampling=resampling,
            feature_precision=feature_precision,
            lengthscale=lengthscale,
            outputscale=outputscale,
            noise_variance=noise_variance,
            rkhs_bound=rkhs_bound,
            delta=delta,
        )
