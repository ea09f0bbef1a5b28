r"""Dictionary sampling for BKB and BBKB: which observed points become inducing
points, by ridge leverage scores (Calandriello et al., COLT 2019), with fresh or
persistent (coupled) uniforms."""

from __future__ import annotations

import torch
from torch import Tensor

from botorch_sketch.utils.validation import (
    check_at_least,
    check_finite,
    check_generator,
)


def inclusion_probabilities(
    scaled_variances: Tensor, counts: Tensor, qbar: float
) -> Tensor:
    r"""Probability that each distinct point enters the dictionary (BKB's ridge
    leverage score sampling).

    A distinct observed point ``x_i`` pulled ``c_i`` times enters with probability
    ``p_i = min(1, qbar c_i sigma~^2(x_i))``: ``sigma~^2`` is the posterior variance
    on the papers' scale (Bayesian variance divided by ``lambda``), an estimate of
    the ridge leverage score of one copy, so ``c_i sigma~^2(x_i)`` is the leverage of
    the point with its multiplicity, and ``sum_i p_i / qbar`` estimates ``d_eff``
    (capped). The Nystrom projection only depends on which distinct points are
    kept, so kept points need no weights. (Drawing each copy independently instead
    would drop a well-pulled arm, ``c sigma~^2 ~ 1``, with probability
    ``~exp(-qbar)`` at every resampling, and its variance would jump back to the
    prior residual.)

    Args:
        scaled_variances: ``u`` posterior variances on the papers' scale.
        counts: ``u`` multiplicities (number of pulls of each point).
        qbar: Oversampling factor ``>= 1``.

    Returns:
        ``u`` probabilities ``min(1, qbar count sigma~^2)``.
    """
    check_finite(scaled_variances, "scaled_variances")
    check_finite(counts, "counts")
    check_at_least(qbar, "qbar", 1.0)
    if scaled_variances.dim() != 1 or (scaled_variances < 0).any():
        raise ValueError("`scaled_variances` must be a 1-d tensor of values >= 0.")
    if counts.shape != scaled_variances.shape or (counts < 0).any():
        raise ValueError(
            f"`counts` must hold values >= 0, one per entry of `scaled_variances` "
            f"({scaled_variances.shape[0]}), got shape {tuple(counts.shape)}."
        )
    return (qbar * counts * scaled_variances).clamp(0.0, 1.0)


def sample_dictionary(
    probabilities: Tensor,
    generator: torch.Generator | None = None,
    *,
    draws: Tensor | None = None,
) -> Tensor:
    r"""Bernoulli inclusions ``draw_i < p_i``; never return an empty selection.

    Without ``draws`` the uniforms are fresh (independent resampling). With
    ``draws``, one persistent uniform per point kept across resamplings (the coupling
    of sequential ridge-leverage-score samplers: SQUEAK, Calandriello, Lazaric and
    Valko, AISTATS 2017; online row sampling, Cohen, Musco and Pachocki, APPROX
    2016), each resampling still includes point ``i`` with probability ``p_i``, but
    only points whose probability crossed their draw enter or leave, so the
    dictionary changes little between batches. The trade-off: successive
    dictionaries are dependent (a point with a high draw stays out while its
    probability stays below it), and the probabilities, computed from earlier
    dictionaries, are no longer independent of the draws, whereas BKB's analysis
    resamples independently at every step.

    Args:
        probabilities: ``u`` inclusion probabilities.
        generator: Random number generator for fresh draws.
        draws: Optional ``u`` persistent uniforms in ``[0, 1)``.

    Returns:
        Sorted LongTensor of the selected indices; if no point was drawn, the index of
        the most probable point.
    """
    check_finite(probabilities, "probabilities")
    if probabilities.dim() != 1 or probabilities.shape[0] == 0:
        raise ValueError(
            "`probabilities` must be a non-empty 1-d tensor, got shape "
            f"{tuple(probabilities.shape)}."
        )
    check_generator(generator)
    if draws is not None:
        check_finite(draws, "draws")
        if ((draws < 0) | (draws >= 1)).any():
            raise ValueError("`draws` must lie in [0, 1).")
    if draws is None:
        # on the generator's device (a CPU generator may drive CUDA data), then moved
        device = probabilities.device if generator is None else generator.device
        draws = torch.rand(
            probabilities.shape,
            generator=generator,
            dtype=probabilities.dtype,
            device=device,
        ).to(probabilities.device)
    elif draws.shape != probabilities.shape:
        raise ValueError(
            f"`draws` must have the shape of `probabilities` "
            f"{tuple(probabilities.shape)}, got {tuple(draws.shape)}."
        )
    selected = torch.nonzero(draws < probabilities).squeeze(-1)
    if selected.numel() == 0:
        selected = probabilities.argmax().reshape(1)
    return selected
