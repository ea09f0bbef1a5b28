r"""The evaluation driver on real engines: threads, processes, a Dask LocalCluster with
two worker processes and a local Ray with two CPUs."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import signal
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import asynchronous_options
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.multi_outcome import MultiOutcomeLoop
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.parallel import (
    DaskEngine,
    EvaluationLog,
    ExecutorEngine,
    RayEngine,
    SimulatedEngine,
    as_engine,
    load_checkpoint,
    run_parallel,
)
from botorch_sketch.utils.extras import install_hint

from ..gp_helpers import assert_loop_matches_scratch
from ..ray_helpers import init_local_ray

torch.set_num_threads(1)

NUM_ARMS = 64


def make_arms() -> torch.Tensor:
    return torch.rand(NUM_ARMS, 2, generator=torch.Generator().manual_seed(0)).double()


def make_optimizer(kind: str, arms: torch.Tensor):
    if kind == "bbkb":  # a fixed kernel: these tests are about the driver
        kernel = ScaleKernel(RBFKernel(ard_num_dims=2)).to(arms)
        return BBKB(
            arms,
            covar_module=kernel,
            noise=0.5,
            radius=0.5,
            ratio_threshold=3.0,
            seed=1,
        )
    return SGPTS(arms, noise=0.5, num_inducing=16, num_features=64, seed=1)


def reward(x: torch.Tensor) -> float:
    r"""A cheap deterministic objective of one arm (module level: picklable)."""
    return float(torch.sin(3.0 * x).sum())


def reward_or_error(x: torch.Tensor) -> float:
    r"""``reward`` that raises on arms with ``x_0 > 0.75`` and returns NaN on arms with
    ``x_1 > 0.9``."""
    if x[0] > 0.75:
        raise ValueError(f"no reward at {x[0]:.3f}")
    return float("nan") if x[1] > 0.9 else reward(x)


def staggered_reward_or_error(x: torch.Tensor) -> float:
    r"""``reward_or_error`` after ``0.05 x_1`` seconds: evaluations submitted together
    end at different times."""
    time.sleep(0.05 * float(x[1]))
    return reward_or_error(x)


def wait_for_file(path: str, x: torch.Tensor) -> float:
    r"""``reward(x)`` once ``path`` exists (a barrier that works across processes)."""
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)
    return reward(x)


#: What the hung evaluation of :func:`hang_once` returns once released: no arm's reward.
LATE = 1000.0


def hang_once(started: str, release: str, x: torch.Tensor) -> float:
    r"""The first call (of any process) hangs until the file ``release`` exists (at
    most 30 s), then returns ``LATE``; it writes ``started + ".returned"`` however it
    ends (also when Ray interrupts it). Later calls take 0.1 s and return
    ``reward(x)``. Tests create ``release`` when they end, so no worker stays hung."""
    try:
        os.close(os.open(started, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(0.1)
        return reward(x)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        open(started + ".returned", "w").close()
    return LATE


def sleep_then_reward(x: torch.Tensor) -> float:
    time.sleep(0.5)
    return reward(x)


def warm_up(engine) -> None:
    r"""Give both workers of ``engine`` a first task: Dask and Ray workers import
    torch and this module then, which takes longer than the timeouts tested."""
    handles = [engine.submit(sleep_then_reward, torch.zeros(2)) for _ in range(2)]
    while handles:
        done = engine.wait(handles)
        handles = [handle for handle in handles if handle not in done]


def wait_for(path: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def sync_loop(optimizer, budget: int) -> list[int]:
    r"""The plain synchronous ask/tell loop, one arm at a time (the oracle)."""
    told = []
    while len(told) < budget:
        index = optimizer.ask(1)
        optimizer.tell(index, torch.tensor([reward(optimizer.arms[index[0]])]).double())
        told.extend(index.tolist())
    return told


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed", reason=install_hint("distributed"))
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env={"OMP_NUM_THREADS": "1"},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def ray_module(tmp_path_factory):
    ray = pytest.importorskip("ray", reason=install_hint("distributed"))
    init_local_ray(tmp_path_factory)
    yield ray
    ray.shutdown()


ENGINES = ["threads", "processes", "dask", "ray"]


@pytest.fixture
def engine(request):
    r"""A fresh engine of the kind ``request.param`` (2 workers)."""
    if request.param == "threads":
        with concurrent.futures.ThreadPoolExecutor(2) as executor:
            yield ExecutorEngine(executor)
    elif request.param == "processes":
        with concurrent.futures.ProcessPoolExecutor(2) as executor:
            yield ExecutorEngine(executor)
    elif request.param == "dask":
        yield DaskEngine(request.getfixturevalue("dask_client"))
    else:
        request.getfixturevalue("ray_module")
        yield RayEngine(max_retries=0)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_wait_returns_first_results_before_slow_ones(engine, tmp_path):
    barrier = str(tmp_path / "go")
    slow = engine.submit(functools.partial(wait_for_file, barrier), torch.zeros(2))
    fast = engine.submit(reward, torch.ones(2))
    assert engine.wait([slow, fast]) == [fast]
    assert engine.result(fast) == reward(torch.ones(2))
    open(barrier, "w").close()
    assert engine.wait([slow]) == [slow] and engine.result(slow) == 0.0


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
@pytest.mark.parametrize("kind", ["bbkb", "sgpts"])
def test_one_worker_makes_the_synchronous_loop(engine, kind):
    arms = make_arms()
    log = run_parallel(
        make_optimizer(kind, arms), reward, engine, num_workers=1, budget=12
    )
    expected = sync_loop(make_optimizer(kind, arms), 12)
    assert log.indices == expected
    assert log.rewards == [reward(arms[i]) for i in expected]
    assert log.num_asked == 12 and not log.failed


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_worker_errors_are_recorded_with_their_arm(engine):
    arms = make_arms()
    optimizer = make_optimizer("sgpts", arms)
    log = run_parallel(optimizer, reward_or_error, engine, num_workers=2, budget=40)
    assert log.num_completed == log.num_asked == 40
    assert optimizer.pending.numel() == 0
    assert log.failed, "the run should have met failing arms"
    assert Counter(optimizer.failed.tolist()) == Counter(log.failed)
    assert Counter(optimizer.observed.tolist()) == Counter(log.indices)
    assert [error.index for error in log.errors] == log.failed
    for error in log.errors:
        x = arms[error.index]
        assert error.arm == x.tolist()
        if x[0] > 0.75:
            assert error.error.startswith("ValueError: no reward at")
            assert "ValueError" in error.traceback
        else:
            assert x[1] > 0.9 and "non-finite" in error.error
    for index, value in zip(log.indices, log.rewards, strict=True):
        assert arms[index, 0] <= 0.75 and value == reward(arms[index])


def reward_and_constraint(x: torch.Tensor) -> tuple[float, float] | list[float]:
    r"""``reward`` and a constraint, feasible (``<= 0``) where ``x_0 >= 0.3``; one
    value too many where ``x_1 > 0.8`` (a malformed result)."""
    outcomes = [reward(x), 0.3 - float(x[0])]
    return outcomes + [0.0] if x[1] > 0.8 else tuple(outcomes)


@pytest.mark.parametrize("engine", ["threads", "processes"], indirect=True)
def test_a_multi_outcome_loop_is_told_every_outcome(engine, tmp_path):
    arms = make_arms()
    loop = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(2)], num_objectives=1)
    checkpoint = tmp_path / "run.pt"
    log = run_parallel(
        loop,
        reward_and_constraint,
        engine,
        num_workers=2,
        budget=16,
        checkpoint=checkpoint,
    )
    assert log.num_completed == 16 and loop.pending.numel() == 0
    for index, outcomes in zip(log.indices, log.rewards, strict=True):
        assert outcomes == list(reward_and_constraint(arms[index]))
    assert Counter(loop.observed.tolist()) == Counter(log.indices)
    expected = [list(reward_and_constraint(arms[i])) for i in loop.observed.tolist()]
    assert loop.outcomes.tolist() == expected
    assert log.failed  # the malformed results: failed, with their error
    for index, error in zip(log.failed, log.errors, strict=True):
        assert arms[index, 1] > 0.8 and "2 outcomes per arm" in error.error
    with pytest.raises(ValueError, match="several outcomes"):
        log.best()
    state, saved = load_checkpoint(checkpoint)
    resumed = MultiOutcomeLoop([BBKB(arms, seed=i) for i in range(2)], 1)
    resumed.load_state_dict(state)
    assert saved.rewards == log.rewards
    assert torch.equal(resumed.outcomes, loop.outcomes)


def fails_where_x1_is_above_0_6(x: torch.Tensor) -> float:
    if x[1] > 0.6:
        raise ValueError("this arm always fails")
    return reward(x)


@pytest.mark.parametrize("kind", ["bbkb", "sgpts"])
def test_only_sgpts_asks_a_failed_arm_again(kind):
    r"""docs/distributed.md, Failures: BBKB never asks a failed arm again; S-GP-TS,
    whose sample paths cover every arm, does (here 4 of 8 arms always fail)."""
    arms = make_arms()[:8]
    optimizer = make_optimizer(kind, arms)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        log = run_parallel(
            optimizer, fails_where_x1_is_above_0_6, executor, num_workers=1, budget=40
        )
    failures = Counter(log.failed)
    assert set(failures) <= {0, 2, 3, 4} and len(log.indices) + len(log.failed) == 40
    if kind == "bbkb":
        assert max(failures.values()) == 1
    else:
        assert max(failures.values()) > 1


def test_results_are_told_as_they_complete():
    r"""The first evaluation blocks until three later ones have been told: a driver
    that waited for whole batches would time out."""
    arms = make_arms()
    release = threading.Event()
    calls = []

    def objective(x):
        calls.append(x)
        if len(calls) == 1 and not release.wait(timeout=20):
            raise TimeoutError("the first evaluation was never released")
        return reward(x)

    def callback(log):
        if len(log.indices) >= 3:
            release.set()

    optimizer = make_optimizer("sgpts", arms)
    with concurrent.futures.ThreadPoolExecutor(3) as executor:
        log = run_parallel(
            optimizer, objective, executor, num_workers=3, budget=10, callback=callback
        )
    assert not log.failed and len(log.indices) == 10
    first = [i for i in range(NUM_ARMS) if torch.equal(arms[i], calls[0])]
    # the first submitted arm was told after at least three others
    assert first[0] in log.indices[3:]


def test_bbkb_with_the_options_for_its_workers():
    r"""The documented recipe, ``BBKB(..., **asynchronous_options(W))`` with ``W``
    threads: every evaluation is told with its reward and, after the run, the
    loop's posterior is the one rebuilt from scratch on its observations."""
    arms = make_arms()
    optimizer = BBKB(arms, noise=0.5, radius=0.5, seed=1, **asynchronous_options(4))
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        log = run_parallel(optimizer, reward, executor, num_workers=4, budget=30)
    assert len(log.indices) == 30 and not log.failed
    assert optimizer.pending.numel() == 0 and optimizer.options.end_fraction == 0.05
    assert optimizer.observed.tolist() == log.indices
    assert log.rewards == pytest.approx([reward(arms[i]) for i in log.indices])
    assert_loop_matches_scratch(optimizer)  # the kernel is learned


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_hung_evaluation_times_out_and_its_late_result_is_never_told(
    engine, tmp_path
):
    r"""The first evaluation hangs: it fails after ``evaluation_timeout``, the run
    goes on, and once it has been released and has returned (during the run) its
    result is ignored."""
    warm_up(engine)
    arms = make_arms()
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    objective = functools.partial(hang_once, started, release)

    def release_after_the_timeout(log: EvaluationLog) -> None:
        if log.failed and not os.path.exists(release):
            open(release, "w").close()
            wait_for(started + ".returned")  # the late result is there, or Ray
            # interrupted the task

    optimizer = make_optimizer("bbkb", arms)
    try:
        log = run_parallel(
            optimizer, objective, engine, num_workers=2, budget=12,
            evaluation_timeout=0.5, callback=release_after_the_timeout,
        )  # fmt: skip
    finally:
        open(release, "w").close()
    assert len(log.failed) == 1 and len(log.indices) == 11
    assert log.errors[0].error == (
        "TimeoutError: no result within evaluation_timeout=0.5 s"
    )
    assert LATE not in log.rewards and LATE not in optimizer.rewards.tolist()
    assert log.rewards == [reward(arms[i]) for i in log.indices]
    assert optimizer.pending.numel() == 0
    assert optimizer.failed.tolist() == log.failed
    assert optimizer.observed.tolist() == log.indices


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_total_timeout_ends_the_run_with_what_it_has(engine, tmp_path):
    r"""The first evaluation hangs and no evaluation timeout is set: the run returns
    after ``total_timeout`` with the other results, the hung arm still pending (in
    the checkpoint too), and a resumed run evaluates it again (S-GP-TS: it keeps
    both workers busy from the start)."""
    warm_up(engine)
    arms = make_arms()
    path = tmp_path / "run.pt"
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    optimizer = make_optimizer("sgpts", arms)
    begin = time.monotonic()
    try:
        log = run_parallel(
            optimizer, functools.partial(hang_once, started, release), engine,
            num_workers=2, budget=6, total_timeout=1.5, checkpoint=path,
        )  # fmt: skip
        elapsed = time.monotonic() - begin
    finally:
        open(release, "w").close()
    assert 1.5 <= elapsed < 10.0
    assert len(log.indices) == 5 and not log.failed and log.num_asked == 6
    (hung,) = optimizer.pending.tolist()
    state, saved_log = load_checkpoint(path)
    assert saved_log == log and state["pending"].tolist() == [hung]
    assert optimizer.observed.tolist() == log.indices
    wait_for(started + ".returned")  # the hung worker is free again
    resumed = make_optimizer("sgpts", arms)
    final = run_parallel(
        resumed, reward, engine, num_workers=2, budget=6, checkpoint=path
    )
    assert final.indices == [*log.indices, hung] and not final.failed
    assert resumed.pending.numel() == 0


def exit_or_interrupt(x: torch.Tensor) -> float:
    r"""``reward`` that raises SystemExit on arms with ``x_0 > 0.75`` and
    KeyboardInterrupt on the others with ``x_1 > 0.9``."""
    if x[0] > 0.75:
        raise SystemExit(3)
    if x[1] > 0.9:
        raise KeyboardInterrupt
    return reward(x)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_system_exit_and_keyboard_interrupt_on_a_worker_fail_the_evaluation(engine):
    arms = make_arms()
    exits = int(torch.nonzero(arms[:, 0] > 0.75)[0])
    interrupts = int(torch.nonzero((arms[:, 0] <= 0.75) & (arms[:, 1] > 0.9))[0])
    optimizer = make_optimizer("sgpts", arms)
    optimizer.ask_arms(torch.tensor([exits, interrupts]))  # submitted first
    log = run_parallel(optimizer, exit_or_interrupt, engine, num_workers=2, budget=10)
    assert log.num_completed == 10 and optimizer.pending.numel() == 0
    errors = {error.index: error.error for error in log.errors}
    assert errors[exits] == (
        "EvaluationInterrupted: the objective raised SystemExit(3)"
    )
    assert errors[interrupts] == (
        "EvaluationInterrupted: the objective raised KeyboardInterrupt()"
    )
    assert Counter(optimizer.failed.tolist()) == Counter(log.failed)


def stop_after(count: int, error: type[BaseException]):
    def callback(log: EvaluationLog) -> None:
        if log.num_completed >= count:
            raise error("stop")

    return callback


@pytest.mark.parametrize("engine", ["threads", "dask", "ray"], indirect=True)
@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_resume_after_interruption_loses_nothing(engine, error, tmp_path):
    arms = make_arms()
    path = tmp_path / "run.pt"
    optimizer = make_optimizer("bbkb", arms)
    with pytest.raises(error):
        run_parallel(
            optimizer,
            staggered_reward_or_error,
            engine,
            num_workers=3,
            budget=30,
            checkpoint=path,
            callback=stop_after(10, error),
        )
    state, log = load_checkpoint(path)
    saved = make_optimizer("bbkb", arms)
    saved.load_state_dict(state)
    pending = saved.pending.tolist()
    assert pending, "the interruption should leave evaluations in flight"
    assert len(log.indices) + len(log.failed) + len(pending) == log.num_asked
    assert Counter(saved.observed.tolist()) == Counter(log.indices)

    resumed = make_optimizer("bbkb", arms)
    final = run_parallel(
        resumed, reward_or_error, engine, num_workers=3, budget=30, checkpoint=path
    )
    assert final.num_completed == final.num_asked >= 30
    assert resumed.pending.numel() == 0
    assert final.indices[: len(log.indices)] == log.indices
    assert final.failed[: len(log.failed)] == log.failed
    new = Counter(final.indices[len(log.indices) :] + final.failed[len(log.failed) :])
    assert not Counter(pending) - new, "an arm pending at the interruption was lost"
    assert Counter(resumed.observed.tolist()) == Counter(final.indices)
    assert Counter(resumed.failed.tolist()) == Counter(final.failed)


@pytest.mark.parametrize("kind", ["bbkb", "sgpts"])
def test_resumed_run_equals_an_uninterrupted_one(kind, tmp_path):
    r"""With one worker nothing is in flight between rounds: the interrupted and
    resumed run makes exactly the choices of a run without interruption."""
    arms = make_arms()
    path = tmp_path / "run.pt"
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        with pytest.raises(KeyboardInterrupt):
            run_parallel(
                make_optimizer(kind, arms),
                reward,
                executor,
                num_workers=1,
                budget=15,
                checkpoint=path,
                callback=stop_after(6, KeyboardInterrupt),
            )
        resumed = run_parallel(
            make_optimizer(kind, arms),
            reward,
            executor,
            num_workers=1,
            budget=15,
            checkpoint=path,
        )
    assert resumed.indices == sync_loop(make_optimizer(kind, arms), 15)


def interrupt_on_fifth_call(counter: list[int], x: torch.Tensor) -> float:
    counter.append(1)
    if len(counter) == 5:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)
    return reward(x)


def test_sigint_saves_the_run(tmp_path):
    r"""A real SIGINT (Ctrl-C) while the driver waits on its workers."""
    # engines started by earlier tests (Ray, Dask) may have replaced the handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _run_and_interrupt(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigint_inside_a_tell_waits_for_it_and_the_checkpoint(tmp_path, monkeypatch):
    r"""A SIGINT that lands between two updates of the optimizer's state (here after
    the sampler has the outcomes, before the loop records the tell) is delivered
    only once the tell, the log and the checkpoint are complete."""
    arms = make_arms()
    optimizer = make_optimizer("sgpts", arms)
    observe = optimizer.sampler.observe
    calls = []

    def observe_then_interrupt(indices, rewards, statistics=None):
        observe(indices, rewards, statistics)
        calls.append(indices.numel())
        if len(calls) == 3:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(optimizer.sampler, "observe", observe_then_interrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    path = tmp_path / "run.pt"
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as executor:
            with pytest.raises(KeyboardInterrupt):
                run_parallel(
                    optimizer, reward, executor, num_workers=2, budget=50,
                    checkpoint=path,
                )  # fmt: skip
        # the driver's own handler is gone
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    state, log = load_checkpoint(path)
    assert len(log.indices) == sum(calls) == optimizer.observed.numel()
    saved = make_optimizer("sgpts", arms)
    saved.load_state_dict(state)  # consistent: the third tell is in it
    assert saved.observed.tolist() == log.indices
    assert saved.tell_sizes == calls


def _run_and_interrupt(tmp_path):
    arms = make_arms()
    path = tmp_path / "run.pt"
    optimizer = make_optimizer("sgpts", arms)
    objective = functools.partial(interrupt_on_fifth_call, [])
    with concurrent.futures.ThreadPoolExecutor(2) as executor:
        with pytest.raises(KeyboardInterrupt):
            run_parallel(
                optimizer,
                objective,
                executor,
                num_workers=2,
                budget=50,
                checkpoint=path,
            )
    state, log = load_checkpoint(path)
    assert 3 <= log.num_completed < 50
    saved = make_optimizer("sgpts", arms)
    saved.load_state_dict(state)
    assert len(log.indices) + saved.pending.numel() == log.num_asked


def test_progress_bar(capsys):
    arms = make_arms()
    with concurrent.futures.ThreadPoolExecutor(2) as executor:
        run_parallel(
            make_optimizer("sgpts", arms),
            reward_or_error,
            executor,
            num_workers=2,
            budget=20,
            progress=True,
        )
        shown = capsys.readouterr().err
        assert "20/20" in shown and "pending=" in shown and "failed=" in shown
        # default: no bar when stderr is not a terminal (as under pytest)
        run_parallel(
            make_optimizer("sgpts", arms), reward, executor, num_workers=2, budget=5
        )
    assert capsys.readouterr().err == ""


def test_bad_arguments_change_nothing():
    arms = make_arms()
    optimizer = make_optimizer("sgpts", arms)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        for kwargs, exception, name in [
            ({"num_workers": 0}, ValueError, "num_workers"),
            ({"num_workers": 1.5}, TypeError, "num_workers"),
            ({"budget": 0}, ValueError, "budget"),
            ({"callback": 3}, TypeError, "callback"),
            *(
                ({name: value}, ValueError, name)
                for name in ("evaluation_timeout", "total_timeout")
                for value in (0, -1.0, float("nan"), float("inf"))
            ),
            *(
                ({name: value}, TypeError, name)
                for name in ("evaluation_timeout", "total_timeout")
                for value in ("1", True)
            ),
        ]:
            options = {"num_workers": 1, "budget": 3, **kwargs}
            with pytest.raises(exception, match=name):
                run_parallel(optimizer, reward, executor, **options)
        with pytest.raises(TypeError, match="objective"):
            run_parallel(optimizer, 3, executor, num_workers=1, budget=3)
        with pytest.raises(TypeError, match="optimizer"):
            run_parallel(object(), reward, executor, num_workers=1, budget=3)
    with pytest.raises(TypeError, match="engine"):
        run_parallel(optimizer, reward, "threads", num_workers=1, budget=3)
    assert optimizer.pending.numel() == 0 and optimizer.num_observations == 0


def counted_reward(calls: list[int], x: torch.Tensor) -> float:
    calls.append(1)
    return reward(x)


def reward_with_a_lock(lock: threading.Lock, x: torch.Tensor) -> float:
    r"""``reward``, holding ``lock``: no engine can pickle it."""
    with lock:
        return reward(x)


def test_a_checkpoint_that_cannot_be_written_fails_before_any_evaluation(tmp_path):
    # issue 37: a missing folder raised after 2 evaluations
    optimizer, calls = make_optimizer("sgpts", make_arms()), []
    objective = functools.partial(counted_reward, calls)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        for path, match in (
            (tmp_path / "missing" / "run.pt", "does not exist"),
            (tmp_path, "is a folder"),
        ):
            with pytest.raises(ValueError, match=f"`checkpoint` .*{match}"):
                run_parallel(
                    optimizer, objective, executor, num_workers=1, budget=3,
                    checkpoint=path,
                )  # fmt: skip
    assert not calls and optimizer.pending.numel() == 0
    assert list(tmp_path.iterdir()) == []  # the probe left nothing


def test_a_checkpoint_of_another_optimizer_names_the_file(tmp_path):
    path = tmp_path / "run.pt"
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        run_parallel(
            make_optimizer("sgpts", make_arms()), reward, executor, num_workers=1,
            budget=2, checkpoint=path,
        )  # fmt: skip
        other, calls = make_optimizer("sgpts", make_arms()[:-1]), []
        with pytest.raises(ValueError, match=f"`checkpoint` {path} was saved by an"):
            run_parallel(
                other, functools.partial(counted_reward, calls), executor,
                num_workers=1, budget=3, checkpoint=path,
            )  # fmt: skip
    assert not calls and other.num_observations == 0


@pytest.mark.parametrize("engine", ["processes", "dask", "ray"], indirect=True)
def test_an_objective_that_cannot_be_pickled_fails_before_any_evaluation(engine):
    # issue 37: a process pool failed every evaluation, spending the whole budget
    optimizer = make_optimizer("sgpts", make_arms())
    objective = functools.partial(reward_with_a_lock, threading.Lock())
    with pytest.raises(TypeError, match="`objective` cannot be pickled"):
        run_parallel(optimizer, objective, engine, num_workers=1, budget=3)
    assert optimizer.pending.numel() == 0 and optimizer.num_observations == 0


def test_threads_take_an_objective_that_cannot_be_pickled():
    objective = functools.partial(reward_with_a_lock, threading.Lock())
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        log = run_parallel(
            make_optimizer("sgpts", make_arms()), objective, executor,
            num_workers=1, budget=2,
        )  # fmt: skip
    assert len(log.indices) == 2


def test_a_truncated_checkpoint_is_named_in_the_error(tmp_path):
    # issue 37: it raised OSError: [Errno 22] Invalid argument
    path = tmp_path / "run.pt"
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        run_parallel(
            make_optimizer("sgpts", make_arms()), reward, executor,
            num_workers=1, budget=2, checkpoint=path,
        )  # fmt: skip
        data = path.read_bytes()
        for size in (len(data) // 2, 0):
            path.write_bytes(data[:size])
            optimizer = make_optimizer("sgpts", make_arms())
            with pytest.raises(ValueError, match="not a readable run_parallel"):
                run_parallel(
                    optimizer, reward, executor, num_workers=1, budget=4,
                    checkpoint=path,
                )  # fmt: skip
            with pytest.raises(ValueError, match=f"{path}.*truncated or corrupt"):
                load_checkpoint(path)
            assert optimizer.pending.numel() == 0


def returns(value: object, x: torch.Tensor) -> object:
    return value


@pytest.mark.parametrize(
    "value",
    [2, 1.5, np.float32(1.5), np.int64(2), torch.tensor(1.5), np.array([2])],
)
def test_real_numbers_are_rewards(value):
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        log = run_parallel(
            make_optimizer("sgpts", make_arms()), functools.partial(returns, value),
            executor, num_workers=1, budget=1,
        )  # fmt: skip
    assert log.rewards == [1.5 if value < 2 else 2.0] and not log.failed


@pytest.mark.parametrize(
    "value, reason",
    [
        ("1.5", "str"),  # issue 37: it was told as 1.5
        (True, "bool"),
        (np.bool_(True), "bool"),
        (torch.tensor(True), "bool"),
        (1 + 2j, "complex"),
        (None, "NoneType"),
        (torch.ones(2), "shape"),
    ],
)
def test_other_return_values_fail_their_evaluation(value, reason):
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        log = run_parallel(
            make_optimizer("sgpts", make_arms()), functools.partial(returns, value),
            executor, num_workers=1, budget=1,
        )  # fmt: skip
    assert not log.rewards and len(log.failed) == 1
    assert log.errors[0].error.startswith("TypeError") and reason in log.errors[0].error


def test_arms_pending_at_the_start_are_counted_as_asked():
    # issue 37: told + failed 6, num_asked 4
    optimizer = make_optimizer("sgpts", make_arms())
    optimizer.ask(2)
    with concurrent.futures.ThreadPoolExecutor(2) as executor:
        log = run_parallel(optimizer, reward, executor, num_workers=2, budget=6)
    assert log.num_completed == log.num_asked == 6


def test_as_engine_of_dask_and_ray(dask_client, ray_module):
    assert isinstance(as_engine(dask_client), DaskEngine)
    assert isinstance(as_engine("ray"), RayEngine)
    with pytest.raises(TypeError, match="client"):
        DaskEngine(object())


def test_as_engine():
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        engine = as_engine(executor)
        assert isinstance(engine, ExecutorEngine) and as_engine(engine) is engine
    with pytest.raises(TypeError, match="executor"):
        ExecutorEngine(object())


@pytest.mark.parametrize("module, build", [("ray", RayEngine), ("distributed", None)])
def test_missing_engine_names_the_extra(monkeypatch, module, build):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ImportError, match=r'pip install -e "\.\[distributed\]"'):
        build() if build else DaskEngine(object())


# --- the simulated clock ----------------------------------------------------------


def test_simulated_wait_pops_the_earliest_completion():
    engine = SimulatedEngine([3.0, 1.0, 2.0, 1.0, 0.5])
    first = [engine.submit(reward, torch.full((2,), float(k))) for k in range(3)]
    assert engine.now == 0.0 and engine.num_submitted == 3
    # one completion per wait, earliest first; the clock jumps to it
    assert engine.wait(first) == [first[1]] and engine.now == 1.0
    assert engine.result(first[1]) == reward(torch.ones(2))
    # submitted at time 1: ends at 1 + 1, a tie with first[2] (earlier submission)
    later = engine.submit(reward, torch.zeros(2))
    running = [first[0], first[2], later]
    for expected, now in ((first[2], 2.0), (later, 2.0), (first[0], 3.0)):
        assert engine.wait(running) == [expected] and engine.now == now
        running.remove(expected)
    # busy worker-time: the sum of the durations once everything has completed
    assert engine.busy_time == 3.0 + 1.0 + 2.0 + 1.0
    assert engine.wait([]) == []


def test_simulated_wait_on_a_subset_completes_earlier_ones_on_the_way():
    engine = SimulatedEngine([2.0, 1.0, 3.0])
    a, b, c = (engine.submit(reward, torch.zeros(2)) for _ in range(3))
    assert engine.wait([a, c]) == [a] and engine.now == 2.0
    assert engine.wait([b, c]) == [b] and engine.now == 2.0  # done on the way
    assert engine.wait([c, b, a]) == [a, b]  # done ones stay done, as futures do
    # a cancelled evaluation never completes and frees its worker at once
    engine.cancel([c])
    assert engine.wait([c]) == [] and engine.now == 2.0
    assert engine.busy_time == 2.0 + 1.0 + 2.0
    with pytest.raises(RuntimeError, match="completed"):
        engine.result(c)


def test_simulated_lognormal_durations_are_the_seeded_draws():
    def drawn(seed, mean, sigma):
        g = torch.Generator().manual_seed(seed)
        z = torch.randn(50, generator=g, dtype=torch.float64)
        return (mean * torch.exp(sigma * z - sigma**2 / 2)).tolist()

    for mean, sigma in ((1.0, 1.0), (2.5, 0.3)):
        engine = SimulatedEngine.lognormal(
            50, mean, sigma, generator=torch.Generator().manual_seed(7)
        )
        assert engine.durations == drawn(7, mean, sigma)
        again = SimulatedEngine.lognormal(
            50, mean, sigma, generator=torch.Generator().manual_seed(7)
        )
        assert again.durations == engine.durations
    assert SimulatedEngine.lognormal(4, 2.0, 0.0).durations == [2.0] * 4
    # each submission takes its own duration, in order
    engine = SimulatedEngine.lognormal(5, generator=torch.Generator().manual_seed(1))
    ends = [engine.submit(reward, torch.zeros(2)).end for _ in range(5)]
    assert ends == engine.durations


def test_run_parallel_on_a_simulated_clock():
    r"""S-GP-TS never waits, so every free worker takes the next duration at once:
    the completion times are the greedy schedule's; an objective's error fails its
    arm as on a real engine."""
    arms = make_arms()
    durations = SimulatedEngine.lognormal(
        30, generator=torch.Generator().manual_seed(3)
    ).durations
    free_at, ends = [0.0] * 4, []
    for duration in durations:
        worker = min(range(4), key=free_at.__getitem__)
        free_at[worker] += duration
        ends.append(free_at[worker])
    runs = []
    for objective in (reward, reward_or_error):
        engine, times = SimulatedEngine(durations), []
        log = run_parallel(
            make_optimizer("sgpts", arms),
            objective,
            engine,
            num_workers=4,
            budget=30,
            callback=lambda log, engine=engine, times=times: times.append(engine.now),
        )
        assert log.num_completed == 30 and engine.num_submitted == 30
        assert times == sorted(ends) and engine.now == max(ends)
        assert engine.busy_time == pytest.approx(sum(durations))
        runs.append(log)
    assert not runs[0].failed and runs[1].failed
    for error in runs[1].errors:
        assert arms[error.index, 0] > 0.75 or arms[error.index, 1] > 0.9
    # reproducible: the same durations and seed give the same run
    again = run_parallel(
        make_optimizer("sgpts", arms),
        reward,
        SimulatedEngine(durations),
        num_workers=4,
        budget=30,
    )
    assert again.indices == runs[0].indices and again.rewards == runs[0].rewards


def test_simulated_engine_bad_inputs():
    for durations, exception in (
        ([[1.0, 2.0]], ValueError),
        (3.0, ValueError),
        ([1.0, -1.0], ValueError),
        ([1.0, float("nan")], ValueError),
        ([1.0, float("inf")], ValueError),
        ("abc", TypeError),
        (["a"], TypeError),
    ):
        with pytest.raises(exception, match="durations"):
            SimulatedEngine(durations)
    for kwargs, exception, name in (
        ({"count": 0}, ValueError, "count"),
        ({"count": 2.0}, TypeError, "count"),
        ({"mean": 0.0}, ValueError, "mean"),
        ({"mean": float("inf")}, ValueError, "mean"),
        ({"mean": "1"}, TypeError, "mean"),
        ({"sigma": -0.5}, ValueError, "sigma"),
        ({"sigma": None}, TypeError, "sigma"),
    ):
        with pytest.raises(exception, match=name):
            SimulatedEngine.lognormal(**{"count": 3, **kwargs})
    engine = SimulatedEngine([1.0])
    engine.submit(reward, torch.zeros(2))
    with pytest.raises(RuntimeError, match="durations"):
        engine.submit(reward, torch.zeros(2))
    assert as_engine(engine) is engine


class _Answering(BBKB):
    r"""A BBKB loop whose ``ask`` returns a fixed (bad) answer."""

    answer: torch.Tensor

    def ask(self, max_arms=None, wait=True):
        return self.answer


@pytest.mark.parametrize(
    "answer, exception",
    [
        (torch.tensor([-1]), ValueError),  # would pick the last arm
        (torch.tensor([NUM_ARMS]), ValueError),
        (torch.tensor([0.0]), TypeError),
        (torch.tensor([[0]]), ValueError),
        (torch.arange(3), RuntimeError),  # more arms than free workers
    ],
)
def test_run_parallel_checks_the_answers_of_ask(answer, exception):
    optimizer = _Answering(make_arms(), seed=0)
    optimizer.answer = answer
    with pytest.raises(exception, match=r"optimizer\.ask\(2\)"):
        run_parallel(
            optimizer, reward, SimulatedEngine([1.0] * 4), num_workers=2, budget=4
        )
    assert optimizer.num_observations == 0
