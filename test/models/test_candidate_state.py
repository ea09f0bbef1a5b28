r"""CandidateState: the in-place DTC posterior against from-scratch float64
computations (a fresh DTCState, the dense exact GP, a state built on all candidates
for appended ones), for float32 and float64 candidates on every device."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.models.candidate_state import CandidateState
from botorch_sketch.models.dtc import DTCState
from botorch_sketch.models.kernel_columns import KernelColumns

from ..gp_helpers import assert_close

DTYPE = torch.float64


def make_arms(num_arms=250, d=3, seed=0, lengthscale=0.2, dtype=DTYPE, device=None):
    r"""``num_arms x d`` uniform arms (drawn on the CPU in float64, then moved: the
    same points for every dtype and device) and a scaled RBF kernel."""
    generator = torch.Generator().manual_seed(seed)
    arms = torch.rand(num_arms, d, generator=generator, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel())
    kernel.base_kernel.lengthscale = lengthscale
    kernel.outputscale = 1.3
    return arms.to(dtype=dtype, device=device), kernel.to(dtype=dtype, device=device)


def from_scratch(
    state: CandidateState, target_sums: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Mean and Bayesian variance of every candidate from a fresh float64 DTCState
    on the CPU (the state's points, observations and dictionary; its reward sums
    unless ``target_sums`` are given)."""
    if target_sums is None:
        target_sums = state.target_sums
    points = state.points.cpu().double()
    kernel = deepcopy(state.kernel).cpu().double()
    observed, dictionary = state.observed.cpu(), state.dictionary.cpu()
    with torch.no_grad():
        dtc = DTCState.build(
            kernel,
            points[dictionary],
            points[observed],
            target_sums.cpu().double()[observed],
            torch.tensor(state.noise, dtype=DTYPE),
            state.counts.cpu().double()[observed],
        )
        return dtc.mean_and_variance(kernel, points)


def assert_matches_scratch(state: CandidateState, scale: float = 1.0) -> None:
    r""":func:`assert_close` of the state's mean and variance to
    :func:`from_scratch`, tolerances times ``scale``."""
    mean, variance = from_scratch(state)
    assert state.mean.device == state.points.device
    assert_close(state.mean, mean, scale)
    assert_close(state.variance, variance, scale)


def exact_posterior(kernel, arms, indices, rewards, noise):
    r"""Mean and variance at every arm of the exact GP (float64, dense) given
    ``rewards`` at the arms ``indices`` (repeats allowed) and noise ``noise``."""
    with torch.no_grad():
        K = kernel(arms).to_dense()
    K_xx = K[indices][:, indices] + noise * torch.eye(len(indices), dtype=DTYPE)
    K_ax = K[:, indices]
    mean = K_ax @ torch.linalg.solve(K_xx, rewards)
    variance = K.diagonal() - (K_ax * torch.linalg.solve(K_xx, K_ax.mT).mT).sum(-1)
    return mean, variance


def random_walk(state: CandidateState, steps: int, seed: int, check_every: int = 0):
    r"""Random observations (with repeats), dictionary additions (single and block)
    and removals; optionally compared with a recomputation along the way."""
    generator = torch.Generator().manual_seed(seed)
    num_arms = state.num_points
    for step in range(steps):
        draw = float(torch.rand(1, generator=generator))
        if draw < 0.4 or state.size == 0:
            size = int(torch.randint(1, 6, (1,), generator=generator))
            indices = torch.randint(num_arms, (size,), generator=generator)
            rewards = torch.randn(size, generator=generator, dtype=DTYPE)
            state.observe(indices, rewards.to(state.points))
            if state.size == 0:
                state.add_to_dictionary(int(indices[0]))
        elif draw < 0.5 and state.observed.numel() > 3:
            # a batch end: observe and resample in one call (fused pass)
            size = int(torch.randint(1, 6, (1,), generator=generator))
            indices = torch.randint(num_arms, (size,), generator=generator)
            rewards = torch.randn(size, generator=generator, dtype=DTYPE)
            pool = torch.cat([state.observed.cpu(), indices])
            keep = torch.rand(pool.shape[0], generator=generator) < 0.6
            keep[-1] = True
            state.update(indices, rewards.to(state.points), pool[keep])
        elif draw < 0.6:
            state.add_to_dictionary(
                int(torch.randint(num_arms, (1,), generator=generator))
            )
        elif draw < 0.75:
            block = torch.randint(num_arms, (4,), generator=generator)
            state.add_to_dictionary(block)
        elif state.size > 1:
            position = int(torch.randint(state.size, (1,), generator=generator))
            state.remove_from_dictionary(int(state.dictionary[position]))
        if check_every and step % check_every == check_every - 1:
            yield step


@pytest.mark.parametrize(
    "noise, lengthscale, scale32, scale64",
    [
        (1.0, 0.2, 30.0, 1.0),
        (0.05, 0.2, 30.0, 1.0),
        (1e-3, 0.2, 50.0, 1.0),
        # K_SS of ~150 close points with condition number ~1e9: the from-scratch
        # Cholesky and the updates agree to what the conditioning allows (float64
        # only: float32 cannot factorize it)
        (1e-3, 0.3, None, 30.0),
    ],
)
def test_hundreds_of_random_updates_equal_from_scratch(
    noise, lengthscale, scale32, scale64, tkwargs
):
    # float32: 400 updates drift up to ~10x further from the float64 posterior than
    # a fresh float32 factorization of the same state (measured on the CPU: 5x, 13x
    # and 26x the float32 tolerance for the three cases; on an H200, 20x in the
    # first), hence the scales
    scale = scale32 if tkwargs["dtype"] == torch.float32 else scale64
    if scale is None:
        pytest.skip("K_SS is too ill-conditioned for float32")
    arms, kernel = make_arms(lengthscale=lengthscale, **tkwargs)
    state = CandidateState(arms, kernel, noise)
    checks = 0
    for _ in random_walk(state, 400, seed=1, check_every=40):
        assert_matches_scratch(state, scale)
        checks += 1
    assert checks == 10 and state.size > 20 and state.observed.numel() > 100
    assert state.features.device == arms.device


def test_set_dictionary_adds_and_removes_to_the_target_set(tkwargs):
    arms, kernel = make_arms(**tkwargs)
    state = CandidateState(arms, kernel, 0.1)
    state.observe(torch.arange(0, 60), torch.linspace(-1, 1, 60, **tkwargs))
    assert state.set_dictionary(torch.tensor([1, 5, 9, 13])) == (4, 0)
    assert state.set_dictionary(torch.tensor([5, 9, 40, 41, 42])) == (3, 2)
    assert sorted(state.dictionary.tolist()) == [5, 9, 40, 41, 42]
    assert_matches_scratch(state)


def test_full_dictionary_is_the_exact_gp_with_repeats(tkwargs):
    arms, kernel = make_arms(num_arms=120)
    noise = 0.02
    generator = torch.Generator().manual_seed(4)
    indices = torch.randint(0, 40, (90,), generator=generator)  # repeated pulls
    rewards = torch.randn(90, generator=generator, dtype=DTYPE)
    state = CandidateState(*make_arms(num_arms=120, **tkwargs), noise)
    state.observe(indices[:50], rewards[:50].to(**tkwargs))
    state.set_dictionary(torch.unique(indices[:50]))
    state.observe(indices[50:], rewards[50:].to(**tkwargs))
    state.add_to_dictionary(torch.unique(indices))
    mean, variance = exact_posterior(kernel, arms, indices, rewards, noise)
    assert_close(state.mean, mean)
    assert_close(state.variance, variance)


def test_refresh_equals_incremental_and_drift_stays_tiny(tkwargs):
    arms, kernel = make_arms(num_arms=200, **tkwargs)
    state = CandidateState(arms, kernel, 1.0)
    for _ in random_walk(state, 600, seed=2):
        pass
    mean, variance = state.mean.clone(), state.variance.clone()
    state.refresh()
    assert_matches_scratch(state)  # refreshed: a fresh factorization
    assert_close(mean, state.mean)  # 600 updates drift less than the tolerances
    assert_close(variance, state.variance)


def test_single_precision_features_agree_with_double(device):
    arms, kernel = make_arms(device=device)
    double = CandidateState(arms, kernel, 0.5)
    single = CandidateState(arms, kernel, 0.5, cache_dtype=torch.float32)
    for state in (double, single):
        for _ in random_walk(state, 200, seed=5):
            pass
    assert single.features.dtype == torch.float32
    assert single.mean.dtype == DTYPE
    assert_matches_scratch(double)
    for ours, reference in (
        (single.mean, double.mean),
        (single.variance, double.variance),
    ):
        error = (ours - reference).abs().max() / reference.abs().max()
        assert error < 1e-4, error


def test_multiplicity_is_one_update_and_equals_repeated_observations(tkwargs):
    arms, kernel = make_arms(num_arms=80, **tkwargs)
    merged = CandidateState(arms, kernel, 0.3)
    one_by_one = CandidateState(arms, kernel, 0.3)
    for state in (merged, one_by_one):
        state.add_to_dictionary(torch.tensor([3, 7, 11]))
    merged.observe(torch.full((500,), 7), torch.full((500,), 0.25, **tkwargs))
    for _ in range(5):
        one_by_one.observe(torch.full((100,), 7), torch.full((100,), 0.25, **tkwargs))
    assert_close(merged.mean, one_by_one.mean)
    assert_close(merged.variance, one_by_one.variance)
    assert_matches_scratch(merged)
    assert_matches_scratch(one_by_one)


def test_memory_budget():
    arms, kernel = make_arms(num_arms=1000)
    with pytest.raises(MemoryError, match="memory_budget"):
        CandidateState(arms, kernel, 1.0, memory_budget=1000)
    state = CandidateState(arms, kernel, 1.0, memory_budget=1000 * 8 * 40)
    with pytest.raises(MemoryError, match="memory_budget"):
        state.add_to_dictionary(torch.arange(50))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda s: s.observe(torch.tensor([1]), torch.tensor([1.0, 2.0])),
            ValueError,
            "rewards",
        ),
        (
            lambda s: s.observe(torch.tensor([1.0]), torch.tensor([1.0])),
            TypeError,
            "indices",
        ),
        (
            lambda s: s.observe(torch.tensor([999]), torch.tensor([1.0])),
            ValueError,
            "indices",
        ),
        (
            lambda s: s.observe(torch.tensor([1]), torch.tensor([float("nan")])),
            ValueError,
            "rewards",
        ),
        (lambda s: s.add_to_dictionary(-1), ValueError, "index"),
        (
            lambda s: s.set_dictionary(torch.tensor([], dtype=torch.long)),
            ValueError,
            "indices",
        ),
        (lambda s: s.remove_from_dictionary(2), ValueError, "at least one"),
    ],
)
def test_bad_input_raises_before_any_change(call, error, match):
    arms, kernel = make_arms(num_arms=50)
    state = CandidateState(arms, kernel, 1.0)
    state.observe(torch.tensor([2, 3]), torch.tensor([0.1, 0.2], dtype=DTYPE))
    state.add_to_dictionary(2)
    before = (state.mean.clone(), state.variance.clone(), state.dictionary.clone())
    with pytest.raises(error, match=match):
        call(state)
    torch.testing.assert_close(state.mean, before[0])
    torch.testing.assert_close(state.variance, before[1])
    assert torch.equal(state.dictionary, before[2])


def test_kernel_columns_closed_form_equals_gpytorch(tkwargs):
    arms, kernel = make_arms(num_arms=40, d=4, **tkwargs)
    kernel.base_kernel = RBFKernel(ard_num_dims=4).to(**tkwargs)
    kernel.base_kernel.lengthscale = torch.tensor([0.2, 0.5, 1.0, 3.0], **tkwargs)
    columns = KernelColumns(kernel, arms)
    assert columns.flops_per_column == 13 * 40  # the closed form was taken
    indices = torch.tensor([3, 0, 17], device=arms.device)
    reference = deepcopy(kernel).cpu().double()
    with torch.no_grad():
        expected = reference(arms.cpu().double(), arms.cpu().double()[[3, 0, 17]])
        expected = expected.to_dense()
    assert_close(columns(indices), expected)
    generic = KernelColumns(kernel.base_kernel + kernel.base_kernel, arms)
    assert generic.flops_per_column == 3 * 40 * 4
    assert_close(generic(indices), 2 * expected / 1.3)


def test_bad_construction():
    arms, kernel = make_arms(num_arms=10)
    with pytest.raises(ValueError, match="noise"):
        CandidateState(arms, kernel, 0.0)
    with pytest.raises(TypeError, match="kernel"):
        CandidateState(arms, "rbf", 1.0)
    with pytest.raises(TypeError, match="cache_dtype"):
        CandidateState(arms, kernel, 1.0, cache_dtype=torch.long)
    with pytest.raises(ValueError, match="points"):
        CandidateState(arms[:0], kernel, 1.0)


@pytest.mark.parametrize("cache_dtype", [None, torch.float32])
def test_reads_of_every_width_equal_the_feature_product(tkwargs, cache_dtype):
    # the cache is read with zero-padded widths (one column: a matrix-vector
    # product), through raw columns left by removals (s > m): Phi M exactly
    arms, kernel = make_arms(num_arms=120, **tkwargs)
    state = CandidateState(arms, kernel, 0.5, cache_dtype=cache_dtype)
    state.observe(torch.arange(0, 120, 3), torch.linspace(-1, 1, 40, **tkwargs))
    state.set_dictionary(torch.arange(0, 60, 2))
    state.set_dictionary(torch.arange(10, 70, 3))
    assert state.num_raw > state.size
    generator = torch.Generator().manual_seed(3)
    features = state.features.to(arms)
    single = cache_dtype == torch.float32 and arms.dtype == torch.float64
    scale = 1e4 if single else 1.0  # single-precision products: 1e-3 relative
    for width in range(1, 10):
        matrix = torch.randn(state.size, width, generator=generator).to(arms)
        assert_close(state.features_times(matrix), features @ matrix, scale)
    vector = matrix[:, 0]
    assert_close(state.features_times(vector), features @ vector, scale)


def test_churn_compacts_the_cache_and_stays_exact(tkwargs):
    # heavy churn: the raw cache is compacted (s falls back to m) and the buffer
    # does not grow past what the live dictionary needs
    arms, kernel = make_arms(num_arms=300, **tkwargs)
    state = CandidateState(arms, kernel, 0.5)
    state.observe(torch.arange(300), torch.linspace(-1, 1, 300, **tkwargs))
    generator = torch.Generator().manual_seed(8)
    stored = []
    for _ in range(30):
        dictionary = torch.randperm(300, generator=generator)[:25]
        state.set_dictionary(dictionary)
        stored.append(state.num_raw)
    assert min(stored) == 25 and max(stored) <= 25 + 25 // 4 + 32
    assert state._store.buffer.shape[1] < 25 + 25 // 4 + 32 + 25
    assert_matches_scratch(state)


def test_copies_add_nothing_to_the_span_and_the_posterior_stays_exact(tkwargs):
    # rows 1-4 copy row 0 and row 11 is row 10 moved by 1e-12 (the kernel cannot
    # tell them apart): entering the dictionary beside their twins, in one block
    # or one at a time, they are skipped, and the full dictionary is still the
    # exact GP with repeats
    arms, kernel = make_arms(num_arms=60)
    arms[1:5] = arms[0]
    arms[11] = arms[10] + 1e-12
    noise = 0.1
    generator = torch.Generator().manual_seed(3)
    indices = torch.randint(0, 30, (80,), generator=generator)
    indices[:6] = torch.tensor([0, 1, 2, 3, 10, 11])
    rewards = torch.randn(80, generator=generator, dtype=DTYPE)
    state = CandidateState(arms.to(**tkwargs), deepcopy(kernel).to(**tkwargs), noise)
    state.update(indices[:40], rewards[:40].to(**tkwargs), torch.tensor([0, 1, 10]))
    assert sorted(state.dictionary.tolist()) == [0, 10]
    state.add_to_dictionary(torch.tensor([2, 3, 11]))
    state.add_to_dictionary(4)
    distinct = torch.unique(indices)
    twins = torch.isin(distinct, torch.tensor([1, 2, 3, 4, 11]))
    added, removed = state.update(indices[40:], rewards[40:].to(**tkwargs), distinct)
    assert (added, removed) == (int((~twins).sum()) - 2, 0)
    assert sorted(state.dictionary.tolist()) == distinct[~twins].tolist()
    mean, variance = exact_posterior(kernel, arms, indices, rewards, noise)
    # float32 factors a K_SS of 26 points with lengthscale 0.2: looser
    scale = 30.0 if tkwargs["dtype"] == torch.float32 else 1.0
    assert_close(state.mean, mean, scale)
    assert_close(state.variance, variance, scale)


def test_a_copy_replacing_its_twin_keeps_the_dictionary_non_empty():
    # every point leaves and an entering one copies the last leaving one: that
    # point stays (it spans the copy), so the dictionary is never empty and spans
    # every requested point
    arms, kernel = make_arms(num_arms=20)
    arms[1] = arms[0]
    state = CandidateState(arms, kernel, 0.5)
    state.update(torch.tensor([0, 1, 5]), torch.tensor([0.3, 0.1, -0.2]), None)
    state.set_dictionary(torch.tensor([0]))
    assert state.set_dictionary(torch.tensor([1])) == (0, 0)
    assert state.dictionary.tolist() == [0]
    assert_matches_scratch(state)
    assert state.set_dictionary(torch.tensor([1, 5])) == (1, 0)
    assert state.dictionary.tolist() == [0, 5]
    assert state.set_dictionary(torch.tensor([1])) == (1, 2)
    assert state.dictionary.tolist() == [1]
    assert_matches_scratch(state)


def test_set_targets_equals_a_state_built_on_those_targets(tkwargs):
    # new targets for every observation so far (as a loop's warped rewards): the
    # state is then the posterior of their sums from scratch, and later updates
    # (observations, dictionary changes) continue from them exactly
    arms, kernel = make_arms(num_arms=150, **tkwargs)
    state = CandidateState(arms, kernel, 0.2)
    generator = torch.Generator().manual_seed(6)
    scale = 30.0 if arms.dtype == torch.float32 else 1.0
    checks = 0
    for _ in random_walk(state, 200, seed=7, check_every=25):
        assert_matches_scratch(state, scale)  # later rewards added to the targets
        observations = torch.repeat_interleave(
            torch.arange(state.num_points, device=arms.device), state.counts.long()
        )
        order = torch.randperm(observations.numel(), generator=generator)
        observations = observations[order.to(arms.device)]
        targets = torch.randn(observations.numel(), generator=generator, dtype=DTYPE)
        variance = state.variance.clone()
        state.set_targets(observations, targets.to(arms))
        sums = torch.zeros(state.num_points, dtype=DTYPE).index_add_(
            0, observations.cpu(), targets
        )
        reference, _ = from_scratch(state, sums)
        assert_close(state.mean, reference, scale)
        assert torch.equal(state.variance, variance)
        checks += 1
    assert checks == 8
    observed = state.observed
    before = state.mean.clone()
    for bad, error, name in (
        (observed, ValueError, "indices"),  # each candidate once: not the multiset
        (observed.float(), TypeError, "indices"),
    ):
        with pytest.raises(error, match=name):
            state.set_targets(bad, torch.zeros(bad.shape[0]).to(arms))
    counts = state.counts.long()
    observations = torch.repeat_interleave(observed, counts[observed])
    for bad in (
        torch.full((observations.numel(),), float("nan")).to(arms),
        torch.zeros(observations.numel() + 1).to(arms),
    ):
        with pytest.raises(ValueError, match="targets"):
            state.set_targets(observations, bad)
    assert torch.equal(state.mean, before)


def test_refresh_with_a_new_noise_equals_from_scratch(tkwargs):
    arms, kernel = make_arms(num_arms=100, **tkwargs)
    state = CandidateState(arms, kernel, 1.0)
    for _ in random_walk(state, 100, seed=9):
        pass
    state.refresh(noise=0.05)
    assert state.noise == 0.05
    assert_matches_scratch(state, 30.0 if arms.dtype == torch.float32 else 1)


def scratch_twin(state: CandidateState) -> CandidateState:
    r"""A state built from scratch on ``state``'s points, observations (each copy
    with its candidate's mean reward: the same counts and sums) and dictionary
    (:meth:`CandidateState.from_observations`; the prior if it is empty)."""
    observed = state.observed
    counts = state.counts[observed]
    indices = observed.repeat_interleave(counts.long())
    rewards = (state.target_sums[observed] / counts).repeat_interleave(counts.long())
    if state.size == 0:
        scratch = CandidateState(state.points, state.kernel, state.noise)
        scratch.observe(indices, rewards)
        return scratch
    return CandidateState.from_observations(
        state.points,
        state.kernel,
        state.noise,
        indices,
        rewards,
        state.dictionary,
    )


def assert_same_posterior(state: CandidateState, tolerance: float = 1e-10) -> None:
    r"""``state`` agrees with :func:`scratch_twin` (float64 cache) to ``tolerance``
    (relative to each quantity's largest entry): mean, variance and explained
    variance, and the features and ``V^{-1}`` up to the rotation of the feature
    coordinates (orthogonal Procrustes: ``Phi = Phi_0 Q``, ``V^{-1} = Q^T
    V_0^{-1} Q``)."""
    scratch = scratch_twin(state)

    def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
        atol = tolerance * max(float(expected.abs().max()), 1.0)
        torch.testing.assert_close(actual.to(expected), expected, rtol=0, atol=atol)

    for name in ("mean", "variance", "explained_variance", "prior_variance"):
        close(getattr(state, name), getattr(scratch, name))
    assert state.num_points == scratch.num_points and state.size == scratch.size
    if state.size:
        features, reference = state.features.to(DTYPE), scratch.features
        left, _, right = torch.linalg.svd(reference.mT @ features)
        rotation = left @ right
        close(features, reference @ rotation)
        close(state.gram_inverse, rotation.mT @ scratch.gram_inverse @ rotation)


def grown_state(case: str, device=None, cache_dtype=None) -> CandidateState:
    r"""A state on the first 200 of :func:`make_arms`' 250 arms (lengthscale 0.3):
    ``"fresh"`` (the prior), ``"observed"`` (observations and a dictionary, one
    block of appends: ``s = m``) or ``"rotated"`` (dictionary points appended and
    removed since the last compaction: a reflected basis and ``s > m``)."""
    arms, kernel = make_arms(lengthscale=0.3, device=device)
    state = CandidateState(arms[:200], kernel, 0.1, cache_dtype=cache_dtype)
    if case == "fresh":
        return state
    generator = torch.Generator().manual_seed(10)
    indices = torch.randint(200, (60,), generator=generator)
    rewards = torch.randn(60, generator=generator, dtype=DTYPE).to(arms)
    state.update(indices, rewards, torch.unique(indices)[:25])
    if case == "rotated":
        state.add_to_dictionary(torch.tensor([3, 50, 97, 150]))
        for index in state.dictionary[[1, 4, 9, 20, 26]].tolist():
            state.remove_from_dictionary(index)
        assert state.num_raw > state.size
    return state


@pytest.mark.parametrize("case", ["fresh", "observed", "rotated"])
def test_appended_points_equal_a_state_built_on_all_points(case, device):
    arms, _ = make_arms(lengthscale=0.3, device=device)
    state = grown_state(case, device)
    stored, width = state.num_raw, state._store.buffer.shape[0]
    state.append_points(arms[200:230])
    assert state.num_points == 230 and state.num_raw == stored
    assert state._store.buffer.shape[0] == 230 + 230 // 8 > width  # spare rows
    assert_same_posterior(state)
    buffer = state._store.buffer
    for start in range(230, 250, 5):  # repeated appends fill the spare columns
        state.append_points(arms[start : start + 5])
        assert_same_posterior(state)
    assert state._store.buffer is buffer and state.num_points == 250
    # later updates see the appended candidates (observed, in the dictionary)
    state.observe(torch.tensor([201, 240, 240, 7]), torch.tensor([0.3, -1.0, 0.5, 2.0]))
    state.add_to_dictionary(torch.tensor([201, 240, 7]))
    assert_same_posterior(state)
    for _ in random_walk(state, 60, seed=11):
        pass
    assert_same_posterior(state, 1e-9)
    state.refresh()  # on the widened buffer
    assert_same_posterior(state)


def test_appended_points_with_a_single_precision_cache():
    arms, _ = make_arms(lengthscale=0.3)
    state = grown_state("rotated", cache_dtype=torch.float32)
    double = grown_state("rotated")
    for each in (state, double):
        each.append_points(arms[200:240])
        each.append_points(arms[240:])
        each.update(torch.tensor([210, 245, 3]), torch.tensor([0.2, 0.4, -0.1]), None)
        each.add_to_dictionary(torch.tensor([210, 245]))
    assert state.features.dtype == torch.float32 and state.mean.dtype == DTYPE
    assert_same_posterior(double)
    assert_same_posterior(state, 1e-5)


def snapshot(state: CandidateState) -> tuple:
    r"""What a failed call must leave as it was: the size, the flops, the very
    cache buffer and kernel columns, the mean, variance and features."""
    return (
        state.num_points,
        state.flops,
        state._store.buffer,
        state._columns,
        state.mean.clone(),
        state.variance.clone(),
        state.features.clone(),
    )


def assert_snapshot(state: CandidateState, expected: tuple) -> None:
    actual = snapshot(state)
    assert actual[:2] == expected[:2]
    assert actual[2] is expected[2] and actual[3] is expected[3]
    for ours, theirs in zip(actual[4:], expected[4:], strict=True):
        assert torch.equal(ours, theirs)


def test_append_points_checks_its_input_and_a_fault_changes_nothing(monkeypatch):
    arms, _ = make_arms(lengthscale=0.3)
    state, twin = grown_state("rotated"), grown_state("rotated")
    before = snapshot(state)
    new = arms[200:210]
    for bad, error in (
        (new[:, :2], ValueError),
        (new.float(), TypeError),
        (new[:0], ValueError),
        (new * float("nan"), ValueError),
        (new.tolist(), TypeError),
    ):
        with pytest.raises(error, match="points"):
            state.append_points(bad)
        assert_snapshot(state, before)

    def broken(self, points):
        raise RuntimeError("injected fault")

    # a fault after the new raw columns were written: into a new buffer (the
    # first append), then into the spare columns of the held one (the second);
    # a retry equals a twin that never failed
    for block in (new, arms[210:212]):
        before = snapshot(state)
        monkeypatch.setattr(KernelColumns, "extended", broken)
        with pytest.raises(RuntimeError, match="injected fault"):
            state.append_points(block)
        monkeypatch.undo()
        assert_snapshot(state, before)
        for each in (state, twin):
            each.append_points(block)
        ours, theirs = snapshot(state), snapshot(twin)
        assert ours[:2] == theirs[:2]
        for actual, expected in zip(ours[4:], theirs[4:], strict=True):
            assert torch.equal(actual, expected)
    assert state._store.buffer.shape == twin._store.buffer.shape


def test_append_points_keeps_the_memory_budget():
    arms, kernel = make_arms(num_arms=300, lengthscale=0.3)
    row = 200 * 8 * 32  # 32 feature columns of the first 200 candidates
    state = CandidateState(arms[:200], kernel, 1.0, memory_budget=row * 205 // 200)
    state.update(torch.arange(10), torch.ones(10, dtype=DTYPE), torch.arange(10))
    before = snapshot(state)
    with pytest.raises(MemoryError, match="memory_budget"):
        state.append_points(arms[200:220])
    assert_snapshot(state, before)
    state.append_points(arms[200:204])  # fits, with less spare than A / 8
    assert state._store.buffer.shape == (205, 32)
    assert_same_posterior(state)
