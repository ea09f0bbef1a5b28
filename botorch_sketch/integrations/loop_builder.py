r"""How the Ray Tune searchers and the Optuna samplers build their loops
(:class:`LoopBuilder`): BBKB's options for ``W`` asynchronous workers
(``max_concurrent``, ``num_workers``), no repeats on a continuous space, the options
object, and one loop per outcome when there are several (:data:`StudyLoop`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.generation.ask_tell import ArmLoop
from botorch_sketch.generation.bbkb_loop import asynchronous_options
from botorch_sketch.generation.hyperparameters import FIT_INDUCING
from botorch_sketch.generation.multi_outcome import MultiOutcomeLoop
from botorch_sketch.generation.options import (
    BBKBOptions,
    SGPTSOptions,
    merged_options,
)
from botorch_sketch.utils.validation import check_kernel

#: Seeds of the outcome loops of a study with several objectives or constraints:
#: the sampler's or searcher's seed plus this times the outcome (mod 2^64).
OUTCOME_SEED_STRIDE = 1_000_003
#: The loop of a study: one ``BBKB`` or ``SGPTS`` for one objective, a
#: :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop` of them for
#: several objectives or constraints.
StudyLoop = ArmLoop | MultiOutcomeLoop


def bbkb_worker_options(num_workers: int | None) -> dict[str, Any]:
    r""":func:`~botorch_sketch.generation.bbkb_loop.asynchronous_options` for
    ``num_workers`` (its ratio threshold follows the loop's kernel and ``lambda``);
    none for None or one worker (the loop's own defaults)."""
    if num_workers is None or num_workers == 1:
        return {}
    return asynchronous_options(num_workers)


class LoopBuilder:
    r"""What a Ray Tune searcher or an Optuna sampler builds its loops with: an
    options object of ``loop_class`` (None: the defaults for the workers at hand,
    :meth:`_worker_options`), keyword overrides of its fields (explicit ones win)
    and the fixed kernel (None: learned).

    A study is judged by the best value it finds, not by the loop's cumulative
    regret. With a learned kernel, an unset ``fit_inducing`` becomes
    :data:`~botorch_sketch.generation.hyperparameters.FIT_INDUCING` (refits on up
    to 100 inducing points, where ``BBKB`` used directly, a bandit, fits on 50), and
    on a space with a continuous parameter an unset ``min_repeat_reduction``
    becomes ``inf``: no configuration is asked twice. A repeat is never the most
    informative trial there (an unmeasured configuration next to it measures
    nearly the same ``f`` and more of the space), and the loops would otherwise
    spend one on a deterministic objective before the told values show it
    (:mod:`~botorch_sketch.generation.repeats`)."""

    loop_class: type

    def _keep_loop_settings(
        self,
        options: BBKBOptions | SGPTSOptions | None,
        covar_module: Kernel | None,
        overrides: dict[str, Any],
    ) -> None:
        r"""Keep the settings, checked here: a bad option or kernel fails before
        the first trial."""
        options_class, owner = self.loop_class.options_class, type(self).__name__
        merged_options(options_class, options, overrides, owner)
        if covar_module is not None:
            check_kernel(covar_module)
        self._options, self._overrides = options, overrides
        self._covar_module = covar_module

    def _worker_options(self) -> dict[str, Any]:
        r"""Loop options for the workers (none by default)."""
        return {}

    def _build_loop(self, features: Tensor, seed: int, continuous: bool) -> ArmLoop:
        r"""The loop on ``features``: the options (or the workers' defaults) with
        the overrides, with a learned kernel the study's settings (the refits'
        cap if unset, no repeats if ``continuous`` and the repeat rule unset), the
        kernel and ``seed``."""
        options_class = self.loop_class.options_class
        options = self._options
        if options is None and (worker_options := self._worker_options()):
            options = options_class(**worker_options)
        options = merged_options(
            options_class, options, self._overrides, type(self).__name__
        )
        if self._covar_module is None:  # a learned kernel
            study: dict[str, Any] = {}
            if options.fit_inducing is None:
                study["fit_inducing"] = FIT_INDUCING
            if continuous and options.min_repeat_reduction is None:
                study["min_repeat_reduction"] = math.inf
            options = dataclasses.replace(options, **study)
        return self.loop_class(
            features, options, covar_module=self._covar_module, seed=seed
        )

    def _build_outcome_loop(
        self,
        features: Tensor,
        seed: int,
        continuous: bool,
        num_objectives: int,
        num_constraints: int,
    ) -> StudyLoop:
        r"""The loop of :meth:`_build_loop` for one objective and no constraint,
        else a :class:`~botorch_sketch.generation.multi_outcome.MultiOutcomeLoop`
        of one per outcome (seeds ``seed + i OUTCOME_SEED_STRIDE``, mod 2^64)."""
        count = num_objectives + num_constraints
        loops = [
            self._build_loop(
                features, (seed + i * OUTCOME_SEED_STRIDE) % 2**64, continuous
            )
            for i in range(count)
        ]
        if count == 1:
            return loops[0]
        return MultiOutcomeLoop(loops, num_objectives, seed)
