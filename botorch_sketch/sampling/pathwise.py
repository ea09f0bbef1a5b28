r"""Scaled posterior sample paths (S-GP-TS; Vakili et al., NeurIPS 2021).

A posterior sample path is a random-Fourier-feature prior draw plus a pathwise update
(Wilson et al., ICML 2020), built with BoTorch's ``draw_matheron_paths``. S-GP-TS
scales the spread of every path around the posterior mean,

    f~(x) = mu(x) + alpha (f(x) - mu(x)),

which :func:`draw_scaled_paths` does by scaling every random input of the path (prior
weights, the whitened ``q(u)`` draw or the observation-noise draw) by ``alpha`` while
the prior mean and the posterior mean enter unscaled. :class:`ScaledSamplePaths`
evaluates the paths differentiably, pairs path ``j`` with the ``j``-th point of a
q-batch, and finds per-path maxima over large finite sets in chunks, ``O((m + M) N)``
per path with ``m`` update points and ``M`` features, never an ``N x N`` covariance.
The model enters only through its public interface (train inputs, kernel,
likelihood, variational strategy, DTC state).

Importing this module registers both models with BoTorch's pathwise dispatch
(``draw_matheron_paths``, ``draw_kernel_feature_paths``, ``gaussian_update``), so
``PathwiseThompsonSampling``, ``get_optimal_samples`` and the entropy-search
acquisition functions built on them sample their posteriors: ``NystromGP`` paths are
updated at the dictionary (:func:`dtc_update`), ``DecomposedSamplingSVGP`` paths by
BoTorch's variational update after a refresh of ``Z`` and ``q(u)``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from botorch.models.approximate_gp import ApproximateGPyTorchModel
from botorch.models.model import Model
from botorch.models.transforms.input import InputTransform
from botorch.sampling.pathwise import (
    GeneralizedLinearPath,
    MatheronPath,
    draw_kernel_feature_paths,
    draw_matheron_paths,
    gaussian_update,
    gen_kernel_features,
)
from botorch.sampling.pathwise.features import FeatureMap
from botorch.sampling.pathwise.posterior_samplers import DrawMatheronPaths
from botorch.sampling.pathwise.prior_samplers import (
    DrawKernelFeaturePaths,
    TPathwisePriorSampler,
    _draw_kernel_feature_paths_fallback,
)
from botorch.sampling.pathwise.update_strategies import GaussianUpdate, TPathwiseUpdate
from botorch.sampling.pathwise.utils import (
    get_input_transform,
    get_output_transform,
    get_train_inputs,
)
from botorch.utils.context_managers import delattr_ctx
from gpytorch.kernels import Kernel
from gpytorch.likelihoods import _GaussianLikelihoodBase
from gpytorch.models import ExactGP
from gpytorch.variational import VariationalStrategy
from linear_operator import to_dense
from linear_operator.operators import ZeroLinearOperator
from torch import Tensor
from torch.nn import Module, ModuleList

from botorch_sketch.models.dtc import DTCState
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.variational import DecomposedSamplingSVGP
from botorch_sketch.utils.validation import (
    check_allocation,
    check_at_least,
    check_finite,
    check_generator,
    check_int,
    check_magnitude,
    check_matrix,
    check_points,
)


class ScaledSamplePaths(Module):
    r"""``P`` scaled posterior sample paths, made of one or more BoTorch Matheron paths.

    Each block is a ``MatheronPath`` of ``P_b`` paths sharing one random-feature basis:
    ``f_j(x) = m(x) + phi(x)^T w_j + k(x, U) v_j`` (``M`` features ``phi``, ``U`` the
    inducing or training points), then the outcome untransform. Values are in the
    model's original outcome space. Evaluation checks the points (finite, ``d``
    columns, within ``finfo.max ** (1/4)``: ``TypeError`` / ``ValueError`` naming
    ``X`` or ``choices``) in ``O(X.numel())``.

    Example:
        >>> paths = draw_scaled_paths(model, 8, num_features=1024)
        >>> paths(X).shape            # X: batch x q x d -> 8 x batch x q
        >>> values, index = paths.topk(choices, k=1)   # argmax of each path
    """

    def __init__(
        self, blocks: list[MatheronPath], alpha: float, dim: int | None = None
    ) -> None:
        r"""
        Args:
            blocks: Matheron paths from ``draw_matheron_paths`` (sample shape ``P_b``).
            alpha: The exploration scale the paths were drawn with (informative).
            dim: The input dimension ``d`` (checked on evaluation), if known.
        """
        super().__init__()
        self.blocks = ModuleList(blocks)
        self.alpha = alpha
        self.dim = dim
        self._sizes = [block["prior_paths"].weight.shape[0] for block in blocks]

    @property
    def num_paths(self) -> int:
        r"""The number ``P`` of paths."""
        return sum(self._sizes)

    def forward(self, X: Tensor) -> Tensor:
        r"""Every path at every point: ``batch x q x d`` -> ``P x batch x q``."""
        return self._values(self._checked(X))

    def _values(self, X: Tensor) -> Tensor:
        return torch.cat([_block_values(block, X) for block in self.blocks], dim=0)

    def _checked(self, X: object) -> Tensor:
        r"""Return ``X`` if it holds finite ``batch x q x d`` points (``d`` =
        :attr:`dim` when known) within ``finfo.max ** (1/4)``, else raise
        ``TypeError`` / ``ValueError`` naming ``X``; ``O(X.numel())``."""
        if self.dim is not None:
            check_points(X, "X", self.dim)
        elif check_finite(X, "X").dim() < 2:
            raise ValueError(
                f"`X` must be at least 2-dimensional (batch x q x d), got shape "
                f"{tuple(X.shape)}."
            )
        return check_magnitude(X, "X")

    def paired(self, X: Tensor) -> Tensor:
        r"""Path ``j`` at ``X[..., j, :]``: ``batch x P x d`` -> ``batch x P``."""
        self._checked(X)
        if X.shape[-2] != self.num_paths:
            raise ValueError(
                f"`X` must be batch x {self.num_paths} x d (one point per path), got "
                f"shape {tuple(X.shape)}."
            )
        parts = X.split(self._sizes, dim=-2)
        return torch.cat(
            [
                _block_paired(block, part)
                for block, part in zip(self.blocks, parts, strict=True)
            ],
            dim=-1,
        )

    @torch.no_grad()
    def topk(
        self, choices: Tensor, k: int = 1, chunk_size: int = 4096
    ) -> tuple[Tensor, Tensor]:
        r"""The ``k`` largest values of every path over ``N`` choices, in chunks.

        Memory ``O(chunk_size (M + m + P))``; time ``O(N (M + m) (d + P))``.

        Args:
            choices: ``N x d`` points.
            k: Number of maxima per path, ``1 <= k <= N``.
            chunk_size: Points evaluated at once.

        Returns:
            ``(values, indices)``, both ``P x k``, values in decreasing order.
        """
        check_matrix(choices, "choices", num_cols=self.dim)
        check_magnitude(choices, "choices")
        num_choices = choices.shape[0]
        check_int(chunk_size, "chunk_size", 1)
        check_int(k, "k", 1)
        if k > num_choices:
            raise ValueError(f"`k` must be <= the number of choices, got {k}.")
        best_values = best_index = None
        for start in range(0, num_choices, chunk_size):
            chunk = choices[start : start + chunk_size]
            values = self._values(chunk)
            index = torch.arange(start, start + chunk.shape[0], device=choices.device)
            index = index.expand_as(values)
            if best_values is not None:
                values = torch.cat([best_values, values], dim=-1)
                index = torch.cat([best_index, index], dim=-1)
            best_values, position = values.topk(min(k, values.shape[-1]), dim=-1)
            best_index = index.gather(-1, position)
        return best_values, best_index


def draw_scaled_paths(
    model: Model,
    num_paths: int,
    *,
    num_features: int = 1024,
    alpha: float = 1.0,
    generator: torch.Generator | None = None,
    paths_per_basis: int | None = None,
) -> ScaledSamplePaths:
    r"""Draw ``num_paths`` paths ``mu + alpha (f - mu)`` of a GP posterior.

    Supported models (single output, no batch shape): approximate GPs with a whitened
    ``VariationalStrategy`` (e.g. :class:`DecomposedSamplingSVGP`,
    ``SingleTaskVariationalGP``), :class:`NystromGP` and exact GPs with a Gaussian
    likelihood (``SingleTaskGP``). The prior is ``num_features`` random Fourier
    features with ``N(0, alpha^2)`` weights. The update is BoTorch's
    ``gaussian_update`` with the random part scaled by ``alpha``: for the SVGP and
    ``NystromGP`` (:func:`dtc_update`), ``u = m(Z) + L (m_w + alpha S_w^{1/2} eps)``;
    for the exact GP, observation noise ``alpha * noise^{1/2} eps``. Since ``f - mu``
    is linear in these draws, the result is exactly ``mu + alpha (f - mu)``.

    Args:
        model: The model; a :class:`DecomposedSamplingSVGP` is refreshed first if its
            hyperparameters changed.
        num_paths: Number ``P >= 1`` of paths.
        num_features: Even number ``M`` of random Fourier features.
        alpha: Exploration scale ``>= 0`` (0 gives the posterior mean).
        generator: Random number generator for every draw (features, weights,
            update); None uses the global one.
        paths_per_basis: Paths sharing one random feature basis; None: all of them
            (BoTorch's behaviour, cheapest), 1: a fresh basis per path (removes the
            error common to paths that share a basis, at ~5 ms per basis).

    Returns:
        The paths.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> paths = draw_scaled_paths(model, 4, alpha=2.0, generator=g)
    """
    check_int(num_paths, "num_paths", 1)
    check_int(num_features, "num_features", 1)
    if num_features % 2:
        raise ValueError(f"`num_features` must be even, got {num_features}.")
    alpha = check_at_least(alpha, "alpha", 0.0)
    check_generator(generator)
    if paths_per_basis is not None:
        check_int(paths_per_basis, "paths_per_basis", 1)
    check_allocation(num_paths * num_features, "`num_paths` x `num_features`")
    check_path_model(model)
    model.eval()
    if isinstance(model, ApproximateGPyTorchModel):
        _drop_batched_cholesky(model.model.variational_strategy)
    per_basis = num_paths if paths_per_basis is None else paths_per_basis
    sizes = [per_basis] * (num_paths // per_basis)
    sizes += [num_paths % per_basis] if num_paths % per_basis else []
    blocks = []
    for size in sizes:
        seed = int(torch.randint(2**62, (1,), generator=generator))
        blocks.append(
            draw_matheron_paths(
                model,
                sample_shape=torch.Size([size]),
                prior_sampler=partial(
                    draw_kernel_feature_paths,
                    num_features=num_features,
                    map_generator=partial(seeded_features, seed=seed),
                    weight_generator=lambda shape: (
                        alpha * standard_normal(shape, generator)
                    ),
                ),
                update_strategy=partial(
                    scaled_update, alpha=alpha, generator=generator
                ),
            )
        )
    (train_X,) = get_train_inputs(model, transformed=False)
    return ScaledSamplePaths(blocks, alpha, dim=train_X.shape[-1])


def check_path_model(model: object) -> None:
    r"""Raise unless :func:`draw_scaled_paths` supports ``model`` (the message
    names ``model``)."""
    if isinstance(model, ApproximateGPyTorchModel):
        strategy = model.model.variational_strategy
        if not isinstance(strategy, VariationalStrategy):
            raise TypeError(
                "`model`: approximate GPs need a whitened VariationalStrategy, got "
                f"{type(strategy).__name__}."
            )
    elif isinstance(model, ExactGP):
        if not isinstance(model.likelihood, _GaussianLikelihoodBase):
            raise TypeError("`model`: exact GPs need a Gaussian likelihood.")
    elif not isinstance(model, NystromGP):
        raise TypeError(
            "`model` must be an approximate GP (ApproximateGPyTorchModel), a "
            f"NystromGP or an exact GP (e.g. SingleTaskGP), got {type(model).__name__}."
        )
    if model.num_outputs != 1 or len(model.batch_shape) > 0:
        raise ValueError("`model` must have a single output and no batch shape.")


def _drop_batched_cholesky(strategy: VariationalStrategy) -> None:
    r"""Forget a batch-shaped cached Cholesky factor of ``K_ZZ + jitter I``.

    GPyTorch's ``VariationalStrategy`` caches this factor ignoring its argument; a
    posterior call on t-batched inputs (``b x q x d``) caches it expanded to
    ``b x m x m``, and BoTorch's pathwise update (``draw_matheron_paths``) and
    :func:`scaled_update` then read that factor and fail on a shape mismatch. Plain
    BoTorch has the same problem (``draw_matheron_paths`` on a
    ``SingleTaskVariationalGP`` after a t-batched posterior call); dropping the
    stale entry makes the next use recompute the ``m x m`` factor (``O(m^3)``).
    """
    cache = getattr(strategy, "_memoize_cache", {})
    factor = cache.get("cholesky_factor")
    if factor is not None and factor.shape[:-2] != strategy.inducing_points.shape[:-2]:
        del cache["cholesky_factor"]


def standard_normal(shape: torch.Size, generator: torch.Generator | None) -> Tensor:
    r"""Standard normal draws (float64, on the generator's device)."""
    device = generator.device if generator is not None else None
    return torch.randn(shape, generator=generator, dtype=torch.float64, device=device)


def seeded_features(kernel: Kernel, num_inputs: int, num_outputs: int, seed: int):
    r"""BoTorch's random Fourier features, drawn from a fixed seed.

    BoTorch draws the frequencies from the global random state; a forked state seeded
    from the caller's generator makes them reproducible without side effects.
    """
    on_cuda = kernel.device.type == "cuda"
    with torch.random.fork_rng(devices=[kernel.device] if on_cuda else []):
        torch.random.default_generator.manual_seed(seed)  # torch.manual_seed is slow
        if on_cuda:
            torch.cuda.manual_seed(seed)
        return gen_kernel_features(
            kernel, num_inputs=num_inputs, num_outputs=num_outputs
        )


def scaled_update(
    model: Model,
    sample_values: Tensor,
    target_values: Tensor | None = None,
    *,
    alpha: float,
    generator: torch.Generator | None,
) -> GeneralizedLinearPath:
    r"""BoTorch's Gaussian pathwise update with its random draw scaled by ``alpha``."""
    if isinstance(model, NystromGP):
        return dtc_update(model, sample_values, alpha=alpha, generator=generator)
    eps = standard_normal(sample_values.shape, generator).to(sample_values)
    if isinstance(model, ApproximateGPyTorchModel):
        inner = model.model
        strategy = inner.variational_strategy
        Z = strategy.inducing_points
        # The strategy's own (cached) factor of K_ZZ + jitter I.
        chol = strategy._cholesky_factor(
            inner.covar_module(Z).add_jitter(strategy.jitter_val)
        )
        chol = to_dense(chol).to(sample_values)
        q_v = strategy.variational_distribution
        root = to_dense(q_v.lazy_covariance_matrix.cholesky()).to(sample_values)
        whitened = q_v.mean.to(sample_values) + alpha * eps @ root.mT
        target_values = inner.mean_module(Z) + whitened @ chol.mT
        return gaussian_update(
            model=model, sample_values=sample_values, target_values=target_values
        )
    (X,) = get_train_inputs(model, transformed=True)
    noise = model.likelihood.noise_covar(shape=X.shape[:-1])
    noisy_values = sample_values + alpha * eps * noise.diagonal().sqrt()
    chol = (model.covar_module(X) + noise).cholesky()
    num_train = X.shape[-2]
    return gaussian_update(
        model=model,
        sample_values=noisy_values,
        target_values=target_values,
        noise_covariance=ZeroLinearOperator(
            num_train, num_train, dtype=X.dtype, device=X.device
        ),
        scale_tril=chol,
    )


class DTCEmbedding(FeatureMap):
    r"""The whitened embedding ``z(x) = L_S^{-1} k_S(x)`` of a DTC state
    (:meth:`~botorch_sketch.models.dtc.DTCState.embed`): ``... x n x d`` ->
    ``... x n x m``, the update features of :func:`dtc_update`."""

    def __init__(
        self, kernel: Kernel, state: DTCState, input_transform: InputTransform | None
    ) -> None:
        super().__init__()
        self.kernel = kernel
        self.state = state
        self.input_transform = input_transform
        self.output_transform = None

    def forward(self, X: Tensor) -> Tensor:
        r"""``z(X)``, in the model's dtype."""
        return self.state.embed(self.kernel, X).to(X)

    @property
    def num_outputs(self) -> int:
        r"""The dictionary size ``m``."""
        return self.state.size

    @property
    def batch_shape(self) -> torch.Size:
        r"""The kernel's batch shape (empty)."""
        return self.kernel.batch_shape


def dtc_update(
    model: NystromGP,
    sample_values: Tensor,
    *,
    alpha: float = 1.0,
    generator: torch.Generator | None = None,
) -> GeneralizedLinearPath:
    r"""Pathwise update of a ``NystromGP``'s DTC posterior (Titsias' with inducing
    points ``S``), given prior path values ``f(S)`` (``sample_shape x m``):

    .. math::

        (f \mid y)(x) = f(x) + k_S(x)^T K_{SS}^{-1} (u - f(S))
        = f(x) + z(x)^T (v - L_S^{-1} f(S)), \quad
        v = w + \alpha C_w \varepsilon, \ \varepsilon \sim N(0, I_m),

    with ``u = L_S v`` and ``q(v) = N(w, C_w C_w^T)`` the whitened optimum
    (:meth:`~botorch_sketch.models.dtc.DTCState.whitened_q`): ``alpha = 1`` draws
    from the DTC posterior, ``alpha`` scales the spread around its mean. Evaluated
    on the whitened embedding ``z`` (:class:`DTCEmbedding`), as the posterior is,
    never with ``K_SS^{-1}``. ``O(m^3)`` once, then ``O(P m^2)`` for ``P`` paths;
    unbatched models only.
    """
    state = model.dtc_state
    if state.weights.dim() != 1:
        raise ValueError(
            "`model` must be unbatched for path draws, got a batched (fantasy) model."
        )
    mean_w, chol_w = state.whitened_q()
    values = sample_values.to(mean_w)
    eps = standard_normal(values.shape, generator).to(values)
    prior = torch.linalg.solve_triangular(
        state.chol_dictionary, values.unsqueeze(-1), upper=False
    ).squeeze(-1)
    weight = mean_w + alpha * eps @ chol_w.mT - prior
    feature_map = DTCEmbedding(model.covar_module, state, get_input_transform(model))
    return GeneralizedLinearPath(
        feature_map=feature_map, weight=weight.to(sample_values)
    )


@GaussianUpdate.register(NystromGP, _GaussianLikelihoodBase)
def _gaussian_update_nystrom(
    model: NystromGP,
    likelihood: _GaussianLikelihoodBase,
    *,
    sample_values: Tensor,
    **ignore: object,
) -> GeneralizedLinearPath:
    r"""BoTorch's ``gaussian_update`` for ``NystromGP``: :func:`dtc_update`."""
    return dtc_update(model, sample_values)


@DrawKernelFeaturePaths.register(NystromGP)
def _draw_kernel_feature_paths_nystrom(
    model: NystromGP, **kwargs: object
) -> GeneralizedLinearPath:
    r"""BoTorch's random-feature prior paths of a ``NystromGP`` (zero mean)."""
    return _draw_kernel_feature_paths_fallback(
        num_inputs=model.train_inputs[0].shape[-1],
        mean_module=None,
        covar_module=model.covar_module,
        input_transform=get_input_transform(model),
        output_transform=get_output_transform(model),
        **kwargs,
    )


@DrawMatheronPaths.register(NystromGP)
def _draw_matheron_paths_nystrom(
    model: NystromGP,
    *,
    sample_shape: torch.Size,
    prior_sampler: TPathwisePriorSampler,
    update_strategy: TPathwiseUpdate,
) -> MatheronPath:
    r"""BoTorch's ``draw_matheron_paths`` for ``NystromGP``: prior paths updated at
    the dictionary (:func:`dtc_update` by default), as for sparse variational GPs."""
    _check_single_output(model)
    model.eval()
    dictionary = model.dtc_state.dictionary  # transformed; refreshed if stale
    with delattr_ctx(model, "outcome_transform"):
        prior_paths = prior_sampler(model=model, sample_shape=sample_shape)
        sample_values = prior_paths.forward(dictionary)  # bypasses the transform
        update_paths = update_strategy(model=model, sample_values=sample_values)
    return MatheronPath(
        prior_paths=prior_paths,
        update_paths=update_paths,
        output_transform=get_output_transform(model),
    )


@DrawMatheronPaths.register(DecomposedSamplingSVGP)
def _draw_matheron_paths_svgp(
    model: DecomposedSamplingSVGP, **kwargs: object
) -> MatheronPath:
    r"""BoTorch's ``draw_matheron_paths`` for sparse variational GPs, after
    refreshing ``Z`` and ``q(u)`` for the current hyperparameters and dropping a
    stale batch-shaped Cholesky factor (:func:`_drop_batched_cholesky`)."""
    _check_single_output(model)
    model._ensure_current()
    model.eval()
    _drop_batched_cholesky(model.model.variational_strategy)
    return DrawMatheronPaths.dispatch(ApproximateGPyTorchModel)(model, **kwargs)


def _check_single_output(model: Model) -> None:
    r"""Path draws of the package's models are single-output: ``ValueError``
    naming ``model`` otherwise (draw each output's paths from
    ``model.subset_output([i])``)."""
    if model.num_outputs != 1:
        raise ValueError(
            f"`model` has {model.num_outputs} outputs; pathwise sampling of the "
            "package's models is single-output: use model.subset_output([i])."
        )


def _transformed(transform, X: Tensor) -> Tensor:
    if transform is None:
        return X
    return (
        transform.forward(X) if isinstance(transform, InputTransform) else transform(X)
    )


def _linear_parts(path: GeneralizedLinearPath, X: Tensor) -> tuple[Tensor, Tensor]:
    r"""Features ``... x n x F`` and bias (``... x n`` or 0) of a linear path."""
    X = _transformed(path.input_transform, X)
    features = to_dense(path.feature_map(X))
    bias = 0.0 if path.bias_module is None else path.bias_module(X)
    return features, bias


def _block_values(block: MatheronPath, X: Tensor) -> Tensor:
    r"""``... x n x d`` -> ``P_b x ... x n``: shared features times all weights."""

    def all_paths(features: Tensor, weight: Tensor, bias: Tensor | float) -> Tensor:
        bias = bias.unsqueeze(-1) if isinstance(bias, Tensor) else bias
        return features @ weight.mT + bias

    return _block_sum(block, X, all_paths, lambda total: total.movedim(-1, 0))


def _block_paired(block: MatheronPath, X: Tensor) -> Tensor:
    r"""``... x P_b x d`` -> ``... x P_b``: path ``j`` at point ``j`` only."""

    def paired(features: Tensor, weight: Tensor, bias: Tensor | float) -> Tensor:
        return (features * weight).sum(dim=-1) + bias

    return _block_sum(block, X, paired, lambda total: total)


def _block_sum(
    block: MatheronPath,
    X: Tensor,
    term: Callable[[Tensor, Tensor, Tensor | float], Tensor],
    arrange: Callable[[Tensor], Tensor],
) -> Tensor:
    r"""The prior and update paths of a block summed (``term`` of their features,
    weights and bias), arranged, then through the block's output transform."""
    X = _transformed(block.input_transform, X)
    total = 0.0
    for name in ("prior_paths", "update_paths"):
        path = block[name]
        features, bias = _linear_parts(path, X)
        total = total + term(features, path.weight, bias)
    total = arrange(total)
    if block.output_transform is not None:
        total = block.output_transform(total)
    return total
