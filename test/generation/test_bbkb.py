r"""BBKB batches against recomputation from scratch, brute-force argmax and BKB."""

from __future__ import annotations

from copy import deepcopy
from itertools import groupby

import pytest
import torch
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch import (
    BKBUpperConfidenceBound,
    NystromGP,
    gen_bbkb_batch,
    gen_bbkb_batch_continuous,
    gen_uncertainty_warmup,
)
from botorch_sketch.generation.bbkb import BatchGreedy, GlobalRule, LocalRule
from botorch_sketch.generation.variance_tracking import (
    CachedGeometry,
    CandidateGeometry,
    FrozenDictionaryTracker,
    LazyArgmax,
    ResidualDirectionTracker,
)
from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.dtc import SCORING_CHUNK_ROWS

from ..gp_helpers import ShapeRecordingRBF

DTYPE = torch.float64


def objective(X):
    return -((X - 0.3) ** 2).sum(-1, keepdim=True)


def make_problem(n_arms=300, d=3, n_obs=40, seed=0, noise=0.5, lengthscale=0.4):
    gen = torch.Generator().manual_seed(seed)
    arms = torch.rand(n_arms, d, generator=gen, dtype=DTYPE)
    X = arms[torch.randint(0, n_arms, (n_obs,), generator=gen)]
    Y = objective(X) + 0.05 * torch.randn(n_obs, 1, generator=gen, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = lengthscale
    model = NystromGP(X, Y, covar_module=kernel, noise=noise, qbar=1.0, generator=gen)
    return arms, model


def hallucinated_variances(model, arms, indices):
    r"""Papers'-scale variances after conditioning on ``arms[indices]`` from scratch
    (same frozen dictionary; outcomes irrelevant to the variance)."""
    if not indices:
        return model.scaled_variance(arms)
    X = arms[torch.tensor(indices)]
    updated = model.condition_on_observations(
        X, torch.zeros(len(indices), 1, dtype=DTYPE)
    )
    return updated.scaled_variance(arms)


def brute_force_greedy(model, arms, radius, size):
    r"""The in-batch UCB greedy by full recomputation: at each of ``size`` steps the
    argmax of ``mu + radius sigma~`` with the earlier choices hallucinated."""
    mean = model.posterior(arms.unsqueeze(-2)).mean.squeeze()
    chosen: list[int] = []
    for _ in range(size):
        variance = hallucinated_variances(model, arms, chosen)
        chosen.append(int((mean + radius * variance.sqrt()).argmax()))
    return chosen


def test_frozen_tracker_equals_recomputation():
    arms, model = make_problem()
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    torch.testing.assert_close(geometry.scaled_variance, model.scaled_variance(arms))
    tracker = FrozenDictionaryTracker(geometry)
    chosen = [5, 17, 5, 200, 42]
    for i in chosen:
        tracker.add(i)
    refreshed = tracker.refresh(torch.arange(arms.shape[0]))
    torch.testing.assert_close(
        refreshed, hallucinated_variances(model, arms, chosen), atol=1e-9, rtol=0
    )


def test_refresh_since_equals_recomputation_at_every_step():
    # a block brought up to date together, step by step from where it was last
    # refreshed (as the lazy argmax does), with copies of the last step between
    arms, model = make_problem()
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = FrozenDictionaryTracker(geometry)
    block = torch.arange(3, arms.shape[0], 5)
    rows = geometry.feature_rows(block)
    chosen, synced_at = [], 0
    for i in [5, 17, 17, 5, 200, 42, 42, 42]:
        tracker.add(i)
        chosen.append(i)
        if len(chosen) == 4:  # refreshed by someone else: not counted twice
            tracker.refresh(block[::2])
        if len(chosen) % 3:  # skip some steps: the next refresh catches up
            continue
        refreshed = tracker.refresh_since(block, rows, synced_at)
        synced_at = tracker.step
        torch.testing.assert_close(
            refreshed,
            hallucinated_variances(model, arms, chosen)[block],
            atol=1e-9,
            rtol=0,
        )
    torch.testing.assert_close(
        tracker.refresh_since(block, rows, synced_at),
        hallucinated_variances(model, arms, chosen)[block],
        atol=1e-9,
        rtol=0,
    )


def test_kept_candidates_equal_recomputation():
    # candidates kept current together (as the lazy argmax's), caught up at some
    # steps only, with copies added to the last step in between and more
    # candidates kept along the way
    arms, model = make_problem()
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = FrozenDictionaryTracker(geometry)
    tracker.keep(torch.arange(2, arms.shape[0], 3))
    chosen = []
    for step, i in enumerate([5, 5, 17, 17, 17, 5, 200, 42, 42]):
        tracker.add(i)
        chosen.append(i)
        if step == 4:
            tracker.keep(torch.tensor([0, 1, 6]))
        if step % 3 == 1:  # skip some steps: the next catch-up takes them all
            continue
        torch.testing.assert_close(
            tracker.kept_variances(),
            hallucinated_variances(model, arms, chosen)[tracker.kept],
            atol=1e-9,
            rtol=0,
        )
    assert tracker.kept.numel() == len(range(2, arms.shape[0], 3)) + 3


def test_frozen_tracker_merges_copies_exactly():
    # consecutive copies of an arm are one step with a multiplicity; candidates
    # refreshed between copies take the difference, the others catch up later
    arms, model = make_problem()
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = FrozenDictionaryTracker(geometry)
    chosen = [5, 5, 5, 17, 17, 5, 200, 200, 200, 200]
    probe = torch.arange(0, arms.shape[0], 7)
    for step, i in enumerate(chosen):
        tracker.add(i)
        if step % 2 == 0:
            tracker.refresh(probe)
        torch.testing.assert_close(
            tracker.refresh(torch.tensor([i, 3])),
            hallucinated_variances(model, arms, chosen[: step + 1])[[i, 3]],
            atol=1e-9,
            rtol=0,
        )
    assert tracker.step == 4  # 5, 17, 5, 200
    refreshed = tracker.refresh(torch.arange(arms.shape[0]))
    torch.testing.assert_close(
        refreshed, hallucinated_variances(model, arms, chosen), atol=1e-9, rtol=0
    )


@pytest.mark.parametrize(
    "residual_update, num_held", [(False, 4), (False, 40), (True, 4)]
)
def test_block_of_held_points_equals_recomputation_and_sequential_steps(
    residual_update, num_held
):
    # one rank-k update for k distinct held points (with copies): the variances of
    # conditioning on them from scratch, and the steps of k single additions, so
    # later copies of the last point and later points continue exactly (40 held
    # points overflow the first 16 stored columns)
    arms, model = make_problem()
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = ResidualDirectionTracker if residual_update else FrozenDictionaryTracker
    block, sequential = tracker(geometry), tracker(geometry)
    gen = torch.Generator().manual_seed(num_held)
    indices = torch.randperm(arms.shape[0], generator=gen)[:num_held]
    indices[-1] = 42  # the point repeated below
    copies = torch.randint(1, 4, (num_held,), generator=gen)
    block.add_many(indices, copies)
    for index, count in zip(indices.tolist(), copies.tolist(), strict=True):
        sequential.add(index, count)
    chosen = indices.repeat_interleave(copies).tolist()
    everything = torch.arange(arms.shape[0])
    if residual_update:  # an eager tracker: the same sequence of steps
        torch.testing.assert_close(block.variance, sequential.variance)
        return
    torch.testing.assert_close(
        block.refresh(everything),
        hallucinated_variances(model, arms, chosen),
        atol=1e-9,
        rtol=0,
    )
    assert block.step == sequential.step == num_held
    torch.testing.assert_close(
        block.directions.matrix, sequential.directions.matrix, atol=1e-12, rtol=0
    )
    torch.testing.assert_close(
        block.directions.denominators, sequential.directions.denominators
    )
    for more in (block, sequential):
        more.add(42, 2)  # copies of the last held point: one step's multiplicity
        more.add(7)
    assert block.step == num_held + 1
    torch.testing.assert_close(
        block.refresh(everything),
        hallucinated_variances(model, arms, chosen + [42, 42, 7]),
        atol=1e-9,
        rtol=0,
    )


def test_global_rule_batch_never_forms_a_full_candidate_block():
    arms, model = make_problem(n_arms=5000)
    recording = ShapeRecordingRBF().to(DTYPE)
    recording.lengthscale = 0.4
    model.covar_module.base_kernel = recording
    batch = gen_bbkb_batch(model, arms, radius=1.0, ratio_threshold=3.0)
    blocks = [rows for rows, cols in recording.blocks if cols > 1]
    assert blocks and max(blocks) <= SCORING_CHUNK_ROWS < arms.shape[0]
    assert batch.batch_size >= 1
    # the batch's start-of-batch variances are the model's (no approximation)
    torch.testing.assert_close(
        batch.start_variances, model.scaled_variance(arms[batch.indices])
    )


def test_residual_tracker_equals_dense_augmented_dictionary():
    r"""Dense oracle: dictionary S + batch points; old data with zero components on
    the new coordinates; the batch points hallucinated with their full embedding."""
    arms, model = make_problem(lengthscale=0.2)
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = ResidualDirectionTracker(geometry)
    chosen = [3, 250, 3, 120]
    for i in chosen:
        tracker.add(i)
    with torch.no_grad():
        kernel, lam = model.covar_module, model.noise
        S = torch.cat([model.dictionary, arms[[3, 250, 120]]])
        L = torch.linalg.cholesky(kernel(S).to_dense() + 1e-10 * torch.eye(S.shape[0]))

        def embed(X):
            K = kernel(S, X).to_dense()
            return torch.linalg.solve_triangular(L, K, upper=False).mT

        m = model.dictionary_size
        state = model.dtc_state
        V = torch.block_diag(state.gram, lam * torch.eye(3, dtype=DTYPE))
        Zb = embed(arms[chosen])
        V = V + Zb.mT @ Zb
        Z = embed(arms)
        residual = kernel(arms, diag=True) - Z.square().sum(-1)
        expected = residual / lam + (Z * torch.linalg.solve(V, Z.mT).mT).sum(-1)
    assert m > 0
    torch.testing.assert_close(tracker.variance, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("residual_update", [False, True])
def test_lazy_argmax_equals_brute_force(residual_update):
    arms, model = make_problem(n_arms=400)
    radius = 2.0
    batch = gen_bbkb_batch(
        model,
        arms,
        ratio_threshold=1e9,
        radius=radius,
        max_batch_size=12,
        residual_update=residual_update,
    )
    assert batch.batch_size == 12
    mean = model.posterior(arms.unsqueeze(-2)).mean.squeeze()
    chosen: list[int] = []
    for step in range(12):
        if residual_update:
            break  # brute force for the frozen tracker only; see next test
        variance = hallucinated_variances(model, arms, chosen)
        brute = int((mean + radius * variance.sqrt()).argmax())
        assert int(batch.indices[step]) == brute
        chosen.append(brute)
    if residual_update:
        geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
        tracker = ResidualDirectionTracker(geometry)
        for step in range(12):
            brute = int((geometry.mean + radius * tracker.variance.sqrt()).argmax())
            assert int(batch.indices[step]) == brute
            tracker.add(brute)


def test_lazy_argmax_with_refreshed_candidates_excluded_equals_brute_force():
    # excluding candidates the argmax has already refreshed (as a failed arm of
    # an open batch is) drops them from every later step
    arms, model = make_problem(n_arms=400)
    radius = 2.0
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = FrozenDictionaryTracker(geometry)
    argmax = LazyArgmax(geometry.mean, radius, tracker, block_size=16)
    excluded = torch.zeros(arms.shape[0], dtype=torch.bool)
    chosen: list[int] = []
    for step in range(12):
        scores = (
            geometry.mean + radius * hallucinated_variances(model, arms, chosen).sqrt()
        )
        scores = scores.masked_fill(excluded, -float("inf"))
        if step == 6:  # the four best refreshed ones and the best of the others
            kept = tracker.kept
            others = scores.masked_fill(
                torch.isin(torch.arange(arms.shape[0]), kept), -1e9
            )
            best = torch.cat(
                [kept[scores[kept].topk(4).indices], others.topk(1).indices]
            )
            argmax.exclude(best)
            excluded[best] = True
            scores[best] = -float("inf")
        index, value = argmax()
        assert index == int(scores.argmax())
        assert value == pytest.approx(float(scores.max()), rel=1e-9)
        tracker.add(index)
        chosen.append(index)


@pytest.mark.parametrize("lengthscale, radius", [(0.4, 4.0), (1.0, 1.0), (1.0, 0.5)])
def test_runs_of_copies_equal_brute_force(lengthscale, radius):
    # the greedy takes runs of copies of an arm (decided in closed form) between
    # other arms; every step equals the argmax of a full recomputation
    arms, model = make_problem(n_arms=300, seed=1, lengthscale=lengthscale)
    size = 60
    batch = gen_bbkb_batch(
        model, arms, ratio_threshold=1e9, radius=radius, max_batch_size=size
    )
    chosen = brute_force_greedy(model, arms, radius, size)
    assert batch.indices.tolist() == chosen
    runs = [len(list(run)) for _, run in groupby(chosen)]
    assert max(runs) >= 5 and len(runs) >= 5
    # a global rule that admits exactly the first k points stops there, mid-run
    start = model.scaled_variance(arms)[torch.tensor(chosen)].tolist()
    for k in (7, 23):
        threshold = 1 + sum(start[:k]) + 0.5 * start[k]
        cut = gen_bbkb_batch(model, arms, ratio_threshold=threshold, radius=radius)
        assert cut.indices.tolist() == chosen[:k]


@pytest.mark.parametrize("rule", ["local", "global+local"])
def test_runs_of_copies_under_the_local_rule_equal_brute_force(rule):
    # outside the global rule's closed form a repeat is a tracker step of its own
    # (copies of the last one), which the tracker's kept candidates must take too
    arms, model = make_problem(n_arms=200, seed=1, lengthscale=0.4)
    size, radius = 30, 4.0
    batch = gen_bbkb_batch(
        model, arms, ratio_threshold=1e9, radius=radius, max_batch_size=size, rule=rule
    )
    chosen = brute_force_greedy(model, arms, radius, size)
    assert batch.indices.tolist() == chosen
    assert max(len(list(run)) for _, run in groupby(chosen)) >= 3


def test_ratio_threshold_one_reproduces_bkb_step_for_step():
    arms, model = make_problem(n_arms=200, n_obs=10)
    bkb_model, bbkb_model = deepcopy(model), deepcopy(model)
    bkb_gen, bbkb_gen = (
        torch.Generator().manual_seed(3),
        torch.Generator().manual_seed(3),
    )
    noise_gen = torch.Generator().manual_seed(9)
    for _ in range(15):
        acqf = BKBUpperConfidenceBound(bkb_model, radius=1.0)
        x_bkb, _ = optimize_acqf_discrete(acqf, q=1, choices=arms)
        batch = gen_bbkb_batch(bbkb_model, arms, ratio_threshold=1.0, radius=1.0)
        assert batch.batch_size == 1
        torch.testing.assert_close(batch.candidates, x_bkb)
        y = objective(x_bkb) + 0.05 * torch.randn(
            1, 1, generator=noise_gen, dtype=DTYPE
        )
        bkb_model = bkb_model.condition_on_observations(
            x_bkb, y, resparsify=True, generator=bkb_gen
        )
        bbkb_model = bbkb_model.condition_on_observations(
            batch.candidates, y, resparsify=True, generator=bbkb_gen
        )
        torch.testing.assert_close(bkb_model.dictionary, bbkb_model.dictionary)


def test_local_bound_never_exceeds_global_bound():
    arms, model = make_problem(noise=2.0)
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    global_rule, local_rule = GlobalRule(geometry), LocalRule(geometry)
    for i in [4, 90, 4, 33]:
        global_rule.add(i)
        local_rule.add(i)
    for j in [0, 10, 150, 299]:
        per_candidate = local_rule.per_candidate_bound_with(j)
        assert (per_candidate <= global_rule.bound_with(j) + 1e-9).all()
    # the per-candidate local bound by hand for one candidate
    x = 7
    k = torch.stack([geometry.scaled_covariance(i)[x] for i in [4, 90, 4, 33, 10]])
    by_hand = 1 + (k.square() / geometry.scaled_variance[x]).sum()
    torch.testing.assert_close(local_rule.per_candidate_bound_with(10)[x], by_hand)


def test_global_rule_bound_and_local_batches_at_least_as_large():
    arms, model = make_problem(noise=2.0, n_obs=80)
    glob = gen_bbkb_batch(model, arms, ratio_threshold=1.5, rule="global", radius=0.5)
    local = gen_bbkb_batch(model, arms, ratio_threshold=1.5, rule="local", radius=0.5)
    both = gen_bbkb_batch(
        model, arms, ratio_threshold=1.5, rule="global+local", radius=0.5
    )
    # global: the accepted sum is within C~ and adding the next choice would exceed it
    assert glob.bound == pytest.approx(1 + float(glob.start_variances.sum()))
    assert glob.batch_size == 1 or glob.bound <= 1.5
    assert local.batch_size >= glob.batch_size
    assert torch.equal(both.indices, local.indices)


def test_batch_sizes_grow_along_a_run_on_8d():
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(1000, 8, generator=gen, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    X = arms[:2]
    model = NystromGP(X, objective(X), covar_module=kernel, noise=1.0, generator=gen)
    sizes, t = [], 2
    while t < 300:
        batch = gen_bbkb_batch(model, arms, ratio_threshold=2.0, radius=0.5)
        Y = objective(batch.candidates) + 0.01 * torch.randn(
            batch.batch_size, 1, generator=gen, dtype=DTYPE
        )
        model = model.condition_on_observations(
            batch.candidates, Y, resparsify=True, generator=gen
        )
        sizes.append(batch.batch_size)
        t += batch.batch_size
    assert model.train_inputs[0].shape[0] == t  # no observation lost
    first, last = sizes[:10], sizes[-10:]
    assert max(first) <= 2
    # batch sizes oscillate (resparsification), but their average grows
    assert sum(last) / len(last) > 5 * sum(first) / len(first)


def test_min_and_max_batch_size():
    arms, model = make_problem()
    forced = gen_bbkb_batch(model, arms, ratio_threshold=1.0, min_batch_size=4)
    assert forced.batch_size == 4
    capped = gen_bbkb_batch(model, arms, ratio_threshold=1e9, max_batch_size=3)
    assert capped.batch_size == 3


def test_uncertainty_warmup_reaches_target_variance():
    arms, model = make_problem(n_arms=150, lengthscale=0.5)
    warmup = gen_uncertainty_warmup(model, arms, min_batch_size=4, ratio_threshold=2.0)
    assert warmup.shape[0] > 0
    # after the warm-up the (residual-aware) hallucinated variances are all <= 1/4
    geometry = CandidateGeometry(model.covar_module, model.dtc_state, arms)
    tracker = ResidualDirectionTracker(geometry)
    index = {tuple(row.tolist()): i for i, row in enumerate(arms)}
    for row in warmup:
        tracker.add(index[tuple(row.tolist())])
    assert float(tracker.variance.max()) <= 0.25


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"ratio_threshold": float("nan")}, ValueError, "ratio_threshold"),
        ({"ratio_threshold": 1.0}, ValueError, "ratio_threshold"),
        ({"max_points": 0}, ValueError, "max_points"),
        ({"max_points": float("nan")}, TypeError, "max_points"),
        ({"min_batch_size": True}, TypeError, "min_batch_size"),
        ({"model": "a model"}, TypeError, "model"),
    ],
)
def test_uncertainty_warmup_rejects_what_it_would_ignore(kwargs, error, match):
    arms, model = make_problem(n_arms=50)
    arguments = {"model": model, "choices": arms, "min_batch_size": 2} | kwargs
    with pytest.raises(error, match=match):
        gen_uncertainty_warmup(**arguments)


def test_residual_update_avoids_repeated_copies():
    r"""A dictionary far from the promising region: the frozen update keeps picking
    the same arm (its variance lies outside the dictionary's span), the residual
    update spreads the batch."""
    gen = torch.Generator().manual_seed(0)
    arms = torch.rand(300, 2, generator=gen, dtype=DTYPE)
    far = torch.tensor([[5.0, 5.0]], dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.1
    model = NystromGP(
        far,
        torch.zeros(1, 1, dtype=DTYPE),
        covar_module=kernel,
        noise=1.0,
        dictionary=far,
    )
    frozen = gen_bbkb_batch(model, arms, ratio_threshold=1e9, max_batch_size=6)
    residual = gen_bbkb_batch(
        model, arms, ratio_threshold=1e9, max_batch_size=6, residual_update=True
    )
    assert frozen.indices.unique().numel() == 1
    assert residual.indices.unique().numel() == 6


def test_continuous_batch_uses_global_rule():
    arms, model = make_problem(noise=2.0, n_obs=80)
    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=DTYPE)
    batch = gen_bbkb_batch_continuous(
        model, bounds, ratio_threshold=1.5, radius=0.5, num_restarts=2, raw_samples=64
    )
    assert 1 <= batch.shape[0] <= 32
    total = 1 + float(model.scaled_variance(batch).sum())
    assert batch.shape[0] == 1 or total <= 1.5
    assert ((batch >= 0) & (batch <= 1)).all()
    # asynchronous: pending points count towards the rule and are not returned
    options = {"ratio_threshold": 1.5, "radius": 0.5, "num_restarts": 2}
    pending = batch[:1]
    more = gen_bbkb_batch_continuous(model, bounds, X_pending=pending, **options)
    total = 1 + float(model.scaled_variance(torch.cat([pending, more])).sum())
    assert more.shape[0] == 0 or total <= 1.5
    full = arms[:1].expand(40, 3)  # far more variance than the rule admits
    assert 1 + float(model.scaled_variance(full).sum()) > 1.5
    none = gen_bbkb_batch_continuous(model, bounds, X_pending=full, **options)
    assert none.shape == (0, 3)
    with pytest.raises(ValueError, match="X_pending"):
        gen_bbkb_batch_continuous(model, bounds, X_pending=full[:, :2], **options)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"choices": torch.zeros(0, 3, dtype=DTYPE)}, "choices"),
        ({"choices": torch.zeros(5, 2, dtype=DTYPE)}, "choices"),
        ({"choices": torch.full((5, 3), float("nan"), dtype=DTYPE)}, "choices"),
        ({"ratio_threshold": 0.5}, "ratio_threshold"),
        ({"rule": "median"}, "rule"),
        ({"radius": -1.0}, "radius"),
        ({"min_batch_size": 0}, "min_batch_size"),
        ({"max_batch_size": 2.5}, "max_batch_size"),
    ],
)
def test_bad_inputs(kwargs, match):
    arms, model = make_problem()
    args = {"choices": arms}
    args.update(kwargs)
    choices = args.pop("choices")
    with pytest.raises((ValueError, TypeError), match=match):
        gen_bbkb_batch(model, choices, **args)


@pytest.mark.parametrize(
    "options",
    [
        {"rule": "global"},
        {"rule": "local"},
        {"rule": "global", "residual_update": True},
    ],
)
def test_cached_state_makes_the_stateless_batch(options):
    # the same posterior held by a CandidateState (the BBKB loop's greedy on its
    # cache, with raw columns left by removals: s > m) and by a NystromGP: same
    # batch
    gen = torch.Generator().manual_seed(4)
    arms = torch.rand(300, 3, generator=gen, dtype=DTYPE)
    observed = torch.randint(0, 300, (60,), generator=gen)
    Y = objective(arms[observed]) + 0.05 * torch.randn(
        60, 1, generator=gen, dtype=DTYPE
    )
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 0.4
    dictionary = torch.unique(observed)[::3]
    model = NystromGP(
        arms[observed], Y, covar_module=kernel, noise=2.0, dictionary=arms[dictionary]
    )
    state = CandidateState.from_observations(
        arms, kernel, 2.0, observed, Y.squeeze(-1), torch.unique(observed)[::2]
    )
    state.set_dictionary(dictionary)
    assert state.num_raw > state.size
    options = {"ratio_threshold": 4.0, "radius": 1.0} | options
    stateless = gen_bbkb_batch(model, arms, **options)
    greedy = BatchGreedy(
        CachedGeometry(state),
        radius=options["radius"],
        ratio_threshold=options["ratio_threshold"],
        rule=options["rule"],
        residual_update=options.get("residual_update", False),
    )
    chosen, values = greedy.extend(1000)
    assert stateless.batch_size > 3
    assert stateless.indices.tolist() == chosen
    torch.testing.assert_close(
        stateless.start_variances, greedy.geometry.scaled_variance[chosen]
    )
    torch.testing.assert_close(
        stateless.acquisition_values, torch.tensor(values, dtype=DTYPE)
    )


def test_model_argument_is_checked():
    arms, model = make_problem(n_arms=50)
    with pytest.raises(TypeError, match="model"):
        gen_bbkb_batch(None, arms)
    with pytest.raises(ValueError, match="choices"):
        gen_bbkb_batch(model, arms[:, :2])


def test_lazy_argmax_breaks_ties_like_a_full_argmax():
    # every arm twice: each step's maximizer is tied with its copy, and the lazy
    # argmax must return the lower index, as torch.argmax of a full recomputation
    arms, model = make_problem(n_arms=150)
    doubled = torch.cat([arms, arms])
    radius = 2.0
    batch = gen_bbkb_batch(
        model, doubled, ratio_threshold=1e9, radius=radius, max_batch_size=8
    )
    mean = model.posterior(doubled.unsqueeze(-2)).mean.squeeze()
    chosen: list[int] = []
    for step in range(8):
        variance = hallucinated_variances(model, doubled, chosen)
        scores = mean + radius * variance.sqrt()
        best = int(batch.indices[step])
        assert best < 150 and torch.isclose(scores[best], scores.max(), rtol=1e-12)
        chosen.append(best)
