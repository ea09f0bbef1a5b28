r"""Optuna samplers on real studies: parameters in their distributions, the loop
against the study (told = COMPLETE, failed = FAIL and PRUNED, pending = RUNNING),
seeds, restarts, threads, journal and SQLite storages, worker processes."""

from __future__ import annotations

import importlib
import json
import logging
import math
import multiprocessing
import signal
import sys
import threading
import time

import pytest
import torch

optuna = pytest.importorskip("optuna")
pytest.register_assert_rewrite("test.integrations.optuna_helpers")

from botorch_sketch import BBKBOptions, asynchronous_options  # noqa: E402
from botorch_sketch.generation.hyperparameters import FIT_INDUCING  # noqa: E402
from botorch_sketch.integrations.optuna import (  # noqa: E402
    ASK_KEY,
    BBKBSampler,
    SGPTSSampler,
)
from botorch_sketch.integrations.optuna_space import arms_of_space  # noqa: E402

from .optuna_helpers import (  # noqa: E402
    FAST,
    SAMPLERS,
    ask_and_sync,
    branin,
    check_loop_matches_study,
    hang_in_a_trial,
    heartbeat_storage,
    mixed,
    set_when_waiting,
    tell_when_set,
    worker,
)

optuna.logging.set_verbosity(optuna.logging.ERROR)
States = optuna.trial.TrialState


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _params(study) -> list[dict]:
    return [trial.params for trial in study.trials]


@pytest.mark.parametrize("name", SAMPLERS)
def test_parameters_lie_in_their_distributions(name):
    study = optuna.create_study(sampler=SAMPLERS[name](seed=0, **FAST))
    study.optimize(mixed, n_trials=14, catch=(RuntimeError,))
    for trial in study.trials:
        for param, value in trial.params.items():
            distribution = trial.distributions[param]
            assert distribution._contains(distribution.to_internal_repr(value))
        assert 1e-4 <= trial.params["lr"] <= 1e-1
        assert isinstance(trial.params["units"], int)
        assert trial.params["batch"] in (10, 20, 30, 40, 50)
        assert round(trial.params["width"] * 10) == pytest.approx(
            trial.params["width"] * 10, abs=1e-9
        )
    sampler = study.sampler
    # the relative space was sampled by the loop after the first trial completed
    asked = [t.number for t in study.trials if ASK_KEY in t.system_attrs]
    assert asked == list(range(1, 14))
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)


def test_every_value_of_a_space_is_inside_the_arms_box():
    distributions = optuna.distributions
    space = {
        "f": distributions.FloatDistribution(1e-3, 1.0, log=True),
        "i": distributions.IntDistribution(2, 40, log=True),
        "s": distributions.IntDistribution(0, 20, step=5),
        "c": distributions.CategoricalDistribution([None, 1.5, "a"]),
    }
    arms = arms_of_space(space, 16, seed=3)
    low, high = arms.features.min(0).values, arms.features.max(0).values
    extremes = [
        {"c": None, "f": 1e-3, "i": 2, "s": 0},
        {"c": "a", "f": 1.0, "i": 40, "s": 20},
    ]
    for params in extremes:
        row = arms.value_row(params, "params")
        assert arms.index_of(row) is not None  # the two end arms
        features = arms.features_of(row.unsqueeze(0))[0]
        assert bool(((features >= low) & (features <= high)).all())
    for index in range(arms.num_arms):  # every arm is a value of the space
        for param, value in arms.params(index).items():
            internal = space[param].to_internal_repr(value)
            assert space[param]._contains(internal)
    # integers take every value, on their grid
    values = arms.values_at(torch.rand(2000, arms.features.shape[-1]).double())
    names = [domain.name for domain in arms.domains]
    assert set(values[:, names.index("s")].tolist()) == {0.0, 5.0, 10.0, 15.0, 20.0}
    assert set(values[:, names.index("i")].tolist()) == set(map(float, range(2, 41)))


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_loop_follows_two_workers_on_one_storage(name, direction):
    storage = optuna.storages.InMemoryStorage()
    studies = [
        optuna.create_study(
            storage=storage,
            study_name="shared",
            direction=direction,
            sampler=SAMPLERS[name](seed=seed, **FAST),
            load_if_exists=True,
        )
        for seed in (0, 1)
    ]
    studies[0].optimize(mixed, n_trials=8, catch=(RuntimeError,))
    running = [ask_and_sync(studies[1]), ask_and_sync(studies[0])]
    studies[1].optimize(mixed, n_trials=3, catch=(RuntimeError,))
    last = ask_and_sync(studies[0])  # catches up: 3 new results, 1 running trial
    check_loop_matches_study(studies[0].sampler, studies[0])
    assert last.number in studies[0].sampler.pending_trials
    for trial in running:
        studies[0].tell(trial, 1.0)
    studies[0].tell(last, state=States.FAIL)
    ask_and_sync(studies[1])
    check_loop_matches_study(studies[1].sampler, studies[1])


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_seeded_run_repeats(name):
    runs = []
    for _ in range(2):
        study = optuna.create_study(sampler=SAMPLERS[name](seed=5, **FAST))
        study.optimize(branin, n_trials=16)
        runs.append(_params(study))
    assert runs[0] == runs[1]
    other = optuna.create_study(sampler=SAMPLERS[name](seed=6, **FAST))
    other.optimize(branin, n_trials=16)
    assert _params(other) != runs[0]


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_restarted_sampler_makes_the_choices_of_one_that_ran_along(name, tmp_path):
    storage = f"sqlite:///{tmp_path / 'studies.db'}"

    def objective(trial):
        value = mixed(trial)  # fails 4 and 9, prunes 6
        return value

    along = optuna.create_study(
        storage=storage, study_name="along", sampler=SAMPLERS[name](seed=2, **FAST)
    )
    along.optimize(objective, n_trials=18, catch=(RuntimeError,))
    first = optuna.create_study(
        storage=storage, study_name="restart", sampler=SAMPLERS[name](seed=2, **FAST)
    )
    first.optimize(objective, n_trials=11, catch=(RuntimeError,))
    restarted = optuna.load_study(
        storage=storage, study_name="restart", sampler=SAMPLERS[name](seed=2, **FAST)
    )
    restarted.optimize(objective, n_trials=7, catch=(RuntimeError,))
    assert _params(restarted) == _params(along)
    assert restarted.sampler.arms.num_arms == along.sampler.arms.num_arms
    ask_and_sync(restarted)
    check_loop_matches_study(restarted.sampler, restarted)
    # another seed rebuilds from the storage once and goes on
    late = optuna.load_study(
        storage=storage, study_name="restart", sampler=SAMPLERS[name](seed=9, **FAST)
    )
    ask_and_sync(late)
    check_loop_matches_study(late.sampler, late)


def test_a_restart_replays_the_local_phase(tmp_path):
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    along = optuna.create_study(
        storage=storage, study_name="along", sampler=BBKBSampler(seed=3, **FAST)
    )
    along.optimize(branin, n_trials=130)
    phase = along.sampler._refiner.local
    assert phase.phases == 1 and phase.strategy.generation > 0
    assert len({tuple(t.params.values()) for t in along.trials[100:]}) == 30
    first = optuna.create_study(
        storage=storage, study_name="restart", sampler=BBKBSampler(seed=3, **FAST)
    )
    first.optimize(branin, n_trials=115)
    restarted = optuna.load_study(
        storage=storage, study_name="restart", sampler=BBKBSampler(seed=3, **FAST)
    )
    restarted.optimize(branin, n_trials=15)
    assert _params(restarted) == _params(along)
    resumed = restarted.sampler._refiner.local
    assert torch.equal(resumed.strategy.mean, phase.strategy.mean)
    assert resumed.queue == phase.queue
    ask_and_sync(restarted)
    check_loop_matches_study(restarted.sampler, restarted)


def test_a_restart_replays_waits_and_other_workers_trials():
    def start(study):
        trial = study.ask()
        return trial, branin(trial)

    def rounds(studies, count):  # a: worker 0, b: worker 1, c: worker 0
        for _ in range(count):
            started = [start(studies[0]), start(studies[1]), start(studies[0])]
            for study, (trial, value) in zip(
                (studies[0], studies[1], studies[0]), started, strict=True
            ):
                study.tell(trial, value)

    storage = optuna.storages.InMemoryStorage()

    def workers(name):
        samplers = (
            # waits briefly when the rule is full (nothing finishes meanwhile),
            # then takes the arm past the rule
            BBKBSampler(seed=0, max_wait=0.1, **FAST),
            SGPTSSampler(seed=1, **FAST),
        )
        return [
            optuna.create_study(
                storage=storage, study_name=name, load_if_exists=True, sampler=s
            )
            for s in samplers
        ]

    along = workers("along")
    rounds(along, 8)
    restart = workers("restart")
    rounds(restart, 4)
    restart[0] = optuna.load_study(
        storage=storage,
        study_name="restart",
        sampler=BBKBSampler(seed=0, max_wait=0.1, **FAST),
    )
    rounds(restart, 4)
    assert _params(restart[0]) == _params(along[0])
    records = [t.system_attrs.get(ASK_KEY) for t in along[0].trials]
    waited = [r for r in records if r and any(c == "w" for c, _ in r["steps"])]
    assert waited  # the batch rule was full at some asks


def test_bbkb_never_hands_a_trial_to_the_fallback_while_others_run():
    # four trials in flight in one process: once a trial has completed, every
    # trial's parameters are the loop's arm (past a full batch rule, the in-batch
    # UCB argmax), none the independent sampler's
    sampler = BBKBSampler(seed=0, num_workers=4, **FAST)
    study = optuna.create_study(sampler=sampler)
    running, generator = [], torch.Generator().manual_seed(0)
    for _ in range(40):
        while len(running) < 4:
            trial = study.ask()
            branin_value = branin(trial)
            loops_arm = trial.number in sampler.pending_trials
            assert loops_arm == any(t.state == States.COMPLETE for t in study.trials)
            running.append((trial, branin_value))
        done = int(torch.randint(len(running), (1,), generator=generator))
        study.tell(*running.pop(done))
    records = [t.system_attrs.get(ASK_KEY) for t in study.trials]
    assert sum(r is not None for r in records) == len(study.trials) - 4
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)


def test_bbkb_asks_with_every_completed_trial_in_the_posterior():
    # by default BKB's rule, so a trial asked while others run is chosen on the
    # posterior of every trial completed before it (after the space-filling
    # design's 5 arms, which are asked whatever is told); BBKB's batches for 4
    # asynchronous workers leave some results waiting
    batches = BBKBOptions(**asynchronous_options(4))
    for options, always in ((None, True), (batches, False)):
        sampler = BBKBSampler(seed=0, num_workers=4, options=options, **FAST)
        study = optuna.create_study(sampler=sampler)
        running, generator = [], torch.Generator().manual_seed(0)
        seen = []
        for _ in range(30):
            while len(running) < 4:
                trial = study.ask()
                running.append((trial, branin(trial)))
                if trial.number >= 10:
                    loop = sampler.loop
                    seen.append(loop.incorporated == loop.num_observations)
            done = int(torch.randint(len(running), (1,), generator=generator))
            study.tell(*running.pop(done))
        assert len(seen) == 23 and all(seen) == always


@pytest.mark.parametrize("name", SAMPLERS)
def test_threads_share_one_loop(name):
    options = {"num_workers": 4} if name == "bbkb" else {}
    sampler = SAMPLERS[name](seed=0, **options, **FAST)
    study = optuna.create_study(sampler=sampler)
    study.optimize(mixed, n_trials=24, n_jobs=4, catch=(RuntimeError,))
    assert len(study.trials) == 24
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)


@pytest.mark.parametrize("name", SAMPLERS)
def test_two_workers_on_a_journal_file(name, tmp_path):
    backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal"))
    storage = optuna.storages.JournalStorage(backend)
    studies = [
        optuna.create_study(
            storage=storage,
            study_name="journal",
            sampler=SAMPLERS[name](seed=seed, **FAST),
            load_if_exists=True,
        )
        for seed in (0, 1)
    ]
    for _ in range(5):
        for study in studies:
            study.optimize(branin, n_trials=1)
    for study in studies:
        trial = ask_and_sync(study)
        check_loop_matches_study(study.sampler, study)
        study.tell(trial, 0.0)


def test_four_worker_processes_on_sqlite(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=storage, study_name="shared")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    outs = [tmp_path / f"worker{rank}.json" for rank in range(4)]
    processes = [
        context.Process(
            target=worker, args=(storage, "shared", rank, 5, barrier, str(out))
        )
        for rank, out in enumerate(outs)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    study = optuna.load_study(storage=storage, study_name="shared")
    complete = [
        t.number for t in study.trials if t.state == States.COMPLETE and "x" in t.params
    ]
    assert len(complete) == 20
    for out in outs:
        seen = json.loads(out.read_text())
        assert sorted(seen["told"]) == complete and seen["failed"] == []


def test_a_wait_ends_when_another_process_completes_a_trial(tmp_path):
    # a wait far longer than the test's: only a fresh read of the storage sees
    # the remote result (Optuna's cached trial list changes only at ask and tell)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    sampler = BBKBSampler(seed=0, max_wait=120.0, poll_interval=0.01, **FAST)
    study = optuna.create_study(storage=storage, study_name="wait", sampler=sampler)
    study.optimize(branin, n_trials=5)
    running = ask_and_sync(study)  # pending: BBKB's batch rule is full
    context = multiprocessing.get_context("spawn")
    waiting, stop = context.Event(), threading.Event()
    remote = context.Process(
        target=tell_when_set,
        args=(storage, "wait", running.number, 1.0, waiting),
        daemon=True,
    )
    remote.start()
    watcher = threading.Thread(target=set_when_waiting, args=(sampler, waiting, stop))
    watcher.start()
    trial = ask_and_sync(study)  # waits until the remote process completes
    stop.set()
    watcher.join()
    remote.join(timeout=120)
    assert remote.exitcode == 0
    record = study._storage.get_trial(trial._trial_id).system_attrs[ASK_KEY]
    assert record["steps"] == [["w", -1], ["t", running.number]]
    assert sampler.told_trials == [0, 1, 2, 3, 4, running.number]
    study.tell(trial, branin(trial))
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
# study.ask's warning that the asked trial has no heartbeat: it is told at once
@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")
def test_a_killed_workers_trial_fails_by_heartbeat_and_its_arm_is_retried(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    sampler = BBKBSampler(seed=0, **FAST)
    study = optuna.create_study(
        storage=heartbeat_storage(url), study_name="heartbeat", sampler=sampler
    )
    study.optimize(branin, n_trials=3)
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    worker_process = context.Process(  # daemon: killed if the test fails early
        target=hang_in_a_trial, args=(url, "heartbeat", started), daemon=True
    )
    worker_process.start()
    assert started.wait(timeout=120)
    dead = study.trials[-1]
    mine = ask_and_sync(study)
    assert dead.number in sampler.pending_trials  # the killed worker's arm
    study.tell(mine, branin(mine))
    worker_process.kill()
    worker_process.join()
    assert worker_process.exitcode == -signal.SIGKILL
    # what study.optimize does before each trial, until the 2 s grace period is
    # over (a bound far past it, should the heartbeat never fail the trial)
    give_up = time.monotonic() + 120.0
    while study.trials[dead.number].state == States.RUNNING:
        assert time.monotonic() < give_up, "the heartbeat never failed the trial"
        optuna.storages.fail_stale_trials(study)
        time.sleep(0.2)
    assert study.trials[dead.number].state == States.FAIL
    study.optimize(branin, n_trials=1)  # the retry, enqueued by the callback
    retry = study.trials[-1]
    assert retry.system_attrs["failed_trial"] == dead.number
    assert retry.params == dead.params and retry.state == States.COMPLETE
    ask_and_sync(study)
    arm = sampler.arms.index_of(sampler.arms.value_row(dead.params, "dead"))
    assert dead.number in sampler.failed_trials and arm in sampler.loop.failed
    told = sampler.told_trials.index(retry.number)  # the same arm, evaluated again
    assert sampler.loop.observed[told].item() == arm
    check_loop_matches_study(sampler, study)


def disc_constrained(trial):
    r"""Minimize the squared distance to (2, 2) inside the unit disc (set with
    ``Trial.set_constraint``): optimum 2 (2 - 1/sqrt(2))^2 = 3.3431 at
    (1/sqrt(2), 1/sqrt(2)); the disc is a fifth of the square."""
    x, y = trial.suggest_float("x", -2.0, 2.0), trial.suggest_float("y", -2.0, 2.0)
    trial.set_constraint("disc", x * x + y * y - 1.0)
    return (x - 2.0) ** 2 + (y - 2.0) ** 2


@pytest.mark.parametrize("name", SAMPLERS)
def test_constrained_study_finds_the_constrained_optimum(name):
    sampler = SAMPLERS[name](seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(disc_constrained, n_trials=60)
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)
    assert sampler.loop.num_constraints == 1
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    feasible = [t.value for t in complete if t.constraints["disc"] <= 0]
    assert min(feasible) < 3.36  # seeds 0-4: random 3.48-5.37, TPE 3.50-3.70
    assert len(feasible) >= 20


@pytest.mark.parametrize("name", SAMPLERS)
def test_constraints_func_values_are_stored_and_modelled(name):
    # feasible where x + y <= 0.5: the optimum 6.125 lies on that line
    def constraints(trial):
        return [trial.params["x"] + trial.params["y"] - 0.5]

    sampler = SAMPLERS[name](seed=1, constraints_func=constraints, **FAST)
    study = optuna.create_study(sampler=sampler)

    def objective(trial):
        x, y = trial.suggest_float("x", -2.0, 2.0), trial.suggest_float("y", -2.0, 2.0)
        return (x - 2.0) ** 2 + (y - 2.0) ** 2

    study.optimize(objective, n_trials=40)
    stored = [t.system_attrs["constraints"] for t in study.trials]
    assert stored == [tuple(constraints(t)) for t in study.trials]
    feasible = [t.value for t in study.trials if constraints(t)[0] <= 0]
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)
    assert min(feasible) < 6.5


@pytest.mark.parametrize("name", SAMPLERS)
def test_multi_objective_study_models_each_objective(name):
    sampler = SAMPLERS[name](seed=0, **FAST)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)

    def objective(trial):
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        return (x - 0.2) ** 2 + (y - 0.2) ** 2, -((x - 0.8) ** 2) - (y - 0.8) ** 2

    study.optimize(objective, n_trials=40)
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)
    assert sampler.loop.num_objectives == 2 and sampler.loop.num_constraints == 0
    # the Pareto set is the segment from (0.2, 0.2) to (0.8, 0.8): the later
    # trials lie near it
    later = [t.params for t in study.trials[20:]]
    near = [abs(p["x"] - p["y"]) < 0.2 and -0.05 < p["x"] < 1.05 for p in later]
    assert sum(near) >= 14


def test_constraints_that_differ_between_trials_raise_naming_the_trial():
    def objective(trial):
        value = branin(trial)
        if trial.number == 5:
            trial.set_constraint("other", 1.0)
        else:
            trial.set_constraint("c", value - 50.0)
        return value

    study = optuna.create_study(sampler=BBKBSampler(seed=0, **FAST))
    with pytest.raises(ValueError, match="trial 5 has the constraints"):
        study.optimize(objective, n_trials=8)
    with pytest.raises(TypeError, match="constraints_func"):
        BBKBSampler(constraints_func=3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"seed": -1}, ValueError, "seed"),
        ({"num_arms": 0}, ValueError, "num_arms"),
        ({"num_refined": -1}, ValueError, "num_refined"),
        ({"independent_sampler": "random"}, TypeError, "independent_sampler"),
        ({"warn_independent_sampling": 1}, TypeError, "warn_independent_sampling"),
        ({"num_workers": 0}, ValueError, "num_workers"),
        ({"max_wait": -1.0}, ValueError, "max_wait"),
        ({"poll_interval": -1.0}, ValueError, "poll_interval"),
        ({"covar_module": "rbf"}, TypeError, "covar_module"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        BBKBSampler(**kwargs)


def test_parameters_outside_the_space_come_from_the_independent_sampler():
    def conditional(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial.number % 2:
            trial.suggest_int("extra", 0, 3)
        return x

    sampler = SGPTSSampler(seed=0, **FAST)
    study = optuna.create_study(sampler=sampler)
    study.optimize(conditional, n_trials=8)
    assert list(sampler._space) == ["x"]
    assert all(0 <= t.params.get("extra", 0) <= 3 for t in study.trials)
    ask_and_sync(study)
    check_loop_matches_study(sampler, study)


@pytest.mark.parametrize("name", SAMPLERS)
def test_independent_sampling_warns_once_per_parameter(name, caplog):
    def dynamic(trial):
        x = trial.suggest_float("x", 0.0, 1.0)  # trial 0: independent, no warning
        if trial.number % 2:
            trial.suggest_int("extra", 0, 3)  # warns at trial 1 only
        if trial.number >= 4:
            trial.suggest_categorical("late", ["a", "b"])  # warns at trial 4 only
        return x

    module = "botorch_sketch.integrations.optuna"
    for warn in (True, False):
        caplog.clear()
        sampler = SAMPLERS[name](seed=0, warn_independent_sampling=warn, **FAST)
        study = optuna.create_study(sampler=sampler)
        with caplog.at_level(logging.WARNING, logger=module):
            study.optimize(dynamic, n_trials=8)
        messages = [r.getMessage() for r in caplog.records if r.name == module]
        if not warn:
            assert messages == []
            continue
        assert len(messages) == 2
        assert "parameter `extra` in Trial#1 is sampled independently" in messages[0]
        assert "parameter `late` in Trial#4 is sampled independently" in messages[1]
        sampler_name = type(sampler).__name__
        assert all(f"instead of `{sampler_name}`" in m for m in messages)
        assert all("`warn_independent_sampling`" in m for m in messages)


def test_reseed_rng_changes_the_choices():
    runs = []
    for reseed in (False, True):
        sampler = SGPTSSampler(seed=0, **FAST)
        study = optuna.create_study(sampler=sampler)
        study.optimize(branin, n_trials=8)
        if reseed:
            sampler.reseed_rng()
        study.optimize(branin, n_trials=4)
        runs.append(_params(study))
    assert runs[0][:8] == runs[1][:8] and runs[0][8:] != runs[1][8:]


def test_import_without_optuna_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    for module in ("optuna", "optuna_space"):
        monkeypatch.delitem(
            sys.modules, f"botorch_sketch.integrations.{module}", raising=False
        )
    with pytest.raises(ImportError, match=r'pip install -e "\.\[optuna\]"'):
        importlib.import_module("botorch_sketch.integrations.optuna")


def test_bbkb_beats_random_search_on_branin():
    # 40 trials, seeds 0-2: simple regrets 0.002-0.03 against 0.4-2.5 for random
    wins = 0
    for seed in range(3):
        bests = []
        for sampler in (BBKBSampler(seed=seed), optuna.samplers.RandomSampler(seed)):
            study = optuna.create_study(sampler=sampler)
            study.optimize(branin, n_trials=40)
            bests.append(study.best_value)
        wins += bests[0] < bests[1]
    assert wins >= 2


@pytest.mark.parametrize("name", ["BBKBSampler", "SGPTSSampler"])
def test_no_configuration_of_a_continuous_space_is_asked_twice(name):
    # the loop would otherwise ask a told configuration again while the learned
    # noise says the objective is noisy, until a repeat shows it is not
    sampler = {"BBKBSampler": BBKBSampler, "SGPTSSampler": SGPTSSampler}[name](seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(
        lambda trial: (
            (trial.suggest_float("x", 0, 1) - 0.3) ** 2
            + (trial.suggest_float("y", 0, 1) - 0.6) ** 2
        ),
        n_trials=60,
    )
    configurations = [(t.params["x"], t.params["y"]) for t in study.trials]
    assert len(set(configurations)) == 60
    assert sampler.loop.options.min_repeat_reduction == math.inf
    assert sampler.loop.options.fit_inducing == FIT_INDUCING  # a study's refits
