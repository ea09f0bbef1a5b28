r"""Kill -9 of Optuna workers (issue 37): four worker processes run one study
with :class:`BBKBSampler` (and, smaller, :class:`SGPTSSampler`) on a SQLite
storage and on a journal file; at seeded random points one of them is killed with
SIGKILL and restarted with its seed. At the end no completed trial is lost or
counted twice, and the loop of a sampler restarted with a worker's seed (which
replays that worker's recorded asks) equals, after catching up, the loop of a
sampler that never ran, both built from the study's trials.

A dead worker's RUNNING trial: on SQLite the storage's heartbeat fails it (2 s
after the last beat, when another worker starts a trial or the test looks), unless
the worker died inside ``study.ask`` (while the sampler chose the trial's arm,
before the trial's heartbeat thread wrote its first beat): a trial with no beat is
never stale, so that one stays RUNNING, as every dead worker's trial does on
Optuna 5's journal storage, which has no heartbeat. The samplers keep the arm of
a trial left RUNNING pending.

``BOTORCH_SKETCH_OPTUNA_KILL_SCALE=k`` multiplies the trials and the kills by
``k`` for a large run.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

optuna = pytest.importorskip("optuna")
pytest.register_assert_rewrite("test.integrations.optuna_helpers")

from .optuna_helpers import (  # noqa: E402
    ask_and_sync,
    check_loop_matches_study,
    kill_sampler,
    killable_worker,
    open_storage,
)

optuna.logging.set_verbosity(optuna.logging.ERROR)
States = optuna.trial.TrialState
SCALE = int(os.environ.get("BOTORCH_SKETCH_OPTUNA_KILL_SCALE", "1"))
WORKERS = 4

#: Bound on each wait for the workers (a hang guard, far past a normal run).
GIVE_UP = 300.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    r"""Poll ``condition`` until it holds; fail naming ``what`` past
    :data:`GIVE_UP` seconds."""
    give_up = time.monotonic() + GIVE_UP
    while not condition():
        assert time.monotonic() < give_up, f"gave up waiting for {what}"
        time.sleep(0.05)


def _count(study: optuna.Study, *states: States) -> int:
    return len(study.get_trials(deepcopy=False, states=states))


def _run_with_kills(kind, path, sampler, target, kills, tmp_path) -> int:
    r"""Run four workers until the study has ``target`` complete trials, killing
    one (seeded choice) with SIGKILL and restarting it at ``kills`` seeded
    points; return the number of kills of a live worker."""
    rng = random.Random(f"{kind}:{sampler}:{target}")
    context = multiprocessing.get_context("spawn")
    study = optuna.load_study(
        study_name="killed", storage=open_storage(kind, path, heartbeat=False)
    )

    def start(rank: int) -> multiprocessing.Process:
        log = tmp_path / f"worker{rank}.log"
        args = (kind, path, sampler, rank, target, str(log))
        process = context.Process(target=killable_worker, args=args, daemon=True)
        process.start()
        return process

    workers = [start(rank) for rank in range(WORKERS)]
    killed = 0
    try:
        for threshold in sorted(rng.sample(range(1, target - 2), kills)):
            _wait_for(
                lambda t=threshold: _count(study, States.COMPLETE) >= t,
                f"{threshold} complete trials",
            )
            time.sleep(rng.uniform(0.0, 0.05))  # a random point of a trial
            rank = rng.randrange(WORKERS)
            if workers[rank].is_alive():
                workers[rank].kill()
                killed += 1
            workers[rank].join()
            assert workers[rank].exitcode in (-signal.SIGKILL, 0)
            workers[rank] = start(rank)
        for worker in workers:
            worker.join(timeout=GIVE_UP)
            assert worker.exitcode == 0
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
    return killed


def _beaten(path: str) -> set[int]:
    r"""The ids of the trials with a heartbeat in the SQLite file ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        rows = connection.execute("SELECT trial_id FROM trial_heartbeats")
        return {trial_id for (trial_id,) in rows}


def _logged(tmp_path: Path) -> list[tuple[int, float]]:
    r"""``(number, value)`` of every trial a worker logged as completed."""
    return [
        (int(number), float(value))
        for log in sorted(tmp_path.glob("worker*.log"))
        for number, value in (line.split() for line in log.read_text().splitlines())
    ]


def _told(sampler) -> Counter:
    r"""The multiset of ``(arm features, reward)`` the sampler's loop was told."""
    loop = sampler.loop
    return Counter(
        (tuple(loop.arms[index].tolist()), reward)
        for index, reward in zip(
            loop.observed.tolist(), loop.rewards.tolist(), strict=True
        )
    )


def _caught_up(kind: str, path: str, sampler_name: str, seed: int):
    r"""A sampler (seed ``seed``) on the study, caught up with it: its loop as
    the trials and its records make it (its own trial then failed)."""
    sampler = kill_sampler(sampler_name, seed)
    study = optuna.load_study(
        study_name="killed",
        storage=open_storage(kind, path, heartbeat=False),
        sampler=sampler,
    )
    trial = ask_and_sync(study)
    check_loop_matches_study(sampler, study)
    study.tell(trial, state=States.FAIL)
    return sampler


CASES = [
    ("sqlite", "bbkb", 12, 2),
    ("journal", "bbkb", 12, 2),
    ("journal", "sgpts", 8, 2),
]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize(("kind", "sampler", "target", "kills"), CASES)
def test_killed_workers_lose_no_trial_and_restart_into_the_same_loop(
    kind, sampler, target, kills, tmp_path
):
    target, kills = target * SCALE, kills * SCALE
    path = str(tmp_path / ("study.db" if kind == "sqlite" else "study.log"))
    storage = open_storage(kind, path, heartbeat=False)
    optuna.create_study(study_name="killed", storage=storage)
    killed = _run_with_kills(kind, path, sampler, target, kills, tmp_path)
    assert killed == kills  # each kill found its worker alive

    study = optuna.load_study(study_name="killed", storage=storage)
    if kind == "sqlite":  # the heartbeat fails the dead workers' trials
        beating = optuna.load_study(
            study_name="killed", storage=open_storage(kind, path)
        )

        def only_unbeaten_running() -> bool:
            optuna.storages.fail_stale_trials(beating)
            running = study.get_trials(deepcopy=False, states=(States.RUNNING,))
            return not {t._trial_id for t in running} & _beaten(path)

        _wait_for(only_unbeaten_running, "the heartbeat to fail the dead trials")
    trials = study.get_trials(deepcopy=False)
    dead = _count(study, States.FAIL, States.RUNNING)
    assert len(trials) == _count(study, States.COMPLETE) + dead  # nothing else
    assert dead <= killed  # only a killed worker leaves a trial unfinished
    if kind == "journal":  # no heartbeat: a dead worker's trial stays RUNNING
        assert _count(study, States.FAIL) == 0

    complete = {t.number: t.value for t in trials if t.state == States.COMPLETE}
    assert len(complete) >= target
    logged = _logged(tmp_path)
    numbers = [number for number, _ in logged]
    assert len(numbers) == len(set(numbers))  # no trial counted twice
    assert all(complete.get(number) == value for number, value in logged)  # none lost
    assert len(complete) - len(logged) <= killed  # killed after its tell, at most

    # a restarted worker's sampler equals one that never ran, after catching up
    fresh = _told(_caught_up(kind, path, sampler, seed=WORKERS))
    assert sum(fresh.values()) == len(complete)
    for rank in range(WORKERS):
        restarted = _caught_up(kind, path, sampler, seed=rank)
        assert _told(restarted) == fresh
        assert sorted(restarted.told_trials) == sorted(complete)
