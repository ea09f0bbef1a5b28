r"""Fuzz suite (issue 37) for the recent public entry points: the Optuna samplers'
constructors (their arguments and option keywords), ``add_arms`` of BBKB and
S-GP-TS, the options objects, :class:`SimulatedEngine` and the tuning benchmark's
``--resume`` store (:meth:`RunStore.load` of malformed and foreign files).

Each example replaces one argument of a valid call by a generated malformed value
(the property suite's generator, :func:`test.property.test_property_based.malformed`).
The call must either raise ``ValueError`` / ``TypeError`` naming that argument and
leave its object's observable state (``state_dict`` and plain attributes, tensors
compared exactly) unchanged, or accept the value and then work: an accepted
constructor argument or option is used once (a short study, a loop's first ask).
Every call runs under a timeout, so a hang fails the example instead of the run.

``BOTORCH_SKETCH_HYPOTHESIS_EXAMPLES`` sets the number of examples per entry point
(default 8; 200 for a large run), as in the property suite;
``BOTORCH_SKETCH_FUZZ_REPORT=path.json`` records, per entry point, how many
malformed inputs were tried, rejected by name, accepted (and then worked), and the
violations, instead of stopping at the first violation.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.results import RunTrace
from benchmarks.runner import RunStore
from botorch_sketch import BBKB, SGPTS
from botorch_sketch.generation.options import (
    BBKBOptions,
    GPThreDSOptions,
    SGPTSOptions,
)
from botorch_sketch.parallel import SimulatedEngine
from test.property.test_property_based import (
    EXAMPLES,
    Call,
    _names,
    _same,
    _snapshot,
    malformed,
)

optuna = pytest.importorskip("optuna")
from botorch_sketch.integrations.optuna import BBKBSampler, SGPTSSampler  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

REPORT = os.environ.get("BOTORCH_SKETCH_FUZZ_REPORT")
DTYPE = torch.float64

#: Seconds one call (and the use of what it returned) may take.
CALL_TIMEOUT = 60

#: Per entry point: outcome -> count ("tried", "rejected", "accepted",
#: "violations"); and one message per kind of violation.
COUNTS: dict[str, Counter] = defaultdict(Counter)
VIOLATIONS: dict[str, dict[str, str]] = defaultdict(dict)


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    r"""Raise ``TimeoutError`` in the main thread once ``seconds`` have passed."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"the call took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------ valid calls
def _arms(n: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(seed))


def _kernel() -> ScaleKernel:
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    return kernel


def _quadratic(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -1.0, 1.0)
    y = trial.suggest_int("y", 0, 4)
    return (x - 0.3) ** 2 + 0.1 * y


def _run_study(sampler: optuna.samplers.BaseSampler) -> None:
    r"""Use an accepted sampler: a study of three trials, all completed."""
    study = optuna.create_study(sampler=sampler)
    study.optimize(_quadratic, n_trials=3)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def _first_ask(loop_class: type, options: Any) -> None:
    r"""Use accepted options: a loop on a few arms asks, is told, asks again."""
    loop = loop_class(_arms(), options, covar_module=_kernel(), seed=0)
    indices = loop.ask(2)
    loop.tell(indices, torch.ones(indices.shape[0], dtype=DTYPE))
    assert torch.isfinite(loop.arms[loop.ask(1)]).all()


def _use_loop(loop: Any, result: Any) -> None:
    r"""Use a loop after ``add_arms``: the new indices, then an ask."""
    assert torch.equal(result, torch.arange(12, loop.arms.shape[0]))
    assert torch.isfinite(loop.arms[loop.ask(1)]).all()


def _use_engine(engine: SimulatedEngine, result: Any) -> None:
    assert all(math.isfinite(d) and d >= 0 for d in result.durations)


def _sampler_call(sampler_class: type, **extra: Any) -> Call:
    r"""A sampler's constructor with small arm sets and two option keywords."""
    arguments = {
        "seed": 0,
        "num_arms": 16,
        "num_refined": 2,
        "warn_independent_sampling": True,
        "covar_module": _kernel(),
        "min_repeat_reduction": 0.0,
        "refit_growth": 2.0,
        **extra,
    }
    return Call(sampler_class, arguments)


def _loop(loop_class: type, learned: bool) -> Any:
    kernel = None if learned else _kernel()
    options = {"num_initial": 0} if learned else {}
    loop = loop_class(_arms(), covar_module=kernel, seed=0, **options)
    indices = loop.ask(2)
    loop.tell(indices, torch.ones(indices.shape[0], dtype=DTYPE))
    return loop


def _add_arms(loop_class: type, learned: bool) -> Callable[[], Call]:
    def make() -> Call:
        loop = _loop(loop_class, learned)
        inside = 0.25 + 0.5 * _arms(3, seed=1)  # inside the arms' box
        return Call(loop.add_arms, {"points": inside}, loop)

    return make


@dataclass(frozen=True)
class Entry:
    r"""An entry point: the builder of a valid :class:`Call` and what to do with
    an accepted call's result (``use(owner, result)``)."""

    build: Callable[[], Call]
    use: Callable[[Any, Any], None]


def _options_entry(options_class: type, loop_class: type | None, **valid: Any):
    def build() -> Call:
        fields = options_class.__dataclass_fields__
        arguments = {
            name: field.default
            for name, field in fields.items()
            if not callable(field.default) and field.default is not None
        }
        return Call(options_class, {**arguments, **valid})

    def use(owner: Any, options: Any) -> None:
        if loop_class is not None:
            _first_ask(loop_class, options)

    return Entry(build, use)


ENTRY_POINTS: dict[str, Entry] = {
    "BBKBSampler": Entry(
        lambda: _sampler_call(
            BBKBSampler, num_workers=2, max_wait=0.0, poll_interval=0.05
        ),
        lambda owner, sampler: _run_study(sampler),
    ),
    "SGPTSSampler": Entry(
        lambda: _sampler_call(SGPTSSampler, num_features=64, num_inducing=8),
        lambda owner, sampler: _run_study(sampler),
    ),
    "BBKB.add_arms": Entry(_add_arms(BBKB, learned=False), _use_loop),
    "BBKB.add_arms (learned kernel)": Entry(_add_arms(BBKB, learned=True), _use_loop),
    "SGPTS.add_arms": Entry(_add_arms(SGPTS, learned=False), _use_loop),
    "SGPTS.add_arms (learned kernel)": Entry(_add_arms(SGPTS, learned=True), _use_loop),
    "BBKBOptions": _options_entry(BBKBOptions, BBKB, cache_dtype=DTYPE),
    "SGPTSOptions": _options_entry(
        SGPTSOptions, SGPTS, num_features=64, cache_dtype=DTYPE
    ),
    "GPThreDSOptions": _options_entry(GPThreDSOptions, None, f_range=(0.0, 2.0)),
    "SimulatedEngine": Entry(
        lambda: Call(
            SimulatedEngine, {"durations": torch.tensor([1.0, 0.5, 2.0], dtype=DTYPE)}
        ),
        _use_engine,
    ),
    "SimulatedEngine.lognormal": Entry(
        lambda: Call(
            SimulatedEngine.lognormal,
            {"count": 4, "mean": 1.0, "sigma": 1.0, "generator": torch.Generator()},
        ),
        _use_engine,
    ),
}


def fuzz_call(entry: Entry, argument: str, value: Any) -> tuple[str, str | None]:
    r"""Call ``entry`` with ``argument`` replaced by ``value``; return
    ``(outcome, violation or None)``, outcome ``"rejected"`` or ``"accepted"``
    (or the name of another exception)."""
    call = entry.build()
    valid = call.arguments[argument]
    before = _snapshot(call.owner)
    try:
        with time_limit(CALL_TIMEOUT):
            result = call.function(**dict(call.arguments, **{argument: value}))
    except (ValueError, TypeError) as error:
        message = str(error)
        if not any(name in message for name in _names(argument, value, valid)):
            return "rejected", f"{type(error).__name__} does not name it: {message}"
        if not _same(before, _snapshot(call.owner)):
            return "rejected", f"the rejection changed the state: {message}"
        return "rejected", None
    except Exception as error:  # noqa: BLE001 - the suite is about these
        return type(error).__name__, f"{type(error).__name__}: {error}"
    try:
        with time_limit(CALL_TIMEOUT):
            entry.use(call.owner, result)
    except Exception as error:  # noqa: BLE001
        return "accepted", f"accepted, then using it raised {error!r}"
    return "accepted", None


def _record(entry: str, argument: str, value: Any, outcome: str, violation: Any):
    COUNTS[entry]["tried"] += 1
    COUNTS[entry][outcome] += 1
    if violation is not None:
        COUNTS[entry]["violations"] += 1
        VIOLATIONS[entry].setdefault(
            f"{argument}: {violation[:200]}", repr(value)[:200]
        )
    if not REPORT:
        assert violation is None, f"`{argument}`={value!r}: {violation}"


_FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not REPORT,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@_FUZZ_SETTINGS
@given(data=st.data())
def test_malformed_arguments_are_rejected_by_name_before_any_change(entry, data):
    arguments = ENTRY_POINTS[entry].build().arguments
    argument = data.draw(st.sampled_from(sorted(arguments)), label="argument")
    value = malformed(arguments[argument], data.draw)
    outcome, violation = fuzz_call(ENTRY_POINTS[entry], argument, value)
    _record(entry, argument, value, outcome, violation)


# ------------------------------------------------------- the --resume run store
def _trace() -> RunTrace:
    return RunTrace(
        problem="p",
        policy="m",
        seed=1,
        optimum=1.0,
        uniform_regret=0.5,
        values=np.array([0.1, 0.4]),
        ask_seconds=np.array([0.01, 0.02]),
        tell_seconds=np.array([0.01, 0.01]),
        batch_index=np.array([0, 1]),
        diagnostics={"radius": np.array([1.0, 0.9])},
        setup_seconds=0.1,
        peak_memory_mb=1.0,
        memory_method="none",
    )


FINGERPRINT = {"budget": 2, "options": {"qbar": 2.0}}

_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=4),
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def _malformed_file(payload: dict[str, Any], draw: Callable) -> bytes:
    r"""The bytes of a malformed or foreign run file made from a valid
    ``payload``: a field of the trace or the payload replaced, JSON of another
    shape, truncated or binary bytes, deep nesting."""
    text = json.dumps(payload)
    kind = draw(st.sampled_from(["trace", "trace", "payload", "json", "bytes"]))
    if kind == "trace":
        trace = dict(payload["trace"])
        key = draw(st.sampled_from(sorted(trace)))
        if draw(st.booleans()):
            trace[key] = draw(_JSON)
        else:
            del trace[key]
        return json.dumps({**payload, "trace": trace}).encode()
    if kind == "payload":
        changed = malformed(payload, draw)
        return json.dumps(changed, default=repr).encode()
    if kind == "json":
        return json.dumps(draw(_JSON)).encode()
    return draw(
        st.one_of(
            st.binary(max_size=16),
            st.integers(1, len(text) - 1).map(lambda n: text[:n].encode()),
            st.just(b"[" * 100_000 + b"]" * 100_000),
            st.just(text.encode("utf-16")),
        )
    )


@_FUZZ_SETTINGS
@given(data=st.data())
def test_malformed_run_files_are_reported_not_raised(data, tmp_path_factory):
    r"""``RunStore.load`` of a malformed or foreign file returns ``(None, why)``
    naming the file (the run is made again), never raises and leaves the file as
    it was; a file that still holds the valid run gives it back."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    trace = _trace()
    path = store.save(trace, FINGERPRINT)
    valid = json.loads(path.read_text())
    content = _malformed_file(valid, data.draw)
    path.write_bytes(content)
    try:
        with time_limit(CALL_TIMEOUT):
            loaded, why = store.load("p", "m", 1, FINGERPRINT)
    except Exception as error:  # noqa: BLE001
        outcome, violation = type(error).__name__, f"raised {error!r}"
    else:
        outcome, violation = ("rejected", None) if loaded is None else ("loaded", None)
        if loaded is None and (why is None or str(path) not in why):
            violation = f"the reason does not name the file: {why!r}"
        if loaded is not None and not _usable(loaded):
            violation = "a malformed run was loaded"
    if path.read_bytes() != content:
        violation = "the file was changed"
    _record("RunStore.load", "file", content, outcome, violation)


def _usable(trace: RunTrace) -> bool:
    r"""Whether a loaded run is well formed: its per-evaluation records all have
    one entry per evaluation and its summary can be computed."""
    lengths = {
        len(array)
        for array in (
            trace.values,
            trace.ask_seconds,
            trace.tell_seconds,
            trace.batch_index,
            *trace.diagnostics.values(),
        )
    }
    try:
        trace.summary()
    except Exception:  # noqa: BLE001 - any failure makes the run unusable
        return False
    return len(lengths) == 1 and isinstance(trace.problem, str)


# --------------------------------------------------------- regression examples
#: Defects the fuzz suite found, fixed: (entry, argument, value).
FIXED_EXAMPLES = [
    ("BBKBOptions", "cache_dtype", "float32"),
    ("BBKBOptions", "cache_dtype", torch.int64),
    ("SGPTSOptions", "cache_dtype", torch.bool),
    ("SGPTSOptions", "memory_budget", math.nan),
    ("SGPTSOptions", "memory_budget", -1.0),
    ("SGPTSOptions", "inducing_quality", "other"),
    ("SGPTSOptions", "num_features", 63),
    ("SGPTSOptions", "num_features", 2**60),
    ("SGPTSOptions", "prior_block", 2**62),
    ("SimulatedEngine", "durations", [True, False]),
    ("SimulatedEngine", "durations", torch.tensor([1.0 + 2.0j])),
    ("SimulatedEngine.lognormal", "count", 2**62),
    ("SimulatedEngine.lognormal", "mean", 1e308),
    ("BBKBSampler", "poll_interval", 1e300),
    ("BBKBSampler", "num_arms", 2**62),
    ("SGPTSSampler", "seed", 2**64),
    ("SGPTSSampler", "num_features", 2**62),
]


@pytest.mark.parametrize(("entry", "argument", "value"), FIXED_EXAMPLES)
def test_fixed_examples_are_rejected_by_name(entry, argument, value):
    outcome, violation = fuzz_call(ENTRY_POINTS[entry], argument, value)
    assert (outcome, violation) == ("rejected", None)


def test_a_huge_sigma_gives_durations_not_an_overflow():
    engine = SimulatedEngine.lognormal(4, sigma=1e300, generator=torch.Generator())
    assert all(math.isfinite(d) and d >= 0 for d in engine.durations)


def _list_diagnostics(payload: dict[str, Any]) -> str:
    return json.dumps({**payload, "trace": {**payload["trace"], "diagnostics": [1]}})


def _short_record(payload: dict[str, Any]) -> str:
    return json.dumps({**payload, "trace": {**payload["trace"], "ask_seconds": [0]}})


def _infinite_seed(payload: dict[str, Any]) -> str:
    return json.dumps({**payload, "trace": {**payload["trace"], "seed": math.inf}})


def _deep_nesting(payload: dict[str, Any]) -> str:
    return "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "content", [_list_diagnostics, _short_record, _infinite_seed, _deep_nesting]
)
def test_fixed_run_files_are_reported(content, tmp_path):
    store = RunStore(tmp_path)
    path = store.save(_trace(), FINGERPRINT)
    path.write_text(content(json.loads(path.read_text())))
    loaded, why = store.load("p", "m", 1, FINGERPRINT)
    assert loaded is None and str(path) in why


@pytest.fixture(scope="module", autouse=True)
def _write_report():
    yield
    summary = {
        entry: {k: counts[k] for k in ("tried", "rejected", "accepted", "violations")}
        for entry, counts in sorted(COUNTS.items())
    }
    print("\nfuzz counts:", json.dumps(summary, indent=1))
    if REPORT:
        Path(REPORT).write_text(
            json.dumps(
                {"examples": EXAMPLES, "counts": COUNTS, "violations": VIOLATIONS},
                indent=1,
                sort_keys=True,
            )
        )
