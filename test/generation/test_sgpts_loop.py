r"""Asynchronous S-GP-TS loop: oracle against a hand-driven CachedSparseThompson,
exact resumption with pending and failed arms, input validation; appended arms
against the rebuild on all arms."""

import copy

import pytest
import torch

from botorch_sketch.generation import ask_tell, thompson_arms
from botorch_sketch.generation.hyperparameters import learnable_covar_module, unit_cube
from botorch_sketch.generation.initial_design import space_filling_arms
from botorch_sketch.generation.reward_warping import fit_power, warped_rewards
from botorch_sketch.generation.sgpts_loop import SGPTS, ExactGPTS
from botorch_sketch.generation.thompson_arms import CachedSparseThompson
from botorch_sketch.sampling.arm_features import ArmFeatureCache, PriorPathBank

from ..gp_helpers import DTYPE, rbf_kernel, seeded, uniform, zero_mean_gp_posterior

NOISE = 0.2
NUM_FEATURES = 64
NUM_INDUCING = 12


def _arms(n=200, d=2, seed=0, dtype=DTYPE, device=None):
    return uniform(n, d, seed=seed, dtype=dtype, device=device)


def _reward(arms, indices, g):
    r"""Noisy rewards of ``arms[indices]``; the noise is drawn from the CPU
    generator ``g`` in float64, then cast: the same draws for every dtype and
    device."""
    x = arms[indices]
    noise = torch.randn(indices.shape[0], generator=g, dtype=DTYPE).to(x)
    return torch.sin(6 * x).sum(-1) + 0.3 * noise


def _kernel(arms):
    return rbf_kernel(0.25, 1.0, arms.dtype, arms.device)


def _hand_sampler(arms, seed):
    r"""The (CPU) generator, as SGPTS's, and a fresh CachedSparseThompson whose
    feature basis it drew, built by hand."""
    generator = torch.Generator().manual_seed(seed)
    cache = ArmFeatureCache(arms, _kernel(arms), NUM_FEATURES, generator=generator)
    return generator, CachedSparseThompson(cache, NOISE, NUM_INDUCING)


def _loop(arms, seed=5, alpha=1.0):
    return SGPTS(
        arms,
        covar_module=_kernel(arms),
        noise=NOISE,
        num_inducing=NUM_INDUCING,
        num_features=NUM_FEATURES,
        alpha=alpha,
        seed=seed,
    )


def _script(num_events=25, seed=11):
    r"""A random asynchronous run: ``(k, told fraction, failed)`` per event."""
    g = seeded(seed)
    for _ in range(num_events):
        k = int(torch.randint(1, 5, (1,), generator=g))
        yield (
            k,
            float(torch.rand(1, generator=g)),
            bool(torch.rand(1, generator=g) < 0.2),
        )


def _drive(loop, arms, events, g):
    r"""Ask ``k``, then tell a random subset of the pending arms in a random order
    (and fail one) per event; return every asked batch."""
    asked = []
    for k, fraction, fail in events:
        asked.append(loop.ask(k))
        pending = loop.pending
        order = torch.randperm(pending.shape[0], generator=g)
        told = pending[order[: max(1, int(fraction * pending.shape[0]))]]
        loop.tell(told, _reward(arms, told, g))
        if fail and loop.pending.numel():
            loop.fail(loop.pending[-1:])
    return asked


def test_asynchronous_choices_equal_hand_driven_sampler(tkwargs):
    arms = _arms(**tkwargs)
    schedule = lambda t: 1.0 / (1.0 + 0.1 * t)  # noqa: E731
    loop = _loop(arms, alpha=schedule)
    # by hand: the same basis and generator, told arms only, pending ones never
    generator, sampler = _hand_sampler(arms, 5)
    g_loop, g_hand = seeded(3), seeded(3)
    pending: list[int] = []
    failed: list[int] = []
    for k, fraction, fail in _script():
        got = loop.ask(k)
        if sampler.num_observations == 0:
            expected = torch.randint(arms.shape[0], (k,), generator=generator)
            expected = expected.to(arms.device)
        else:
            alpha = schedule(sampler.num_observations + 1)
            expected = sampler.sample(k, alpha, generator).indices
        assert torch.equal(got, expected)
        pending += expected.tolist()
        order = torch.randperm(len(pending), generator=g_hand)
        count = max(1, int(fraction * len(pending)))
        told = torch.tensor(pending)[order[:count]]
        sampler.observe(told, _reward(arms, told, g_hand))
        for arm in told.tolist():
            pending.remove(arm)
        if fail and pending:
            failed.append(pending.pop())
        # the loop's side of the same events
        pending_loop = loop.pending
        order_loop = torch.randperm(pending_loop.shape[0], generator=g_loop)
        told_loop = pending_loop[order_loop[:count]]
        loop.tell(told_loop, _reward(arms, told_loop, g_loop))
        if fail and loop.pending.numel():
            loop.fail(loop.pending[-1:])
        assert sorted(loop.pending.tolist()) == sorted(pending)
    assert loop.failed.tolist() == failed
    assert torch.equal(loop.observed, sampler.observed)
    assert torch.equal(loop.rewards, sampler.rewards)
    assert sampler.num_observations > 20 and sampler.reselections > 1


def test_synchronous_use_is_batch_sampling(tkwargs):
    arms = _arms(**tkwargs)
    loop = _loop(arms, seed=2)
    generator, sampler = _hand_sampler(arms, 2)
    g = seeded(0)
    first = loop.ask(3)
    expected = torch.randint(200, (3,), generator=generator).to(arms.device)
    assert torch.equal(first, expected)
    rewards = _reward(arms, first, g)
    loop.tell(first, rewards)
    sampler.observe(first, rewards)
    for _ in range(5):
        batch = loop.ask(6)
        assert torch.equal(batch, sampler.sample(6, 1.0, generator).indices)
        rewards = _reward(arms, batch, g)
        loop.tell(batch, rewards)
        sampler.observe(batch, rewards)
    assert loop.pending.numel() == 0


@pytest.mark.parametrize("other_seed", [5, 9])
def test_resume_makes_identical_choices_and_keeps_pending(other_seed, tkwargs):
    arms = _arms(**tkwargs)
    loop = _loop(arms)
    _drive(loop, arms, _script(12), seeded(1))
    loop.ask(3)
    assert loop.pending.numel() >= 3 and loop.failed.numel() >= 1
    state = loop.state_dict()
    resumed = _loop(arms, seed=other_seed)
    resumed.ask(2)  # a resumed loop's own history is discarded
    resumed.load_state_dict(state)
    assert torch.equal(resumed.pending, loop.pending)
    assert torch.equal(resumed.rewards, loop.rewards)
    assert torch.equal(resumed.failed, loop.failed)
    assert torch.equal(resumed.observed, loop.observed)
    # the saved dict is not aliased by either loop
    assert torch.equal(state["pending"], loop.pending)
    events = list(_script(10, seed=4))
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            _drive(loop, arms, events, seeded(8)),
            _drive(resumed, arms, events, seeded(8)),
            strict=True,
        )
    )
    assert torch.equal(resumed.pending, loop.pending)


def _snapshot(loop):
    return (
        loop.pending.clone(),
        loop.failed.clone(),
        loop.num_observations,
        loop.generator.get_state(),
    )


def _same(loop, snapshot):
    pending, failed, t, generator = snapshot
    return (
        torch.equal(loop.pending, pending)
        and torch.equal(loop.failed, failed)
        and loop.num_observations == t
        and torch.equal(loop.generator.get_state(), generator)
    )


def test_bad_inputs_change_nothing():
    arms = _arms()
    loop = _loop(arms)
    _drive(loop, arms, _script(4), seeded(1))
    loop.ask(2)
    arm = int(loop.pending[0])
    snapshot = _snapshot(loop)
    one = torch.ones(1, dtype=DTYPE)
    arm_t = torch.tensor([arm])
    nine = torch.tensor([arm] * 9)
    empty = torch.tensor([], dtype=torch.long)
    cases = [
        (ValueError, "max_arms", lambda: loop.ask(0)),
        (TypeError, "max_arms", lambda: loop.ask(True)),
        (TypeError, "max_arms", lambda: loop.ask(2.0)),
        (TypeError, "indices", lambda: loop.tell(torch.tensor([1.0]), one)),
        (ValueError, "indices", lambda: loop.tell(arm_t.unsqueeze(0), one)),
        (ValueError, "indices", lambda: loop.tell(torch.tensor([200]), one)),
        (ValueError, "not pending", lambda: loop.tell(nine, one.repeat(9))),
        (ValueError, "at least one", lambda: loop.tell(empty, one[:0])),
        (TypeError, "rewards", lambda: loop.tell(arm_t, [1.0])),
        (ValueError, "rewards", lambda: loop.tell(arm_t, one.repeat(2))),
        (ValueError, "rewards", lambda: loop.tell(arm_t, one * torch.nan)),
        (ValueError, "rewards", lambda: loop.tell(arm_t, one * 1e300)),
        (ValueError, "rewards", lambda: loop.tell(arm_t, one.reshape(1, 1, 1))),
        (TypeError, "rewards", lambda: loop.tell(arm_t, torch.tensor([True]))),
        (TypeError, "rewards", lambda: loop.tell(arm_t, torch.tensor([1]))),
        (ValueError, "not pending", lambda: loop.fail(nine)),
        (TypeError, "indices", lambda: loop.fail([arm])),
    ]
    for error, match, call in cases:
        with pytest.raises(error, match=match):
            call()
        assert _same(loop, snapshot)


def test_bad_states_change_nothing():
    arms = _arms()
    loop = _loop(arms)
    _drive(loop, arms, _script(4), seeded(1))
    loop.ask(2)
    good = loop.state_dict()
    snapshot = _snapshot(loop)
    t = good["observed"].shape[0]
    cases = [
        (TypeError, "state", [1]),
        (ValueError, "misses", {k: v for k, v in good.items() if k != "failed"}),
        (
            ValueError,
            "misses",
            {k: v for k, v in good.items() if k != "prior_weights"},
        ),
        (ValueError, "pending", good | {"pending": torch.tensor([200])}),
        (TypeError, "failed", good | {"failed": torch.tensor([0.5])}),
        (ValueError, "tell_sizes", good | {"tell_sizes": [t + 1]}),
        (ValueError, "tell_sizes", good | {"tell_sizes": [t, 0]}),
        (ValueError, "rewards", good | {"rewards": good["rewards"][:-1]}),
        (ValueError, "rewards", good | {"rewards": good["rewards"] * torch.inf}),
        (ValueError, "seed", good | {"seed": -1}),
        (TypeError, "generator", good | {"generator": 3}),
        (ValueError, "generator", good | {"generator": torch.zeros(3).byte()}),
        (ValueError, "prior_weights", good | {"prior_weights": torch.zeros(2, 3)}),
        (
            ValueError,
            "prior_weights",
            good | {"prior_weights": torch.full((2, NUM_FEATURES), torch.nan)},
        ),
    ]
    for error, match, state in cases:
        with pytest.raises(error, match=match):
            loop.load_state_dict(state)
        assert _same(loop, snapshot)


def test_constructor_validation():
    arms = _arms(20)
    kernel = rbf_kernel(0.25, 1.0)
    with pytest.raises(ValueError, match="noise"):
        SGPTS(arms, covar_module=kernel, noise=0.0)
    with pytest.raises(ValueError, match="num_inducing"):
        SGPTS(arms, covar_module=kernel, num_inducing=0)
    with pytest.raises(ValueError, match="prior_block"):
        SGPTS(arms, covar_module=kernel, prior_block=0)
    with pytest.raises(ValueError, match="alpha"):
        SGPTS(arms, covar_module=kernel, alpha=-1.0)
    with pytest.raises(ValueError, match="seed"):
        SGPTS(arms, covar_module=kernel, seed=-2)
    with pytest.raises(ValueError, match="num_features"):
        SGPTS(arms, covar_module=kernel, num_features=7)
    with pytest.raises(ValueError, match="inducing_quality"):
        SGPTS(arms, covar_module=kernel, inducing_quality="best")
    with pytest.raises(ValueError, match="arms"):
        SGPTS(arms[0], covar_module=kernel)
    with pytest.raises(ValueError, match="noise"):
        SGPTS(arms, noise=1e-300)
    with pytest.raises(ValueError, match="alpha"):
        SGPTS(arms, alpha=lambda t: -1.0)  # a schedule is probed at once


def test_device_runs_make_the_cpu_choices(device):
    # every random choice is drawn on the CPU generator, so the run on `device`
    # asks what the CPU run asks (an exact float64 posterior on both)
    runs = []
    for on in (torch.device("cpu"), device):
        arms = _arms(device=on)
        loop = _loop(arms)
        asked = _drive(loop, arms, _script(15), seeded(1))
        loop.ask(2)
        loop.fail(loop.pending[:1])
        resumed = _loop(arms, seed=9)
        resumed.load_state_dict(loop.state_dict())
        assert torch.equal(resumed.ask(3), loop.ask(3))
        assert all(a.device.type == on.type for a in asked)
        runs.append([a.tolist() for a in asked])
    assert runs[0] == runs[1]


def test_ask_arms_are_pending_arms_of_the_users_choice():
    # the chosen arms become pending (never in the posterior until told), the
    # loop's own choices are unchanged, and a resume keeps them
    arms = _arms()
    loop, twin = _loop(arms), _loop(arms)
    g, g_twin = seeded(1), seeded(1)
    _drive(loop, arms, _script(4), g)
    _drive(twin, arms, _script(4), g_twin)
    chosen = torch.tensor([17, 3, 17])
    before = loop.pending.clone()
    loop.ask_arms(chosen)
    assert torch.equal(loop.pending, torch.cat([before, chosen]))
    assert torch.equal(loop.ask(2), twin.ask(2))
    resumed = _loop(arms, seed=9)
    resumed.load_state_dict(loop.state_dict())
    assert torch.equal(resumed.pending, loop.pending)
    rewards = _reward(arms, chosen, seeded(2))
    loop.tell(chosen, rewards)
    twin.ask_arms(chosen)
    twin.tell(chosen, rewards)
    assert torch.equal(loop.observed[-3:], chosen)
    assert torch.equal(loop.rewards, twin.rewards)
    assert torch.equal(loop.ask(4), twin.ask(4))
    snapshot = _snapshot(loop)
    for bad, error in (
        ([1], TypeError),
        (torch.tensor([0.5]), TypeError),
        (torch.tensor([[1]]), ValueError),
        (torch.tensor([200]), ValueError),
    ):
        with pytest.raises(error, match="indices"):
            loop.ask_arms(bad)
        assert _same(loop, snapshot)


def _learned(arms, seed=0, **options):
    return SGPTS(arms, num_inducing=40, num_features=NUM_FEATURES, seed=seed, **options)


def _run_learned(loop, arms, steps, scale=1.0, offset=0.0, asked_per_step=2):
    r"""Ask, then tell all, ``steps`` times, rewards in units ``scale``, ``offset``;
    return the asked arms."""
    history = []
    for _ in range(steps):
        indices = loop.ask(asked_per_step)
        x = arms[indices]
        loop.tell(indices, scale * (torch.sin(6 * x).sum(-1) - x.sum(-1)) + offset)
        history.append(indices.tolist())
    return history


def test_learned_loop_starts_space_filling_and_refits_to_the_exact_posterior():
    g = seeded(5)
    arms = torch.rand(150, 3, generator=g, dtype=DTYPE) * 10 - 5  # not the cube
    loop = _learned(arms)
    first = loop.ask(8)  # the max(5, 2 d) = 6 design arms first, then 2 paths
    design = space_filling_arms(unit_cube(arms), 6, _basis_drawn(arms))
    assert torch.equal(first[:6], design)
    loop.tell(first, _reward(unit_cube(arms), first, g))
    assert loop.refits.last == 8
    history = _run_learned(loop, arms, 12)
    assert loop.refits.last > 8 and loop.num_observations < 1.5 * loop.refits.last
    assert len({a for step in history for a in step}) > 6  # it moves on
    lengthscale = loop.covar_module.base_kernel.lengthscale
    default = learnable_covar_module(3).base_kernel.lengthscale.to(lengthscale)
    assert not torch.allclose(lengthscale, default)
    # oracle: with every distinct observed arm inducing (m = 40 > 32), the paths'
    # mean (alpha = 0) is the exact GP's on the warped rewards (the power fitted
    # on the rewards of the last refit), with the learned kernel on the unit cube
    sampler = loop.sampler
    y = loop.rewards
    assert loop.power == fit_power(y[: loop.refits.last])
    targets = warped_rewards(y, loop.power)
    torch.testing.assert_close(sampler.targets, targets, rtol=0, atol=0)
    X = unit_cube(arms)
    mean, _ = zero_mean_gp_posterior(
        X[loop.observed], targets, loop.noise, loop.covar_module, X
    )
    weights = torch.zeros(1, NUM_FEATURES, dtype=DTYPE)
    noise = torch.zeros(1, sampler.noise_size, dtype=DTYPE)
    paths = sampler.path_values(weights, noise, alpha=0.0).squeeze(-1)
    # up to the jitter (1e-8) on K_ZZ, whose 40 inducing points lie close
    # together under the learned lengthscales (errors up to ~3e-4 seen)
    torch.testing.assert_close(paths, mean, rtol=1e-3, atol=1e-3)


def test_heavy_tailed_rewards_are_warped_and_the_paths_are_their_posterior():
    g = seeded(9)
    arms = torch.rand(200, 2, generator=g, dtype=DTYPE)
    scales = 10.0 ** torch.tensor([0.0, 3.0], dtype=DTYPE)

    def heavy_tailed(indices):  # an ellipsoid loss, maximized
        return -(scales * (arms[indices] - 0.4) ** 2).sum(-1)

    loop = _learned(arms, seed=2)
    for _ in range(16):
        indices = loop.ask(2)
        loop.tell(indices, heavy_tailed(indices))
    assert loop.power == fit_power(loop.rewards[: loop.refits.last]) > 1.0
    # oracle: the paths' mean is Titsias' posterior mean of the warped rewards on
    # the inducing points, K_AZ (lambda K_ZZ + K_ZX K_XZ)^{-1} K_ZX y~, from scratch
    # (K_ZZ with the sampler's jitter)
    sampler = loop.sampler
    targets = warped_rewards(loop.rewards, loop.power)
    torch.testing.assert_close(sampler.targets, targets, rtol=0, atol=0)
    X = unit_cube(arms)
    Z = X[sampler.inducing_arms]
    with torch.no_grad():
        K_AZ = loop.covar_module(X, Z).to_dense()
        K_XZ = K_AZ[loop.observed]
        K_ZZ = loop.covar_module(Z).to_dense()
    K_ZZ = K_ZZ + sampler.jitter * torch.eye(Z.shape[0], dtype=DTYPE)
    system = loop.noise * K_ZZ + K_XZ.mT @ K_XZ
    mean = K_AZ @ torch.linalg.solve(system, K_XZ.mT @ targets)
    weights = torch.zeros(1, NUM_FEATURES, dtype=DTYPE)
    noise = torch.zeros(1, sampler.noise_size, dtype=DTYPE)
    paths = sampler.path_values(weights, noise, alpha=0.0).squeeze(-1)
    # (the two orders of the same products differ by ~5e-6: K_ZZ is ill-conditioned)
    torch.testing.assert_close(paths, mean, rtol=1e-4, atol=1e-4)
    twin = _learned(arms, seed=2)
    twin.load_state_dict(loop.state_dict())
    assert twin.power == loop.power
    for each in (loop, twin):
        indices = each.ask(2)
        each.tell(indices, heavy_tailed(indices))
    assert torch.equal(loop.observed, twin.observed)


def test_a_standardizing_tell_computes_q_once(monkeypatch):
    # the new targets enter with the observations: one q(u) per tell, and the
    # result is q(u) computed from scratch on the standardized rewards (a fixed
    # kernel: never warped)
    g = seeded(6)
    arms = torch.rand(120, 2, generator=g, dtype=DTYPE)
    loop = SGPTS(
        arms,
        covar_module=_kernel(arms),
        noise=NOISE,
        num_inducing=NUM_INDUCING,
        num_features=NUM_FEATURES,
        standardize=True,
    )
    _run_learned(loop, arms, 6)
    computed = []
    titsias_q = thompson_arms.titsias_q_from_statistics

    def counted(*args):
        computed.append(args)
        return titsias_q(*args)

    monkeypatch.setattr(thompson_arms, "titsias_q_from_statistics", counted)
    indices = loop.ask(3)
    loop.tell(indices, torch.sin(5 * arms[indices]).sum(-1))
    assert len(computed) == 1
    sampler = loop.sampler
    y = loop.rewards
    assert loop.power == 1.0
    torch.testing.assert_close(sampler.targets, (y - y.mean()) / y.std())
    mean, _ = titsias_q(*computed[0])
    X = loop.kernel_inputs
    Z, observed = X[sampler.inducing_arms], X[sampler.observed]
    phi = torch.linalg.solve_triangular(
        sampler._chol, loop.covar_module(Z, observed).to_dense(), upper=False
    )
    fresh, _ = titsias_q(phi @ phi.mT, phi @ sampler.targets, sampler.noise)
    torch.testing.assert_close(mean, fresh)


def _basis_drawn(arms):
    r"""A generator as the loop's after it drew its feature basis."""
    generator = seeded(0)
    ArmFeatureCache(arms, rbf_kernel(0.5, 1.0), NUM_FEATURES, generator=generator)
    return generator


def test_learned_loop_does_not_depend_on_the_rewards_units():
    arms = _arms(120)
    histories = [
        _run_learned(_learned(arms, seed=1), arms, 12, scale, offset)
        for scale, offset in ((1.0, 0.0), (1000.0, 300.0), (0.001, -7.0))
    ]
    assert histories[0] == histories[1] == histories[2]


@pytest.mark.parametrize("steps", [2, 3, 9])
def test_learned_loop_resumes_exactly(steps):
    # saved before the first refit, right after one, and later
    arms = _arms(120)
    loop = _learned(arms, seed=2)
    _run_learned(loop, arms, steps, asked_per_step=3)
    twin = _learned(arms, seed=7)
    twin.load_state_dict(loop.state_dict())
    assert twin.noise == loop.noise and twin.refits.last == loop.refits.last
    assert _run_learned(twin, arms, 6) == _run_learned(loop, arms, 6)
    fixed = _loop(arms)
    _drive(fixed, arms, _script(3), seeded(1))
    differing = "fingerprint differs in .'covar_module', 'noise'"
    with pytest.raises(ValueError, match=differing):
        _learned(arms).load_state_dict(fixed.state_dict())
    with pytest.raises(ValueError, match="rebuilt_at"):
        _learned(arms).load_state_dict(loop.state_dict() | {"rebuilt_at": 1})


def _fault(error, function):
    r"""``function``, except that its first call raises ``error`` (a transient
    fault)."""
    calls = []

    def faulty(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error("stop")
        return function(*args, **kwargs)

    return faulty


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("where", ["refit", "observe", "reselect"])
def test_a_failed_tell_changes_nothing_and_can_be_retried(error, where, monkeypatch):
    # #26 item 3: a tell that fails inside the update (the refit, the sampler's
    # update, its re-selection) leaves the loop as it was; a retry equals a
    # fault-free twin
    arms = _arms(120)
    loop, twin = _learned(arms, seed=3), _learned(arms, seed=3)
    _run_learned(loop, arms, 3)
    _run_learned(twin, arms, 3)
    indices = loop.ask(2)
    assert torch.equal(indices, twin.ask(2))
    rewards = _reward(arms, indices, seeded(4))
    twin.tell(indices, rewards)
    before = loop.state_dict()
    target = {
        "refit": (ask_tell, "fit_dtc_hyperparameters"),
        "observe": (CachedSparseThompson, "observe"),
        "reselect": (CachedSparseThompson, "_refresh_q"),
    }[where]
    monkeypatch.setattr(*target, _fault(error, getattr(*target)))
    if where == "refit":
        loop.refits.last = 1  # due now
    with pytest.raises(error):
        loop.tell(indices, rewards)
    monkeypatch.undo()
    if where == "refit":
        loop.refits.last = before["hyperparameters"]["last_fit"]
    _assert_same_state(loop.state_dict(), before)
    loop.tell(indices, rewards)
    assert _run_learned(loop, arms, 4) == _run_learned(twin, arms, 4)


def _assert_same_state(actual, expected):
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(actual[key], value), key
        elif key != "hyperparameters":
            assert actual[key] == value, key
    for key, value in expected["hyperparameters"]["covar_module"].items():
        assert torch.equal(actual["hyperparameters"]["covar_module"][key], value)


def test_a_checkpoint_of_another_problem_is_rejected():
    # #26 item 5: other arm values, another d, noise or option
    arms = _arms(80)
    loop = _loop(arms)
    _drive(loop, arms, _script(3), seeded(1))
    saved = loop.state_dict()
    others = {
        "arms": _loop(arms.flip(0)),
        "covar_module": _learned(arms),
        "num_inducing": SGPTS(
            arms, covar_module=_kernel(arms), noise=NOISE, num_features=NUM_FEATURES
        ),
    }
    for differing, other in others.items():
        before = _snapshot(other)
        with pytest.raises(ValueError, match=f"differs in .*'{differing}'"):
            other.load_state_dict(saved)
        assert _same(other, before)


def test_added_arms_join_the_posterior_and_resume():
    g = seeded(12)
    arms = torch.rand(100, 2, generator=g, dtype=DTYPE) * 4 - 2
    loop, twin = _learned(arms, seed=4), _learned(arms, seed=8)
    _run_learned(loop, arms, 6)
    new = torch.rand(25, 2, generator=g, dtype=DTYPE) * 3 - 1.5
    with pytest.raises(ValueError, match="bounding box"):
        loop.add_arms(new + 10)
    assert loop.arms.shape == (100, 2)
    assert loop.add_arms(new).tolist() == list(range(100, 125))
    # oracle: every observed arm is inducing, so the paths' mean is the exact
    # GP's at all arms, the new ones included
    X = (torch.cat([arms, new]) - arms.min(0).values) / (
        arms.max(0).values - arms.min(0).values
    )
    targets = warped_rewards(loop.rewards, loop.power)
    mean, _ = zero_mean_gp_posterior(
        X[loop.observed], targets, loop.noise, loop.covar_module, X
    )
    sampler = loop.sampler
    weights = torch.zeros(1, NUM_FEATURES, dtype=DTYPE)
    noise = torch.zeros(1, sampler.noise_size, dtype=DTYPE)
    paths = sampler.path_values(weights, noise, alpha=0.0).squeeze(-1)
    torch.testing.assert_close(paths, mean, rtol=1e-4, atol=1e-4)
    twin.load_state_dict(loop.state_dict())
    assert _run_learned(twin, twin.arms, 8) == _run_learned(loop, loop.arms, 8)


def _add_by_rebuild(loop, points):
    r"""Append ``points`` as ``add_arms`` did before it was incremental (the
    oracle): the feature cache and the posterior rebuilt on all arms, the told
    arms observed in one update, the prior weights left reloaded."""
    points, inputs = loop._checked_new_arms(points)
    loop.arms = torch.cat([loop.arms, points])
    loop.kernel_inputs = torch.cat([loop.kernel_inputs, inputs])
    sampler = loop._sampler_from(loop._basis_seed, loop.observed, loop.rewards)
    sampler.prior_bank.load(loop.sampler.prior_bank.remaining)
    loop.sampler, loop._rebuilt_at = sampler, loop.num_observations


def _assert_same_paths(loop, expected):
    r"""The paths of ``loop`` equal those of ``expected`` at all arms (float64):
    for fixed prior weights and update draws, and the next draw of each loop's
    prior bank and generator (on copies)."""
    sampler, oracle = loop.sampler, expected.sampler
    assert loop.arms.shape == expected.arms.shape
    assert torch.equal(sampler.update_arms, oracle.update_arms)
    g = seeded(9)
    W = torch.randn(3, NUM_FEATURES, generator=g, dtype=DTYPE)
    E = torch.randn(3, sampler.noise_size, generator=g, dtype=DTYPE)
    close = {"rtol": 0.0, "atol": 1e-10}
    for alpha in (0.0, 0.7):
        torch.testing.assert_close(
            sampler.path_values(W, E, alpha), oracle.path_values(W, E, alpha), **close
        )
    state = loop.generator.get_state()
    assert torch.equal(state, expected.generator.get_state())
    draws = [
        copy.deepcopy(each).sample_values(2, 1.0, torch.Generator().set_state(state))
        for each in (sampler, oracle)
    ]
    torch.testing.assert_close(*draws, **close)


def _appending_loop(loop_class, learned, arms, **options):
    if learned:
        options = {"num_inducing": 16, **options}
        return loop_class(arms, num_features=NUM_FEATURES, seed=3, **options)
    return loop_class(
        arms,
        covar_module=_kernel(arms),
        noise=NOISE,
        num_features=NUM_FEATURES,
        seed=3,
        **{"num_inducing": NUM_INDUCING, **options},
    )


def _inside(arms, n, seed):
    r"""``n`` uniform points in the bounding box of ``arms``."""
    low, high = arms.min(0).values, arms.max(0).values
    return low + (high - low) * torch.rand(n, 2, generator=seeded(seed), dtype=DTYPE)


@pytest.mark.parametrize("learned", [True, False], ids=["learned", "fixed"])
@pytest.mark.parametrize("loop_class", [SGPTS, ExactGPTS])
def test_appended_arms_give_the_rebuilds_paths_and_choices(loop_class, learned):
    # oracle: the rebuild on all arms that add_arms was; appends while arms are
    # pending, after refits, repeated, new arms asked and told; the later asks
    # equal the rebuilding twin's, and a loop resumed from the state (rebuilt on
    # all arms from the start) has the same paths
    arms = _arms(120)
    loop, twin = (_appending_loop(loop_class, learned, arms) for _ in range(2))
    rounds = [(8, 16), (6, 1), (0, 24), (5, 32), (6, 3)]
    for number, (events, count) in enumerate(rounds):
        events = list(_script(events, seed=number))
        asked = [
            _drive(each, each.arms, events, seeded(number)) for each in (loop, twin)
        ]
        assert all(map(torch.equal, *asked))
        assert loop.pending.numel() > 0
        rebuilt_at = loop._rebuilt_at
        points = _inside(arms, count, seed=number)
        added = loop.add_arms(points)
        _add_by_rebuild(twin, points)
        assert added.tolist() == list(
            range(loop.arms.shape[0] - count, loop.arms.shape[0])
        )
        assert loop._rebuilt_at == rebuilt_at  # nothing was rebuilt
        _assert_same_paths(loop, twin)
        if number == 2:  # new arms pending, then told
            for each in (loop, twin):
                each.ask_arms(added[:2])
    if learned:
        assert loop.refits.last is not None and loop._rebuilt_at > 0
    assert set(loop.observed.tolist()) & set(range(120, loop.arms.shape[0]))
    resumed = _appending_loop(loop_class, learned, arms)
    resumed.load_state_dict(loop.state_dict())
    _assert_same_paths(resumed, loop)
    events = list(_script(8, seed=7))
    asked = [
        _drive(each, each.arms, events, seeded(7)) for each in (loop, twin, resumed)
    ]
    assert all(map(torch.equal, asked[0], asked[1]))
    assert all(map(torch.equal, asked[0], asked[2]))


@pytest.mark.parametrize("learned", [True, False], ids=["learned", "fixed"])
def test_appends_keep_the_inducing_points_chosen_by_improvement(learned):
    # "improvement" weights the selection by the model before each update, so
    # the inducing points depend on the tell calls: an append keeps them (the
    # rebuild re-chose them from all observations at once); the oracle is a
    # loop resumed on all arms, which replays the same calls
    arms = _arms(120)
    options = {"inducing_quality": "improvement", "num_inducing": 8}
    loop = _appending_loop(SGPTS, learned, arms, **options)
    for number, count in enumerate((16, 1, 32)):
        _drive(loop, loop.arms, list(_script(8, seed=number)), seeded(number))
        before = copy.deepcopy(loop)
        loop.add_arms(_inside(arms, count, seed=number))
        # the same paths at the old arms: the posterior is kept
        assert torch.equal(loop.sampler.update_arms, before.sampler.update_arms)
        W = torch.randn(2, NUM_FEATURES, generator=seeded(number), dtype=DTYPE)
        E = torch.randn(2, loop.sampler.noise_size, generator=seeded(8), dtype=DTYPE)
        torch.testing.assert_close(
            loop.sampler.path_values(W, E)[: before.arms.shape[0]],
            before.sampler.path_values(W, E),
            rtol=0.0,
            atol=1e-10,
        )
        resumed = _appending_loop(SGPTS, learned, arms, **options)
        resumed.load_state_dict(loop.state_dict())
        _assert_same_paths(loop, resumed)
    events = list(_script(8, seed=7))
    asked = [_drive(each, each.arms, events, seeded(7)) for each in (loop, resumed)]
    assert all(map(torch.equal, *asked))


def test_bad_arms_to_add_change_nothing():
    arms = _arms(120)
    loop = _appending_loop(SGPTS, True, arms)
    _drive(loop, arms, list(_script(8)), seeded(1))
    before, paths = loop.state_dict(), copy.deepcopy(loop)
    good = _inside(arms, 2, seed=0)
    cases = [
        (ValueError, "bounding box", good + 2),
        (ValueError, "points", good[:, :1]),
        (ValueError, "points", good[0]),
        (ValueError, "points", good[:0]),
        (ValueError, "points", good * torch.nan),
        (ValueError, "points", good * 1e300),
        (TypeError, "points", good.float()),
        (TypeError, "points", good.tolist()),
    ]
    for error, match, points in cases:
        with pytest.raises(error, match=match):
            loop.add_arms(points)
        _assert_same_state(loop.state_dict(), before)
        assert loop.sampler.cache.num_arms == 120
        _assert_same_paths(loop, paths)


class _Fault(Exception):
    pass


def _fault_now(function):
    r"""A fault instead of ``function``."""

    def faulty(*args, **kwargs):
        raise _Fault

    return faulty


def _after(function):
    r"""``function``, then a fault (the append has written everything)."""

    def faulty(*args, **kwargs):
        function(*args, **kwargs)
        raise _Fault

    return faulty


@pytest.mark.parametrize("where", ["features", "columns", "bank", "after the bank"])
@pytest.mark.parametrize("room", [True, False], ids=["in place", "new buffers"])
def test_a_failed_append_changes_nothing_and_can_be_retried(where, room, monkeypatch):
    # a fault inside the append, after the new buffers were allocated or the
    # new arms written past the arms in use: the loop is as it was (state,
    # cache, bank and paths), and a retry equals a fault-free twin
    arms = _arms(120)
    loop, twin = (_appending_loop(SGPTS, True, arms) for _ in range(2))
    events = list(_script(8))
    for each in (loop, twin):
        _drive(each, arms, events, seeded(1))
        if room:  # room for a quarter more arms
            each.add_arms(_inside(arms, 1, seed=4))
        each.ask(2)  # the bank's weights in use
    before, unchanged = loop.state_dict(), copy.deepcopy(loop)
    num_arms = loop.arms.shape[0]
    target = {
        "features": (ArmFeatureCache, "_write_features", _fault_now),
        "columns": (ArmFeatureCache, "_write_columns", _fault_now),
        "bank": (PriorPathBank, "extend", _fault_now),
        "after the bank": (PriorPathBank, "extend", _after),
    }[where]
    owner, name, fault = target
    monkeypatch.setattr(owner, name, fault(getattr(owner, name)))
    points = _inside(arms, 5, seed=5)
    with pytest.raises(_Fault):
        loop.add_arms(points)
    monkeypatch.undo()
    _assert_same_state(loop.state_dict(), before)
    assert loop.arms.shape[0] == loop.sampler.cache.num_arms == num_arms
    assert loop.sampler.prior_bank._num_arms == num_arms
    _assert_same_paths(loop, unchanged)
    for each in (loop, twin):
        each.add_arms(points)
    _assert_same_paths(loop, twin)
    events = list(_script(6, seed=2))
    asked = [_drive(each, each.arms, events, seeded(2)) for each in (loop, twin)]
    assert all(map(torch.equal, *asked))
