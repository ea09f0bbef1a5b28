r"""Problems, objectives and state comparisons shared by the fault-injection suite
(``test/test_fault_injection.py``), its driver subprocess (``test/fault_driver.py``)
and the asynchronous-protocol properties (``test/property/test_async_protocol.py``).

Importable without pytest: the driver subprocess uses it.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch import Tensor

from botorch_sketch.generation.bbkb_loop import BBKB, asynchronous_options
from botorch_sketch.generation.sgpts_loop import SGPTS

DTYPE = torch.float64
#: Which environment variable selects the large runs, and its value for them.
LARGE = os.environ.get("BOTORCH_SKETCH_FAULTS", "") == "large"


def make_arms(num_arms: int = 24, d: int = 2, seed: int = 0) -> Tensor:
    r"""``num_arms x d`` distinct uniform arms in ``[0, 1]^d``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(num_arms, d, generator=generator, dtype=DTYPE)


def fixed_kernel(d: int = 2) -> ScaleKernel:
    kernel = ScaleKernel(RBFKernel(ard_num_dims=d)).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    return kernel


def make_loop(
    kind: str, arms: Tensor, *, learned: bool = True, workers: int = 2, seed: int = 1
) -> BBKB | SGPTS:
    r"""A small ``BBKB`` or ``SGPTS`` on ``arms``: self-tuning (the default) or with
    a fixed kernel and ``noise=0.5``."""
    fixed = {} if learned else {"covar_module": fixed_kernel(arms.shape[-1])}
    if not learned:
        fixed["noise"] = 0.5
    if kind == "bbkb":
        options = asynchronous_options(workers) if workers > 1 else {}
        options.setdefault("max_batch_size", 8)
        return BBKB(arms, seed=seed, **options, **fixed)
    return SGPTS(arms, num_inducing=8, num_features=32, seed=seed, **fixed)


def reward(x: Tensor) -> Tensor:
    r"""A cheap deterministic objective of arms ``x`` (``... x d`` -> ``...``)."""
    return torch.sin(3.0 * x).sum(-1)


def fails(x: Tensor) -> bool:
    r"""Whether :func:`logged_reward` raises at the arm ``x`` (``d``)."""
    return bool(x[0] > 0.85)


def logged_reward(path: str, arms: Tensor, pause: float, x: Tensor) -> float:
    r""":func:`reward` of one arm after ``pause`` seconds; raises ValueError at arms
    where :func:`fails`. Either way it then appends ``"<arm index> <pid>"`` to the
    file ``path`` (one ``O_APPEND`` write: whole lines, also under kill -9)."""
    time.sleep(pause)
    index = int(torch.nonzero((arms == x).all(-1))[0])
    line = f"{index} {os.getpid()}\n".encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
    if fails(x):
        raise ValueError(f"arm {index} always fails")
    return float(reward(x))


def logged_objective(path: str, arms: Tensor, pause: float = 0.0):
    return partial(logged_reward, path, arms, pause)


def evaluations(path: str) -> list[int]:
    r"""The arm indices :func:`logged_reward` appended to ``path``, in order."""
    if not os.path.exists(path):
        return []
    with open(path) as file:
        return [int(line.split()[0]) for line in file if line.strip()]


def assert_same_state(actual: Any, expected: Any, where: str = "state") -> None:
    r"""Equal (nested) ``state_dict``s: tensors bit for bit, with equal dtypes and
    NaN equal to NaN; dicts, lists and other values by ``==``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert actual.keys() == expected.keys(), where
        for key, value in expected.items():
            assert_same_state(actual[key], value, f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), where
        for position, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_state(a, e, f"{where}[{position}]")
    elif isinstance(expected, Tensor):
        assert isinstance(actual, Tensor), where
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
        same = actual == expected
        if expected.is_floating_point():
            same |= actual.isnan() & expected.isnan()
        assert bool(same.all()), f"{where} differs"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def assert_same_run(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    r"""The states of two loops that made the same calls and choices, one of them
    resumed (``load_state_dict``) on the way: :func:`assert_same_state`, but for
    BBKB's dictionary, a set that a loaded loop holds sorted, and the variances
    BBKB saves of its pending arms, read from a posterior that a load rebuilds
    from scratch (equal to rounding)."""
    actual, expected = dict(actual), dict(expected)
    if "dictionary" in expected:
        for state in (actual, expected):
            state["dictionary"] = state["dictionary"].sort().values
        torch.testing.assert_close(
            actual.pop("pending_variances"), expected.pop("pending_variances")
        )
    assert_same_state(actual, expected)
