r"""Objectives, oracle checks and the worker process the Optuna sampler tests share
(import after ``pytest.importorskip("optuna")``)."""

from __future__ import annotations

import json
import math
import os
import threading

import optuna
import torch

from botorch_sketch.integrations.optuna import ASK_KEY, BBKBSampler, SGPTSSampler

SAMPLERS = {"bbkb": BBKBSampler, "sgpts": SGPTSSampler}

#: Small arm sets and few refined arms keep the tests fast.
FAST = {"num_arms": 128, "num_refined": 16}


def branin(trial: optuna.Trial) -> float:
    r"""Branin on ``[-5, 10] x [0, 15]`` (minimum 0.397887)."""
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def mixed(trial: optuna.Trial) -> float:
    r"""Every kind of distribution; trials 4 and 9 fail, 6 is pruned."""
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    width = trial.suggest_float("width", 0.0, 1.0, step=0.1)
    depth = trial.suggest_int("depth", 1, 6)
    units = trial.suggest_int("units", 8, 256, log=True)
    batch = trial.suggest_int("batch", 10, 50, step=10)
    act = trial.suggest_categorical("act", ["relu", "tanh", "gelu"])
    if trial.number in (4, 9):
        raise RuntimeError("a crashed evaluation")
    if trial.number == 6:
        raise optuna.TrialPruned()
    return (
        (math.log10(lr) + 2.5) ** 2
        + (width - 0.3) ** 2
        + 0.1 * depth
        + 0.01 * math.log(units)
        + batch / 100
        + (act == "tanh")
    )


def ask_and_sync(study: optuna.Study) -> optuna.Trial:
    r"""A new trial whose sampler caught up with the study: it suggests the
    relative space's parameters (the first suggest asks the loop)."""
    trial = study.ask()
    frozen = study._storage.get_trial(trial._trial_id)
    space = study.sampler.infer_relative_search_space(study, frozen)
    for name, distribution in space.items():
        trial._suggest(name, distribution)
    return trial


def check_loop_matches_study(sampler, study: optuna.Study) -> None:
    r"""Oracle: the loop's told rewards are the COMPLETE trials' values (negated
    for minimize; with several objectives or constraints, each outcome loop's
    rewards are its objective's values or its constraint's values negated) on
    their parameters' arms, its failed arms those of the FAIL and
    PRUNED trials, its pending arms those of the RUNNING trials (each of those
    trials with the parameters of the relative space, or asked by this sampler: a
    trial whose worker died before suggesting its parameters has the arm recorded
    with the ask)."""
    trials = study.get_trials(deepcopy=False)
    states = optuna.trial.TrialState
    minimize = optuna.study.StudyDirection.MINIMIZE
    signs = [-1.0 if d == minimize else 1.0 for d in study.directions]
    arms, loop = sampler.arms, sampler.loop
    outcome_loops = getattr(loop, "loops", [loop])  # one per outcome, or the loop

    def outcomes(t: optuna.trial.FrozenTrial) -> list[float]:
        r"""Its values (negated for minimize), then its constraints negated (in
        the order of their names)."""
        values = [sign * value for sign, value in zip(signs, t.values, strict=True)]
        return values + [-value for _, value in sorted(t.constraints.items())]

    def covers(t: optuna.trial.FrozenTrial) -> bool:
        return all(t.distributions.get(n) == d for n, d in sampler._space.items())

    def asked(t: optuna.trial.FrozenTrial) -> dict | None:
        record = t.system_attrs.get(ASK_KEY)
        return record if record and record["sampler"] == sampler._tag else None

    def numbers(*wanted: states) -> list[int]:
        return [
            t.number
            for t in trials
            if t.state in wanted and (covers(t) or asked(t) is not None)
        ]

    def arm(number: int) -> int:
        if not covers(trials[number]):
            return asked(trials[number])["arm"]
        return arms.index_of(arms.value_row(trials[number].params, "params"))

    assert sorted(sampler.told_trials) == numbers(states.COMPLETE)
    assert loop.num_observations == len(sampler.told_trials)
    for k, number in enumerate(sampler.told_trials):
        told = [outcome_loop.rewards[k].item() for outcome_loop in outcome_loops]
        assert told == outcomes(trials[number])
        assert loop.observed[k].item() == arm(number)
    assert sorted(sampler.failed_trials) == numbers(states.FAIL, states.PRUNED)
    pending = sampler.pending_trials
    assert sorted(pending) == numbers(states.RUNNING)
    assert all(pending[number] == arm(number) for number in pending)
    for outcome_loop in outcome_loops:  # every loop: the same arms
        assert torch.equal(outcome_loop.observed, loop.observed)
        failed = sorted(outcome_loop.failed.tolist())
        assert failed == sorted(map(arm, sampler.failed_trials))
        assert sorted(outcome_loop.pending.tolist()) == sorted(pending.values())
    assert sorted(loop.pending.tolist()) == sorted(pending.values())


def worker(storage_url: str, name: str, seed: int, trials: int, barrier, out) -> None:
    r"""A worker process: optimize Branin on the shared study, wait for the others,
    then write which trials its loop has told and failed (JSON to ``out``)."""
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = SGPTSSampler(seed=seed, **FAST)
    study = optuna.load_study(study_name=name, storage=storage_url, sampler=sampler)
    study.optimize(branin, n_trials=trials)
    barrier.wait()  # every worker's trials are finished
    last = ask_and_sync(study)
    with open(out, "w") as file:
        json.dump({"told": sampler.told_trials, "failed": sampler.failed_trials}, file)
    barrier.wait()  # every worker has synced before any final trial ends
    study.tell(last, state=optuna.trial.TrialState.FAIL)


def tell_when_set(
    storage_url: str, name: str, number: int, value: float, event
) -> None:
    r"""A remote worker process: once ``event`` is set, complete trial ``number``
    of the shared study with ``value`` (exit code 1 if it is never set)."""
    study = optuna.load_study(study_name=name, storage=storage_url)
    if not event.wait(timeout=120):
        raise SystemExit(1)
    study.tell(number, value)


def set_when_waiting(sampler: BBKBSampler, event, stop) -> None:
    r"""Watch ``sampler`` (a thread): set ``event`` once an ask of it waits for
    results (its last loop step), or return when ``stop`` is set."""
    while not stop.is_set():
        with sampler._lock:
            steps = getattr(sampler, "_steps", None)
            if steps and steps[-1][0] == "w":
                event.set()
                return
        stop.wait(0.01)


def heartbeat_storage(url: str) -> optuna.storages.RDBStorage:
    r"""An RDB storage whose running trials beat every second: one silent for 2 s
    is failed and enqueued again once, with its parameters."""
    return optuna.storages.RDBStorage(
        url,
        heartbeat_interval=1,
        grace_period=2,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
            max_retry=1
        ),
    )


def hang_in_a_trial(url: str, name: str, started) -> None:
    r"""A worker process that starts a Branin trial on the shared study (its
    storage beating), sets ``started`` and never finishes it."""
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = BBKBSampler(seed=1, **FAST)
    study = optuna.load_study(
        study_name=name, storage=heartbeat_storage(url), sampler=sampler
    )

    def objective(trial: optuna.Trial) -> float:
        value = branin(trial)
        started.set()
        threading.Event().wait()  # killed here
        return value

    study.optimize(objective, n_trials=1)


def open_storage(kind: str, path: str, heartbeat: bool = True):
    r"""The storage of a study in file ``path``: ``"sqlite"`` (an RDB storage,
    its running trials beating every second and failed 2 s after their worker
    died, with ``heartbeat``) or ``"journal"`` (a journal file; a lock left by a
    killed writer is taken over after 3 s)."""
    if kind == "sqlite":
        url = f"sqlite:///{path}"
        if not heartbeat:
            return optuna.storages.RDBStorage(url)
        return optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)
    journal = optuna.storages.journal
    lock = journal.JournalFileSymlinkLock(path, grace_period=3)
    return journal.JournalStorage(journal.JournalFileBackend(path, lock_obj=lock))


def cheap(trial: optuna.Trial) -> float:
    r"""A cheap deterministic objective of a float and an int, a few
    milliseconds long (so that a kill often lands inside a trial)."""
    x = trial.suggest_float("x", -1.0, 1.0)
    n = trial.suggest_int("n", 0, 4)
    threading.Event().wait(0.005)
    return (x - 0.3) ** 2 + 0.1 * n


def killable_worker(
    kind: str, path: str, sampler: str, seed: int, target: int, log: str
) -> None:
    r"""A worker process (killed with SIGKILL and restarted by the test): run
    ``cheap`` on the shared study until it has ``target`` complete trials,
    appending ``number value`` of each trial it completed to the file ``log``
    once the storage holds it."""
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(
        study_name="killed",
        storage=open_storage(kind, path),
        sampler=kill_sampler(sampler, seed),
    )

    def record(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            with open(log, "a") as file:
                file.write(f"{trial.number} {trial.value!r}\n")
                file.flush()
                os.fsync(file.fileno())

    complete = (optuna.trial.TrialState.COMPLETE,)
    stop = optuna.study.MaxTrialsCallback(target, states=complete)
    study.optimize(cheap, n_trials=10 * target, callbacks=[record, stop])


def kill_sampler(name: str, seed: int):
    r"""The sampler of a worker of the kill tests (small arm sets; BBKB's
    options for four workers)."""
    workers = {"num_workers": 4} if name == "bbkb" else {}
    return SAMPLERS[name](seed=seed, num_arms=64, num_refined=4, **workers)
