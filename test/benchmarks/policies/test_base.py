r"""The ask/tell protocol and the adapter base class of the benchmark policies."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.benchmarks.policies.base import AskTell, AskTellPolicy, draw_seed
from botorch_sketch.benchmarks.policies.bkb import BBKBPolicy
from botorch_sketch.benchmarks.policies.common import KernelHyperparameters
from botorch_sketch.benchmarks.policies.threds import GPThreDSPolicy
from botorch_sketch.generation.bbkb_loop import BBKB
from botorch_sketch.generation.sgpts_loop import SGPTS
from botorch_sketch.generation.threds import GPThreDS

from .test_bkb import make_problem


@pytest.mark.parametrize("loop_class", [BBKB, GPThreDS, SGPTS])
def test_library_loops_satisfy_the_protocol(loop_class):
    assert issubclass(loop_class, AskTell)


def test_draw_seed_is_one_draw_from_the_generator():
    generator = torch.Generator().manual_seed(3)
    expected = int(torch.randint(2**31 - 1, (1,), generator=generator))
    assert draw_seed(torch.Generator().manual_seed(3)) == expected


def test_adapter_forwards_to_a_loop_built_by_hand():
    r"""BBKBPolicy's run equals the BBKB loop it configures, driven directly."""
    problem = make_problem(num_arms=200)
    policy = BBKBPolicy(radius=1.0, ratio_threshold=2.0)
    policy.reset(problem, 30, torch.Generator().manual_seed(5))
    assert isinstance(policy, AskTellPolicy) and isinstance(policy.loop, BBKB)
    hp = KernelHyperparameters.from_problem(problem)
    loop = BBKB(
        problem.arms,
        covar_module=hp.kernel(dtype=problem.arms.dtype),
        noise=hp.noise_variance,
        radius=hp.noise_variance**0.5,
        seed=draw_seed(torch.Generator().manual_seed(5)),
        ratio_threshold=2.0,
    )
    noise = torch.Generator().manual_seed(6)
    while loop.num_observations < 30:
        chosen = policy.ask()
        assert torch.equal(chosen, loop.ask(30 - loop.num_observations))
        values = problem.arm_values[chosen]
        rewards = values + 0.01 * torch.randn(
            chosen.numel(), generator=noise, dtype=values.dtype
        )
        policy.tell(chosen, rewards)
        loop.tell(chosen, rewards)
    assert policy.diagnostics() == loop.diagnostics()


@pytest.mark.parametrize("policy", [BBKBPolicy(), GPThreDSPolicy()])
def test_rejected_problem_leaves_policy_and_generator_untouched(policy):
    finite = make_problem(num_arms=20)
    box = make_problem(num_arms=20)
    box.arms, box.arm_values = None, None
    wrong = box if isinstance(policy, BBKBPolicy) else finite
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    with pytest.raises(ValueError):
        policy.reset(wrong, 10, generator)
    assert policy.loop is None and not hasattr(policy, "horizon")
    assert torch.equal(generator.get_state(), state)
