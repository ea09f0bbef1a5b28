r"""GP-ThreDS local tests: the stopping rules on hand-made bounds and full replays
against a from-scratch exact GP, for every dtype and device (``tkwargs``)."""

import math

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.means import ZeroMean

from botorch_sketch.generation.threds import default_threds_kernel
from botorch_sketch.generation.threds_geometry import cube_grid, first_query_index
from botorch_sketch.generation.threds_local import (
    LocalTest,
    decide,
    first_argmax,
    threds_radius,
)

from ..gp_helpers import seeded, uniform

DTYPE = torch.float64
GROUP = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
ALL_OPEN = torch.ones(8, dtype=torch.bool)


def test_radius_values():
    # The radius at n = 1 for the defaults: 0.5 + 0.1 sqrt(2 (0 + 1 + log 1000)).
    assert threds_radius(1, 0.5, 0.1, 1e-3) == pytest.approx(0.8977, abs=5e-5)
    assert threds_radius(10, 0.5, 0.1, 1e-3) == pytest.approx(
        0.5 + 0.1 * math.sqrt(2 * (math.log(10) + 1 + math.log(1000)))
    )
    # Rosenbrock's rkhs_bound = 2; gamma = sqrt (Matern-like kernels).
    assert threds_radius(4, 2.0, 0.1, 1e-3, math.sqrt) == pytest.approx(
        2.0 + 0.1 * math.sqrt(2 * (2 + 1 + math.log(1000)))
    )


def bounds(ucb, lcb, tkwargs):
    r"""UCB, LCB, group and all-open tensors of the 8-point example on a device."""
    device = tkwargs["device"]
    return (
        torch.tensor(ucb, **tkwargs),
        torch.tensor(lcb, **tkwargs),
        GROUP.to(device),
        ALL_OPEN.to(device),
    )


def test_negative_stop_comes_first(tkwargs):
    # max UCB 0.7 < tau - tol = 0.75: stop, even with the cap reached.
    ucb, lcb, GROUP, ALL_OPEN = bounds(
        [0.1, 0.7, 0.2, 0.3, 0.0, 0.0, 0.6, 0.1], [-1.0] * 8, tkwargs
    )
    decision = decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 50, 50)
    assert (decision.kind, decision.group, decision.next_index) == ("stop", None, 1)
    # Strict inequality: max UCB exactly tau - tol does not stop.
    ucb[1] = 0.75
    assert decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 1, 50).kind == "continue"


def test_positive_declares_the_leaf_of_the_max_lcb(tkwargs):
    ucb, lcb, GROUP, ALL_OPEN = bounds(
        [2.0, 3.0, 1.5, 1.5, 2.5, 2.9, 1.0, 1.0],
        [0.5, 0.9, 0.8, 0.2, 1.2, 1.4, 0.1, 0.0],
        tkwargs,
    )
    decision = decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 3, 50)
    # max LCB 1.4 at point 5 (leaf 2); the next query is the max UCB point 1.
    assert (decision.kind, decision.group, decision.next_index) == ("positive", 2, 1)
    # Strict inequality: max LCB exactly tau is not positive.
    lcb = torch.where(lcb > 1.0, torch.ones_like(lcb), lcb)
    assert decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 3, 50).kind == "continue"


def test_declared_leaves_are_ignored(tkwargs):
    ucb, lcb, GROUP, ALL_OPEN = bounds(
        [2.0, 3.0, 1.5, 1.5, 2.5, 2.9, 1.0, 1.0],
        [0.5, 0.9, 0.8, 0.2, 1.2, 1.4, 0.1, 0.0],
        tkwargs,
    )
    open_points = GROUP != 2
    decision = decide(ucb, lcb, GROUP, open_points, 1.0, 0.25, 3, 50)
    assert (decision.kind, decision.group, decision.next_index) == ("continue", None, 1)
    open_points &= GROUP != 0  # now the max UCB is 1.5 at point 2 (lowest index)
    decision = decide(ucb, lcb, GROUP, open_points, 1.0, 0.25, 50, 50)
    # Cap: the leaf of the max LCB among open points (0.8 at point 2, leaf 1).
    assert (decision.kind, decision.group, decision.next_index) == ("cap", 1, 2)
    # Only leaf 3 left, its UCB 1.0 is not below 0.75.
    open_points = GROUP == 3
    decision = decide(ucb, lcb, GROUP, open_points, 1.0, 0.25, 49, 50)
    assert (decision.kind, decision.next_index) == ("continue", 6)
    assert decide(ucb, lcb, GROUP, open_points, 1.3, 0.25, 49, 50).kind == "stop"


def test_cap_declares_the_leaf_of_the_max_lcb(tkwargs):
    ucb, lcb, GROUP, ALL_OPEN = bounds(
        [1.9] * 8, [0.1, 0.2, 0.3, 0.9, 0.4, 0.5, 0.6, 0.7], tkwargs
    )
    assert decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 49, 50).kind == "continue"
    decision = decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 50, 50)
    # Ties of the max UCB go to the lowest index.
    assert (decision.kind, decision.group, decision.next_index) == ("cap", 1, 0)


def test_near_ties_go_to_the_lowest_index(device):
    # The slack depends on the dtype, so this test spells both out (every device).
    values = torch.tensor(
        [0.5, 2.0, 2.0 + 1e-12, 1.0, 2.0 + 1e-6], dtype=DTYPE, device=device
    )
    assert first_argmax(values) == 4  # 1e-6 is a real difference
    values[4] = 2.0
    assert first_argmax(values) == 1  # 1e-12 is rounding
    # float32: sqrt(eps) = 3.5e-4, so 1e-6 is rounding; -inf entries are ignored.
    values = torch.tensor([-math.inf, 3.0, 3.0 + 1e-6, 2.0], device=device)
    assert first_argmax(values) == 1
    # decide() uses it for the next query and for the declared leaf.
    ucb, lcb, GROUP, ALL_OPEN = bounds(
        [1.0, 2.0, 2.0 + 1e-13, 2.0] + [0.0] * 4,
        [0.0] * 8,
        {"dtype": DTYPE, "device": device},
    )
    lcb[3], lcb[6] = 1.5, 1.5 + 1e-13  # leaf 1 (index 3) and leaf 3 (index 6)
    decision = decide(ucb, lcb, GROUP, ALL_OPEN, 1.0, 0.25, 1, 50)
    assert (decision.kind, decision.group, decision.next_index) == ("positive", 1, 1)


def reference_bounds(grid, X, y, kernel, radius):
    r"""UCB and LCB lists on ``grid`` of a zero-mean ``SingleTaskGP`` fitted from
    scratch to ``(X, y)`` with noise 0.01, in ``grid``'s dtype and device."""
    model = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        train_Yvar=torch.full((len(y), 1), 0.01, dtype=X.dtype, device=X.device),
        covar_module=kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    )
    with torch.no_grad():
        posterior = model.posterior(grid)
    mean = posterior.mean.squeeze(-1).tolist()
    sd = posterior.variance.squeeze(-1).sqrt().tolist()
    pairs = list(zip(mean, sd, strict=True))
    return [m + radius * s for m, s in pairs], [m - radius * s for m, s in pairs]


def replay_against_exact_gp(test, grid, leaf, f, *, reused=None, seed=1):
    r"""Drive ``test`` to its end; check every step against a from-scratch exact GP.

    The observation noise is drawn on the CPU in float64, so every dtype and device
    sees the same data. Near-ties (within ``sqrt(eps)`` of the dtype, relative) go to
    the lowest index. Returns the decision kinds seen and the groups declared.
    """
    tau, tol, cap = test.threshold, test.tolerance, test.cap
    gen = seeded(seed)
    X, Y = ([], []) if reused is None else (list(reused[0]), reused[1].tolist())
    declared, since, kinds = [], 0, set()
    kernel = kernel_like(grid)
    slack = math.sqrt(torch.finfo(grid.dtype).eps)

    def brute_force_argmaxes():
        ucb, lcb = reference_bounds(
            grid, torch.stack(X), torch.tensor(Y, dtype=grid.dtype, device=grid.device),
            kernel, threds_radius(len(Y), 0.5, 0.1, 1e-3),
        )  # fmt: skip
        open_idx = [i for i in range(len(grid)) if int(leaf[i]) not in declared]
        # Tie rule: the lowest index among (near-)maximal values.
        u_top, l_top = max(ucb[i] for i in open_idx), max(lcb[i] for i in open_idx)
        u_best = min(i for i in open_idx if ucb[i] >= u_top - slack * (1 + abs(u_top)))
        l_best = min(i for i in open_idx if lcb[i] >= l_top - slack * (1 + abs(l_top)))
        return ucb[u_best], u_best, lcb[l_best], l_best

    # The first query: the fixed one, or argmax UCB given the reused data.
    expected_next = (
        first_query_index(6, 2) if reused is None else brute_force_argmaxes()[1]
    )
    while not test.finished:
        assert test.next_index == expected_next
        x = test.next_point
        y = f(x[0]) + 0.1 * float(torch.randn(1, generator=gen, dtype=DTYPE))
        decision = test.observe(y)
        X.append(x[0])
        Y.append(y)
        since += 1
        u_max, u_best, l_max, l_best = brute_force_argmaxes()
        if u_max < tau - tol:
            kind = "stop"
        elif l_max > tau:
            kind = "positive"
        elif since == cap:
            kind = "cap"
        else:
            kind = "continue"
        assert decision.kind == kind
        assert decision.next_index == u_best
        kinds.add(kind)
        if kind in ("positive", "cap"):
            assert decision.group == int(leaf[l_best])
            declared.append(int(leaf[l_best]))
            since = 0
        expected_next = u_best
    assert test.declared == declared
    assert test.num_observations == len(Y)
    return kinds, declared


PEAK = (0.4, 0.1)


def peaked(x):
    peak = torch.tensor(PEAK, dtype=x.dtype, device=x.device)
    return 1.0 - 4.0 * float(((x - peak) ** 2).sum())


def kernel_like(like):
    r"""The paper's default kernel in ``like``'s dtype and device."""
    return default_threds_kernel(dtype=like.dtype, device=like.device)


def unit_cube(edge, tkwargs):
    return torch.tensor([[0.0, 0.0], [edge, edge]], **tkwargs)


def make_test(grid, leaf, cube, reused=None):
    reused_X, reused_Y = (None, None) if reused is None else reused
    test = LocalTest(
        grid, leaf, 4, cube, threshold=0.8, tolerance=0.05,
        radius=lambda n: threds_radius(n, 0.5, 0.1, 1e-3), kernel=kernel_like(grid),
        noise=0.01, cap=4, first_index=first_query_index(6, 2), reused_X=reused_X,
        reused_Y=reused_Y,
    )  # fmt: skip
    return test


def test_local_test_replays_the_rules_against_an_exact_gp(tkwargs):
    cube = unit_cube(0.5, tkwargs)
    grid, leaf = cube_grid(cube, 6)
    test = make_test(grid, leaf, cube)
    kinds, declared = replay_against_exact_gp(test, grid, leaf, peaked)
    # The replay went through every rule (the far leaf is dropped at the end).
    assert kinds == {"continue", "positive", "cap", "stop"}
    assert test.stopped and len(declared) == 3 and test.decisions.count("cap") == 2
    with pytest.raises(RuntimeError, match="finished"):
        test.observe(0.0)


def test_reused_observations_extension_against_an_exact_gp(tkwargs):
    cube = unit_cube(0.5, tkwargs)
    grid, leaf = cube_grid(cube, 6)
    reused_X = uniform(5, 2, seed=3, scale=0.5, **tkwargs)  # off the grid
    reused_Y = torch.tensor([peaked(x) for x in reused_X], **tkwargs)
    test = make_test(grid, leaf, cube, (reused_X, reused_Y))
    assert test.num_observations == 5 and test.since_declaration == 0
    kinds, declared = replay_against_exact_gp(
        test, grid, leaf, peaked, reused=(reused_X, reused_Y)
    )
    assert "positive" in kinds and declared
    # The reused data settle the test faster than the prior start.
    fresh = make_test(grid, leaf, cube)
    replay_against_exact_gp(fresh, grid, leaf, peaked)
    assert test.num_observations - 5 < fresh.num_observations


def test_reused_observations_bad_input():
    cube = unit_cube(0.5, {"dtype": DTYPE, "device": None})
    grid, leaf = cube_grid(cube, 6)
    X = torch.zeros(2, 2, dtype=DTYPE)
    with pytest.raises(ValueError, match="reused_Y"):
        make_test(grid, leaf, cube, (X, None))
    with pytest.raises(ValueError, match="reused_X"):
        make_test(grid, leaf, cube, (X, torch.zeros(3, dtype=DTYPE)))
    with pytest.raises(ValueError, match="reused_X"):
        make_test(grid, leaf, cube, (torch.zeros(2, 3, dtype=DTYPE), X[:, 0]))


@pytest.mark.parametrize(("value", "stopped"), [(-10.0, True), (5.0, False)])
def test_constant_functions(value, stopped, tkwargs):
    cube = unit_cube(1.0, tkwargs)
    grid, leaf = cube_grid(cube, 20)
    test = LocalTest(
        grid, leaf, 4, cube, threshold=0.85, tolerance=0.2,
        radius=lambda n: threds_radius(n, 0.5, 0.1, 1e-3),
        kernel=kernel_like(grid), noise=0.01, cap=50,
        first_index=first_query_index(20, 2),
    )  # fmt: skip
    while not test.finished:
        test.observe(value)
    assert test.stopped == stopped
    if stopped:  # far below tau: nothing declared, long before the cap
        assert test.declared == [] and test.num_observations < 50
    else:  # far above tau: one positive declaration per query
        assert sorted(test.declared) == [0, 1, 2, 3]
        assert test.decisions == ["positive"] * 4 and test.num_observations == 4
        assert test.declared[0] == 0  # the first query (9/19, 9/19) lies in leaf 0
