r"""The loops' asynchronous protocol under random interleavings (#26, Deliver).

Hypothesis draws sequences of ``ask`` (``k`` arms), ``ask_arms``, ``tell`` and
``fail`` (random sub-multisets of the pending arms, in random order), state round
trips (``state_dict`` then ``load_state_dict``, into the same loop or a new one
built with another seed, directly or through ``torch.save``) and ``add_arms`` on
``BBKB`` and ``SGPTS``, each with a fixed kernel and self-tuning. A shadow model
(lists of pending, told and failed arms; of repeated pending arms the earliest
leave first) must equal the loop's ``pending``, ``observed``/``rewards`` and
``failed`` after every step, and a twin that skips the round trips must make the
same choices and end in the same state (``assert_same_run``: bit for bit but for
BBKB's dictionary, a set, and its pending arms' variances, equal to rounding).

Default: a few examples per loop (CI-sized); ``BOTORCH_SKETCH_FAULTS=large`` runs
many more, with longer sequences.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ..fault_helpers import (
    DTYPE,
    LARGE,
    assert_same_run,
    make_arms,
    make_loop,
    reward,
)

EXAMPLES = 200 if LARGE else 20
STEPS = 40 if LARGE else 15
NUM_ARMS = 12
VARIANTS = ["bbkb-fixed", "bbkb-learned", "sgpts-fixed", "sgpts-learned"]
OPERATIONS = ["ask", "ask", "ask_arms", "tell", "tell", "fail", "round trip", "add"]


@dataclass
class Shadow:
    r"""What the protocol says the loop holds."""

    num_arms: int
    pending: list[int] = field(default_factory=list)
    told: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    def leave(self, indices: list[int]) -> None:
        r"""Remove the earliest pending copy of each of ``indices``."""
        for index in indices:
            self.pending.remove(index)

    def check(self, loop) -> None:
        assert loop.arms.shape[0] == self.num_arms
        assert loop.pending.tolist() == self.pending
        assert loop.observed.tolist() == self.told
        assert loop.rewards.tolist() == self.rewards
        assert loop.failed.tolist() == self.failed


def sub_multiset(data, pending: list[int]) -> list[int]:
    r"""A random non-empty sub-multiset of ``pending``, in random order."""
    order = data.draw(st.permutations(range(len(pending))))
    size = data.draw(st.integers(1, len(pending)))
    return [pending[position] for position in order[:size]]


def round_trip(data, loop, kind, learned):
    r"""``loop``'s state loaded into ``loop`` itself or a new loop with another
    seed, directly or through ``torch.save`` / ``torch.load(weights_only=True)``."""
    state = loop.state_dict()
    if data.draw(st.booleans(), label="through a file"):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
    if data.draw(st.booleans(), label="into a new loop"):
        seed = data.draw(st.integers(2, 50), label="its seed")
        loop = make_loop(kind, make_arms(NUM_ARMS), learned=learned, seed=seed)
    loop.load_state_dict(state)
    return loop


@pytest.mark.parametrize("variant", VARIANTS)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_random_interleavings_follow_the_shadow_and_round_trips_change_nothing(
    variant, data
):
    kind, mode = variant.split("-")
    learned = mode == "learned"
    arms = make_arms(NUM_ARMS)
    loop = make_loop(kind, arms, learned=learned)
    twin = make_loop(kind, arms, learned=learned)  # never round-trips
    shadow = Shadow(NUM_ARMS)
    box = arms.min(0).values, arms.max(0).values
    for _ in range(data.draw(st.integers(4, STEPS), label="steps")):
        operation = data.draw(st.sampled_from(OPERATIONS))
        if operation in ("tell", "fail") and not shadow.pending:
            operation = "ask"
        event(operation)  # counts: pytest --hypothesis-show-statistics
        if operation == "ask":
            k = data.draw(st.integers(1, 4), label="k")
            if kind == "bbkb" and set(shadow.failed) >= set(range(shadow.num_arms)):
                for each in (loop, twin):
                    with pytest.raises(RuntimeError, match="Every arm has failed"):
                        each.ask(k)
                continue
            asked = loop.ask(k)
            assert torch.equal(asked, twin.ask(k)), "a round trip changed a choice"
            assert asked.numel() == k if kind == "sgpts" else asked.numel() <= k
            assert asked.numel() >= 1 or shadow.pending, "nothing pending, no arm"
            shadow.pending += asked.tolist()
        elif operation == "ask_arms":
            chosen = data.draw(
                st.lists(st.integers(0, shadow.num_arms - 1), min_size=1, max_size=2)
            )
            for each in (loop, twin):
                each.ask_arms(torch.tensor(chosen))
            shadow.pending += chosen
        elif operation in ("tell", "fail"):
            chosen = sub_multiset(data, shadow.pending)
            indices = torch.tensor(chosen)
            if operation == "tell":
                rewards = reward(loop.arms[indices])
                for each in (loop, twin):
                    each.tell(indices, rewards)
                shadow.told += chosen
                shadow.rewards += rewards.tolist()
            else:
                for each in (loop, twin):
                    each.fail(indices)
                shadow.failed += chosen
            shadow.leave(chosen)
        elif operation == "round trip":
            loop = round_trip(data, loop, kind, learned)
        else:
            n = data.draw(st.integers(1, 3), label="added arms")
            weights = data.draw(
                st.lists(st.floats(0, 1), min_size=2 * n, max_size=2 * n)
            )
            points = box[0] + (box[1] - box[0]) * torch.tensor(
                weights, dtype=DTYPE
            ).reshape(n, 2)
            added = loop.add_arms(points)
            assert torch.equal(added, twin.add_arms(points))
            assert added.tolist() == list(range(shadow.num_arms, shadow.num_arms + n))
            shadow.num_arms += n
        shadow.check(loop)
        shadow.check(twin)
    assert_same_run(loop.state_dict(), twin.state_dict())
