r"""Thompson-sampling baselines: S-GP-TS and exact GP-TS.

Each is an ask/tell object built for one run, ``Class(problem, horizon, generator,
**options)``. All use the fixed kernel and noise of
:meth:`~.common.KernelHyperparameters.from_problem`, a zero prior mean, one scaled
sample path per batch element with ``M`` random Fourier features, and ``num_initial``
uniformly random first points.

- :class:`ModelSGPTS` (``"sgpts"``) and :class:`ModelExactGPTS` (``"exact-gpts"``):
  a :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` or a
  ``SingleTaskGP`` updated after every batch; paths maximized over the arms or the box
  by :func:`~botorch_sketch.generation.thompson.gen_thompson_candidates`.
- :class:`CachedSGPTS` (``"sgpts-cached"``) and :class:`CachedExactGPTS`
  (``"exact-gpts-incremental"``): finite problems only, keeping their work between
  steps (:mod:`botorch_sketch.generation.thompson_arms`).
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from gpytorch.means import ZeroMean
from torch import Tensor

from benchmarks.policies.common import (
    KernelHyperparameters,
    check_finite,
    resolve_cache_dtype,
)
from benchmarks.problems import Problem
from botorch_sketch.acquisition.thompson import resolve_alpha
from botorch_sketch.generation.thompson import gen_thompson_candidates
from botorch_sketch.generation.thompson_arms import (
    CachedSparseThompson,
    IncrementalExactThompson,
)
from botorch_sketch.models.variational import DecomposedSamplingSVGP
from botorch_sketch.sampling.arm_features import ArmFeatureCache
from botorch_sketch.utils.validation import check_at_least, check_int, check_positive

Alpha = float | Callable[[int], float]


#: The ``cache_dtype`` options of the cached samplers (None: the arms' dtype).
def _check_quality(value: str) -> str:
    r"""Validate an ``inducing_quality`` option."""
    if value not in ("variance", "improvement"):
        raise ValueError(
            f"`inducing_quality` must be 'variance' or 'improvement', got {value!r}."
        )
    return value


class _Thompson:
    r"""Settings and fixed kernel shared by the Thompson-sampling baselines.

    Args:
        problem, horizon, generator: The run.
        batch_size: Points per ``ask()`` (one sample path each).
        num_initial: Uniformly random points of the first ``ask()``.
        num_features: Random Fourier features ``M`` per path (even).
        alpha: Exploration scale: a constant or a schedule ``t -> alpha_t`` (e.g.
            :class:`~botorch_sketch.acquisition.thompson.AlphaSchedule`).
        lengthscale: Override of ``problem.hyperparameters["lengthscale"]``.
        outputscale: Override of the kernel variance.
        noise: Override of the noise variance (default
            ``problem.noise_std ** 2``).
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        batch_size: int = 1,
        num_initial: int = 1,
        num_features: int = 1000,
        alpha: Alpha = 1.0,
        lengthscale: float | None = None,
        outputscale: float | None = None,
        noise: float | None = None,
    ) -> None:
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.num_initial = check_int(num_initial, "num_initial", 1)
        self.num_features = check_int(num_features, "num_features", 1)
        if num_features % 2:
            raise ValueError(f"`num_features` must be even, got {num_features}.")
        if not callable(alpha):  # else a schedule
            check_at_least(alpha, "alpha", 0.0)
        self.alpha = alpha
        self.problem = problem
        self.generator = generator
        self.hyperparameters = KernelHyperparameters.from_problem(
            problem,
            lengthscale=lengthscale,
            outputscale=outputscale,
            noise=noise,
        )

    def _kernel(self, like: Tensor):
        return self.hyperparameters.kernel(dtype=like.dtype, device=like.device)

    def diagnostics(self) -> dict[str, float]:
        return {}


class _ModelThompson(_Thompson):
    r"""Ask/tell loop of the model-based Thompson samplers (finite or box).

    Args:
        raw_samples: Box problems: Sobol points scored per path (default ``1000 d``).
        num_restarts: Box problems: L-BFGS-B starts per path.
        chunk_size: Arms evaluated at once.
        settings: Those of :class:`_Thompson`.
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        raw_samples: int | None = None,
        num_restarts: int = 10,
        chunk_size: int = 4096,
        **settings: Any,
    ) -> None:
        if raw_samples is not None:
            check_int(raw_samples, "raw_samples", 1)
        self.raw_samples = raw_samples
        self.num_restarts = check_int(num_restarts, "num_restarts", 1)
        self.chunk_size = check_int(chunk_size, "chunk_size", 1)
        super().__init__(problem, horizon, generator, **settings)
        self.model: Model | None = None

    def ask(self, max_arms: int | None = None) -> Tensor:
        problem = self.problem
        if self.model is None:
            return self.problem.uniform_choices(self.num_initial, self.generator)
        result = gen_thompson_candidates(
            self.model,
            self.batch_size,
            choices=problem.arms,
            bounds=None if problem.is_finite else problem.bounds,
            num_features=self.num_features,
            alpha=self.alpha,
            generator=self.generator,
            chunk_size=self.chunk_size,
            raw_samples=self.raw_samples,
            num_restarts=self.num_restarts,
        )
        return result.indices if problem.is_finite else result.candidates

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        problem = self.problem
        X = problem.arms[chosen] if problem.is_finite else chosen
        Y = rewards.detach().to(X).reshape(-1, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InputDataWarning)  # raw rewards by design
            self.model = self._observe(X.detach(), Y)

    @abstractmethod
    def _observe(self, X: Tensor, Y: Tensor) -> Model:
        r"""Return the model conditioned on all data after adding ``(X, Y)``."""


class ModelSGPTS(_ModelThompson):
    r"""S-GP-TS (Vakili et al., NeurIPS 2021) on a decomposed-sampling SVGP.

    After every batch the inducing points (at most ``num_inducing``) are re-selected
    from all observations and ``q(u)`` is set to Titsias' optimum, ``O(n m^2)``. The
    paper's setting is ``num_inducing=100``, ``num_features=1000``, ``alpha=1``.

    Args:
        num_inducing: Maximal number ``m`` of inducing points.
        randomized_selection: Randomized (instead of greedy) inducing selection.
        inducing_quality: ``"variance"`` (the paper's) or ``"improvement"`` (see
            :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP`).
        settings: Those of :class:`_ModelThompson` and :class:`_Thompson`.

    Example:
        >>> ts = ModelSGPTS(problem, 100, torch.Generator(), num_inducing=100)
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        num_inducing: int = 100,
        randomized_selection: bool = False,
        inducing_quality: str = "variance",
        **settings: Any,
    ) -> None:
        self.num_inducing = check_int(num_inducing, "num_inducing", 1)
        self.randomized_selection = bool(randomized_selection)
        self.inducing_quality = _check_quality(inducing_quality)
        super().__init__(problem, horizon, generator, **settings)

    def _observe(self, X: Tensor, Y: Tensor) -> Model:
        if self.model is not None:
            self.model.update(X, Y)
            return self.model
        return DecomposedSamplingSVGP(
            X,
            Y,
            self.num_inducing,
            covar_module=self._kernel(X),
            mean_module=ZeroMean(),
            noise=self.hyperparameters.noise,
            randomized_selection=self.randomized_selection,
            inducing_quality=self.inducing_quality,
            generator=self.generator,
        )

    def diagnostics(self) -> dict[str, float]:
        if self.model is None:
            return {}
        return {"num_inducing": float(self.model.inducing_points.shape[-2])}


class ModelExactGPTS(_ModelThompson):
    r"""Exact GP-TS as a plain BoTorch loop: a ``SingleTaskGP`` (fixed kernel, zero
    mean, fixed noise) rebuilt on all observations after every batch, paths by the
    exact pathwise update (``O(n^3)``).

    Example:
        >>> ts = ModelExactGPTS(problem, 100, torch.Generator(), num_features=1000)
    """

    _X: Tensor | None = None
    _Y: Tensor | None = None

    def _observe(self, X: Tensor, Y: Tensor) -> Model:
        if self._X is not None:
            X, Y = torch.cat([self._X, X]), torch.cat([self._Y, Y])
        self._X, self._Y = X, Y
        model = SingleTaskGP(
            X,
            Y,
            train_Yvar=torch.full_like(Y, self.hyperparameters.noise),
            covar_module=self._kernel(X),
            mean_module=ZeroMean(),
            outcome_transform=None,
        )
        return model.eval()


class _CachedThompson(_Thompson):
    r"""Ask/tell loop of the finite-arm Thompson samplers with cached work.

    Args:
        memory_budget_gib: GiB the cached features and kernel columns may take
            (past it they are recomputed in chunks at every draw).
        cache_dtype: A key of :data:`~.common.CACHE_DTYPES`: the cache's storage dtype.
        prior_block: Prior weights drawn ahead for batches smaller than this
            (:class:`~botorch_sketch.sampling.arm_features.PriorPathBank`).
        settings: Those of :class:`_Thompson`.
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        memory_budget_gib: float = 8.0,
        cache_dtype: str | None = None,
        prior_block: int = 64,
        **settings: Any,
    ) -> None:
        check_positive(memory_budget_gib, "memory_budget_gib")
        self.prior_block = check_int(prior_block, "prior_block", 1)
        check_finite(problem, type(self).__name__)
        super().__init__(problem, horizon, generator, **settings)
        self.cache = ArmFeatureCache(
            problem.arms,
            self._kernel(problem.arms),
            self.num_features,
            generator=generator,
            memory_budget=memory_budget_gib * 2**30,
            cache_dtype=resolve_cache_dtype(cache_dtype),
        )

    def ask(self, max_arms: int | None = None) -> Tensor:
        sampler = self.sampler
        if sampler.num_observations == 0:
            return self.problem.uniform_choices(self.num_initial, self.generator)
        alpha = resolve_alpha(self.alpha, sampler.num_observations + 1)
        return sampler.sample(self.batch_size, alpha, self.generator).indices

    def tell(self, chosen: Tensor, rewards: Tensor) -> None:
        self.sampler.observe(chosen, rewards.detach())

    def diagnostics(self) -> dict[str, float]:
        return {"memory_gib": self.sampler.memory_bytes / 2**30}


class CachedSGPTS(_CachedThompson):
    r"""S-GP-TS on a finite problem with cached work (:class:`CachedSparseThompson`).

    The model of :class:`ModelSGPTS` with the prior features of all arms computed once
    per run: ``O(N (M + m) q + m^3)`` per step while the inducing set is unchanged,
    ``O(n m^2)`` more when it changes.

    Args:
        num_inducing: Maximal number ``m`` of inducing points.
        inducing_quality: ``"variance"`` or ``"improvement"``.
        settings: Those of :class:`_CachedThompson` and :class:`_Thompson`.
    """

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        *,
        num_inducing: int = 100,
        inducing_quality: str = "variance",
        **settings: Any,
    ) -> None:
        self.num_inducing = check_int(num_inducing, "num_inducing", 1)
        self.inducing_quality = _check_quality(inducing_quality)
        super().__init__(problem, horizon, generator, **settings)
        self.sampler = CachedSparseThompson(
            self.cache,
            self.hyperparameters.noise,
            self.num_inducing,
            inducing_quality=self.inducing_quality,
            prior_block=self.prior_block,
        )

    def diagnostics(self) -> dict[str, float]:
        result = super().diagnostics()
        if self.sampler.num_observations:
            result["num_inducing"] = float(self.sampler.noise_size)
            result["reselections"] = float(self.sampler.reselections)
        return result


class CachedExactGPTS(_CachedThompson):
    r"""Exact GP-TS on a finite problem with cached work
    (:class:`IncrementalExactThompson`): ``O(N (M + t) + t^2)`` per step."""

    def __init__(
        self,
        problem: Problem,
        horizon: int,
        generator: torch.Generator,
        **settings: Any,
    ) -> None:
        super().__init__(problem, horizon, generator, **settings)
        self.sampler = IncrementalExactThompson(
            self.cache, self.hyperparameters.noise, prior_block=self.prior_block
        )
