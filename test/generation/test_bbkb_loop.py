r"""The resumable BBKB ask/tell loop."""

from __future__ import annotations

import pytest
import torch
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BBKB, BBKBOptions, BKBUpperConfidenceBound, TheoryRadius
from botorch_sketch.generation import ask_tell
from botorch_sketch.generation.hyperparameters import (
    FIT_INDUCING,
    UCB_FIT_INDUCING,
    learnable_covar_module,
    unit_cube,
)
from botorch_sketch.generation.reward_warping import fit_power, warped_rewards
from botorch_sketch.models.candidate_state import CandidateState

from ..gp_helpers import assert_loop_matches_scratch

DTYPE = torch.float64


def objective(X):
    return -((X - 0.4) ** 2).sum(-1)


def make_loop(arms, seed=0, radius=0.5):
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.5
    # without a horizon, batches of copies of a well-pulled arm grow geometrically
    return BBKB(
        arms,
        covar_module=kernel,
        noise=1.0,
        radius=radius,
        seed=seed,
        max_batch_size=64,
    )


def run(loop, arms, steps, noise_gen):
    history = []
    for _ in range(steps):
        indices = loop.ask()
        noise = 0.01 * torch.randn(indices.shape[0], generator=noise_gen, dtype=DTYPE)
        loop.tell(indices, objective(arms[indices]) + noise)
        history.append(indices)
    return history


def test_loop_observes_everything_and_learns():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(500, 3, generator=gen, dtype=DTYPE)
    loop = make_loop(arms)
    history = run(loop, arms, 100, torch.Generator().manual_seed(1))
    pulled = torch.cat(history)
    assert loop.num_observations == pulled.shape[0]
    assert loop.model.train_inputs[0].shape[0] == pulled.shape[0]
    # with lambda = 1 learning is slow (exact GP-UCB is no better at t = 100), but
    # after 100 batches the pulls are far better than a uniform arm's
    assert objective(arms[pulled[-20:]]).mean() > objective(arms).mean() + 0.2


def test_save_and_load_resume_exactly():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    radius = TheoryRadius(
        noise_std=0.01, rkhs_bound=0.5, delta=0.1, noise=1.0, ratio_threshold=2.0
    )
    loop = make_loop(arms, radius=radius)
    run(loop, arms, 10, torch.Generator().manual_seed(1))
    state = loop.state_dict()
    continued = run(loop, arms, 8, torch.Generator().manual_seed(2))
    fresh_radius = TheoryRadius(
        noise_std=0.01, rkhs_bound=0.5, delta=0.1, noise=1.0, ratio_threshold=2.0
    )
    resumed = make_loop(arms, seed=123, radius=fresh_radius)
    resumed.load_state_dict(state)
    replayed = run(resumed, arms, 8, torch.Generator().manual_seed(2))
    for a, b in zip(continued, replayed, strict=True):
        assert torch.equal(a, b)
    assert resumed.radius.value == pytest.approx(loop.radius.value)
    assert fresh_radius.log_det_sum == radius.log_det_sum == 0.0  # the loops' copies


def theory_options():
    radius = TheoryRadius(
        noise_std=0.01, rkhs_bound=0.5, delta=0.1, noise=1.0, ratio_threshold=2.0
    )
    return BBKBOptions(noise=1.0, radius=radius, max_batch_size=64)


def test_two_loops_from_one_options_object_are_two_loops():
    # issue 37: the loops shared, and both updated, the options' TheoryRadius
    arms = torch.rand(200, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    shared = theory_options()
    loops = [BBKB(arms, shared, covar_module=kernel, seed=s) for s in (0, 1)]
    twins = [BBKB(arms, theory_options(), covar_module=kernel, seed=s) for s in (0, 1)]
    for loop, twin in zip(loops, twins, strict=True):  # one loop after the other
        ran = run(loop, arms, 6, torch.Generator().manual_seed(2))
        expected = run(twin, arms, 6, torch.Generator().manual_seed(2))
        for a, b in zip(ran, expected, strict=True):
            assert torch.equal(a, b)
        assert loop.radius.value == twin.radius.value > shared.radius.value
    assert shared.radius.log_det_sum == 0.0


def test_protocol_errors_change_nothing():
    arms = torch.rand(100, 2, dtype=DTYPE)
    loop = make_loop(arms)
    with pytest.raises(ValueError, match="pending"):
        loop.tell(torch.tensor([0]), torch.zeros(1, dtype=DTYPE))
    first = loop.ask()
    before = loop.state_dict()
    for rewards, error in (
        (torch.tensor([float("nan")], dtype=DTYPE), ValueError),
        (torch.zeros(2), ValueError),
        (torch.tensor([1e300], dtype=DTYPE), ValueError),  # #26 item 8
        (torch.tensor([-1e308], dtype=DTYPE), ValueError),
        (torch.zeros(1, 1, 1, dtype=DTYPE), ValueError),
        (torch.tensor([True]), TypeError),
        (torch.tensor([1]), TypeError),
        ("1.5", TypeError),
    ):
        with pytest.raises(error, match="rewards"):
            loop.tell(first, rewards)
    for indices, error, match in (
        ((first + 1) % 100, ValueError, "pending"),
        (first.repeat(2), ValueError, "pending"),
        (first.tolist(), TypeError, "indices"),
        (first.double(), TypeError, "indices"),
        (first[:0], ValueError, "indices"),
        (torch.tensor([100]), ValueError, "indices"),
    ):
        with pytest.raises(error, match=match):
            loop.fail(indices)
        with pytest.raises(error, match=match):
            loop.tell(indices, torch.zeros(1, dtype=DTYPE))
    assert_same_state(loop.state_dict(), before)
    for max_arms, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="max_arms"):
            loop.ask(max_arms)
    with pytest.raises(TypeError, match="max_arms"):
        loop.ask(True)
    assert_same_state(loop.state_dict(), before)
    loop.tell(first, torch.zeros(1, dtype=DTYPE))
    assert loop.num_observations == 1 and loop.pending.numel() == 0


def assert_same_state(state, reference):
    r"""Equal state dicts: tensors bit for bit (NaN equal to NaN), nested dicts."""
    assert state.keys() == reference.keys()
    for key, value in reference.items():
        if isinstance(value, dict):
            assert_same_state(state[key], value)
        elif isinstance(value, torch.Tensor):
            torch.testing.assert_close(
                state[key], value, rtol=0, atol=0, equal_nan=True
            )
        else:
            assert state[key] == value, key


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise": 0.0}, "noise"),
        ({"noise": 1e-300}, "noise"),
        ({"ratio_threshold": 0.9}, "ratio_threshold"),
        ({"rule": "any"}, "rule"),
        ({"qbar": 0.1}, "qbar"),
        ({"pending_radius": -0.1}, "pending_radius"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BBKB(torch.rand(10, 2, dtype=DTYPE), **kwargs)
    with pytest.raises(ValueError, match="arms"):
        BBKB(torch.zeros(0, 2, dtype=DTYPE))


def test_bkb_loop_plays_the_bkb_ucb_argmax_of_its_model():
    # C~ = 1: every ask is the argmax of BKB-UCB on the NystromGP of the loop's data
    # and dictionary, scored from scratch by BoTorch's discrete optimizer
    gen = torch.Generator().manual_seed(3)
    arms = torch.rand(200, 2, generator=gen, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    loop = BBKB(arms, covar_module=kernel, noise=0.5, radius=0.7, ratio_threshold=1.0)
    noise_gen = torch.Generator().manual_seed(4)
    for step in range(25):
        indices = loop.ask()
        assert indices.shape == (1,)
        if step > 0:
            acqf = BKBUpperConfidenceBound(loop.model, radius=0.7)
            x, _ = optimize_acqf_discrete(acqf, q=1, choices=arms)
            assert torch.equal(arms[indices], x)
        y = objective(arms[indices]) + 0.01 * torch.randn(1, generator=noise_gen)
        loop.tell(indices, y.to(DTYPE))
    assert 1 <= loop.state.size <= 25


def test_an_ask_that_cannot_wait_takes_the_in_batch_ucb_argmax_past_the_rule():
    # C~ = 1: with one arm pending the rule is full; wait=False gives the argmax of
    # BKB-UCB with the pending arm hallucinated (frozen mean, conditioned
    # variance), scored from scratch by BoTorch's discrete optimizer
    gen = torch.Generator().manual_seed(5)
    arms = torch.rand(150, 2, generator=gen, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    loop = BBKB(arms, covar_module=kernel, noise=0.5, radius=0.7, ratio_threshold=1.0)
    for _ in range(6):
        indices = loop.ask()
        loop.tell(indices, objective(arms[indices]))
    first = loop.ask()
    assert loop.ask().numel() == 0 and torch.equal(loop.pending, first)
    pending = arms[first]
    for _ in range(2):
        past = loop.ask(wait=False)
        acqf = BKBUpperConfidenceBound(loop.model, radius=0.7, X_pending=pending)
        x, _ = optimize_acqf_discrete(acqf, q=1, choices=arms)
        assert past.shape == (1,) and torch.equal(arms[past], x)
        pending = torch.cat([pending, arms[past]])
    assert loop.pending.shape == (3,)
    loop.tell(loop.pending, objective(arms[loop.pending]))
    assert loop.num_observations == 9 and loop.ask(wait=False).shape == (1,)
    with pytest.raises(TypeError, match="wait"):
        loop.ask(wait=1)


def test_failed_update_loses_nothing_and_can_be_retried(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(150, 2, generator=gen, dtype=DTYPE)
    loop = make_loop(arms)
    run(loop, arms, 6, torch.Generator().manual_seed(1))
    before = loop.state_dict()
    indices = loop.ask()
    rewards = objective(arms[indices])

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(CandidateState, "_execute", broken)
    with pytest.raises(RuntimeError, match="injected"):
        loop.tell(indices, rewards)
    # nothing recorded, the batch still pending, the posterior as before the call
    assert torch.equal(loop.observed, before["observed"])
    assert torch.equal(loop.pending, indices)
    reference = make_loop(arms)
    reference.load_state_dict(before)
    torch.testing.assert_close(loop.state.mean, reference.state.mean)
    torch.testing.assert_close(loop.state.variance, reference.state.variance)
    monkeypatch.undo()
    loop.tell(indices, rewards)
    assert loop.num_observations == before["observed"].numel() + indices.numel()
    resumed = make_loop(arms, seed=5)
    resumed.load_state_dict(loop.state_dict())
    assert torch.equal(resumed.observed, loop.observed)
    torch.testing.assert_close(resumed.state.mean, loop.state.mean)
    torch.testing.assert_close(resumed.state.variance, loop.state.variance)


def test_rejected_state_dict_leaves_the_loop_unchanged():
    arms = torch.rand(80, 2, dtype=DTYPE)
    loop = make_loop(arms)
    run(loop, arms, 4, torch.Generator().manual_seed(1))
    good = loop.state_dict()
    for key, value, error in (
        ("observed", torch.tensor([999]), ValueError),
        ("dictionary", torch.tensor([0.5]), TypeError),
        ("rewards", torch.tensor([float("nan")]), ValueError),
        ("draws", torch.zeros(3), ValueError),
        ("draws", torch.full((80,), 1.5, dtype=DTYPE), ValueError),  # #26 item 9
        ("draws", torch.full((80,), -0.1, dtype=DTYPE), ValueError),
    ):
        with pytest.raises(error, match=key):
            loop.load_state_dict(good | {key: value})
        assert torch.equal(loop.observed, good["observed"])
        assert torch.equal(loop.state.dictionary, good["dictionary"])
    with pytest.raises(ValueError, match="keys"):
        loop.load_state_dict({"observed": good["observed"]})


def test_coupled_resampling_churns_less_than_independent():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(400, 3, generator=gen, dtype=DTYPE)
    churn = {}
    for resampling in ("coupled", "independent"):
        kernel = ScaleKernel(RBFKernel()).to(DTYPE)
        kernel.base_kernel.lengthscale = 0.3
        loop = BBKB(
            arms,
            covar_module=kernel,
            noise=1.0,
            radius=0.5,
            qbar=2.0,
            resampling=resampling,
            max_batch_size=16,
        )
        run(loop, arms, 60, torch.Generator().manual_seed(1))
        churn[resampling] = loop.diagnostics()["dictionary_churn"]
    assert churn["coupled"] < 0.75 * churn["independent"]


def test_repeated_arms_run_to_the_end_and_reach_the_model():
    # copies of arms (real data sets repeat rows) enter the dictionary beside their
    # twins: skipped by the update, never a non-PD Schur complement; five copies of
    # one arm used to fail at the second tell
    gen = torch.Generator().manual_seed(2)
    arms = torch.rand(40, 3, generator=gen, dtype=DTYPE)
    arms[1:5] = arms[0]
    arms[20:30] = arms[10:20]
    loop = make_loop(arms)
    history = run(loop, arms, 60, torch.Generator().manual_seed(3))
    assert loop.num_observations == torch.cat(history).shape[0]
    assert loop.model.train_inputs[0].shape[0] == loop.num_observations
    twin = {**{i: 0 for i in range(1, 5)}, **{i: i - 10 for i in range(20, 30)}}
    originals = {twin.get(i, i) for i in loop.state.dictionary.tolist()}
    assert len(originals) == loop.state.size  # no two copies in the dictionary
    for copies in (make_loop(arms[:1].repeat(5, 1)), BBKB(arms[:1].repeat(5, 1))):
        told = 0
        for _ in range(6):
            indices = copies.ask()
            copies.tell(indices, torch.zeros(indices.shape[0], dtype=DTYPE))
            told += indices.numel()
        assert copies.state.size == 1 and copies.num_observations == told > 6


def run_learned(loop, arms, steps, scale=1.0, offset=0.0, asked_per_step=None):
    r"""Synchronous steps of a loop with learned hyperparameters on ``objective``
    in other units (``scale * f + offset``); the arms asked, step by step."""
    history = []
    for _ in range(steps):
        indices = loop.ask(asked_per_step)
        loop.tell(indices, scale * objective(arms[indices]) + offset)
        history.append(indices.tolist())
    return history


def test_learned_loop_starts_space_filling_and_refits_geometrically():
    gen = torch.Generator().manual_seed(5)
    arms = torch.rand(400, 3, generator=gen, dtype=DTYPE) * 10 - 5  # not the cube
    loop = BBKB(arms, seed=0)
    first = loop.ask()
    assert first.numel() == 6 and torch.unique(first).numel() == 6  # max(5, 2 d)
    loop.tell(first, objective(arms[first]))
    assert loop.refits.last == 6
    run_learned(loop, arms, 30)
    n = loop.num_observations
    assert loop.refits.last > 6 and n < 1.5 * loop.refits.last + 2
    lengthscale = loop.covar_module.base_kernel.lengthscale
    assert not torch.allclose(
        lengthscale, learnable_covar_module(3).base_kernel.lengthscale.to(lengthscale)
    )
    # the state is the posterior of the standardized rewards with the learned
    # kernel on the unit cube, as rebuilt from scratch
    assert torch.equal(loop.kernel_inputs, unit_cube(arms)) and loop.standardize
    # K_SS's condition number is about 1e12 under the fitted lengthscales (about 1),
    # so two orders of the same products differ by up to ~1e-6 (thread counts too)
    assert_loop_matches_scratch(loop, rtol=1e-5, atol=1e-5)
    assert loop.diagnostics()["radius"] == pytest.approx(2 * loop.noise**0.5)
    posterior = loop.model.posterior(arms[:5])  # in the arms' coordinates
    torch.testing.assert_close(posterior.mean.squeeze(-1), loop.state.mean[:5])


def test_learned_loop_refits_on_at_most_fit_inducing_points():
    # the first refit (on the space-filling design) fits on the whole dictionary
    # unless `fit_inducing` is smaller: a cap at the design's size changes nothing,
    # a smaller one changes the fitted hyperparameters
    gen = torch.Generator().manual_seed(5)
    arms = torch.rand(400, 3, generator=gen, dtype=DTYPE)
    loops = {
        cap: BBKB(arms, BBKBOptions(fit_inducing=cap), seed=0) for cap in (100, 6, 2)
    }
    for loop in loops.values():
        first = loop.ask()
        loop.tell(first, objective(arms[first]))
    assert first.numel() == 6 and loops[100].state.size <= 6
    fitted = {
        cap: (loop.covar_module.base_kernel.lengthscale, loop.noise)
        for cap, loop in loops.items()
    }
    assert torch.equal(fitted[6][0], fitted[100][0]) and fitted[6][1] == fitted[100][1]
    assert not torch.allclose(fitted[2][0], fitted[100][0])


def test_bbkb_refits_on_its_default_cap_without_the_option(monkeypatch):
    # fit_inducing=None: refits on BBKB.default_fit_inducing points (here 2), as
    # the loop given that cap does, and unlike the loop given 100
    assert BBKB.default_fit_inducing == UCB_FIT_INDUCING < FIT_INDUCING
    monkeypatch.setattr(BBKB, "default_fit_inducing", 2)
    gen = torch.Generator().manual_seed(5)
    arms = torch.rand(400, 3, generator=gen, dtype=DTYPE)
    lengthscales = {}
    for cap in (None, 2, 100):
        loop = BBKB(arms, BBKBOptions(fit_inducing=cap), seed=0)
        first = loop.ask()
        loop.tell(first, objective(arms[first]))
        lengthscales[cap] = loop.covar_module.base_kernel.lengthscale
    assert torch.equal(lengthscales[None], lengthscales[2])
    assert not torch.allclose(lengthscales[None], lengthscales[100])


def test_learned_loop_asks_with_a_smaller_radius_while_arms_are_pending():
    # a batch opened with nothing pending plays mu + 2 sigma, one opened with arms
    # pending mu + 0.5 sigma with them hallucinated: each pick against the argmax
    # of BoTorch's BKB-UCB scored from scratch on the loop's model
    gen = torch.Generator().manual_seed(8)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    loop = BBKB(arms, seed=0, ratio_threshold=1.0, min_repeat_reduction=0.0)
    run_learned(loop, arms, 12)

    def assert_ucb_argmax(indices, scale, pending=None):
        radius = scale * loop.noise**0.5
        assert loop.ucb_radius == pytest.approx(radius)
        acqf = BKBUpperConfidenceBound(loop.model, radius=radius, X_pending=pending)
        x, _ = optimize_acqf_discrete(acqf, q=1, choices=arms)
        assert indices.shape == (1,) and torch.equal(arms[indices], x)

    assert not len(loop.pending) and loop.ucb_radius == pytest.approx(
        2 * loop.noise**0.5
    )
    first = loop.ask()
    assert_ucb_argmax(first, 2.0)
    second = loop.ask(wait=False)  # the same batch, past its rule
    assert_ucb_argmax(second, 2.0, arms[first])
    loop.tell(first, objective(arms[first]))
    assert loop.ucb_radius == pytest.approx(2 * loop.noise**0.5)  # still open
    third = loop.ask(wait=False)  # ends the batch; the next holds `second`
    assert loop.num_observations == loop.incorporated
    assert_ucb_argmax(third, 0.5, arms[second])
    assert loop.diagnostics()["radius"] == pytest.approx(2 * loop.noise**0.5)
    with_option = BBKB(arms, seed=0, ratio_threshold=1.0, pending_radius=0.3)
    with_option.ask()  # the design, all pending
    assert with_option.ucb_radius == 0.3


def test_learned_loop_does_not_depend_on_the_rewards_units():
    gen = torch.Generator().manual_seed(6)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    histories = [
        run_learned(BBKB(arms, seed=1), arms, 25, scale, offset, asked_per_step=2)
        for scale, offset in ((1.0, 0.0), (1000.0, 300.0), (0.001, -7.0))
    ]
    assert histories[0] == histories[1] == histories[2]


def heavy_tailed(X):
    r"""A loss spanning orders of magnitude (an ellipsoid), maximized."""
    return -(10.0 ** (3 * torch.arange(X.shape[-1]).to(X)) * (X - 0.4) ** 2).sum(-1)


def test_heavy_tailed_rewards_are_warped_and_the_state_is_their_posterior():
    gen = torch.Generator().manual_seed(9)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    loops = [BBKB(arms, seed=3) for _ in range(3)]
    histories = []
    units = ((1.0, 0.0), (1e3, 300.0), (1e-3, -5.0))
    for loop, (scale, offset) in zip(loops, units, strict=True):
        history = []
        for _ in range(20):
            indices = loop.ask(2)
            loop.tell(indices, scale * heavy_tailed(arms[indices]) + offset)
            history.append(indices.tolist())
        histories.append(history)
    loop = loops[0]
    # the power of the last refit, on the rewards told by then, spreads the tail
    assert loop.power == fit_power(loop.rewards[: loop.refits.last]) > 1.0
    assert histories[0] == histories[1] == histories[2]  # in any units
    assert all(each.power == loop.power for each in loops)
    # the state is the posterior of the warped rewards, rebuilt from scratch
    targets = loop.targets_of(loop.rewards)
    torch.testing.assert_close(targets, warped_rewards(loop.rewards, loop.power))
    assert_loop_matches_scratch(loop, rtol=1e-5, atol=1e-5)
    twin = BBKB(arms, seed=3)
    twin.load_state_dict(loop.state_dict())
    assert twin.power == loop.power
    for each in (loop, twin):
        indices = each.ask(2)
        each.tell(indices, heavy_tailed(arms[indices]))
    assert torch.equal(loop.observed, twin.observed)


def test_learned_loop_resumes_exactly():
    gen = torch.Generator().manual_seed(7)
    arms = torch.rand(200, 2, generator=gen, dtype=DTYPE)
    loop = BBKB(arms, seed=2)
    run_learned(loop, arms, 12, asked_per_step=3)
    twin = BBKB(arms, seed=2)
    twin.load_state_dict(loop.state_dict())
    assert twin.noise == loop.noise and twin.refits.last == loop.refits.last
    assert run_learned(twin, arms, 10, asked_per_step=3) == run_learned(
        loop, arms, 10, asked_per_step=3
    )
    fixed = make_loop(arms)
    with pytest.raises(ValueError, match="hyperparameters"):
        BBKB(arms, seed=2).load_state_dict(
            {**loop.state_dict(), "hyperparameters": None}
        )
    run(fixed, arms, 3, torch.Generator().manual_seed(0))
    differing = "fingerprint differs in .'covar_module', 'noise'"
    with pytest.raises(ValueError, match=differing):
        BBKB(arms, seed=2).load_state_dict(fixed.state_dict())


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_refit_changes_nothing_and_can_be_retried(error, monkeypatch):
    gen = torch.Generator().manual_seed(8)
    arms = torch.rand(150, 2, generator=gen, dtype=DTYPE)
    loop, twin = BBKB(arms, seed=3), BBKB(arms, seed=3)
    indices = loop.ask()
    assert torch.equal(indices, twin.ask())
    twin.tell(indices, objective(arms[indices]))
    before = loop.state_dict()

    def interrupted(*args, **kwargs):
        raise error("stop")

    monkeypatch.setattr(ask_tell, "fit_dtc_hyperparameters", interrupted)
    with pytest.raises(error):
        loop.tell(indices, objective(arms[indices]))
    assert_same_state(loop.state_dict(), before)
    monkeypatch.undo()
    loop.tell(indices, objective(arms[indices]))
    assert run_learned(loop, arms, 5) == run_learned(twin, arms, 5)


def test_a_state_saved_before_the_first_batch_end_loads():
    # arms asked, one told, the others pending: nothing in the posterior yet and
    # an empty dictionary, which the loaded loop must accept (#26)
    gen = torch.Generator().manual_seed(9)
    arms = torch.rand(50, 2, generator=gen, dtype=DTYPE)
    for loop, twin in ((make_loop(arms), make_loop(arms)), (BBKB(arms), BBKB(arms))):
        loop.ask_arms(torch.tensor([3, 7, 11]))
        loop.tell(torch.tensor([7]), torch.tensor([0.5], dtype=DTYPE))
        twin.load_state_dict(loop.state_dict())
        assert twin.pending.tolist() == [3, 11] and twin.num_observations == 1
        for each in (loop, twin):
            each.tell(torch.tensor([3, 11]), torch.tensor([0.1, 0.2], dtype=DTYPE))
        assert torch.equal(twin.ask(), loop.ask())


def test_a_checkpoint_of_another_problem_is_rejected():
    # #26 item 5: other arm values, another d, noise, radius or fixed kernel
    gen = torch.Generator().manual_seed(10)
    arms = torch.rand(60, 2, generator=gen, dtype=DTYPE)
    loop = make_loop(arms)
    run(loop, arms, 3, torch.Generator().manual_seed(0))
    saved = loop.state_dict()
    other_kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    others = {
        "arms": make_loop(arms + 1e-9),
        "arms'": make_loop(torch.rand(60, 3, generator=gen, dtype=DTYPE)),
        "noise": BBKB(arms, covar_module=make_loop(arms).covar_module, noise=0.5),
        "radius": make_loop(arms, radius=0.7),
        "covar_module": BBKB(arms, covar_module=other_kernel, noise=1.0, radius=0.5),
    }
    for differing, other in others.items():
        before = other.state_dict()
        with pytest.raises(ValueError, match=f"differs in .*'{differing[:5]}"):
            other.load_state_dict(saved)
        assert_same_state(other.state_dict(), before)
    twin = make_loop(arms, seed=9)  # the seed may differ: the state carries it
    twin.load_state_dict(saved)
    assert torch.equal(twin.ask(), loop.ask())


def test_added_arms_join_the_posterior_and_resume():
    gen = torch.Generator().manual_seed(11)
    arms = torch.rand(120, 2, generator=gen, dtype=DTYPE) * 4 - 2
    loop, twin = BBKB(arms, seed=4), BBKB(arms, seed=4)
    run_learned(loop, arms, 8, asked_per_step=2)
    pending = loop.ask(2)
    new = torch.rand(30, 2, generator=gen, dtype=DTYPE) * 3 - 1.5  # in the box
    before = loop.state_dict()
    for bad, error in (
        (new + 10, ValueError),  # outside the box of the first arms
        (new[:, :1], ValueError),
        (new.float(), TypeError),
        (new[:0], ValueError),
    ):
        with pytest.raises(error, match="points"):
            loop.add_arms(bad)
        assert_same_state(loop.state_dict(), before)
    indices = loop.add_arms(new)
    assert indices.tolist() == list(range(120, 150))
    assert torch.equal(loop.pending, pending) and loop.arms.shape == (150, 2)
    # the state is the posterior on all arms, and the model's at the new ones
    assert_loop_matches_scratch(loop)
    torch.testing.assert_close(
        loop.model.posterior(new).mean.squeeze(-1), loop.state.mean[120:]
    )
    loop.tell(pending, objective(loop.arms[pending]))
    twin.load_state_dict(loop.state_dict())
    assert torch.equal(twin.arms, loop.arms)
    history = run_learned(loop, loop.arms, 10, asked_per_step=3)
    assert history == run_learned(twin, twin.arms, 10, asked_per_step=3)


def add_by_rebuilding(loop, points):
    r"""``loop.add_arms(points)`` as it was before the candidate state took
    appended arms: the state rebuilt from scratch on all arms with the
    incorporated observations and the dictionary (``O((A + n) m^2)``), the open
    batch's greedy dropped."""
    points, new_inputs = loop._checked_new_arms(points)
    inputs = torch.cat([loop.kernel_inputs, new_inputs])
    done = slice(0, loop.incorporated)
    state = loop._new_state(
        loop.observed[done],
        loop.rewards[done],
        loop.state.dictionary,
        kernel_inputs=inputs,
    )
    loop.arms = torch.cat([loop.arms, points])
    loop.kernel_inputs, loop.state = inputs, state
    loop.draws = torch.cat([loop.draws, torch.full_like(points[:, 0], torch.nan)])
    loop._greedy = loop._model = None


def assert_same_posterior(loop, twin):
    r"""The same hyperparameters and posterior. Tolerance: the learned run ends
    with ``lambda`` at its floor ``1e-6``, where the batch ends made in place
    since the last refit (or rebuild) drift up to ``~1e-8`` from a state built
    from scratch, in both loops; the appends add nothing to that (measured)."""
    assert loop.noise == pytest.approx(twin.noise, rel=1e-6)
    for name in ("mean", "variance"):
        torch.testing.assert_close(
            getattr(loop.state, name), getattr(twin.state, name), rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize("learned", [False, True], ids=["fixed", "learned"])
def test_added_arms_continue_as_a_state_rebuilt_on_all_arms(learned):
    # add_arms appends the arms to the candidate state: the posterior and the
    # asks are those of the former rebuild of the state on all arms, whether a
    # batch is open (arms pending: its greedy must see the new arms) or not, as
    # the loop goes on (with a learned kernel: through refits); the new arms lie
    # near the optimum, so the asks take them
    gen = torch.Generator().manual_seed(21)
    arms = torch.rand(150, 2, generator=gen, dtype=DTYPE)
    loop, twin = (
        BBKB(arms, seed=5) if learned else make_loop(arms, seed=5) for _ in range(2)
    )
    open_batches = []
    for step in range(24):
        if step % 3 == 2:  # after steps that left arms pending, and others
            open_batches.append(loop.pending.numel() > 0)
            new = torch.rand(16, 2, generator=gen, dtype=DTYPE) * 0.3 + 0.25
            first = loop.arms.shape[0]
            assert loop.add_arms(new).tolist() == list(range(first, first + 16))
            add_by_rebuilding(twin, new)
            assert torch.equal(loop.arms, twin.arms)
            assert torch.equal(loop.kernel_inputs, twin.kernel_inputs)
            assert_same_posterior(loop, twin)
        asked = loop.ask(3)
        assert torch.equal(asked, twin.ask(3))
        pending = loop.pending  # some stay pending (the batch stays open)
        told = pending[:-1] if step % 2 and pending.numel() > 1 else pending
        for each in (loop, twin):
            each.tell(told, objective(each.arms[told]))
        assert_same_posterior(loop, twin)
    pending = loop.pending
    for each in (loop, twin):  # the last batch ends: every outcome in the state
        if pending.numel():
            each.tell(pending, objective(each.arms[pending]))
    assert any(open_batches) and not all(open_batches)
    assert_same_posterior(loop, twin)
    assert_loop_matches_scratch(loop)
    added = loop.observed[loop.observed >= 150].numel()
    assert loop.num_observations > 25 and added > 0
    assert loop.refits is None or loop.refits.last > 20


def test_a_learned_loop_resumes_its_design_into_a_loop_of_another_seed():
    # the space-filling design is drawn from the seed: the state carries it, so a
    # loop built with another seed resumes the saved one's choices (#26)
    gen = torch.Generator().manual_seed(12)
    arms = torch.rand(40, 2, generator=gen, dtype=DTYPE)
    loop, twin = BBKB(arms, seed=0), BBKB(arms, seed=7)
    first = loop.ask(2)
    loop.tell(first, objective(arms[first]))
    twin.load_state_dict(loop.state_dict())
    assert run_learned(twin, arms, 4, asked_per_step=2) == run_learned(
        loop, arms, 4, asked_per_step=2
    )
    with pytest.raises(ValueError, match="design"):
        twin.load_state_dict(loop.state_dict() | {"design": first})
