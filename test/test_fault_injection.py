r"""Fault injection into the asynchronous loops and the driver (#26, Deliver).

- **kill -9** of a real ``run_parallel`` driver subprocess (threads inside, a
  checkpoint file, an objective that appends each evaluation to a file) at random
  points, then a resume in a new subprocess: every asked arm is in the final log
  exactly once, each result came from a real evaluation, and a one-worker run
  resumes to the uninterrupted run's choices.
- **Foreign checkpoints**: ``run_parallel`` given a checkpoint of another problem
  (other arm values, another ``d``, another ``noise`` or radius) raises and leaves
  the file, the optimizer and the objective alone.
- **Exceptions** of every kind (``RuntimeError``, ``KeyboardInterrupt``,
  ``MemoryError``, a custom ``BaseException``) injected into every state-changing
  step of both self-tuning loops (the batch end's updates, the refits and the
  rebuilds, BBKB's and S-GP-TS's appends of arms, the latter once their features
  are written, and the choice of arms in ``ask``: BBKB's batch greedy, S-GP-TS's
  paths), at the first and the last ``ask``, ``tell`` and ``add_arms`` of a
  scripted asynchronous run that reach it, transient (the patched method raises
  at its first call only) or persistent (at every call, as a broken device or
  memory that stays short): the call raises the injected exception, the
  ``state_dict`` after it equals the one before, bit for bit, and loads, the
  next ask chooses as it would have without the call, and once the fault is
  gone a retry makes the fault-free run's later choices (a fault in BBKB's ask
  after it ended a batch undoes that batch end too). The rollback recomputes
  nothing, so a persistent fault cannot break it (#37); a persistent fault
  after S-GP-TS's tell re-selected its inducing points (the feature cache's
  reused column slots) is checked too.

Timeouts on each engine are tested in ``test/parallel/test_driver.py``.

The default sizes keep the module CI-sized; ``BOTORCH_SKETCH_FAULTS=large`` runs
more kills per driver, more seeds and four more random scripts per loop.
"""

from __future__ import annotations

import concurrent.futures
import copy
import inspect
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import torch

from botorch_sketch.generation import ask_tell
from botorch_sketch.generation.bbkb import BatchGreedy
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.generation.thompson_arms import CachedSparseThompson
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.kernel_columns import KernelColumns
from botorch_sketch.parallel import load_checkpoint, run_parallel
from botorch_sketch.sampling.arm_features import ArmFeatureCache

from .fault_helpers import (
    DTYPE,
    LARGE,
    assert_same_run,
    assert_same_state,
    evaluations,
    fails,
    logged_objective,
    make_arms,
    make_loop,
    reward,
)

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("fault_driver.py")


# ------------------------------------------------------------------ kill -9
def start_driver(kind, workers, budget, checkpoint, path, pause, go):
    r"""A driver subprocess (``fault_driver.py``) that starts its run once the
    file ``go`` exists."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    arguments = [kind, workers, budget, checkpoint, path, pause, go]
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *map(str, arguments)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kill_after(process, path, count, delay):
    r"""SIGKILL ``process`` ``delay`` seconds after the file ``path`` holds
    ``count`` evaluations (or at once if it ended); whether it was killed."""
    deadline = time.monotonic() + 120
    while len(evaluations(path)) < count and process.poll() is None:
        assert time.monotonic() < deadline, "the driver made no progress"
        time.sleep(0.005)
    time.sleep(delay)
    if process.poll() is not None:
        return False
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    return True


KILL_RUNS = [  # kind, workers, kills, seed of the kill points
    (kind, workers, 1, 0) for kind in ("bbkb", "sgpts") for workers in (1, 3)
]
if LARGE:
    KILL_RUNS += [
        (kind, workers, 4, seed)
        for kind in ("bbkb", "sgpts")
        for workers in (1, 3)
        for seed in (1, 2)
    ]


@pytest.mark.parametrize("kind, workers, kills, seed", KILL_RUNS)
def test_kill_9_and_resume_loses_and_duplicates_nothing(
    kind, workers, kills, seed, tmp_path
):
    budget, pause = 16, 0.02
    checkpoint, path = tmp_path / "run.pt", str(tmp_path / "evaluations.txt")
    points = torch.Generator().manual_seed(seed)
    go = [str(tmp_path / f"go{run}") for run in range(kills + 1)]
    options = (kind, workers, budget, checkpoint, path, pause)
    upcoming = start_driver(*options, go[0])
    open(go[0], "w").close()
    killed = 0
    for run in range(kills):
        # the next driver imports meanwhile; it starts once this one is dead
        process, upcoming = upcoming, start_driver(*options, go[run + 1])
        done = len(evaluations(path))
        count = done + int(torch.randint(1, 5, (1,), generator=points))
        delay = 0.02 * float(torch.rand(1, generator=points))
        killed += kill_after(process, path, count, delay)
        open(go[run + 1], "w").close()
    assert killed >= 1, "no kill landed during a run"
    _, error = upcoming.communicate(timeout=300)
    final = upcoming
    assert final.returncode == 0, error.decode()[-2000:]

    state, log = load_checkpoint(checkpoint)
    arms = make_arms()
    loop = make_loop(kind, arms, workers=workers)
    loop.load_state_dict(state)
    # every asked arm once in the log, told or failed, and so in the loop
    assert log.num_completed == log.num_asked == budget
    assert loop.pending.numel() == 0
    assert loop.observed.tolist() == log.indices
    assert loop.failed.tolist() == log.failed
    assert log.rewards == [float(reward(arms[i])) for i in log.indices]
    assert all(fails(arms[i]) for i in log.failed)
    assert not any(fails(arms[i]) for i in log.indices)
    # each result came from an evaluation; the only evaluations not in the log
    # are those in flight at a kill (their arms were evaluated again)
    evaluated = Counter(evaluations(path))
    recorded = Counter(log.indices + log.failed)
    assert not recorded - evaluated
    assert (evaluated - recorded).total() <= killed * workers
    if workers == 1:  # the uninterrupted run's choices, failures included
        other = str(tmp_path / "uninterrupted.txt")
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            uninterrupted = run_parallel(
                make_loop(kind, arms, workers=1),
                logged_objective(other, arms),
                executor,
                num_workers=1,
                budget=budget,
            )
        assert log.indices == uninterrupted.indices
        assert log.failed == uninterrupted.failed


# ------------------------------------------------------ foreign checkpoints
FOREIGN = {
    "bbkb": {
        "arms": lambda: BBKB(make_arms(seed=1), seed=1),
        "d": lambda: BBKB(make_arms(d=3), seed=1),
        "noise": lambda: BBKB(make_arms(), noise=0.3, seed=1),
        "radius": lambda: BBKB(make_arms(), radius=1.5, seed=1),
    },
    "sgpts": {
        "arms": lambda: SGPTS(make_arms(seed=1), num_inducing=8, num_features=32),
        "d": lambda: SGPTS(make_arms(d=3), num_inducing=8, num_features=32),
        "noise": lambda: SGPTS(make_arms(), noise=0.3, num_inducing=8, num_features=32),
    },
}
FOREIGN_CASES = [(kind, other) for kind, cases in FOREIGN.items() for other in cases]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    r"""One checkpoint per loop kind, saved by a short run on :func:`make_arms`."""
    saved = {}
    for kind in FOREIGN:
        path = tmp_path_factory.mktemp(kind) / "run.pt"
        arms = make_arms()
        loop = BBKB(arms, seed=1) if kind == "bbkb" else make_loop(kind, arms)
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            run_parallel(
                loop, lambda x: float(reward(x)), executor, num_workers=1, budget=6,
                checkpoint=path,
            )  # fmt: skip
        saved[kind] = path
    return saved


@pytest.mark.parametrize("kind, other", FOREIGN_CASES)
def test_a_foreign_checkpoint_is_rejected_and_left_alone(
    kind, other, checkpoints, tmp_path
):
    path = checkpoints[kind]
    content, modified = path.read_bytes(), path.stat().st_mtime_ns
    loop = FOREIGN[kind][other]()
    before = loop.state_dict()
    log = str(tmp_path / "evaluations.txt")
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        with pytest.raises(ValueError, match="another problem: its fingerprint"):
            run_parallel(
                loop, logged_objective(log, loop.arms), executor, num_workers=1,
                budget=10, checkpoint=path,
            )  # fmt: skip
    assert path.read_bytes() == content and path.stat().st_mtime_ns == modified
    assert_same_state(loop.state_dict(), before)
    assert evaluations(log) == []


# -------------------------------------------------------- injected exceptions
class InjectedFault(BaseException):
    r"""A custom ``BaseException`` subclass (neither Exception nor an interrupt)."""


ERRORS = [RuntimeError, KeyboardInterrupt, MemoryError, InjectedFault]

SITES = {
    "bbkb": {
        "posterior update": (BBKB, "_update_posterior"),
        "new targets": (CandidateState, "set_targets"),
        "power fit": (ask_tell, "fit_power"),
        "refit": (ask_tell, "fit_dtc_hyperparameters"),
        "refit's refresh": (CandidateState, "refresh"),
        "dictionary update": (CandidateState, "update"),
        "arm append": (CandidateState, "append_points"),
        # inside the append, after the new raw columns were written
        "appended kernel columns": (KernelColumns, "extended"),
        "batch greedy": (BatchGreedy, "extend"),
    },
    "sgpts": {
        "observe": (CachedSparseThompson, "observe"),
        "new targets": (SGPTS, "targets_of"),
        "power fit": (ask_tell, "fit_power"),
        "_refresh_q": (CachedSparseThompson, "_refresh_q"),
        "_reselect": (CachedSparseThompson, "_reselect"),
        "refit": (ask_tell, "fit_dtc_hyperparameters"),
        "sampler rebuild": (SGPTS, "_sampler_from"),
        "arm append": (ArmFeatureCache, "_write_columns"),
        "path sampling": (CachedSparseThompson, "update_weights"),
    },
}

#: A scripted asynchronous run: asks of ``k`` arms, ``ask_arms`` of ``k`` arms,
#: tells of a fraction of the pending arms (1: all, which ends a BBKB batch;
#: an ask then ends a batch that holds arms told meanwhile), fails, added arms.
SCRIPT = [
    ("ask", 3), ("tell", 0.5), ("ask", 3), ("tell", 1.0), ("ask_arms", 2),
    ("ask", 3), ("fail", 1), ("tell", 0.5), ("ask", 2), ("tell", 0.5),
    ("ask", 2), ("add", 3), ("ask_arms", 2), ("tell", 0.5), ("ask", 4),
    ("tell", 1.0), ("ask", 2), ("tell", 0.5), ("ask", 1), ("tell", 1.0),
    ("ask", 3), ("tell", 0.5),
]  # fmt: skip


def random_script(seed, steps=20):
    r"""A random script like :data:`SCRIPT`."""
    g = torch.Generator().manual_seed(seed)
    script = [("ask", 3)]
    for _ in range(steps - 1):
        u = float(torch.rand(1, generator=g))
        k = int(torch.randint(1, 5, (1,), generator=g))
        if u < 0.35:
            script.append(("ask", k))
        elif u < 0.42:
            script.append(("ask_arms", k))
        elif u < 0.8:
            script.append(("tell", 1.0 if u > 0.65 else 0.5))
        elif u < 0.92:
            script.append(("fail", 1))
        else:
            script.append(("add", k))
    return script


SCRIPTS = {0: SCRIPT, **({seed: random_script(seed) for seed in range(1, 5)})}
SCRIPT_SEEDS = list(SCRIPTS) if LARGE else [0]
#: Steps compared after a retry (the large run: all)
HORIZON = 4


def resolve(loop, op, step):
    r"""The call of script entry ``op`` at ``step`` on ``loop`` now: its random
    choices depend on the step and the pending arms only; a tell or fail with
    nothing pending becomes an ask of one arm."""
    g = torch.Generator().manual_seed(1000 + step)
    name, value = op
    pending = loop.pending
    if name in ("tell", "fail") and pending.numel() == 0:
        return ("ask", 1)
    if name == "ask":
        return op
    if name == "ask_arms":
        return ("ask_arms", torch.randint(loop.arms.shape[0], (value,), generator=g))
    if name == "add":
        box = loop._given_arms
        low, high = box.min(0).values, box.max(0).values
        return ("add", low + (high - low) * torch.rand(value, 2, generator=g).to(DTYPE))
    order = pending[torch.randperm(pending.numel(), generator=g)]
    count = max(1, int(value * pending.numel())) if name == "tell" else value
    chosen = order[:count]
    if name == "fail":
        return ("fail", chosen)
    return ("tell", chosen, reward(loop.arms[chosen]))


def perform(loop, call):
    r"""Make ``call`` on ``loop``; the arms asked (or added), else None."""
    if call[0] == "ask":
        return loop.ask(call[1])
    if call[0] == "add":
        return loop.add_arms(call[1])
    if call[0] == "ask_arms":
        return loop.ask_arms(call[1])
    if call[0] == "fail":
        return loop.fail(call[1])
    return loop.tell(call[1], call[2])


def patched(monkeypatch, owner, name, wrap):
    r"""Replace ``owner.name`` by ``wrap(original)`` (static for classmethods)."""
    original = getattr(owner, name)
    replacement = wrap(original)
    static = inspect.getattr_static(owner, name)
    if isinstance(static, (classmethod, staticmethod)):
        replacement = staticmethod(replacement)
    monkeypatch.setattr(owner, name, replacement)


#: How long an injected fault lasts: its first call only, or every call
MODES = ("transient", "persistent")


def injected(error, mode="transient"):
    r"""A wrapper that raises ``error`` at its first call only (``"transient"``) or
    at every call (``"persistent"``)."""

    def wrap(original):
        calls = []

        def faulty(*args, **kwargs):
            calls.append(1)
            if mode == "persistent" or len(calls) == 1:
                raise error("injected fault")
            return original(*args, **kwargs)

        return faulty

    return wrap


def counting(name, called):
    def wrap(original):
        def spy(*args, **kwargs):
            called.add(name)
            return original(*args, **kwargs)

        return spy

    return wrap


def removing(called):
    r"""A spy of ``ArmFeatureCache.remove_columns`` that records a removal of a
    registered column (its slot is then free for another arm's column)."""

    def wrap(original):
        def spy(cache, indices):
            before = cache.num_columns
            original(cache, indices)
            if cache.num_columns < before:
                called.add(COLUMN_REMOVAL)

        return spy

    return wrap


#: The pseudo-site of a registered column removed by S-GP-TS's re-selection
COLUMN_REMOVAL = "column removal"


@cache
def reference(kind, seed):
    r"""The fault-free run of the script: per step the call, its result, the sites
    it reached and the state before it; then the final state."""
    steps = []
    arms = make_arms(20)
    loop = make_loop(kind, arms)
    with pytest.MonkeyPatch.context() as monkeypatch:
        called = set()
        for site, (owner, name) in SITES[kind].items():
            patched(monkeypatch, owner, name, counting(site, called))
        patched(monkeypatch, ArmFeatureCache, "remove_columns", removing(called))
        for step, op in enumerate(SCRIPTS[seed]):
            called.clear()
            call = resolve(loop, op, step)
            before = loop.state_dict()
            result = perform(loop, call)
            steps.append((call, result, frozenset(called), before))
    return steps, loop.state_dict()


def first_steps(kind, seed, site):
    r"""The first step of each kind (ask, tell, add_arms...) that reaches
    ``site``."""
    steps, _ = reference(kind, seed)
    first = {}
    for step, (call, _, called, _) in enumerate(steps):
        if site in called:
            first.setdefault(call[0], step)
    return first


def last_steps(kind, seed, site):
    r"""The last step of each kind that reaches ``site`` (a fault there hits a
    loop with more history: observations, a refitted kernel, added arms)."""
    steps, _ = reference(kind, seed)
    return {
        call[0]: step
        for step, (call, _, called, _) in enumerate(steps)
        if site in called
    }


FAULT_CASES = [
    (kind, site, error, mode, seed)
    for kind in SITES
    for site in SITES[kind]
    for error in ERRORS
    for mode in MODES
    for seed in SCRIPT_SEEDS
]


def loop_at(kind, seed, step):
    r"""A loop of ``kind`` as the run of script ``seed`` left it before ``step``:
    that run itself (the large runs), or resumed from its saved state there."""
    steps, _ = reference(kind, seed)
    loop = make_loop(kind, make_arms(20))
    if LARGE:
        for call, *_ in steps[:step]:
            perform(loop, call)
    else:
        loop.load_state_dict(steps[step][3])
    assert_same_run(loop.state_dict(), steps[step][3])
    return loop


def assert_fault_changes_nothing(kind, seed, step, target, fault, monkeypatch):
    r"""Make the call of ``step`` of script ``seed`` on a loop there with the
    method ``target`` (owner, name) raising ``fault`` (error, mode): the call
    raises that error, the loop's state is unchanged (bit for bit) and loads, the
    next ask (made on a copy) chooses what it would have chosen without the call,
    and once the fault is removed a retry and the later steps make the fault-free
    run's choices and state."""
    steps, final = reference(kind, seed)
    loop = loop_at(kind, seed, step)
    before = loop.state_dict()
    call = steps[step][0]
    patched(monkeypatch, *target, injected(*fault))
    with pytest.raises(BaseException, match="injected fault") as raised:
        perform(loop, call)
    monkeypatch.undo()
    assert raised.type is fault[0]
    after = loop.state_dict()
    assert_same_state(after, before, f"state after {call[0]}")
    loaded = make_loop(kind, make_arms(20))
    loaded.load_state_dict(after)
    assert_same_run(loaded.state_dict(), after)
    probe, twin = copy.deepcopy(loop), loop_at(kind, seed, step)
    assert torch.equal(probe.ask(4, wait=False), twin.ask(4, wait=False))
    end = len(steps) if LARGE else min(step + HORIZON, len(steps))
    for later, (call, result, *_) in enumerate(steps[step:end], step):
        again = perform(loop, call)
        if result is not None:
            assert torch.equal(again, result), f"step {later} after the fault"
    expected = final if end == len(steps) else steps[end][3]
    assert_same_run(loop.state_dict(), expected)


@pytest.mark.parametrize(
    "kind, site, error, mode, seed",
    FAULT_CASES,
    ids=[f"{k}-{s}-{e.__name__}-{m}-{n}" for k, s, e, m, n in FAULT_CASES],
)
def test_a_fault_changes_nothing_and_a_retry_is_fault_free(
    kind, site, error, mode, seed, monkeypatch
):
    first = first_steps(kind, seed, site)
    if seed == 0:  # the fixed script reaches every site
        assert first, f"the script never reaches {site}"
    chosen = {*first.values(), *last_steps(kind, seed, site).values()}
    for step in sorted(chosen):
        target, fault = SITES[kind][site], (error, mode)
        assert_fault_changes_nothing(kind, seed, step, target, fault, monkeypatch)


def raises_after(error, ended, mode):
    r"""A wrapper that raises ``error`` once ``ended`` holds something: at its
    first such call (``"transient"``) or at every one (``"persistent"``)."""

    def wrap(original):
        raised = []

        def faulty(*args, **kwargs):
            if ended and (mode == "persistent" or not raised):
                raised.append(1)
                raise error("injected fault")
            return original(*args, **kwargs)

        return faulty

    return wrap


def recording(ended):
    def wrap(original):
        def spy(*args, **kwargs):
            original(*args, **kwargs)
            ended.append(1)

        return spy

    return wrap


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("error", ERRORS)
def test_a_fault_after_an_ask_ended_the_batch_undoes_the_end(error, mode, monkeypatch):
    r"""BBKB's ask ends a full batch, then opens the next one: a fault in the
    second greedy undoes the batch end too (the loop is as before the ask); a
    retry makes the fault-free run's choices."""
    steps, final = reference("bbkb", 0)
    step = first_steps("bbkb", 0, "posterior update")["ask"]
    loop = loop_at("bbkb", 0, step)
    before = loop.state_dict()
    ended = []
    patched(monkeypatch, BBKB, "_end_batch", recording(ended))
    patched(monkeypatch, BatchGreedy, "extend", raises_after(error, ended, mode))
    with pytest.raises(error, match="injected fault"):
        perform(loop, steps[step][0])
    monkeypatch.undo()
    assert ended, "the ask did not end its batch"
    assert_same_state(loop.state_dict(), before)
    for later, (call, result, *_) in enumerate(steps[step:], step):
        again = perform(loop, call)
        if result is not None:
            assert torch.equal(again, result), f"step {later} after the fault"
    assert_same_run(loop.state_dict(), final)


#: The exceptions a fault that persists raises in the tests of issue #37
PERSISTENT = [RuntimeError, MemoryError, KeyboardInterrupt]


@pytest.mark.parametrize("error", PERSISTENT)
@pytest.mark.parametrize(
    "kind, site", [("bbkb", "new targets"), ("sgpts", "_refresh_q")]
)
def test_a_tell_under_a_persistent_fault_loses_and_duplicates_nothing(
    kind, site, error, monkeypatch
):
    r"""#37: a tell whose update fails at every attempt (S-GP-TS's Titsias
    refresh, BBKB's new targets) raises and leaves the loop as before it (no
    observation added, the arms still pending, a state that loads); the retry
    once the fault is gone records each outcome once, as an undisturbed twin."""
    arms = make_arms(20)
    loop, twin = make_loop(kind, arms), make_loop(kind, arms)
    for each in (loop, twin):
        told = each.ask(3)
        each.tell(told, reward(arms[told]))
    asked = loop.ask(3)
    assert torch.equal(asked, twin.ask(3))
    twin.tell(asked, reward(arms[asked]))
    before = loop.state_dict()
    patched(monkeypatch, *SITES[kind][site], injected(error, "persistent"))
    for _ in range(2):  # a fault that persists: the retry fails the same way
        with pytest.raises(error, match="injected fault"):
            loop.tell(asked, reward(arms[asked]))
        assert_same_state(loop.state_dict(), before)
    monkeypatch.undo()
    assert loop.num_observations == 3 and torch.equal(loop.pending, asked)
    make_loop(kind, arms).load_state_dict(loop.state_dict())
    loop.tell(asked, reward(arms[asked]))
    assert loop.num_observations == 3 + asked.numel() and not loop.pending.numel()
    assert_same_state(loop.state_dict(), twin.state_dict())
    assert torch.equal(loop.ask(2), twin.ask(2))


@pytest.mark.parametrize("error", PERSISTENT)
def test_a_persistent_fault_after_a_reselection_restores_the_feature_cache(
    error, monkeypatch
):
    r"""S-GP-TS's tell re-selects its inducing points, freeing the feature cache's
    slots of the dropped ones and reusing them for the new ones, then its Titsias
    refresh fails at every call: the reused slots get their columns back, so the
    retry draws the fault-free run's paths."""
    first = first_steps("sgpts", 0, COLUMN_REMOVAL)
    assert "tell" in first, "the script never drops an inducing point"
    target = SITES["sgpts"]["_refresh_q"]
    assert_fault_changes_nothing(
        "sgpts", 0, first["tell"], target, (error, "persistent"), monkeypatch
    )
