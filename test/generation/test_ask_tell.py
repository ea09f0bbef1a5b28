r"""The ask/tell contract and the base class of the arm loops (BBKB, SGPTS,
ExactGPTS): argument checks before any state change, the pending and failed
multisets, the shared saved state and the refit bookkeeping."""

import copy
import pickle
import threading
from collections import Counter

import pytest
import torch
from botorch.test_functions import Hartmann

from botorch_sketch.generation import ask_tell
from botorch_sketch.generation.ask_tell import STATE_KEYS, ArmLoop, AskTellOptimizer
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.hyperparameters import INITIAL_LEARNED_NOISE
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS
from botorch_sketch.parallel.driver import AskTellOptimizer as DriverAskTellOptimizer

from ..gp_helpers import DTYPE, rbf_kernel

NUM_ARMS = 40


def _arms():
    return torch.rand(NUM_ARMS, 2, generator=torch.Generator().manual_seed(0)).to(DTYPE)


LOOPS = {
    "bbkb": lambda arms, **kw: BBKB(arms, seed=1, **kw),
    "sgpts": lambda arms, **kw: SGPTS(arms, num_features=64, num_inducing=8, **kw),
    "exact": lambda arms, **kw: ExactGPTS(arms, num_features=64, **kw),
}


def _fixed(name, arms, **options):
    return LOOPS[name](arms, covar_module=rbf_kernel(0.3), noise=0.1, **options)


def _same_state(actual, expected):
    r"""Whether two saved states (nested dicts, lists, tensors; NaN equal to NaN)
    are equal."""
    if isinstance(expected, torch.Tensor):
        return (
            isinstance(actual, torch.Tensor)
            and actual.dtype == expected.dtype
            and actual.shape == expected.shape
            and torch.equal(actual.nan_to_num(7.0), expected.nan_to_num(7.0))
            and torch.equal(actual.isnan(), expected.isnan())
        )
    if isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            _same_state(actual[key], value) for key, value in expected.items()
        )
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            _same_state(a, e) for a, e in zip(actual, expected, strict=True)
        )
    return actual == expected


@pytest.mark.parametrize("name", list(LOOPS))
def test_loops_follow_the_one_contract(name):
    loop = _fixed(name, _arms())
    assert isinstance(loop, ArmLoop) and isinstance(loop, AskTellOptimizer)
    assert DriverAskTellOptimizer is AskTellOptimizer  # run_parallel uses this one
    assert set(STATE_KEYS) <= set(loop.state_dict())


@pytest.mark.parametrize("name", list(LOOPS))
def test_bad_arguments_raise_naming_them_before_any_change(name):
    arms = _arms()
    loop = _fixed(name, arms)
    loop.ask_arms(torch.tensor([3, 3, 5]))
    loop.tell(torch.tensor([5]), torch.ones(1, dtype=DTYPE))
    loop.ask_arms(torch.tensor([7]))
    before = loop.state_dict()
    one = torch.ones(1, dtype=DTYPE)
    three = torch.tensor([3])
    cases = [
        (ValueError, "max_arms", lambda: loop.ask(0)),
        (TypeError, "max_arms", lambda: loop.ask(2.0)),
        (TypeError, "wait", lambda: loop.ask(1, wait=1)),
        (TypeError, "indices", lambda: loop.ask_arms([3])),
        (ValueError, "indices", lambda: loop.ask_arms(torch.tensor([NUM_ARMS]))),
        (TypeError, "indices", lambda: loop.tell(torch.tensor([3.0]), one)),
        (ValueError, "indices", lambda: loop.tell(torch.tensor([[3]]), one)),
        (ValueError, "indices", lambda: loop.tell(torch.tensor([NUM_ARMS]), one)),
        (ValueError, "not pending", lambda: loop.tell(torch.tensor([5]), one)),
        (ValueError, "not pending", lambda: loop.tell(three.repeat(3), one.repeat(3))),
        (ValueError, "at least one", lambda: loop.tell(three[:0], one[:0])),
        (TypeError, "rewards.*torch.as_tensor", lambda: loop.tell(three, [1.0])),
        (TypeError, "rewards.*as_tensor", lambda: loop.tell(three, torch.tensor([1]))),
        (ValueError, "rewards", lambda: loop.tell(three, one.repeat(2))),
        (
            ValueError,
            "rewards.*fail\\(indices",
            lambda: loop.tell(three, one * torch.nan),
        ),
        (
            ValueError,
            "rewards.*fail\\(indices",
            lambda: loop.tell(three, one * torch.inf),
        ),
        (TypeError, "indices", lambda: loop.fail([3])),
        (ValueError, "not pending", lambda: loop.fail(torch.tensor([5]))),
        (ValueError, "at least one", lambda: loop.fail(three[:0])),
    ]
    for error, match, call in cases:
        with pytest.raises(error, match=match):
            call()
        assert _same_state(loop.state_dict(), before)


@pytest.mark.parametrize("name", list(LOOPS))
def test_pending_and_failed_are_multisets(name):
    arms = _arms()
    loop = _fixed(name, arms)
    loop.ask_arms(torch.tensor([3, 3, 5, 9]))
    loop.tell(torch.tensor([3]), torch.ones(1, dtype=DTYPE))  # one copy of 3 stays
    assert Counter(loop.pending.tolist()) == Counter([3, 5, 9])
    loop.fail(torch.tensor([9, 3]))
    assert Counter(loop.pending.tolist()) == Counter([5])
    assert loop.failed.tolist() == [9, 3] and loop.observed.tolist() == [3]
    with pytest.raises(ValueError, match="not pending"):
        loop.fail(torch.tensor([3]))  # both copies are gone
    asked = loop.ask(2)
    assert Counter(loop.pending.tolist()) == Counter([5, *asked.tolist()])


@pytest.mark.parametrize("name", list(LOOPS))
def test_saved_pending_and_failed_arms_resume(name):
    arms = _arms()
    loop = _fixed(name, arms)
    loop.ask_arms(torch.tensor([3, 3, 5, 9]))
    loop.fail(torch.tensor([9]))
    loop.tell(torch.tensor([3]), torch.ones(1, dtype=DTYPE))
    state = loop.state_dict()
    twin = _fixed(name, arms)
    twin.load_state_dict(state)
    assert _same_state(twin.state_dict(), state)
    assert torch.equal(twin.ask(3), loop.ask(3))


@pytest.mark.parametrize("name", list(LOOPS))
@pytest.mark.parametrize(
    "key, value, error",
    [
        ("pending", torch.tensor([NUM_ARMS]), ValueError),
        ("failed", torch.tensor([0.5]), TypeError),
        ("observed", torch.tensor([[3]]), ValueError),
        ("rewards", torch.tensor([torch.nan], dtype=DTYPE), ValueError),
        ("design_asked", -1, ValueError),
        ("generator", "state", TypeError),
        ("fingerprint", {}, ValueError),
    ],
)
def test_bad_shared_state_raises_naming_it_before_any_change(name, key, value, error):
    arms = _arms()
    loop = _fixed(name, arms)
    loop.ask_arms(torch.tensor([3, 5]))
    loop.tell(torch.tensor([3]), torch.ones(1, dtype=DTYPE))
    before = loop.state_dict()
    with pytest.raises(error, match=key):
        loop.load_state_dict({**before, key: value})
    with pytest.raises(ValueError, match=key):
        loop.load_state_dict({k: v for k, v in before.items() if k != key})
    assert _same_state(loop.state_dict(), before)


@pytest.mark.parametrize("name", ["bbkb", "sgpts"])
def test_refit_bookkeeping(name, monkeypatch):
    r"""A learned loop refits on schedule, counts its CPU time, keeps its
    hyperparameters when the fit gives nothing, and restarts a fit at the
    hyperparameters it began with once the observations pass a power of two."""
    arms = _arms()
    loop = LOOPS[name](arms, num_initial=2)
    assert loop.refits is not None and loop.refit_seconds == 0.0
    initial = {k: v.clone() for k, v in loop.covar_module.state_dict().items()}
    calls, restarts = [], []

    def no_fit(*args, **kwargs):
        calls.append(args[2].shape[0])
        restarts.append(kwargs["restart"])
        return None

    monkeypatch.setattr(ask_tell, "fit_dtc_hyperparameters", no_fit)
    kernel = {k: v.clone() for k, v in loop.covar_module.state_dict().items()}
    noise = loop.noise
    indices = loop.ask(2)
    loop.tell(indices, torch.tensor([0.5, -0.5], dtype=DTYPE))
    assert calls == [2] and loop.refits.last == 2  # due at max(num_initial, 2)
    assert loop.refit_seconds >= 0.0 and loop.noise == noise
    for key, value in loop.covar_module.state_dict().items():
        assert torch.equal(value, kernel[key])
    assert loop.state_dict()["hyperparameters"]["last_fit"] == 2
    assert restarts == [None]
    loop.covar_module.base_kernel.lengthscale = 7.0
    for _ in range(2):
        indices = loop.ask(1)
        loop.tell(indices, torch.tensor([0.1], dtype=DTYPE))
    assert calls == [2, 3, 4] and restarts[1] is None
    restart_kernel, restart_noise = restarts[2]
    assert restart_noise == INITIAL_LEARNED_NOISE
    for key, value in restart_kernel.state_dict().items():
        assert torch.equal(value, initial[key])


def test_fixed_kernel_loops_do_not_refit():
    loop = _fixed("sgpts", _arms())
    assert loop.refits is None and not loop._refit_due(10**6)
    assert loop.state_dict()["hyperparameters"] is None


class Gate:
    r"""A constant option value (BBKB's ``ratio_threshold``, S-GP-TS's ``alpha``
    schedule) that, once armed, holds the first thread evaluating it inside the
    loop's call until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered, self.released = threading.Event(), threading.Event()

    def __call__(self, value: float) -> float:
        if self.armed and not self.entered.is_set():
            self.entered.set()
            assert self.released.wait(timeout=60), "the test never released the gate"
        return 2.0


#: The option each loop evaluates inside ``ask`` once it has data.
GATED_OPTION = {"bbkb": "ratio_threshold", "sgpts": "alpha", "exact": "alpha"}


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_call_while_another_thread_is_inside_one_is_refused(name):
    # issue 37, item 6: concurrent calls raised mixed exceptions and corrupted state
    gate = Gate()  # a function, so that the loop's deep copy of the options shares it
    arms = _arms()
    loop = _fixed(name, arms, **{GATED_OPTION[name]: lambda value: gate(value)})
    twin = _fixed(name, arms, **{GATED_OPTION[name]: lambda value: 2.0})
    for one in (loop, twin):
        first = one.ask(1)
        one.tell(first, torch.ones(1, dtype=DTYPE))
    before = loop.state_dict()
    gate.armed, asked = True, []
    inside = threading.Thread(target=lambda: asked.append(loop.ask(1)))
    inside.start()
    try:
        assert gate.entered.wait(timeout=60), "ask never reached the option"
        for call in (
            lambda: loop.ask(1),
            lambda: loop.ask_arms(torch.tensor([0])),
            lambda: loop.tell(first, torch.ones(1, dtype=DTYPE)),
            lambda: loop.fail(first),
            lambda: loop.add_arms(arms[:1] / 2),
            loop.state_dict,
            lambda: loop.load_state_dict(before),
        ):
            with pytest.raises(RuntimeError, match="another thread is inside a call"):
                call()
    finally:
        gate.released.set()
        inside.join()
    gate.armed = False
    assert torch.equal(asked[0], twin.ask(1))  # the refused calls changed nothing
    assert _same_state(loop.state_dict(), twin.state_dict())


@pytest.mark.parametrize("name", list(LOOPS))
def test_copied_and_pickled_loops_have_their_own_lock(name):
    loop = _fixed(name, _arms())
    loop.ask(1)
    for copied in (copy.deepcopy(loop), pickle.loads(pickle.dumps(loop))):
        assert copied._call_lock is not loop._call_lock
        assert _same_state(copied.state_dict(), loop.state_dict())
        copied.ask(1)  # its lock works


def _self_tuned_choices(loop_class, scale, offset, budget=48):
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(1000, 6, generator=gen, dtype=DTYPE)
    values = Hartmann(dim=6, negate=True)(arms)
    loop = loop_class(arms, seed=0)
    chosen = []
    while loop.num_observations < budget:
        indices = loop.ask(min(4, budget - loop.num_observations))
        chosen.extend(indices.tolist())
        loop.tell(indices, scale * values[indices] + offset)
    return chosen


@pytest.mark.parametrize("loop_class", [BBKB, SGPTS])
def test_self_tuning_choices_do_not_depend_on_the_rewards_units(loop_class):
    reference = _self_tuned_choices(loop_class, 1.0, 0.0)
    assert _self_tuned_choices(loop_class, 1e3, 300.0) == reference
    assert _self_tuned_choices(loop_class, 1e-3, -5.0) == reference


@pytest.mark.parametrize("name", list(LOOPS))
def test_best_is_the_largest_told_reward(name):
    arms = _arms()
    loop = _fixed(name, arms)
    with pytest.raises(ValueError, match=r"tell\(indices, rewards\)"):
        loop.best()
    told = []  # (index, reward) in the order told, kept by hand
    generator = torch.Generator().manual_seed(3)
    for round_ in range(6):
        indices = loop.ask(4)
        rewards = torch.randn(len(indices), generator=generator, dtype=DTYPE)
        if round_ in (1, 3):  # a tie at the top: the reward told first wins
            rewards[-1 if round_ == 1 else 0] = 5.0
        for part in (slice(0, 1), slice(1, None)):  # the rest stays pending a while
            if len(indices[part]):
                loop.tell(indices[part], rewards[part])
                told += zip(indices[part].tolist(), rewards[part].tolist(), strict=True)
            top = max(reward for _, reward in told)
            index = next(i for i, reward in told if reward == top)
            best = loop.best()
            assert (best.index, best.reward) == (index, top)
            assert torch.equal(best.point, arms[index])
    assert loop.best().reward == 5.0
