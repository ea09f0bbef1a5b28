r"""One batch of S-GP-TS and exact GP-TS on the continuous Hartmann-6
(:func:`time_box_batches`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
from torch import Tensor

from botorch_sketch.benchmarks.policies.thompson import ModelExactGPTS, ModelSGPTS
from botorch_sketch.benchmarks.problems import Problem, make_sgpts_hartmann6
from botorch_sketch.benchmarks.thompson_steps.steps import check_ts, timed_round
from botorch_sketch.utils.validation import check_int

#: Method keys of :func:`time_box_batches` with their table labels.
BOX_METHODS = {"sgpts": "S-GP-TS", "exact-gpts": "exact GP-TS"}


def _noisy_values(problem: Problem, X: Tensor, generator: torch.Generator) -> Tensor:
    r"""Noisy rewards ``f(x) + noise_std * eps`` of the points ``X`` (``n x d``)."""
    noise = torch.randn(X.shape[0], generator=generator, dtype=X.dtype)
    return problem.objective(X) + problem.noise_std * noise


def time_box_batches(
    ts: Sequence[int] = (250, 4150),
    batch_size: int = 100,
    *,
    num_inducing: int = 100,
    num_features: int = 1000,
    inducing_quality: str = "variance",
    raw_samples: int | None = None,
    num_restarts: int = 10,
    seed: int = 0,
) -> dict[str, dict[int, dict[str, float]]]:
    r"""Time one batch of S-GP-TS and exact GP-TS on S-GP-TS's continuous Hartmann-6.

    At each ``t`` both policies (:class:`ModelSGPTS`, :class:`ModelExactGPTS`) are
    told the same ``t`` uniform points with noisy rewards (untimed), then ``ask()``
    one batch of ``batch_size`` points (one path each, maximized over the box by
    ``raw_samples`` Sobol points and ``num_restarts`` L-BFGS-B starts per path, the
    same budget for both) and ``tell()`` its rewards.

    Returns:
        Method key (``"sgpts"``, ``"exact-gpts"``) -> ``t`` -> ``{"select",
        "update", "batch"}`` seconds.

    Example:
        >>> time_box_batches(ts=(4150,))["exact-gpts"][4150]["batch"]
    """
    ts = check_ts(ts, 0)
    check_int(batch_size, "batch_size", 1)
    problem = make_sgpts_hartmann6(seed=seed)
    options = {
        "batch_size": batch_size,
        "num_features": num_features,
        "raw_samples": raw_samples,
        "num_restarts": num_restarts,
    }
    sparse = {"num_inducing": num_inducing, "inducing_quality": inducing_quality}
    builders = {
        "sgpts": partial(ModelSGPTS, **sparse, **options),
        "exact-gpts": partial(ModelExactGPTS, **options),
    }
    results: dict[str, dict[int, dict[str, float]]] = {}
    for name, build in builders.items():
        results[name] = {}
        for t in ts:
            base = torch.Generator().manual_seed(seed)
            X = problem.uniform_points(t, base)
            noise = torch.randn(t, generator=base, dtype=X.dtype)
            policy_seed = int(torch.randint(2**62, (1,), generator=base))
            policy = build(
                problem, t + batch_size, torch.Generator().manual_seed(policy_seed)
            )
            policy.tell(X, problem.objective(X) + problem.noise_std * noise)
            rewards_of = partial(_noisy_values, problem, generator=base)
            _, select, update = timed_round(policy, rewards_of)
            results[name][t] = {
                "select": select,
                "update": update,
                "batch": select + update,
            }
    return results


def format_box_report(results: dict[str, dict[int, dict[str, float]]]) -> str:
    r"""The results of :func:`time_box_batches` as a table with the speed-up."""
    lines = [
        "continuous Hartmann-6, one batch (seconds):",
        f"{'method':<28}{'t':>6}{'select s':>10}{'update s':>10}{'batch s':>10}",
    ]
    for name, by_t in results.items():
        for t, run in by_t.items():
            lines.append(
                f"{BOX_METHODS[name]:<28}{t:>6}{run['select']:>10.2f}"
                f"{run['update']:>10.2f}{run['batch']:>10.2f}"
            )
    for t, run in results["exact-gpts"].items():
        ratio = run["batch"] / results["sgpts"][t]["batch"]
        lines.append(f"exact GP-TS / S-GP-TS batch time at t={t}: {ratio:.1f}x")
    return "\n".join(lines)
