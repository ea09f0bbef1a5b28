r"""Property-based robustness suite (issue 14): every public entry point, given one
argument replaced by a generated malformed value, either succeeds with finite outputs
or raises ``ValueError``/``TypeError`` whose message names that argument; a rejected
call leaves its object's state (``state_dict`` or all its tensors) unchanged.

The default example count keeps the suite CI-sized; set
``BOTORCH_SKETCH_HYPOTHESIS_EXAMPLES=200`` for a large run, and
``BOTORCH_SKETCH_PROPERTY_REPORT=path.json`` to record every outcome (per entry
point: accepted, ValueError, TypeError, other exception types, state changes after a
rejection) instead of stopping at the first violation.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.posteriors import Posterior
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor
from torch.nn import Module

from botorch_sketch import (
    BBKB,
    SGPTS,
    AlphaSchedule,
    BKBUpperConfidenceBound,
    DecomposedSamplingSVGP,
    GPThreDS,
    NystromGP,
    TheoryRadius,
    draw_scaled_paths,
    gen_bbkb_batch,
    gen_thompson_candidates,
)
from botorch_sketch.models import CandidateState
from botorch_sketch.models.dictionary import inclusion_probabilities, sample_dictionary
from botorch_sketch.models.incremental_exact import IncrementalExactGP
from botorch_sketch.models.inducing import select_inducing_indices
from botorch_sketch.sampling.pathwise import ScaledSamplePaths

EXAMPLES = int(os.environ.get("BOTORCH_SKETCH_HYPOTHESIS_EXAMPLES", "8"))
REPORT = os.environ.get("BOTORCH_SKETCH_PROPERTY_REPORT")
DTYPE = torch.float64
D = 2

#: Per entry point: outcome -> count; and one example message per outcome.
COUNTS: dict[str, Counter] = defaultdict(Counter)
EXAMPLE_MESSAGES: dict[str, dict[str, str]] = defaultdict(dict)


# ----------------------------------------------------------------- valid inputs
def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _points(n: int, seed: int = 0) -> Tensor:
    return torch.rand(n, D, dtype=DTYPE, generator=_generator(seed))


def _targets(X: Tensor) -> Tensor:
    return torch.sin(5 * X).sum(-1, keepdim=True)


def _kernel() -> ScaleKernel:
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    return kernel


def _nystrom() -> NystromGP:
    X = _points(12)
    return NystromGP(X, _targets(X), covar_module=_kernel(), noise=0.1)


def _svgp() -> DecomposedSamplingSVGP:
    X = _points(12)
    return DecomposedSamplingSVGP(
        X, _targets(X), num_inducing=6, covar_module=_kernel(), noise=0.05
    )


_UNIT = torch.tensor([[0.0] * D, [1.0] * D], dtype=DTYPE)
_THREDS = {"f_range": (0.0, 2.0), "grid_points": 5, "cap": 8}


def _threds_run(T: int) -> GPThreDS:
    gen = GPThreDS(_UNIT, **_THREDS)
    gen.run(lambda x: torch.sin(5 * x).sum(), T)
    return gen


def _bbkb_loop(steps: int) -> BBKB:
    loop = BBKB(_points(30, seed=4), covar_module=_kernel(), max_batch_size=4, seed=0)
    for _ in range(steps):
        indices = loop.ask()
        loop.tell(indices, _targets(loop.arms[indices]).squeeze(-1))
    return loop


def _candidate_state() -> CandidateState:
    points = _points(20, seed=5)
    indices = torch.tensor([0, 3, 3, 7])
    return CandidateState.from_observations(
        points,
        _kernel(),
        0.1,
        indices,
        _targets(points[indices]).squeeze(-1),
        torch.tensor([0, 3]),
    )


@dataclass
class Call:
    r"""One entry point: ``function(**arguments)`` and the object (if any) whose
    state a rejected call must leave unchanged."""

    function: Callable[..., Any]
    arguments: dict[str, Any]
    owner: object | None = None


def _method(build: Callable[[], Any], name: str, arguments: Callable[[Any], dict]):
    def make() -> Call:
        owner = build()
        return Call(getattr(owner, name), arguments(owner), owner)

    return make


def _paths_topk() -> Call:
    paths = draw_scaled_paths(_svgp(), 2, num_features=32, generator=_generator())
    return Call(paths.topk, {"choices": _points(20, 1), "k": 1, "chunk_size": 8}, paths)


def _incremental(pending: int) -> IncrementalExactGP:
    gp = IncrementalExactGP.from_kernel(_points(15, 2), _kernel(), 0.01)
    gp.observe(1, 0.5)
    for index in range(pending):
        gp.append(index + 2)
    return gp


#: Entry points: name -> builder of a valid call. Every argument listed is mutated.
ENTRY_POINTS: dict[str, Callable[[], Call]] = {
    "NystromGP": lambda: Call(
        NystromGP,
        {
            "train_X": _points(12),
            "train_Y": _targets(_points(12)),
            "covar_module": _kernel(),
            "noise": 0.1,
            "dictionary": _points(12)[:4],
            "qbar": 2.0,
            "generator": _generator(),
        },
    ),
    "NystromGP.posterior": _method(
        _nystrom, "posterior", lambda m: {"X": _points(5, 1).unsqueeze(-2)}
    ),
    "NystromGP.condition_on_observations": _method(
        _nystrom,
        "condition_on_observations",
        lambda m: {"X": _points(3, 1), "Y": _targets(_points(3, 1))},
    ),
    "NystromGP.resparsify": _method(
        _nystrom,
        "resparsify",
        lambda m: {"generator": _generator(), "variance_model": m},
    ),
    "NystromGP.set_dictionary": _method(
        _nystrom, "set_dictionary", lambda m: {"dictionary": _points(3, 1)}
    ),
    "DecomposedSamplingSVGP": lambda: Call(
        DecomposedSamplingSVGP,
        {
            "train_X": _points(12),
            "train_Y": _targets(_points(12)),
            "num_inducing": 5,
            "covar_module": _kernel(),
            "noise": 0.05,
            "randomized_selection": False,
            "inducing_quality": "variance",
            "generator": _generator(),
        },
    ),
    "DecomposedSamplingSVGP.update": _method(
        _svgp, "update", lambda m: {"X": _points(3, 1), "Y": _targets(_points(3, 1))}
    ),
    "DecomposedSamplingSVGP.posterior": _method(
        _svgp, "posterior", lambda m: {"X": _points(5, 1)}
    ),
    "draw_scaled_paths": lambda: Call(
        draw_scaled_paths,
        {
            "model": _svgp(),
            "num_paths": 2,
            "num_features": 32,
            "alpha": 1.0,
            "generator": _generator(),
            "paths_per_basis": None,
        },
    ),
    "ScaledSamplePaths.topk": _paths_topk,
    "gen_thompson_candidates": lambda: Call(
        gen_thompson_candidates,
        {
            "model": _svgp(),
            "q": 2,
            "choices": _points(20, 1),
            "num_features": 32,
            "alpha": 1.0,
            "generator": _generator(),
            "chunk_size": 8,
        },
    ),
    "gen_thompson_candidates[box]": lambda: Call(
        gen_thompson_candidates,
        {
            "model": _svgp(),
            "q": 1,
            "bounds": _UNIT.clone(),
            "num_features": 32,
            "raw_samples": 16,
            "num_restarts": 2,
            "options": {"maxiter": 3},
        },
    ),
    "BKBUpperConfidenceBound": lambda: Call(
        BKBUpperConfidenceBound,
        {
            "model": _nystrom(),
            "radius": 1.0,
            "maximize": True,
            "X_pending": _points(2, 3),
            "residual_update": False,
        },
    ),
    "BKBUpperConfidenceBound.forward": _method(
        lambda: BKBUpperConfidenceBound(_nystrom(), radius=1.0),
        "forward",
        lambda a: {"X": _points(5, 1).unsqueeze(-2)},
    ),
    "TheoryRadius": lambda: Call(
        TheoryRadius,
        {
            "noise_std": 0.1,
            "rkhs_bound": 1.0,
            "delta": 0.1,
            "noise": 1.0,
            "ratio_threshold": 2.0,
        },
    ),
    "TheoryRadius.observe": _method(
        lambda: TheoryRadius(0.1, 1.0, 0.1, 1.0),
        "observe",
        lambda r: {"scaled_variances": torch.tensor([0.5, 0.2], dtype=DTYPE)},
    ),
    "TheoryRadius.load_state_dict": _method(
        lambda: TheoryRadius(0.1, 1.0, 0.1, 1.0),
        "load_state_dict",
        lambda r: {"state": {"log_det_sum": 0.3}},
    ),
    "AlphaSchedule": lambda: Call(
        AlphaSchedule,
        {
            "scale": 0.1,
            "rkhs_bound": 1.0,
            "noise_std": 0.5,
            "noise": 1.0,
            "offset": 0.0,
        },
    ),
    "select_inducing_indices": lambda: Call(
        select_inducing_indices,
        {
            "X": _points(15),
            "kernel": _kernel(),
            "num_inducing": 4,
            "randomized": True,
            "generator": _generator(),
            "rel_tol": 1e-6,
            "quality": torch.ones(15, dtype=DTYPE),
        },
    ),
    "IncrementalExactGP.from_kernel": lambda: Call(
        IncrementalExactGP.from_kernel,
        {
            "points": _points(15, 2),
            "kernel": _kernel(),
            "noise": 0.01,
            "capacity": 4,
        },
    ),
    "IncrementalExactGP.observe": _method(
        lambda: _incremental(0), "observe", lambda gp: {"index": 3, "y": 0.5}
    ),
    "IncrementalExactGP.set_rewards": _method(
        lambda: _incremental(2),
        "set_rewards",
        lambda gp: {"rewards": torch.tensor([0.1, 0.2], dtype=DTYPE)},
    ),
    "sample_dictionary": lambda: Call(
        sample_dictionary,
        {
            "probabilities": torch.tensor([0.1, 0.9, 0.5], dtype=DTYPE),
            "generator": _generator(),
            "draws": torch.tensor([0.2, 0.3, 0.7], dtype=DTYPE),
        },
    ),
    "inclusion_probabilities": lambda: Call(
        inclusion_probabilities,
        {
            "scaled_variances": torch.tensor([0.1, 0.3], dtype=DTYPE),
            "counts": torch.tensor([1.0, 2.0], dtype=DTYPE),
            "qbar": 2.0,
        },
    ),
    "GPThreDS": lambda: Call(
        GPThreDS,
        {
            "bounds": _UNIT.clone(),
            "f_range": (0.0, 2.0),
            "covar_module": _kernel(),
            "noise": 0.01,
            "rkhs_bound": 0.5,
            "noise_std": 0.1,
            "delta": 1e-3,
            "gamma": math.log,
            "grid_points": 5,
            "cap": 8,
            "tol_coef": 0.2,
            "c_coef": 0.4,
            "max_depth": 3,
            "mode": "cube",
            "walk_delta": 0.25,
            "readmit_after": 2,
            "reuse_observations": False,
            "seed": 0,
        },
    ),
    "GPThreDS.tell": _method(
        lambda: _threds_run(3),
        "tell",
        lambda g: {"X": g.ask(), "Y": torch.tensor(0.3, dtype=DTYPE)},
    ),
    "GPThreDS.load_state_dict": _method(
        lambda: _threds_run(2),
        "load_state_dict",
        lambda g: {"state": _threds_run(5).state_dict()},
    ),
    "BBKB": lambda: Call(
        BBKB,
        {
            "arms": _points(30, 4),
            "covar_module": _kernel(),
            "noise": 1.0,
            "radius": 1.0,
            "ratio_threshold": 2.0,
            "rule": "global",
            "qbar": 2.0,
            "resampling": "coupled",
            "residual_update": False,
            "max_batch_size": 4,
            "seed": 0,
        },
    ),
    "BBKB.tell": lambda: _bbkb_tell(),
    "BBKB.ask": _method(lambda: _bbkb_loop(2), "ask", lambda loop: {"max_arms": 2}),
    "BBKB.fail": lambda: _pending_call(_bbkb_loop(1), "fail"),
    "SGPTS.ask": _method(lambda: _sgpts_loop(2), "ask", lambda loop: {"max_arms": 2}),
    "SGPTS.tell": lambda: _pending_call(_sgpts_loop(1), "tell"),
    "SGPTS.fail": lambda: _pending_call(_sgpts_loop(1), "fail"),
    "BBKB.load_state_dict": _method(
        lambda: _bbkb_loop(1),
        "load_state_dict",
        lambda loop: {"state": _bbkb_loop(3).state_dict()},
    ),
    "gen_bbkb_batch": lambda: Call(
        gen_bbkb_batch,
        {
            "model": _nystrom(),
            "choices": _points(30, 4),
            "ratio_threshold": 2.0,
            "rule": "global",
            "radius": 1.0,
            "max_batch_size": 4,
            "residual_update": False,
        },
    ),
    "CandidateState.from_observations": lambda: Call(
        CandidateState.from_observations,
        {
            "points": _points(20, 5),
            "kernel": _kernel(),
            "noise": 0.1,
            "indices": torch.tensor([0, 3, 3, 7]),
            "rewards": torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=DTYPE),
            "dictionary": torch.tensor([0, 3]),
        },
    ),
    "CandidateState.observe": _method(
        _candidate_state,
        "observe",
        lambda s: {
            "indices": torch.tensor([1, 3]),
            "rewards": torch.tensor([0.5, -0.5], dtype=DTYPE),
        },
    ),
    "CandidateState.update": _method(
        _candidate_state,
        "update",
        lambda s: {
            "indices": torch.tensor([1, 3]),
            "rewards": torch.tensor([0.5, -0.5], dtype=DTYPE),
            "dictionary": torch.tensor([1, 3, 7]),
        },
    ),
}


def _sgpts_loop(steps: int) -> SGPTS:
    loop = SGPTS(
        _points(30, seed=4), covar_module=_kernel(), num_inducing=5, num_features=64
    )
    for _ in range(steps):
        indices = loop.ask(2)
        loop.tell(indices, _targets(loop.arms[indices]).squeeze(-1))
    return loop


def _pending_call(loop: BBKB | SGPTS, name: str) -> Call:
    r"""``tell`` (with rewards) or ``fail`` of the arms of a fresh ask."""
    indices = loop.ask(2)
    arguments = {"indices": indices}
    if name == "tell":
        arguments["rewards"] = _targets(loop.arms[indices]).squeeze(-1)
    return Call(getattr(loop, name), arguments, loop)


def _bbkb_tell() -> Call:
    loop = _bbkb_loop(1)
    indices = loop.ask()
    rewards = _targets(loop.arms[indices]).squeeze(-1)
    return Call(loop.tell, {"indices": indices, "rewards": rewards}, loop)


# -------------------------------------------------------------- malformed values
_SPECIAL = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e30, 1e-300, -1.0, 0.0]
_NON_TENSORS = [None, "x", 1.5, 0, -1, True, [1.0, 2.0], math.nan, {}]
#: Any float: the special values first, then hypothesis's own (subnormals, huge,
#: signed zeros, NaN, infinities), so a large run keeps finding new examples.
_ANY_FLOAT = st.one_of(st.sampled_from(_SPECIAL), st.floats(width=64))
#: Any int except positive ones in (2^10, 2^45): as sizes those are legitimate
#: requests for gigabytes or hours (below the half-of-memory bound that rejects
#: larger ones; a GP-ThreDS grid is size ** d), which a test run cannot afford on
#: a shared machine.
_ANY_INT = st.one_of(
    st.integers(-(2**63), 2**10), st.integers(2**45, 2**63), st.just(2**63 - 1)
)
_ANY_SCALAR = st.one_of(
    _ANY_FLOAT,
    _ANY_INT,
    st.text(max_size=3),
    st.sampled_from(_NON_TENSORS),
)


def _tensor_mutations(value: Tensor, draw: Callable) -> Any:
    kind = draw(
        st.sampled_from(
            [
                "poison",
                "scale",
                "dtype",
                "drop_dim",
                "add_dim",
                "drop_column",
                "add_column",
                "empty",
                "transpose",
                "requires_grad",
                "non_tensor",
                "list",
            ]
        )
    )
    value = value.detach().clone()
    if kind == "poison" and value.numel() > 0:
        flat = value.reshape(-1).clone()
        position = draw(st.integers(0, flat.numel() - 1))
        if flat.dtype == torch.bool:
            flat[position] = not bool(flat[position])
        elif flat.is_floating_point():
            flat[position] = draw(_ANY_FLOAT)
        else:
            info = torch.iinfo(flat.dtype)
            flat[position] = draw(st.integers(int(info.min), int(info.max)))
        return flat.reshape(value.shape)
    if kind == "scale":
        if value.is_floating_point():
            return value * draw(_ANY_FLOAT)
        return value + draw(st.integers(-(2**40), 2**40))
    if kind == "dtype":
        dtype = draw(
            st.sampled_from(
                [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool]
            )
        )
        return value.to(dtype)
    if kind == "drop_dim" and value.dim() > 0:
        return value[0] if value.shape[0] > 0 else value.reshape(-1)
    if kind == "add_dim":
        return value.unsqueeze(draw(st.integers(0, value.dim())))
    if kind == "drop_column" and value.dim() > 0 and value.shape[-1] > 0:
        return value[..., :-1]
    if kind == "add_column" and value.dim() > 0:
        return torch.cat([value, value[..., :1]], dim=-1)
    if kind == "empty" and value.dim() > 0:
        return value[:0]
    if kind == "transpose" and value.dim() >= 2:
        return value.mT.contiguous()
    if kind == "requires_grad" and value.is_floating_point():
        return value.requires_grad_(True)
    if kind == "list":
        return value.tolist()
    return draw(_ANY_SCALAR)


def _gamma_nan(n: int) -> float:
    return math.nan


def _gamma_text(n: int) -> str:
    return "log"


def _gamma_huge(n: int) -> float:
    return -1e300


def _constant_gamma(value: float) -> Callable[[int], float]:
    def gamma(n: int) -> float:
        return value

    return gamma


def malformed(value: Any, draw: Callable) -> Any:
    r"""A generated malformed (or borderline) replacement for a valid ``value``."""
    if isinstance(value, Tensor):
        return _tensor_mutations(value, draw)
    if isinstance(value, bool):
        truthy = [1, 0, "yes", None, 1.0, torch.tensor(True)]
        return draw(st.one_of(st.sampled_from(truthy), _ANY_SCALAR))
    if isinstance(value, int):
        edges = [0, -1, -(2**62), 2**62, True, False, 1.5, "3"]
        return draw(st.one_of(st.sampled_from(edges), _ANY_INT, _ANY_SCALAR))
    if isinstance(value, float):
        odd = [True, "1.0", None, torch.tensor(0.5, dtype=DTYPE)]
        return draw(st.one_of(_ANY_FLOAT, st.sampled_from(odd), _ANY_SCALAR))
    if isinstance(value, str):
        words = ["", value.upper(), "other"]
        return draw(st.one_of(st.sampled_from(words), _ANY_SCALAR))
    if isinstance(value, tuple):
        pairs = [("a", "b"), (value[1], value[0]), 5, value + (1.0,), (True, 2.0)]
        return draw(
            st.one_of(
                st.sampled_from(pairs),
                st.tuples(_ANY_FLOAT, _ANY_FLOAT),
                _ANY_SCALAR,
            )
        )
    if isinstance(value, torch.Generator):
        return draw(st.one_of(st.sampled_from([torch.tensor(0), "seed"]), _ANY_SCALAR))
    if isinstance(value, Mapping):
        kind = draw(st.sampled_from(["drop", "extra", "value", "value", "not_mapping"]))
        changed = dict(value)
        keys = sorted(changed, key=str)
        if kind == "drop" and keys:
            del changed[draw(st.sampled_from(keys))]
            return changed
        if kind == "extra":
            changed["unexpected"] = torch.zeros(1)
            return changed
        if kind == "value" and keys:
            key = draw(st.sampled_from(keys))
            changed[key] = malformed(changed[key], draw)
            return changed
        return draw(_ANY_SCALAR)
    if isinstance(value, (RBFKernel, ScaleKernel)):
        kernels = ["rbf", _batched_kernel(), MaternKernel().to(DTYPE), RBFKernel()]
        return draw(st.one_of(st.sampled_from(kernels), _ANY_SCALAR))
    if isinstance(value, Module):  # a model
        exact = SingleTaskGP(_points(6), _targets(_points(6)))
        models = ["model", _fantasy_model(), exact]
        return draw(st.one_of(st.sampled_from(models), _ANY_SCALAR))
    if callable(value):
        return draw(
            st.one_of(
                st.sampled_from([_gamma_nan, _gamma_text, _gamma_huge]),
                st.builds(_constant_gamma, _ANY_FLOAT),
                _ANY_SCALAR,
            )
        )
    return draw(_ANY_SCALAR)


# ------------------------------------------------------------------ the checks
def _all_finite(result: Any, depth: int = 0) -> bool:
    r"""Whether an accepted call's result is finite (evaluating models, paths,
    generators and acquisition functions at a few valid points)."""
    if depth > 4 or result is None or isinstance(result, (str, bool, int)):
        return True
    if isinstance(result, float):
        return math.isfinite(result)
    if isinstance(result, Tensor):
        if result.is_floating_point():
            return bool(torch.isfinite(result).all())
        return True
    if isinstance(result, Posterior):
        return _all_finite(result.mean) and _all_finite(result.variance)
    dim = _input_dim(result)
    test_X = torch.rand(4, dim, dtype=DTYPE, generator=_generator(9))
    with torch.no_grad():
        if isinstance(result, NystromGP) and result.train_inputs[0].dim() > 2:
            return _all_finite(result.posterior(test_X.unsqueeze(-2)))
        if isinstance(result, (NystromGP, DecomposedSamplingSVGP)):
            return _all_finite(result.posterior(test_X))
        if isinstance(result, ScaledSamplePaths):
            return _all_finite(result(test_X))
        if isinstance(result, BKBUpperConfidenceBound):
            return _all_finite(result(test_X.unsqueeze(-2)))
        if isinstance(result, GPThreDS):
            return _all_finite(result.ask())
        if isinstance(result, BBKB):
            return _all_finite(result.arms[result.ask()])
        if isinstance(result, TheoryRadius):
            return math.isfinite(result.value) and math.isfinite(result.batch_value())
        if isinstance(result, AlphaSchedule):
            return all(math.isfinite(result(t)) for t in (1, 10, 1000))
        if isinstance(result, (IncrementalExactGP, CandidateState)):
            return _all_finite(result.mean) and _all_finite(result.variance)
    if is_dataclass(result):
        return all(
            _all_finite(getattr(result, f.name), depth + 1) for f in fields(result)
        )
    if isinstance(result, (tuple, list)):
        return all(_all_finite(item, depth + 1) for item in result)
    return True


def _input_dim(result: Any) -> int:
    r"""The input dimension of a model-like result (``D`` for anything else)."""
    model = result.model if isinstance(result, BKBUpperConfidenceBound) else result
    if isinstance(model, DecomposedSamplingSVGP):
        return model.train_X.shape[-1]
    if isinstance(model, NystromGP):
        return model.train_inputs[0].shape[-1]
    return D


def _snapshot(owner: object) -> Any:
    r"""Everything observable of ``owner``: its ``state_dict`` (if any) and its
    plain attributes (tensors, numbers, strings and containers of them), copied."""
    if owner is None:
        return None
    state = owner.state_dict() if hasattr(owner, "state_dict") else None
    attributes = {
        k: v for k, v in vars(owner).items() if k not in _MODULE_INTERNALS and _plain(v)
    }
    return _copied({"state": state, "attributes": attributes})


#: ``torch.nn.Module`` bookkeeping (parameters and buffers are in the state dict).
_MODULE_INTERNALS = {
    "_modules",
    "_parameters",
    "_buffers",
    "_non_persistent_buffers_set",
}


def _plain(value: Any) -> bool:
    if isinstance(value, (Tensor, bool, int, float, str)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return False


def _copied(value: Any) -> Any:
    r"""A recursive copy (tensors detached and cloned)."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copied(v) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(torch.equal(a, b)) or bool(
            a.is_floating_point() and ((a == b) | (a.isnan() & b.isnan())).all()
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def _names(argument: str, value: Any, valid: Any) -> list[str]:
    r"""Names a message may use for ``argument``: the argument itself or, for a
    mapping with one changed or missing key, that key."""
    names = [argument]
    if isinstance(value, Mapping) and isinstance(valid, Mapping):
        names += [str(k) for k in set(valid) ^ set(value)]
        names += [str(k) for k in valid if k in value and value[k] is not valid[k]]
    return names


def _outcome(entry: str, data: st.DataObject) -> tuple[str, str | None]:
    r"""Run one generated call; return ``(outcome, violation or None)``."""
    call = ENTRY_POINTS[entry]()
    argument = data.draw(st.sampled_from(sorted(call.arguments)), label="argument")
    return _checked_call(call, argument, malformed(call.arguments[argument], data.draw))


def _checked_call(call: Call, argument: str, value: Any) -> tuple[str, str | None]:
    r"""Call with ``argument`` replaced by ``value``; return ``(outcome, violation
    or None)``."""
    valid = call.arguments[argument]
    arguments = dict(call.arguments, **{argument: value})
    before = _snapshot(call.owner)
    try:
        result = call.function(**arguments)
    except (ValueError, TypeError) as error:
        outcome = type(error).__name__
        message = str(error)
        if not any(name in message for name in _names(argument, value, valid)):
            return outcome, f"{outcome} for `{argument}` does not name it: {message}"
        if not _same(before, _snapshot(call.owner)):
            return outcome, f"rejected `{argument}` changed the state: {message}"
        return outcome, None
    except Exception as error:  # noqa: BLE001 - the property is about these
        outcome = type(error).__name__
        return outcome, f"`{argument}` -> {outcome}: {error}"
    try:
        finite = _all_finite(result)
    except Exception as error:  # noqa: BLE001
        return (
            "accepted",
            f"`{argument}` accepted, then using the result raised {error!r}",
        )
    if not finite:
        return "accepted", f"`{argument}` accepted with non-finite output"
    return "accepted", None


def _batched_kernel() -> ScaleKernel:
    return ScaleKernel(RBFKernel(batch_shape=torch.Size([2]))).to(DTYPE)


def _truncated_generator_state(state: dict[str, Any]) -> dict[str, Any]:
    return dict(state, generator=state["generator"][:-1])


def _fantasy_model() -> NystromGP:
    X = _points(6)
    return _nystrom().condition_on_observations(
        X[:2].expand(3, 2, D), _targets(X[:2]).expand(3, 2, 1)
    )


#: Examples the large run found failing, now fixed (regression tests):
#: (entry, argument, value builder, what happened).
FIXED_EXAMPLES = [
    (
        "CandidateState.from_observations",
        "points",
        lambda: _points(20, 5) * 1e200,
        "points beyond finfo.max ** (1/4): raw _LinAlgError",
    ),
    ("BBKB", "seed", lambda: True, "RuntimeError from torch's manual_seed"),
    ("BBKB", "seed", lambda: 1.5, "RuntimeError from torch's manual_seed"),
    ("BBKB", "covar_module", lambda: "rbf", "AttributeError: 'str' ... 'to'"),
    (
        "BBKB",
        "covar_module",
        _batched_kernel,
        "accepted at construction, then ask() raises IndexError",
    ),
    ("BBKB", "arms", lambda: _points(30, 4).bfloat16(), "NotImplementedError"),
    (
        "BBKB.load_state_dict",
        "state",
        lambda: _truncated_generator_state(_bbkb_loop(3).state_dict()),
        "a generator state of the wrong size: RuntimeError from torch",
    ),
    ("gen_bbkb_batch", "model", _fantasy_model, "a batched model: IndexError"),
    (
        "CandidateState.from_observations",
        "points",
        lambda: _points(20, 5).half(),
        "NotImplementedError (half-precision Cholesky)",
    ),
    (
        "CandidateState.from_observations",
        "kernel",
        _batched_kernel,
        "RuntimeError: shape mismatch",
    ),
    (
        "CandidateState.from_observations",
        "points",
        lambda: _points(2, 5),
        "ValueError names `indices`, not `points`",
    ),
]


@pytest.mark.parametrize(
    "entry, argument, build, reason",
    FIXED_EXAMPLES,
    ids=[f"{case[0]}-{case[1]}-{i}" for i, case in enumerate(FIXED_EXAMPLES)],
)
def test_fixed_examples(entry, argument, build, reason):
    outcome, violation = _checked_call(ENTRY_POINTS[entry](), argument, build())
    assert violation is None, violation


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not REPORT,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_malformed_input_is_rejected_by_name_or_gives_finite_output(entry, data):
    outcome, violation = _outcome(entry, data)
    COUNTS[entry][outcome] += 1
    if violation is not None:
        COUNTS[entry]["violations"] += 1
        if "changed the state" in violation:
            COUNTS[entry]["state changes after rejection"] += 1
        EXAMPLE_MESSAGES[entry].setdefault(outcome, violation[:300])
    if not REPORT:
        assert violation is None, violation


@pytest.fixture(scope="module", autouse=True)
def _write_report():
    yield
    if REPORT:
        with open(REPORT, "w") as file:
            json.dump(
                {
                    "examples": EXAMPLES,
                    "counts": COUNTS,
                    "violations": EXAMPLE_MESSAGES,
                },
                file,
                indent=1,
                sort_keys=True,
            )
