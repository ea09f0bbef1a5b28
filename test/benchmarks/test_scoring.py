r"""The acquisition timings of the scoring benchmark (issue 27 item 5), on tiny
problems: every measurement runs on every model and the ratios are the control's
time over each model's."""

from __future__ import annotations

import math

import pytest

from benchmarks import __main__ as entry
from benchmarks.scoring import MODELS, time_acquisitions


def test_every_model_and_measurement_is_timed_with_ratios():
    results = time_acquisitions(40, dim=2, num_inducing=16, num_baseline=8, repeats=1)
    for name in MODELS:
        for measurement in ("kg", "nehvi"):
            seconds = results[f"{name}_{measurement}_s"]
            assert math.isfinite(seconds) and seconds > 0
    for measurement in ("kg", "nehvi"):
        exact = results[f"exact_{measurement}_s"]
        for name in MODELS[1:]:
            assert results[f"{measurement}_speedup_{name}"] == pytest.approx(
                exact / results[f"{name}_{measurement}_s"]
            )
    assert len(results) == 10


def test_a_subset_of_models_and_bad_names():
    results = time_acquisitions(
        40, dim=2, num_baseline=8, models=("nystrom",), repeats=1
    )
    assert set(results) == {"nystrom_kg_s", "nystrom_nehvi_s"}
    with pytest.raises(ValueError, match="`models`"):
        time_acquisitions(40, models=("gpytorch",))


def test_scoring_subcommand_adds_the_acquisition_timings(capsys):
    argv = ["scoring", "--num-train", "30", "--num-candidates", "40", "--dim", "2"]
    assert entry.main([*argv, "--acquisition-sizes", "40"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]  # below the header and rule
    lines = dict(line.split() for line in rows)
    assert float(lines["n40_kg_speedup_nystrom"]) > 0
    assert float(lines["n40_exact_nehvi_s"]) > 0
    with pytest.raises(SystemExit) as done:
        entry.main([*argv, "--acquisition-sizes", "10"])
    assert done.value.code == 2
    assert "--acquisition-sizes" in capsys.readouterr().err


def test_out_of_memory_is_nan_with_a_warning_and_other_errors_raise():
    import torch

    from benchmarks.scoring import _timed_or_nan

    def out_of_memory():
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: 800 bytes")

    def broken():
        raise RuntimeError("shape mismatch")

    cpu = torch.device("cpu")
    with pytest.warns(UserWarning, match="exact qKG: out of memory"):
        assert math.isnan(_timed_or_nan(out_of_memory, cpu, "exact qKG"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _timed_or_nan(broken, cpu, "exact qKG")
