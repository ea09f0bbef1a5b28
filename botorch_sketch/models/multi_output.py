r"""Posteriors of several independent outputs sharing the inputs, as BoTorch's
batched multi-output models (``SingleTaskGP`` with an ``n x o`` ``train_Y``) give
them.

Both package models keep their ``o`` outputs as a batch dimension inside the model
and return ``batch x q x o`` posteriors through BoTorch's own
``BatchedMultiOutputGPyTorchModel.posterior`` (output dimension inserted with
``add_output_dim``, outputs assembled into a ``MultitaskMultivariateNormal``).
:func:`multi_output_posterior` adds what that method lacks: with ``output_indices``
and an outcome transform, the transform is subset to the same outputs before it
untransforms the posterior (BoTorch 0.18's applies the full transform to the subset
and fails on the shape mismatch), and a single output index gives the posterior of
``model.subset_output`` (BoTorch's fails to assemble one output).
"""

from __future__ import annotations

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.gpytorch import BatchedMultiOutputGPyTorchModel, GPyTorchModel
from botorch.posteriors import Posterior
from botorch.utils.context_managers import delattr_ctx
from torch import Tensor


def multi_output_posterior(
    model: GPyTorchModel,
    X: Tensor,
    output_indices: list[int] | None,
    observation_noise: bool | Tensor,
    posterior_transform: PosteriorTransform | None,
) -> Posterior:
    r"""BoTorch's batched multi-output posterior of ``model`` at ``batch x q x d``
    points ``X`` over the outputs ``output_indices`` (checked non-negative indices;
    None: all ``o``): ``batch x q x len(output_indices)``.

    ``model`` must follow the ``BatchedMultiOutputGPyTorchModel`` layout:
    ``_num_outputs``, ``_input_batch_shape``, ``_apply_noise`` and a call that maps
    ``batch x 1 x q x d`` transformed inputs to a ``batch x o`` batch of normals.
    """
    posterior_fn = BatchedMultiOutputGPyTorchModel.posterior
    subset = output_indices is not None and list(output_indices) != list(
        range(model._num_outputs)
    )
    if subset and len(output_indices) == 1:
        # BoTorch assembles a MultitaskMultivariateNormal of two or more outputs
        # only: one output is the single-output model's posterior
        return model.subset_output(list(output_indices)).posterior(
            X,
            observation_noise=observation_noise,
            posterior_transform=posterior_transform,
        )
    if not (subset and hasattr(model, "outcome_transform")):
        return posterior_fn(
            model,
            X,
            output_indices=output_indices,
            observation_noise=observation_noise,
            posterior_transform=posterior_transform,
        )
    transform = model.outcome_transform.subset_output(list(output_indices))
    with delattr_ctx(model, "outcome_transform"):
        posterior = posterior_fn(
            model,
            X,
            output_indices=output_indices,
            observation_noise=observation_noise,
        )
    posterior = transform.untransform_posterior(posterior, X=model.transform_inputs(X))
    if posterior_transform is not None:
        return posterior_transform(posterior=posterior, X=X)
    return posterior


def output_rows(indices: list[int], t: Tensor) -> Tensor:
    r"""The rows ``indices`` of the output dimension (``-2``) of ``t``
    (``... x o x k``): ``... x len(indices) x k``, or ``... x k`` for one index
    (a model of one output has no output dimension)."""
    picked = t.index_select(-2, torch.tensor(indices, device=t.device))
    return picked if len(indices) > 1 else picked.squeeze(-2)
