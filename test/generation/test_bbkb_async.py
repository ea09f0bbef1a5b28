r"""Asynchronous BBKB: pending arms, partial and failed evaluations, resume."""

from __future__ import annotations

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import BBKB, NystromGP, asynchronous_options, gen_bbkb_batch
from botorch_sketch.generation.bbkb import BatchGreedy, copies_of
from botorch_sketch.generation.variance_tracking import CachedGeometry
from botorch_sketch.models.candidate_state import CandidateState

DTYPE = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def objective(X):
    return -((X - 0.4) ** 2).sum(-1)


def make_loop(arms, **options):
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    defaults = {"noise": 1.0, "radius": 0.5, "ratio_threshold": 5.0, "seed": 0}
    options = defaults | {"max_batch_size": 64} | options
    return BBKB(arms, covar_module=kernel, **options)


def warm(loop, arms, batches, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(batches):
        indices = loop.ask()
        noise = 0.01 * torch.randn(indices.shape[0], generator=gen, dtype=DTYPE)
        loop.tell(indices, objective(arms[indices]) + noise.to(arms))


def rebuilt(loop, arms):
    r"""The loop's posterior recomputed from scratch (the oracle)."""
    return CandidateState.from_observations(
        arms,
        loop.covar_module,
        loop.noise,
        loop.observed,
        loop.rewards,
        loop.state.dictionary,
    )


def rebuilt_model(loop, arms):
    r"""The posterior of :func:`rebuilt` as a ``NystromGP`` (the stateless
    generator's input)."""
    return NystromGP(
        arms[loop.observed],
        loop.rewards.unsqueeze(-1),
        covar_module=loop.covar_module,
        noise=loop.noise,
        dictionary=arms[loop.state.dictionary],
    )


@pytest.fixture
def arms():
    return torch.rand(300, 3, generator=torch.Generator().manual_seed(0), dtype=DTYPE)


def test_synchronous_asks_are_the_batches_of_the_stateless_generator(arms):
    # the oracle rescoring every arm from a NystromGP built from scratch on the
    # loop's observations and dictionary
    loop = make_loop(arms)
    warm(loop, arms, 3)
    for _ in range(4):
        expected = gen_bbkb_batch(
            loop.model, arms, radius=0.5, ratio_threshold=5.0, max_batch_size=64
        )
        indices = loop.ask()
        assert torch.equal(indices, expected.indices)
        loop.tell(indices, objective(arms[indices]))


def test_asks_in_pieces_continue_the_same_batch(arms):
    # pending arms are hallucinated exactly as the earlier steps of the batch, so
    # asking 1, then 2, then the rest gives the one-ask batch
    whole, pieces = make_loop(arms), make_loop(arms)
    warm(whole, arms, 4)
    warm(pieces, arms, 4)
    batch = whole.ask()
    assert batch.numel() >= 4
    parts = [pieces.ask(1), pieces.ask(2), pieces.ask()]
    assert torch.equal(torch.cat(parts), batch)
    assert pieces.ask().numel() == 0  # the rule is full: wait for outcomes
    assert torch.equal(pieces.pending, batch)


def test_one_worker_is_bkb(arms):
    # ask one arm, tell it, repeat: BBKB with C~ = 2 plays what BKB (C~ = 1) plays
    asynchronous = make_loop(arms, ratio_threshold=2.0)
    bkb = make_loop(arms, ratio_threshold=1.0)
    for _ in range(30):
        index = asynchronous.ask(1)
        assert torch.equal(index, bkb.ask())
        reward = objective(arms[index])
        asynchronous.tell(index, reward)
        bkb.tell(index, reward)
    torch.testing.assert_close(asynchronous.state.mean, bkb.state.mean)
    assert torch.equal(asynchronous.state.dictionary, bkb.state.dictionary)


def test_tells_in_any_order_reach_the_exact_posterior(arms):
    loop = make_loop(arms)
    warm(loop, arms, 3)
    batch = loop.ask()
    assert batch.numel() >= 3
    order = torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(2))
    first, rest = batch[order[:2]], batch[order[2:]]
    loop.tell(first, objective(arms[first]))
    assert torch.equal(torch.sort(loop.pending).values, torch.sort(rest).values)
    more = loop.ask(3)  # asked while `rest` is pending
    if rest.numel():
        loop.tell(rest.flip(0), objective(arms[rest.flip(0)]))
    if more.numel():
        loop.tell(more, objective(arms[more]))
    assert loop.pending.numel() == 0
    reference = rebuilt(loop, arms)
    torch.testing.assert_close(loop.state.mean, reference.mean)
    torch.testing.assert_close(loop.state.variance, reference.variance)


def test_repeated_arms_leave_earliest_copy_first():
    arms = torch.rand(5, 2, dtype=DTYPE)
    loop = make_loop(arms)
    loop.pending = torch.tensor([3, 1, 3, 3])
    loop._pending_variances = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=DTYPE)
    loop.fail(torch.tensor([3, 3]))
    assert torch.equal(loop.pending, torch.tensor([1, 3]))
    assert torch.equal(loop._pending_variances, torch.tensor([0.2, 0.4], dtype=DTYPE))
    assert torch.equal(loop.failed, torch.tensor([3, 3]))


def test_failures_are_recorded_and_nothing_is_lost_across_a_resume(arms):
    loop = make_loop(arms)
    warm(loop, arms, 3)
    asked = torch.cat([loop.ask(2), loop.ask(3)])
    loop.fail(asked[:1])
    loop.tell(asked[1:2], objective(arms[asked[1:2]]))
    state = loop.state_dict()
    resumed = make_loop(arms, seed=7)
    resumed.load_state_dict(state)
    assert torch.equal(resumed.pending, loop.pending)
    assert torch.equal(resumed.failed, asked[:1])
    n = loop.num_observations
    assert (
        n + loop.pending.numel() + loop.failed.numel()
        == resumed.num_observations + (resumed.pending.numel() + resumed.failed.numel())
    )
    # the resumed loop makes the same choices from here on
    for _ in range(3):
        a, b = loop.ask(2), resumed.ask(2)
        assert torch.equal(a, b)
        if loop.pending.numel():
            told = loop.pending[:1].clone()
            loop.tell(told, objective(arms[told]))
            resumed.tell(told, objective(arms[told]))
    torch.testing.assert_close(resumed.state.mean, loop.state.mean)


def test_a_state_without_a_key_is_rejected(arms):
    loop = make_loop(arms)
    warm(loop, arms, 2)
    resumed = make_loop(arms)
    before = resumed.state_dict()
    for key in loop.state_dict():
        state = loop.state_dict()
        del state[key]
        with pytest.raises(ValueError, match=f"misses the keys \\['{key}'\\]"):
            resumed.load_state_dict(state)
    assert torch.equal(resumed.observed, before["observed"])
    with pytest.raises(ValueError, match="pending"):
        resumed.load_state_dict(
            loop.state_dict() | {"pending": torch.tensor([len(arms)])}
        )


def test_batches_stay_bounded_when_one_arm_dominates():
    # the README's loop shape: once one arm dominates, the rules admit thousands of
    # copies of it; the default cap stops the batch, and copies cost one step each
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(2000, 4, generator=gen, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.3
    loop = BBKB(arms, covar_module=kernel, noise=1.0, radius=1.0, ratio_threshold=2.0)
    sizes = []
    for _ in range(25):
        indices = loop.ask()
        sizes.append(indices.numel())
        loop.tell(indices, objective(arms[indices]))
    assert max(sizes) <= 1000
    assert loop.num_observations == sum(sizes)


def test_bad_pending_for_the_generator(arms):
    loop = make_loop(arms)
    warm(loop, arms, 2)
    for pending, error in (
        (torch.tensor([0.5]), TypeError),
        (torch.tensor([[1]]), ValueError),
        (torch.tensor([len(arms)]), ValueError),
    ):
        with pytest.raises(error, match="pending"):
            gen_bbkb_batch(loop.model, arms, pending=pending)


def test_failed_arms_are_not_asked_again(arms):
    loop, retrying = make_loop(arms), make_loop(arms, retry_failed=True)
    warm(loop, arms, 3)
    warm(retrying, arms, 3)
    first, again = loop.ask(1), retrying.ask(1)
    assert torch.equal(first, again)
    loop.fail(first)
    retrying.fail(again)
    assert torch.equal(retrying.ask(1), first)  # its UCB is still the highest
    for _ in range(5):
        indices = loop.ask()
        assert not torch.isin(indices, first).any()
        loop.tell(indices, objective(arms[indices]))
    resumed = make_loop(arms)
    resumed.load_state_dict(loop.state_dict())
    assert torch.equal(resumed.ask(), loop.ask())


def test_excluded_candidates_equal_brute_force(arms):
    loop = make_loop(arms, ratio_threshold=1e6)
    warm(loop, arms, 3)
    excluded = torch.zeros(len(arms), dtype=torch.bool)
    excluded[
        torch.randperm(len(arms), generator=torch.Generator().manual_seed(0))[:150]
    ] = True
    batch = gen_bbkb_batch(
        loop.model,
        arms,
        radius=0.5,
        ratio_threshold=1e6,
        max_batch_size=10,
        excluded=excluded,
    )
    model = loop.model
    mean = model.posterior(arms.unsqueeze(-2)).mean.squeeze()
    chosen = []
    for _ in range(10):
        if chosen:
            X = arms[torch.tensor(chosen)]
            hallucinated = model.condition_on_observations(
                X, torch.zeros(len(chosen), 1, dtype=DTYPE)
            )
        else:
            hallucinated = model
        scores = mean + 0.5 * hallucinated.scaled_variance(arms).sqrt()
        chosen.append(int(scores.masked_fill(excluded, -float("inf")).argmax()))
    assert batch.indices.tolist() == chosen
    for bad, error in (
        (excluded[:5], ValueError),
        (excluded.long(), TypeError),
        (torch.ones_like(excluded), ValueError),
    ):
        with pytest.raises(error, match="excluded"):
            gen_bbkb_batch(loop.model, arms, excluded=bad)


def test_told_outcomes_wait_while_the_batch_admits_arms(arms):
    # the posterior is frozen inside a batch: telling some pending arms does not
    # change what the open batch asks next
    told, silent = make_loop(arms), make_loop(arms)
    warm(told, arms, 3)
    warm(silent, arms, 3)
    first, same = told.ask(3), silent.ask(3)
    assert torch.equal(first, same)
    before = told.state.mean.clone()
    told.tell(first[:2], objective(arms[first[:2]]))
    assert told.incorporated == told.num_observations - 2
    torch.testing.assert_close(told.state.mean, before, rtol=0, atol=0)
    assert torch.equal(told.ask(2), silent.ask(2))


def test_a_full_rule_ends_the_batch_with_the_told_outcomes(arms):
    loop = make_loop(arms)
    warm(loop, arms, 3)
    batch = loop.ask()  # fills the rule
    assert loop.ask().numel() == 0  # nothing told yet: wait
    told, still = batch[:2], batch[2:]
    loop.tell(told, objective(arms[told]))
    kept = loop.state_dict()
    new = loop.ask()
    # the batch ended: the posterior holds every told outcome; the new arms are the
    # stateless generator's on that posterior with the pending arms hallucinated
    assert loop.incorporated == loop.num_observations
    reference = rebuilt(loop, arms)
    torch.testing.assert_close(loop.state.mean, reference.mean)
    expected = gen_bbkb_batch(
        rebuilt_model(loop, arms),
        arms,
        radius=0.5,
        ratio_threshold=5.0,
        max_batch_size=64,
        pending=still,
    )
    assert torch.equal(new, expected.indices)
    # and a loop resumed from before that ask does the same
    resumed = make_loop(arms, seed=3)
    resumed.load_state_dict(kept)
    assert torch.equal(resumed.ask(), new)


def test_a_failed_batch_end_in_ask_loses_nothing(arms, monkeypatch):
    loop = make_loop(arms)
    warm(loop, arms, 3)
    batch = loop.ask()
    loop.tell(batch[:2], objective(arms[batch[:2]]))
    before = loop.state_dict()

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(CandidateState, "_execute", broken)
    with pytest.raises(RuntimeError, match="injected"):
        loop.ask()
    after = loop.state_dict()
    for key in ("observed", "rewards", "pending", "batch"):
        assert torch.equal(after[key], before[key]), key
    assert torch.equal(
        after["dictionary"].sort().values, before["dictionary"].sort().values
    )
    assert after["incorporated"] == before["incorporated"]
    monkeypatch.undo()
    reference = make_loop(arms)
    reference.load_state_dict(before)
    assert torch.equal(loop.ask(), reference.ask())
    torch.testing.assert_close(loop.state.mean, reference.state.mean)


def brute_force_batch(model, arms, radius, pending, size):
    r"""Greedy UCB picks with the pending and earlier picks hallucinated by
    conditioning the model on them from scratch (outcomes do not matter)."""
    mean = model.posterior(arms.unsqueeze(-2)).mean.squeeze()
    chosen = []
    for _ in range(size):
        held = torch.cat([pending, torch.tensor(chosen, dtype=torch.long).to(pending)])
        X = arms[held]
        hallucinated = model.condition_on_observations(
            X, torch.zeros(X.shape[0], 1, dtype=DTYPE, device=arms.device)
        )
        scores = mean + radius * hallucinated.scaled_variance(arms).sqrt()
        chosen.append(int(scores.argmax()))
    return chosen


@pytest.mark.parametrize("device", DEVICES)
def test_pending_arms_are_hallucinated_like_brute_force(arms, device):
    # the held arms enter in one rank-p update; the picks after them are the
    # brute-force greedy's, from the model and from the loop's cached state
    arms = arms.to(device)
    loop = make_loop(arms, ratio_threshold=1e6)
    warm(loop, arms, 3)
    pending = torch.tensor([4, 90, 90, 17, 250, 4, 4], device=device)
    expected = brute_force_batch(loop.model, arms, 0.5, pending, 6)
    batch = gen_bbkb_batch(
        loop.model,
        arms,
        radius=0.5,
        ratio_threshold=1e6,
        max_batch_size=6,
        pending=pending,
    )
    assert batch.indices.device.type == device
    assert batch.indices.tolist() == expected
    greedy = BatchGreedy(
        CachedGeometry(loop.state),
        radius=0.5,
        ratio_threshold=1e6,
        rule="global",
        held=copies_of(pending),
    )
    assert greedy.extend(6)[0] == expected


def told_one_at_a_time(loop, arms, completions, workers, seed=2):
    r"""A simulated cluster: ``workers`` evaluations in flight, the oldest completes
    first; ``ask(free)`` after every completion. Returns every ask's arms."""
    asked = [loop.ask(workers)]
    queue = asked[0].tolist()
    for _ in range(completions):
        done = torch.tensor(queue[:1], device=arms.device)
        queue = queue[1:]
        loop.tell(done, objective(arms[done]))
        new = loop.ask(workers - len(queue))
        asked.append(new)
        queue += new.tolist()
    return asked


def test_end_fraction_ends_a_full_batch_for_several_completions_at_once(arms):
    # with end_fraction = 2.5 / b an ask finds the rule of a b-arm batch full and
    # waits until 3 of its arms are done, then ends the batch with all of them:
    # what the default loop does when those 3 outcomes are told together
    reference = make_loop(arms)
    warm(reference, arms, 3)
    batch = reference.ask()
    assert batch.numel() >= 4
    loop = make_loop(arms, end_fraction=2.5 / batch.numel())
    warm(loop, arms, 3)
    assert torch.equal(loop.ask(), batch)
    for k in range(2):
        loop.tell(batch[k : k + 1], objective(arms[batch[k : k + 1]]))
        assert loop.ask().numel() == 0  # fewer than 3 done: wait
        assert loop.incorporated == loop.num_observations - k - 1
    loop.tell(batch[2:3], objective(arms[batch[2:3]]))
    reference.tell(batch[:3], objective(arms[batch[:3]]))
    new = loop.ask()
    assert torch.equal(new, reference.ask())
    assert loop.incorporated == reference.incorporated == loop.num_observations
    torch.testing.assert_close(loop.state.mean, rebuilt(loop, arms).mean)
    # a failure that leaves nothing pending ends the batch whatever the fraction
    lonely = make_loop(arms, end_fraction=1.0)
    warm(lonely, arms, 3)
    asked = lonely.ask()
    lonely.tell(asked[:-1], objective(arms[asked[:-1]]))
    lonely.fail(asked[-1:])
    assert lonely.ask().numel() >= 1
    assert lonely.incorporated == lonely.num_observations


def test_asynchronous_options_keep_the_workers_busy_and_batch_the_tells(arms):
    options = asynchronous_options(100)
    threshold = options.pop("ratio_threshold")
    assert options == {"end_fraction": 0.05, "max_batch_size": 105}
    assert threshold(1.0) == 8.0 and threshold(2.0) == 15.0
    assert asynchronous_options(1, 0.5) == {
        "ratio_threshold": 1.035,
        "end_fraction": 0.05,
        "max_batch_size": 2,
    }
    for bad, error in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="workers"):
            asynchronous_options(bad)
    with pytest.raises(ValueError, match="scaled_prior_variance"):
        asynchronous_options(4, 0.0)
    for bad, error in ((-0.1, ValueError), (1.5, ValueError), ("0.1", TypeError)):
        with pytest.raises(error, match="end_fraction"):
            make_loop(arms, end_fraction=bad)
    # 8 workers, the rule never binds: every ask fills the free workers, and a
    # batch of 10 ends once 25% of it is done: for 3 completions at once
    loop = make_loop(arms, ratio_threshold=1e6, max_batch_size=10, end_fraction=0.25)
    warm(loop, arms, 2)
    ends = loop.num_batches
    asked = told_one_at_a_time(loop, arms, 30, 8)
    assert [a.numel() for a in asked] == [8] + [1] * 30
    assert loop.num_batches - ends == 10  # 30 completions, 3 per batch end


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_asynchronous_run_on_cuda_makes_the_cpu_choices(arms):
    runs = []
    for device in ("cpu", "cuda"):
        on_device = arms.to(device)
        loop = make_loop(on_device, end_fraction=0.3)
        warm(loop, on_device, 3)
        asked = told_one_at_a_time(loop, on_device, 40, 6)
        fail = loop.pending[:1].clone()
        loop.fail(fail)
        asked.append(loop.ask(2))
        state = loop.state_dict()
        resumed = make_loop(on_device, end_fraction=0.3)
        resumed.load_state_dict(state)
        assert torch.equal(resumed.ask(1), loop.ask(1))
        runs.append(([a.tolist() for a in asked], loop.state.mean.cpu()))
    assert runs[0][0] == runs[1][0]
    torch.testing.assert_close(runs[0][1], runs[1][1])


def test_ask_arms_is_an_ask_that_returned_those_arms(arms):
    # a loop told to hold the arms its twin's ask returned is the twin, state,
    # later asks and posterior alike
    asked, chosen = make_loop(arms), make_loop(arms)
    warm(asked, arms, 3)
    warm(chosen, arms, 3)
    for size in (2, 3):  # a new batch, then its continuation
        indices = asked.ask(size)
        assert indices.numel() == size
        chosen.ask_arms(indices)
        mine, theirs = chosen.state_dict(), asked.state_dict()
        for key in ("pending", "pending_variances", "batch", "observed"):
            assert torch.equal(mine[key], theirs[key]), key
    assert torch.equal(chosen.ask(), asked.ask())
    pending = asked.pending.clone()
    for loop in (asked, chosen):
        loop.tell(pending, objective(arms[pending]))
    torch.testing.assert_close(chosen.state.mean, asked.state.mean)
    torch.testing.assert_close(chosen.state.variance, rebuilt(chosen, arms).variance)
    assert torch.equal(chosen.ask(), asked.ask())


def test_ask_arms_enter_the_batch_as_pending_arms(arms):
    # any arms, in a new batch or in the open one, are held like pending arms: the
    # next ask is the stateless generator's with all of them pending, and once
    # told the posterior is the one rebuilt from scratch
    loop = make_loop(arms, ratio_threshold=50.0)
    warm(loop, arms, 3)
    user = torch.tensor([7, 250, 7])
    loop.ask_arms(user)
    assert loop.pending.tolist() == user.tolist()
    options = {"radius": 0.5, "ratio_threshold": 50.0, "max_batch_size": 64}
    reference = rebuilt_model(loop, arms)
    first = loop.ask(2)
    expected = gen_bbkb_batch(reference, arms, pending=user, **options)
    assert first.tolist() == expected.indices[:2].tolist()
    more = torch.tensor([123])
    loop.ask_arms(more)
    held = torch.cat([user, first, more])
    rest = gen_bbkb_batch(reference, arms, pending=held, **options)
    assert rest.indices.numel() >= 3
    assert torch.equal(loop.ask(3), rest.indices[:3])
    pending = loop.pending.clone()
    assert torch.equal(pending, torch.cat([held, rest.indices[:3]]))
    loop.tell(pending, objective(arms[pending]))
    scratch = rebuilt(loop, arms)
    torch.testing.assert_close(loop.state.mean, scratch.mean)
    torch.testing.assert_close(loop.state.variance, scratch.variance)
    # a state saved with user-chosen arms pending resumes with them
    loop.ask_arms(torch.tensor([3]))
    resumed = make_loop(arms, ratio_threshold=50.0, seed=5)
    resumed.load_state_dict(loop.state_dict())
    assert resumed.pending.tolist() == [3]
    assert torch.equal(resumed.ask(), loop.ask())


def test_ask_arms_before_any_data_is_the_first_ask(arms):
    first = make_loop(arms).ask()
    loop = make_loop(arms, seed=1)
    loop.ask_arms(first)
    reference = make_loop(arms)
    reference.ask()
    assert torch.equal(loop.pending, reference.pending)
    assert torch.equal(loop.ask(), reference.ask())


def test_bad_ask_arms_change_nothing(arms):
    loop = make_loop(arms)
    warm(loop, arms, 2)
    loop.ask(2)
    before = loop.state_dict()
    for bad, error in (
        (torch.tensor([0.5]), TypeError),
        ([1, 2], TypeError),
        (torch.tensor([[1]]), ValueError),
        (torch.tensor([len(arms)]), ValueError),
        (torch.tensor([-1]), ValueError),
    ):
        with pytest.raises(error, match="indices"):
            loop.ask_arms(bad)
    after = loop.state_dict()
    for key in ("pending", "pending_variances", "batch", "observed"):
        assert torch.equal(after[key], before[key]), key


def test_worker_ratio_threshold_follows_the_learned_noise():
    # C~ = 1 + 0.07 W v with v = max k(x, x) / lambda of the loop now: a learned
    # lambda changes it at the refits
    gen = torch.Generator().manual_seed(3)
    arms = torch.rand(150, 2, generator=gen, dtype=torch.float64)
    loop = BBKB(arms, seed=0, **asynchronous_options(8))
    seen = set()
    for _ in range(30):
        indices = loop.ask(4)
        if indices.numel():
            x = arms[indices]
            loop.tell(indices, torch.sin(5 * x).sum(-1))
        v = float(loop.state.prior_variance.max()) / loop.noise
        assert loop.diagnostics()["ratio_threshold"] == pytest.approx(1 + 0.56 * v)
        seen.add(round(loop.noise, 12))
    assert len(seen) > 1  # refits moved lambda, and C~ with it
