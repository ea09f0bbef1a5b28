r"""S-GP-TS candidate generation: one scaled sample path per batch element.

:func:`gen_thompson_candidates` draws ``q`` scaled posterior sample paths
(:func:`~botorch_sketch.sampling.pathwise.draw_scaled_paths`) and returns the
maximizer of each:

- over a finite set of ``N`` choices, by evaluating the paths in chunks,
  ``O((m + M) N)`` per path (``m`` update points, ``M`` features) and
  ``O(chunk (m + M))`` memory; the ``N x N`` joint posterior covariance that
  ``MaxPosteriorSampling`` factorizes is never formed;
- over a box, by multi-start L-BFGS-B (BoTorch's ``gen_candidates_scipy``): each path
  starts from its own best points among ``raw_samples`` scrambled Sobol points.

It works with any model :func:`draw_scaled_paths` supports, so exact GP-TS
(``SingleTaskGP``) and S-GP-TS (:class:`~botorch_sketch.models.variational.
DecomposedSamplingSVGP`) share this code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from botorch.generation.gen import gen_candidates_scipy
from botorch.models.model import Model
from botorch.sampling.pathwise.utils import get_train_inputs
from botorch.utils.sampling import draw_sobol_samples
from torch import Tensor

from botorch_sketch.acquisition.thompson import (
    ScaledPathThompsonSampling,
    resolve_alpha,
)
from botorch_sketch.sampling.pathwise import check_path_model
from botorch_sketch.utils.validation import (
    check_allocation,
    check_bounds,
    check_generator,
    check_int,
    check_magnitude,
    check_matrix,
    check_model_dtype,
)


class ThompsonCandidates(NamedTuple):
    r"""Result of :func:`gen_thompson_candidates`.

    Attributes:
        candidates: ``q x d`` maximizers, one per path.
        values: ``q`` path values at the candidates (original outcome scale).
        indices: ``q`` row indices into ``choices`` (finite sets), else None.
    """

    candidates: Tensor
    values: Tensor
    indices: Tensor | None


def gen_thompson_candidates(
    model: Model,
    q: int,
    *,
    choices: Tensor | None = None,
    bounds: Tensor | None = None,
    num_features: int = 1024,
    alpha: float | Callable[[int], float] = 1.0,
    generator: torch.Generator | None = None,
    paths_per_basis: int | None = None,
    chunk_size: int = 4096,
    raw_samples: int | None = None,
    num_restarts: int = 10,
    options: dict[str, Any] | None = None,
) -> ThompsonCandidates:
    r"""Thompson sampling: the maximizers of ``q`` scaled posterior sample paths.

    Exactly one of ``choices`` (finite set) or ``bounds`` (box) must be given.

    Args:
        model: A model supported by :func:`draw_scaled_paths` (e.g.
            :class:`DecomposedSamplingSVGP` or ``SingleTaskGP``).
        q: Number of candidates (paths).
        choices: ``N x d`` finite candidate set.
        bounds: ``2 x d`` box.
        num_features: Even number ``M`` of random Fourier features.
        alpha: Exploration scale, a constant or a schedule ``t -> alpha_t`` (e.g.
            :class:`~botorch_sketch.acquisition.thompson.AlphaSchedule`) evaluated at
            ``t = n + 1`` for ``n`` training points.
        generator: Random number generator for the paths and the Sobol points.
        paths_per_basis: Paths sharing a feature basis (None: all).
        chunk_size: Points evaluated at once.
        raw_samples: Box only: Sobol points scored per path (default ``1000 d``).
        num_restarts: Box only: L-BFGS-B starts per path (the best raw points).
        options: Box only: options of ``gen_candidates_scipy`` (e.g. ``maxiter``).

    Returns:
        A :class:`ThompsonCandidates` ``(candidates, values, indices)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> X_next, values, idx = gen_thompson_candidates(
        ...     model, q=10, choices=arms, num_features=1000, generator=g
        ... )
    """
    check_path_model(model)
    check_int(q, "q", 1)
    check_int(num_features, "num_features", 1)
    check_allocation(q * num_features, "`q` x `num_features`")
    if (choices is None) == (bounds is None):
        raise ValueError(
            "Pass exactly one of `choices` (finite set) and `bounds` (box)."
        )
    check_int(chunk_size, "chunk_size", 1)
    check_int(num_restarts, "num_restarts", 1)
    check_generator(generator)
    (train_X,) = get_train_inputs(model, transformed=False)
    dim = train_X.shape[-1]
    if choices is not None:
        check_model_dtype(choices, "choices")
        check_matrix(choices, "choices", num_cols=dim)
        check_magnitude(choices, "choices")
    else:
        check_model_dtype(bounds, "bounds")
        check_bounds(bounds)
        check_magnitude(bounds, "bounds")
        if bounds.shape[-1] != dim:
            raise ValueError(f"`bounds` must be 2 x {dim}, got {tuple(bounds.shape)}.")
        raw_samples = 1000 * dim if raw_samples is None else raw_samples
        check_int(raw_samples, "raw_samples", 1)
        check_allocation(raw_samples * dim, "`raw_samples` x d", bounds)
        if options is not None and not isinstance(options, dict):
            raise TypeError(
                f"`options` must be a dict or None, got {type(options).__name__}."
            )
    alpha_t = resolve_alpha(alpha, train_X.shape[-2] + 1)
    acqf = ScaledPathThompsonSampling(
        model,
        num_paths=q,
        num_features=num_features,
        alpha=alpha_t,
        generator=generator,
        paths_per_basis=paths_per_basis,
    )
    if choices is not None:
        values, index = acqf.paths.topk(choices, k=1, chunk_size=chunk_size)
        index = index.squeeze(-1)
        return ThompsonCandidates(choices[index], values.squeeze(-1), index)
    return _maximize_on_box(
        acqf, bounds, raw_samples, num_restarts, generator, chunk_size, options
    )


def _maximize_on_box(
    acqf: ScaledPathThompsonSampling,
    bounds: Tensor,
    raw_samples: int,
    num_restarts: int,
    generator: torch.Generator | None,
    chunk_size: int,
    options: dict[str, Any] | None,
) -> ThompsonCandidates:
    r"""Multi-start L-BFGS-B on every path, each from its own best raw points.

    The acquisition is separable over the ``q`` positions, so one L-BFGS-B problem per
    restart (``q x d`` variables) improves every path at once; afterwards each path
    keeps its best restart, or its best raw point if no restart beat it.
    """
    seed = int(torch.randint(2**62, (1,), generator=generator))
    try:
        raw = draw_sobol_samples(bounds, n=raw_samples, q=1, seed=seed).squeeze(-2)
    except RuntimeError as error:  # allocation failure (out of memory)
        raise ValueError(
            f"`raw_samples` ({raw_samples} points) cannot be allocated: {error}"
        ) from error
    paths = acqf.paths
    k = min(num_restarts, raw_samples)
    raw_values, raw_index = paths.topk(raw, k=k, chunk_size=chunk_size)  # q x k
    starts = raw[raw_index].transpose(0, 1)  # k x q x d
    try:
        optimized, _ = gen_candidates_scipy(
            initial_conditions=starts.contiguous(),
            acquisition_function=acqf,
            lower_bounds=bounds[0],
            upper_bounds=bounds[1],
            options=options,
        )
    except (TypeError, ValueError) as error:  # everything else was checked
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"`options` were rejected by the optimizer: {error}") from error

    with torch.no_grad():
        values = paths.paired(optimized)  # k x q
    best_values, best_restart = values.max(dim=0)
    position = torch.arange(paths.num_paths, device=optimized.device)
    candidates = optimized[best_restart, position]
    keep_raw = raw_values[:, 0] > best_values
    candidates = torch.where(keep_raw.unsqueeze(-1), starts[0], candidates)
    best_values = torch.where(keep_raw, raw_values[:, 0], best_values)
    return ThompsonCandidates(candidates.detach(), best_values, None)
