r"""Test-session settings and the fixtures every numeric test loops over.

One torch thread (the tests use small matrices, where thread start-up and contention
cost more than they save). Like BoTorch's ``BotorchTestCase``, model, acquisition and
generation tests run for each dtype (``float32``, ``float64``) and each device (the
CPU, and CUDA when present): take the ``tkwargs`` fixture (``{"dtype", "device"}``)
and compare with :func:`test.gp_helpers.assert_close`, whose tolerances follow the
dtype.
"""

import pytest
import torch

torch.set_num_threads(1)

#: The devices the ``device`` fixture runs on.
DEVICES = [torch.device("cpu")] + (
    [torch.device("cuda")] if torch.cuda.is_available() else []
)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture(params=DEVICES, ids=[d.type for d in DEVICES])
def device(request: pytest.FixtureRequest) -> torch.device:
    return request.param


@pytest.fixture
def tkwargs(dtype: torch.dtype, device: torch.device) -> dict:
    r"""``{"dtype": ..., "device": ...}`` for every dtype and device."""
    return {"dtype": dtype, "device": device}
