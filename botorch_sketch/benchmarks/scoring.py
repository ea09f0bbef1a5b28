r"""Time NystromGP's posterior mean and variance over a large candidate set against
BoTorch's exact ``SingleTaskGP`` on the same data and fixed hyperparameters.

Run ``python -m botorch_sketch.benchmarks scoring --help``.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Sequence
from copy import deepcopy

import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.benchmarks.acquisition_timing import (
    exact_gp,
    time_acquisitions,
    timed,
)
from botorch_sketch.benchmarks.arguments import OneLineParser
from botorch_sketch.models.nystrom import NystromGP

DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
    ``n`` in ``acquisition_sizes`` it adds
    :func:`~botorch_sketch.benchmarks.acquisition_timing.time_acquisitions` after
    ``n`` observations, keys prefixed ``n{n}_``. The data are drawn on the CPU and
    moved to ``device``.
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

    sketch, build_time = timed(
        lambda: NystromGP(
            X, Y, covar_module=deepcopy(kernel), noise=noise, qbar=qbar, generator=gen
        ),
        device,
    )
    exact = exact_gp(X, Y, deepcopy(kernel), noise)
    with torch.no_grad():
        (sketch_mean, sketch_var), sketch_time = timed(
            lambda: _mean_and_variance(sketch, candidates, chunk_size), device
        )
        (exact_mean, exact_var), exact_time = timed(
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


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(f"choose float32 or float64, not {name!r}")
    return DTYPES[name]


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
    parser.add_argument(
        "--dtype", type=_dtype, default=torch.float64, help="float32, float64 (default)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
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
    try:
        args.device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device}: not a torch device")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available here")
    args.acquisition_sizes = tuple(args.acquisition_sizes)
    for key, value in compare_scoring(**vars(args)).items():
        text = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:>22}: {text}")


if __name__ == "__main__":
    main()
