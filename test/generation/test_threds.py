import copy
import math
import pickle

import pytest
import torch

from botorch_sketch.generation.threds import (
    GPThreDS,
    ThresholdSearch,
    default_threds_kernel,
)
from botorch_sketch.generation.threds_geometry import sub_cubes

DTYPE = torch.float64
UNIT = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
USER = torch.tensor([[-1.0, 2.0], [1.0, 6.0]], dtype=DTYPE)
PATTERN = [True, True, True, False, True, True, False, True]  # S S S F S S F S
THRESHOLDS = [
    0.85, 0.955, 1.0425, 1.10375, 1.0075, 1.046875, 1.0709375, 1.038125, 1.05234375,
]  # fmt: skip


def branin(X):
    u = 15 * X[..., 0] - 5
    v = 15 * X[..., 1]
    inner = v - 5.1 * u**2 / (4 * math.pi**2) + 5 * u / math.pi - 6
    return -(inner**2 + 10 * (1 - 1 / (8 * math.pi)) * torch.cos(u) - 44.81) / 51.95


def noisy(f, seed):
    r"""``f`` plus ``N(0, 0.01)`` noise drawn on the CPU (then moved to ``X``'s
    device), so every device observes the same values."""
    gen = torch.Generator().manual_seed(seed)

    def observe(X):
        noise = torch.randn(X.shape[0], generator=gen, dtype=X.dtype)
        return f(X) + 0.1 * noise.to(X.device)

    return observe


def test_threshold_search_follows_the_spec_sequence():
    search = ThresholdSearch((0.5, 1.2), c_coef=0.4)
    thresholds, epochs = [search.threshold], [search.epoch]
    for success in PATTERN:
        search.update(success)
        thresholds.append(search.threshold)
        epochs.append(search.epoch)
    assert thresholds == pytest.approx(THRESHOLDS, abs=1e-12)
    assert epochs == [1, 2, 3, 4, 4, 5, 6, 6, 7]
    # A failure halves [a, b] downwards: [a - (b - a) / 2, tau].
    search = ThresholdSearch((0.0, 1.0), c_coef=0.4)
    search.update(False)
    assert (search.lower, search.upper) == (-0.5, 0.5)


def test_generator_threshold_sequence_from_real_tests():
    # max_depth=0 keeps testing the root; observations far above tau make every leaf
    # pass (success), far below make the test stop negative (failure).
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), max_depth=0)
    thresholds, epochs = [gen.threshold], [gen.epoch]
    for success in PATTERN:
        drive_epochs(gen, [success])
        thresholds.append(gen.threshold)
        epochs.append(gen.epoch)
        assert gen.level == 0 and torch.equal(gen.cubes, UNIT.unsqueeze(0))
    assert thresholds == pytest.approx(THRESHOLDS, abs=1e-12)
    assert epochs == [1, 2, 3, 4, 4, 5, 6, 6, 7]


def test_first_query_and_user_bounds():
    gen = GPThreDS(USER, f_range=(0.5, 1.2))
    expected = USER[0] + 9 / 19 * (USER[1] - USER[0])  # grid index ceil(20 / 2)
    torch.testing.assert_close(gen.ask(), expected.unsqueeze(0))
    gen = GPThreDS(USER, f_range=(0.5, 1.2), grid_points=21)
    torch.testing.assert_close(gen.ask(), USER.mean(dim=0, keepdim=True))
    assert gen.epoch == 1 and gen.threshold == pytest.approx(0.85)
    assert gen.interval == (0.5, 1.2)
    torch.testing.assert_close(gen.cubes, USER.unsqueeze(0))
    assert gen.current_test.num_observations == 0


def test_successful_epoch_refines_to_the_declared_leaves():
    gen = GPThreDS(USER, f_range=(0.5, 1.2))
    for _ in range(4):  # far above tau: one leaf declared per query
        gen.tell(gen.ask(), torch.tensor([5.0], dtype=DTYPE))
    assert gen.epoch == 2 and gen.level == 1 and gen.num_queries == 4
    assert gen.interval == pytest.approx((0.85 - 0.4 * 0.5 * 0.7, 1.2))
    leaves = sub_cubes(UNIT.unsqueeze(0))[0]
    expected = USER[0] + leaves * (USER[1] - USER[0])
    assert sorted(map(str, gen.cubes.tolist())) == sorted(map(str, expected.tolist()))
    assert gen.cubes.tolist()[0] == expected[0].tolist()  # leaf 0 is declared first
    # The next test is on the first new cube, with the same first-query rule.
    cube = gen.current_test.box
    torch.testing.assert_close(gen.current_test.next_point[0], cube[0] + 9 / 19 * 0.5)


def test_max_depth_keeps_the_deepest_cubes():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), max_depth=1)
    for _ in range(4 + 16 + 16):
        gen.tell(gen.ask(), torch.tensor(gen.threshold + 5.0, dtype=DTYPE))
    assert gen.epoch == 4 and gen.level == 1
    assert gen.cubes.shape == (4, 2, 2)
    assert ((gen.cubes[:, 1] - gen.cubes[:, 0]) == 0.5).all()


def drive_epochs(gen, pattern):
    r"""Observe far above (success) or below (failure) tau until each epoch ends."""
    for success in pattern:
        epoch, interval = gen.epoch, gen.interval
        while gen.epoch == epoch and gen.interval == interval:
            value = gen.threshold + (5.0 if success else -10.0)
            gen.tell(gen.ask(), torch.tensor(value, dtype=DTYPE))


@pytest.mark.parametrize("readmit_after", [None, 2])
def test_readmission_guard_extension(readmit_after):
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), readmit_after=readmit_after)
    drive_epochs(gen, [True, True, False])
    assert gen.level == 2 and gen.cubes.shape[0] == 16
    drive_epochs(gen, [False])
    if readmit_after is None:  # the paper: shrinking is irreversible
        assert gen.level == 2 and gen.cubes.shape[0] == 16
    else:  # two failures in a row: back to the 4 cubes of level 1
        assert gen.level == 1
        assert torch.equal(gen.cubes, sub_cubes(UNIT.unsqueeze(0))[0])
        drive_epochs(gen, [False, False])  # and then to the root
        assert gen.level == 0 and torch.equal(gen.cubes, UNIT.unsqueeze(0))
        drive_epochs(gen, [False, False])  # nothing above the root
        assert gen.level == 0
    assert gen.epoch == 3  # failures never move k


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("mode", ["cube", "rwt"])
def test_each_test_starts_from_the_earlier_observations_inside_its_box(
    mode, reuse, tkwargs
):
    user = USER.to(**tkwargs)
    gen = GPThreDS(user, f_range=(0.5, 1.2), mode=mode, reuse_observations=reuse)
    f = noisy(lambda X: branin((X - user[0]) / (user[1] - user[0])), 2)
    queries, starts, test = [], 0, None
    while len(queries) < 300:
        if gen.current_test is not test:  # a new test: brute-force count
            test, box = gen.current_test, gen.current_test.box
            lower, upper = box[0] - 1e-9, box[1] + 1e-9  # faces up to rounding
            inside = [q for q in queries if ((q >= lower) & (q <= upper)).all()]
            # Extension: all earlier queries in the (closed) box; paper: none.
            assert test.num_observations == (len(inside) if reuse else 0)
            starts += bool(inside)
        x = gen.ask()
        queries.append((x[0] - user[0]) / (user[1] - user[0]))
        gen.tell(x, f(x))
    assert starts >= 3  # later tests did find earlier queries in their boxes


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("mode", ["cube", "rwt"])
@pytest.mark.parametrize("T", [1, 137])
def test_run_makes_exactly_T_queries(mode, T, reuse, tkwargs):
    calls = []
    f = noisy(branin, 0)

    def counted(X):
        calls.append(X)
        return f(X)

    bounds = UNIT.to(**tkwargs)
    gen = GPThreDS(bounds, f_range=(0.5, 1.2), mode=mode, reuse_observations=reuse)
    X, Y = gen.run(counted, T)
    assert len(calls) == T and gen.num_queries == T
    assert X.shape == (T, 2) and Y.shape == (T,)
    assert X.dtype == Y.dtype == tkwargs["dtype"] and X.device == bounds.device
    assert torch.isfinite(Y).all()
    assert torch.equal(X, torch.cat(calls))
    assert ((X >= 0) & (X <= 1)).all()


def test_budget_can_end_a_test_midway():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
    gen.run(noisy(branin, 1), 3)
    assert gen.current_test.num_observations == 3 and not gen.current_test.finished


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("mode", ["cube", "rwt"])
def test_deterministic_under_a_seed(mode, reuse):
    runs = []
    for seed in (5, 5, 6):
        gen = GPThreDS(
            UNIT, f_range=(0.5, 1.2), mode=mode, seed=seed, reuse_observations=reuse
        )
        runs.append(gen.run(noisy(branin, seed), 100))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], runs[2][0])
    if mode == "rwt":  # the seed alone changes the walk's first queries
        gen = GPThreDS(UNIT, f_range=(0.5, 1.2), mode=mode, seed=6)
        assert not torch.equal(gen.run(noisy(branin, 5), 100)[0], runs[0][0])


def test_branin_run_shrinks_towards_a_maximizer():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
    X, _ = gen.run(noisy(branin, 4), 600)
    # The cubes cover at most a quarter of the box ...
    area = float((gen.cubes[:, 1] - gen.cubes[:, 0]).prod(dim=-1).sum())
    assert gen.level >= 3 and area <= 0.25
    # ... one of them is centred within 0.03 of Branin's maximum 1.0474, and late
    # queries are good ones.
    assert float(branin(gen.cubes.mean(dim=1)).max()) > 1.02
    assert float(branin(X[-100:]).mean()) > 0.95


def test_default_kernel_values_are_exact():
    kernel = default_threds_kernel(0.2, 1.0)
    assert float(kernel.base_kernel.lengthscale) == 0.2
    assert float(kernel.outputscale) == 1.0
    assert not any(p.requires_grad for p in kernel.parameters())


def test_custom_kernel_is_copied():
    kernel = default_threds_kernel(0.3, 2.0, dtype=torch.float32)
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), covar_module=kernel)
    gen.run(noisy(branin, 0), 5)
    assert gen.covar_module is not kernel
    assert float(gen.covar_module.outputscale) == pytest.approx(2.0)
    assert gen.covar_module.outputscale.dtype == DTYPE
    assert kernel.outputscale.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bounds": torch.tensor([[0.0, 1.0], [1.0, 1.0]], dtype=DTYPE)}, ValueError,
         "lower < upper"),
        ({"bounds": torch.tensor([[0.0, 0.0], [1.0, float("nan")]])}, ValueError,
         "bounds"),
        ({"f_range": None}, ValueError, "no safe default"),
        ({"f_range": (1.0, 1.0)}, ValueError, "f_range"),
        ({"f_range": (0.0, math.inf)}, ValueError, "f_range"),
        ({"noise": 0.0}, ValueError, "noise"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"grid_points": 1}, ValueError, "grid_points"),
        ({"cap": 0}, ValueError, "cap"),
        ({"cap": 2.5}, TypeError, "cap"),
        ({"max_depth": -1}, ValueError, "max_depth"),
        ({"mode": "walk"}, ValueError, "mode"),
        ({"covar_module": "rbf"}, TypeError, "covar_module"),
        ({"gamma": 3.0}, TypeError, "gamma"),
        ({"rkhs_bound": -1.0}, ValueError, "rkhs_bound"),
        ({"readmit_after": 0}, ValueError, "readmit_after"),
        ({"reuse_observations": 1}, TypeError, "reuse_observations"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)  # fmt: skip
def test_bad_arguments(kwargs, error, match):
    arguments = {"bounds": UNIT, "f_range": (0.5, 1.2)} | kwargs
    bounds = arguments.pop("bounds")
    with pytest.raises(error, match=match):
        GPThreDS(bounds, **arguments)


def test_bad_observations_change_nothing():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
    gen.run(noisy(branin, 0), 2)
    x = gen.ask()
    bad = [
        (x, torch.tensor([float("nan")], dtype=DTYPE), ValueError, "Y"),
        (x, torch.tensor([math.inf], dtype=DTYPE), ValueError, "Y"),
        (x, torch.tensor([1.0, 2.0], dtype=DTYPE), ValueError, "Y"),
        (x, torch.tensor([1]), TypeError, "Y"),
        (x[0], torch.tensor([1.0], dtype=DTYPE), ValueError, "X"),
        (x + 0.01, torch.tensor([1.0], dtype=DTYPE), ValueError, "ask"),
    ]
    for X, Y, error, match in bad:
        with pytest.raises(error, match=match):
            gen.tell(X, Y)
    assert gen.num_queries == 2 and gen.current_test.num_observations == 2
    assert torch.equal(gen.ask(), x)
    with pytest.raises(ValueError, match="T"):
        gen.run(noisy(branin, 0), 0)


def test_caller_thread_setting_is_restored():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
        gen.run(noisy(branin, 0), 10)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def user_branin(X):
    return branin((X - USER[0]) / (USER[1] - USER[0]))


@pytest.mark.parametrize(
    "options",
    [{}, {"reuse_observations": True}, {"mode": "rwt", "seed": 3, "readmit_after": 1}],
)
def test_resume_mid_run_makes_the_same_queries(options):
    def make():
        return GPThreDS(USER, f_range=(0.5, 1.2), **options)

    whole = make()
    X_ref, _ = whole.run(noisy(user_branin, 3), 230)
    f = noisy(user_branin, 3)
    first = make()
    first.run(f, 157)  # stops inside a test (checked below), after some epochs
    assert first.epoch > 1 and 0 < first.current_test.num_observations
    state = first.state_dict()
    assert state["X"].shape == (157, 2) and state["Y"].shape == (157,)
    resumed = make()
    resumed.run(noisy(user_branin, 9), 20)  # loading replaces a run in progress
    resumed.load_state_dict(state)
    X, _ = resumed.run(f, 73)
    assert torch.equal(X, X_ref[157:])
    assert (resumed.epoch, resumed.threshold, resumed.level, resumed.num_queries) == (
        whole.epoch,
        whole.threshold,
        whole.level,
        whole.num_queries,
    )
    assert torch.equal(resumed.cubes, whole.cubes)
    saved, expected = resumed.state_dict(), whole.state_dict()
    assert saved.pop("options") == expected.pop("options")
    for key, value in saved.items():
        assert torch.equal(value, expected[key])


def test_empty_state_is_a_fresh_start():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
    state = gen.state_dict()
    assert state["X"].shape == (0, 2) and state["Y"].shape == (0,)
    gen.run(noisy(branin, 0), 30)
    gen.load_state_dict(state)
    assert gen.num_queries == 0 and gen.epoch == 1
    fresh = GPThreDS(UNIT, f_range=(0.5, 1.2))
    assert torch.equal(gen.run(branin, 40)[0], fresh.run(branin, 40)[0])


@pytest.mark.parametrize("copier", ["pickle", "deepcopy"])
@pytest.mark.parametrize("mode", ["cube", "rwt"])
def test_pickle_and_deepcopy_continue_identically(copier, mode):
    gen = GPThreDS(USER, f_range=(0.5, 1.2), mode=mode, reuse_observations=True)
    gen.run(noisy(user_branin, 1), 120)
    saved = gen.state_dict()
    if copier == "pickle":
        twin = pickle.loads(pickle.dumps(gen))
    else:
        twin = copy.deepcopy(gen)
    assert type(twin) is GPThreDS and twin.covar_module is not gen.covar_module
    X_twin, _ = twin.run(user_branin, 60)
    assert _same_state(gen.state_dict(), saved)  # the copy is independent
    assert torch.equal(gen.run(user_branin, 60)[0], X_twin)


def test_pickle_with_the_former_options_is_rejected():
    # Former pickles held the options as a dict (once with `rkhs_bound` /
    # `noise_std` as B / R): unpickling one must fail loudly, not fall back to the
    # defaults.
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), rkhs_bound=2.0, noise_std=0.3)
    gen.run(noisy(branin, 0), 5)
    saved = gen.__getstate__()
    options = {"f_range": (0.5, 1.2), "B": 2.0, "R": 0.3}
    with pytest.raises(TypeError, match="`options` must be a GPThreDSOptions"):
        GPThreDS.__new__(GPThreDS).__setstate__(saved | {"options": options})
    twin = pickle.loads(pickle.dumps(gen))
    assert (twin.options.rkhs_bound, twin.options.noise_std) == (2.0, 0.3)


def test_rejected_loads_change_nothing():
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2))
    gen.run(noisy(branin, 0), 60)
    good = gen.state_dict()
    other = GPThreDS(UNIT, f_range=(0.0, 1.0))  # other options: other queries
    other.run(noisy(branin, 0), 60)
    shifted = good["X"].clone()
    shifted[41] += 0.01
    bad = [
        ([good["X"], good["Y"]], TypeError, "state"),
        ({"X": good["X"]}, ValueError, "'Y'"),
        (good | {"generator": None}, ValueError, "generator"),
        (good | {"X": good["X"].tolist()}, TypeError, "state\\['X'\\]"),
        (good | {"Y": good["Y"].long()}, TypeError, "state\\['Y'\\]"),
        (good | {"X": good["X"][:, :1]}, ValueError, "state\\['X'\\]"),
        (good | {"Y": good["Y"][:-1]}, ValueError, "state\\['Y'\\]"),
        (good | {"Y": good["Y"].clone().fill_(math.nan)}, ValueError, "state\\['Y'\\]"),
        (good | {"X": shifted}, ValueError, "state\\['X'\\]` row 41"),
        (other.state_dict(), ValueError, "state\\['options'\\].*'f_range'"),
        (other.state_dict() | {"options": good["options"]}, ValueError, "query"),
    ]
    x = gen.ask()
    for state, error, match in bad:
        with pytest.raises(error, match=match):
            gen.load_state_dict(state)
        assert gen.num_queries == 60 and torch.equal(gen.ask(), x)
        assert _same_state(gen.state_dict(), good)
    twin = GPThreDS(UNIT, f_range=(0.5, 1.2))
    twin.load_state_dict(good)
    assert torch.equal(gen.run(branin, 50)[0], twin.run(branin, 50)[0])


def test_bad_option_types_are_named():
    # Issue 14 item 9: half-precision bounds, non-numeric ranges and a gamma that
    # returns NaN raise ValueError/TypeError naming the argument.
    with pytest.raises(TypeError, match="`bounds`"):
        GPThreDS(UNIT.half(), f_range=(0.5, 1.2))
    with pytest.raises(TypeError, match="`f_range`"):
        GPThreDS(UNIT, f_range=("a", "b"))
    with pytest.raises(TypeError, match="`f_range`"):
        GPThreDS(UNIT, f_range=5)
    with pytest.raises(ValueError, match="`gamma`"):
        GPThreDS(UNIT, f_range=(0.5, 1.2), gamma=lambda n: math.nan)
    with pytest.raises(ValueError, match="`noise`"):
        GPThreDS(UNIT, f_range=(0.5, 1.2), noise=1e-300)


def test_gamma_failing_mid_run_changes_nothing():
    # gamma turns NaN at the 5th observation of a test: tell raises ValueError
    # naming gamma, and the generator is left as it was before that call.
    gen = GPThreDS(
        UNIT, f_range=(0.5, 1.2), gamma=lambda n: math.log(n) if n < 5 else math.nan
    )
    f = noisy(branin, 0)
    for _ in range(4):
        x = gen.ask()
        gen.tell(x, torch.as_tensor(f(x), dtype=DTYPE))
    before = gen.state_dict()
    x = gen.ask()
    with pytest.raises(ValueError, match="`gamma`"):
        gen.tell(x, torch.tensor(0.3, dtype=DTYPE))
    after = gen.state_dict()
    assert _same_state(before, after)
    assert gen.num_queries == 4 and torch.equal(gen.ask(), x)


class _FlakyGamma:
    r"""``math.log`` that raises once, at its ``fail_at``-th call (a fault inside
    the model update of a running loop)."""

    def __init__(self, fail_at):
        self.calls, self.fail_at = 0, fail_at

    def __call__(self, n):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected fault")
        return math.log(n)


@pytest.mark.parametrize("mode", ["cube", "rwt"])
def test_fault_injection_retry_and_round_trip_lose_nothing(mode):
    # An exception inside tell's update, then a retry, then state_dict /
    # load_state_dict: the run makes exactly the queries of an unfaulted run.
    f = noisy(branin, 1)
    reference = GPThreDS(UNIT, f_range=(0.5, 1.2), mode=mode, seed=2)
    X_ref, _ = reference.run(f, 40)
    f = noisy(branin, 1)
    gen = GPThreDS(UNIT, f_range=(0.5, 1.2), mode=mode, seed=2, gamma=_FlakyGamma(12))
    faults = 0
    for t in range(40):
        x = gen.ask()
        y = torch.as_tensor(f(x), dtype=DTYPE)
        try:
            gen.tell(x, y)
        except RuntimeError:
            faults += 1
            assert gen.num_queries == t
            gen.tell(x, y)  # the retry
        if t == 20:
            state = gen.state_dict()
            gen = GPThreDS(UNIT, f_range=(0.5, 1.2), mode=mode, seed=2)
            gen.load_state_dict(state)
    assert faults == 1
    assert torch.equal(gen.state_dict()["X"], X_ref)


def _same_state(first: dict, second: dict) -> bool:
    r"""Whether two :meth:`GPThreDS.state_dict` are equal (tensors and options)."""
    return first.keys() == second.keys() and all(
        torch.equal(value, second[key])
        if isinstance(value, torch.Tensor)
        else value == second[key]
        for key, value in first.items()
    )


def test_best_is_the_query_with_the_largest_value_in_user_bounds():
    gen = GPThreDS(USER, f_range=(0.5, 1.2))
    with pytest.raises(ValueError, match=r"tell\(X, Y\)"):
        gen.best()
    X, Y = gen.run(lambda X: noisy(branin, 2)((X - USER[0]) / (USER[1] - USER[0])), 50)
    position = int(Y.argmax())  # the first of equal maxima
    point, value = gen.best()
    assert value == float(Y[position]) and torch.equal(point, X[position])
    assert point.shape == (2,)
