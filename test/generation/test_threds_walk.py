import torch

from botorch_sketch.generation.threds_geometry import sub_cubes
from botorch_sketch.generation.threds_walk import random_walk

DTYPE = torch.float64
UNIT = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
LEFT = torch.tensor([[0.0, 0.0], [0.5, 1.0]], dtype=DTYPE)
RIGHT = torch.tensor([[0.5, 0.0], [1.0, 1.0]], dtype=DTYPE)
LEAVES = sub_cubes(UNIT.unsqueeze(0))[0]  # 0: LL, 1: LU, 2: RL, 3: RU


def replay(leaves, outcomes):
    r"""Drive the walk with scripted outcomes; return the requests and the result."""
    walk = random_walk(leaves)
    requests = [next(walk)]
    try:
        for outcome in outcomes:
            requests.append(walk.send(outcome))
    except StopIteration as stop:
        return requests, stop.value
    raise AssertionError("the walk did not end with the scripted outcomes")


def summary(requests):
    return [
        (r.kind, r.box.tolist(), r.leaves.nonzero().squeeze(-1).tolist())
        for r in requests
    ]


def test_walk_descends_declares_and_terminates():
    outcomes = [
        True,  # child LEFT passes: move to LEFT
        False,  # child leaf 0 fails
        True,  # child leaf 1 passes: move to leaf 1
        True,  # leaf 1 confirmed: declared, restart at the root
        False,  # child LEFT (only leaf 0 active) fails
        False,  # child RIGHT fails: no child of the root passes
        False,  # termination test: nothing above tau in leaves 0, 2, 3 -> end
    ]
    requests, declared = replay(LEAVES, outcomes)
    assert summary(requests) == [
        ("child", LEFT.tolist(), [0, 1]),
        ("child", LEAVES[0].tolist(), [0]),
        ("child", LEAVES[1].tolist(), [1]),
        ("leaf", LEAVES[1].tolist(), [1]),
        ("child", LEFT.tolist(), [0]),
        ("child", RIGHT.tolist(), [2, 3]),
        ("terminate", UNIT.tolist(), [0, 2, 3]),
    ]
    assert declared.tolist() == [False, True, False, False]


def test_failures_go_up_and_single_active_children_are_skipped():
    L0, L1, L2, L3 = (leaf.tolist() for leaf in LEAVES)
    script = [
        (False, ("child", LEFT.tolist(), [0, 1])),
        (True, ("child", RIGHT.tolist(), [2, 3])),  # move to RIGHT
        (False, ("child", L2, [2])),
        (False, ("child", L3, [3])),  # no child passes: back to the root
        (True, ("child", LEFT.tolist(), [0, 1])),
        (True, ("child", L0, [0])),  # move to leaf 0
        (False, ("leaf", L0, [0])),  # not confirmed: back to LEFT
        (False, ("child", L0, [0])),
        (False, ("child", L1, [1])),  # back to the root
        (False, ("child", LEFT.tolist(), [0, 1])),
        (False, ("child", RIGHT.tolist(), [2, 3])),
        (True, ("terminate", UNIT.tolist(), [0, 1, 2, 3])),  # passes: restart
        (True, ("child", LEFT.tolist(), [0, 1])),
        (True, ("child", L0, [0])),
        (True, ("leaf", L0, [0])),  # leaf 0 declared: restart without it
        (False, ("child", LEFT.tolist(), [1])),
        (True, ("child", RIGHT.tolist(), [2, 3])),
        (False, ("child", L2, [2])),
        (True, ("child", L3, [3])),
        (True, ("leaf", L3, [3])),  # leaf 3 declared
        # LEFT holds only leaf 1: passing it leads straight to leaf 1's box.
        (True, ("child", LEFT.tolist(), [1])),
        (False, ("leaf", L1, [1])),
        (False, ("child", LEFT.tolist(), [1])),
        (False, ("child", RIGHT.tolist(), [2])),
        (False, ("terminate", UNIT.tolist(), [1, 2])),  # fails: the epoch ends
    ]
    requests, declared = replay(LEAVES, [outcome for outcome, _ in script])
    assert summary(requests) == [request for _, request in script]
    assert declared.tolist() == [True, False, False, True]


def test_walk_ends_when_every_leaf_is_declared():
    # Two leaves in different halves of the unit square (a scattered region).
    leaves = LEAVES[[0, 3]]
    requests, declared = replay(leaves, [True, True, True])
    assert summary(requests) == [
        ("child", LEFT.tolist(), [0]),
        ("leaf", LEAVES[0].tolist(), [0]),
        # One active leaf left: the root skips down to it.
        ("leaf", LEAVES[3].tolist(), [1]),
    ]
    assert declared.tolist() == [True, True]
