r"""Time NystromGP's posterior mean and variance over a large candidate set against
BoTorch's exact ``SingleTaskGP`` on the same data and fixed hyperparameters.

With ``--acquisition-sizes``, also time two acquisition workloads on the package's
models against ``SingleTaskGP`` (:func:`time_acquisitions`), each from the data
onwards (a fresh model):

- ``kg``: ``fantasize`` of ``num_points`` q-batches, then one-shot
  ``qKnowledgeGradient`` on ``num_points`` candidate sets, value and gradient;
- ``nehvi``: ``qLogNoisyExpectedHypervolumeImprovement`` on a two-output model,
  baseline the last ``num_baseline`` observations, value and gradient.

Run ``python -m benchmarks scoring --help``.
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy

import torch
from botorch.acquisition import qKnowledgeGradient
from botorch.acquisition.multi_objective import qLogNoisyExpectedHypervolumeImprovement
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.means import ZeroMean
from torch import Tensor

from benchmarks.arguments import (
    DTYPES,
    OneLineParser,
    add_options,
)
from benchmarks.writers import text_table
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.variational import DecomposedSamplingSVGP

#: The models :func:`time_acquisitions` times, the control first.
MODELS = ("exact", "nystrom", "svgp")


def _timed(fn: Callable[[], object], device: torch.device) -> tuple[object, float]:
    r"""``fn()`` and its wall time, waiting for the device's queued work."""
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    synchronize()
    start = time.perf_counter()
    out = fn()
    synchronize()
    return out, time.perf_counter() - start


def _timed_or_nan(fn: Callable[[], object], device: torch.device, label: str) -> float:
    r"""The wall time of ``fn()``, or NaN with a warning naming ``label`` when it
    runs out of memory."""
    try:
        return _timed(fn, device)[1]
    except (RuntimeError, MemoryError) as error:  # torch's allocators raise these
        if "memory" not in str(error).lower():
            raise
        message = str(error).splitlines()[0][:200]
        warnings.warn(f"{label}: out of memory ({message})", stacklevel=2)
        return float("nan")


def _exact_gp(X: Tensor, Y: Tensor, covar_module: Kernel, noise: float) -> SingleTaskGP:
    r"""``SingleTaskGP`` on ``n x d`` ``X`` and ``n x o`` ``Y`` with zero mean, the
    fixed kernel and noise variance, and no transforms."""
    return SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, noise),
        covar_module=covar_module,
        mean_module=ZeroMean(),
        outcome_transform=None,
    ).eval()


def _builder(
    name: str, X: Tensor, kernel: ScaleKernel, noise: float, qbar: float, m: int
) -> Callable[[Tensor], Model]:
    r"""A function of ``n x o`` targets that builds model ``name`` on ``X`` with a
    copy of ``kernel``, noise ``noise`` and prior mean 0."""

    def build(Y: Tensor) -> Model:
        covar = ScaleKernel(RBFKernel()).to(X)
        covar.load_state_dict(kernel.state_dict())
        if name == "exact":
            return _exact_gp(X, Y, covar, noise)
        if name == "nystrom":
            generator = torch.Generator(device=X.device).manual_seed(0)
            return NystromGP(
                X, Y, covar_module=covar, noise=noise, qbar=qbar, generator=generator
            )
        return DecomposedSamplingSVGP(
            X,
            Y,
            num_inducing=m,
            covar_module=covar,
            mean_module=ZeroMean(),
            noise=noise,
        ).eval()

    return build


def time_acquisitions(
    num_train: int,
    dim: int = 8,
    lengthscale: float = 1.0,
    noise: float = 1.0,
    qbar: float = 2.0,
    num_inducing: int = 256,
    q: int = 2,
    num_fantasies: int = 4,
    num_points: int = 4,
    num_baseline: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    models: tuple[str, ...] = MODELS,
    repeats: int = 2,
) -> dict[str, float]:
    r"""Time the ``kg`` and ``nehvi`` measurements (module docstring) of
    :data:`MODELS` after ``num_train`` observations in ``[0, 1]^dim``.

    Args:
        models: The subset of :data:`MODELS` to time (ratios need ``exact``).
        repeats: Runs per measurement; the best counts (first calls compile), and
            one that runs out of memory is not repeated.

    Returns:
        ``{f"{model}_{measurement}_s": seconds, f"{measurement}_speedup_{model}":
        ratio}`` (the ratios for ``nystrom`` and ``svgp``, when timed with
        ``exact``); NaN for a measurement that ran out of memory.
    """
    unknown = set(models) - set(MODELS)
    if unknown:
        raise ValueError(f"`models` must be among {MODELS}, got {sorted(unknown)}.")
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(num_train, dim, generator=gen, dtype=dtype)
    Y = torch.stack([torch.sin(3 * X).sum(-1), torch.cos(2 * X).sum(-1)], dim=-1)
    Y = Y + noise**0.5 * torch.randn(num_train, 2, generator=gen, dtype=dtype)
    shape = (num_points, q + num_fantasies, dim)
    kg_points = torch.rand(*shape, generator=gen, dtype=dtype).to(device)
    points = torch.rand(num_points, q, dim, generator=gen, dtype=dtype).to(device)
    X, Y = X.to(device), Y.to(device)
    kernel = ScaleKernel(RBFKernel()).to(X)
    kernel.base_kernel.lengthscale = lengthscale
    ref_point = Y.min(dim=0).values.tolist()

    def knowledge_gradient(model: Model) -> None:
        sampler = SobolQMCNormalSampler(torch.Size([num_fantasies]), seed=seed)
        model.fantasize(points, sampler)
        acquisition = qKnowledgeGradient(model, num_fantasies=num_fantasies)
        candidates = kg_points.clone().requires_grad_(True)
        acquisition(candidates).sum().backward()

    def hypervolume(model: Model) -> None:
        acquisition = qLogNoisyExpectedHypervolumeImprovement(
            model,
            ref_point=ref_point,
            X_baseline=X[-num_baseline:],
            sampler=SobolQMCNormalSampler(torch.Size([32]), seed=seed),
        )
        candidates = points.clone().requires_grad_(True)
        acquisition(candidates).sum().backward()

    results: dict[str, float] = {}
    for name in [name for name in MODELS if name in models]:
        # warm-up on a few points (first-call costs of BoTorch and GPyTorch)
        small = _builder(name, X[:32], kernel, noise, qbar, num_inducing)
        knowledge_gradient(small(Y[:32, :1]))
        hypervolume(small(Y[:32]))
        build = _builder(name, X, kernel, noise, qbar, num_inducing)
        # qLogNEHVI first: an out-of-memory qKG leaves the allocator's arenas large
        for key, label, fn in [
            ("nehvi", "qLogNEHVI", lambda b=build: hypervolume(b(Y))),
            ("kg", "qKG", lambda b=build: knowledge_gradient(b(Y[:, :1]))),
        ]:
            times = []
            for _ in range(repeats):  # the best of `repeats` (first calls compile)
                times.append(_timed_or_nan(fn, device, f"{name} {label}"))
                if math.isnan(times[-1]):
                    break
            results[f"{name}_{key}_s"] = (
                max(times) if math.isnan(times[-1]) else min(times)
            )
    for measurement in ("kg", "nehvi"):
        exact = results.get(f"exact_{measurement}_s")
        for name in [name for name in MODELS[1:] if name in models and exact]:
            speedup = exact / results[f"{name}_{measurement}_s"]
            results[f"{measurement}_speedup_{name}"] = speedup
    return results


def _mean_and_variance(
    model: NystromGP | SingleTaskGP, candidates: torch.Tensor, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Posterior mean and variance of ``N x 1 x d`` candidates, in t-batch chunks
    (an exact GP's t-batch posterior expands its training set per candidate)."""
    posteriors = [model.posterior(chunk) for chunk in candidates.split(chunk_size)]
    return (
        torch.cat([p.mean for p in posteriors]),
        torch.cat([p.variance for p in posteriors]),
    )


def compare_scoring(
    num_train: int = 5000,
    num_candidates: int = 20000,
    dim: int = 8,
    lengthscale: float = 1.0,
    noise: float = 1.0,
    qbar: float = 2.0,
    seed: int = 0,
    chunk_size: int = 1000,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    acquisition_sizes: tuple[int, ...] = (),
) -> dict[str, float]:
    r"""Score ``num_candidates`` points with both models after ``num_train``
    observations; return timings (seconds), the dictionary size and accuracy.

    Both timings include the first posterior call's factorization. For each size
    ``n`` in ``acquisition_sizes`` it adds :func:`time_acquisitions` after ``n``
    observations, keys prefixed ``n{n}_``. The data are drawn on the CPU and moved to
    ``device``.
    """
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    tkwargs = {"dtype": dtype, "device": device}
    X = torch.rand(num_train, dim, generator=gen, dtype=dtype)
    Y = torch.sin(3 * X).sum(-1, keepdim=True)
    Y = Y + noise**0.5 * torch.randn(num_train, 1, generator=gen, dtype=dtype)
    candidates = torch.rand(num_candidates, 1, dim, generator=gen, dtype=dtype)
    X, Y, candidates = X.to(device), Y.to(device), candidates.to(device)
    kernel = ScaleKernel(RBFKernel()).to(**tkwargs)
    kernel.base_kernel.lengthscale = lengthscale

    sketch, build_time = _timed(
        lambda: NystromGP(
            X, Y, covar_module=deepcopy(kernel), noise=noise, qbar=qbar, generator=gen
        ),
        device,
    )
    exact = _exact_gp(X, Y, deepcopy(kernel), noise)
    with torch.no_grad():
        (sketch_mean, sketch_var), sketch_time = _timed(
            lambda: _mean_and_variance(sketch, candidates, chunk_size), device
        )
        (exact_mean, exact_var), exact_time = _timed(
            lambda: _mean_and_variance(exact, candidates, chunk_size), device
        )
        ratio = sketch_var / exact_var
        mean_error = (sketch_mean - exact_mean).abs().max()
    results = {
        "num_train": num_train,
        "num_candidates": num_candidates,
        "dictionary_size": sketch.dictionary_size,
        "nystrom_build_s": build_time,
        "nystrom_scoring_s": sketch_time,
        "exact_scoring_s": exact_time,
        "speedup": exact_time / sketch_time,
        "variance_ratio_min": float(ratio.min()),
        "variance_ratio_max": float(ratio.max()),
        "max_abs_mean_error": float(mean_error),
    }
    for size in acquisition_sizes:
        timings = time_acquisitions(
            size,
            dim=dim,
            lengthscale=lengthscale,
            noise=noise,
            qbar=qbar,
            seed=seed,
            dtype=dtype,
            device=device,
        )
        results.update({f"n{size}_{key}": value for key, value in timings.items()})
    return results


def _size(text: str) -> int:
    value = int(text)
    if value < 32:
        raise argparse.ArgumentTypeError(f"sizes must be >= 32, got {value}")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    r"""The argument parser; flags default to :func:`compare_scoring`'s arguments."""
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    for name, parameter in inspect.signature(compare_scoring).parameters.items():
        default = parameter.default
        if type(default) in (int, float):
            flag = "--" + name.replace("_", "-")
            parser.add_argument(flag, type=type(default), default=default)
    add_options(parser, "dtype", "device")
    parser.add_argument(
        "--acquisition-sizes",
        type=_size,
        nargs="*",
        default=(),
        help="also time fantasize + qKG and qLogNEHVI against SingleTaskGP after "
        "each of these numbers of observations, e.g. 1000 10000 (default: none)",
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    r"""Parse ``argv``, run :func:`compare_scoring` and print its results."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.dtype = DTYPES[args.dtype]
    args.acquisition_sizes = tuple(args.acquisition_sizes)
    results = compare_scoring(**vars(args))
    rows = [
        [key, f"{value:.4g}" if isinstance(value, float) else value]
        for key, value in results.items()
    ]
    print(text_table(["result", "value"], rows))


if __name__ == "__main__":
    main()
