r"""Optuna's sampler conformance suite (``optuna.testing.pytest_samplers``, as
OptunaHub's unit-test recipe uses it: a test class per sampler that inherits the
suite's cases and overrides its ``sampler`` fixture, a factory of fresh samplers)
for both samplers: basic, relative and multi-objective sampling (the samplers
take multi-objective studies, so ``SingleOnlySamplerTestCase`` does not apply)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

optuna = pytest.importorskip("optuna")
pytest.importorskip("optuna.testing.pytest_samplers")

from optuna.samplers import BaseSampler  # noqa: E402
from optuna.testing.pytest_samplers import (  # noqa: E402
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
)

from botorch_sketch.integrations.optuna import (  # noqa: E402
    BBKBSampler,
    SGPTSSampler,
)

#: Small arm sets and few refined arms keep the suite's 252 cases (126 per
#: sampler) at about 10 s on two cores (15 s with the default 2,048 + 128 arms).
CHEAP = {"num_arms": 64, "num_refined": 8}


class _Conformance(
    BasicSamplerTestCase, RelativeSamplerTestCase, MultiObjectiveSamplerTestCase
):
    sampler_class: type[BaseSampler]

    @pytest.fixture
    def sampler(self) -> Callable[[], BaseSampler]:
        return lambda: self.sampler_class(seed=0, **CHEAP)


class TestBBKBSampler(_Conformance):
    sampler_class = BBKBSampler


class TestSGPTSSampler(_Conformance):
    sampler_class = SGPTSSampler
