r"""The prepared GPU check (``.ci/gpu-check``) at toy sizes: every step runs and
leaves its results where docs/benchmarks.md takes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("01-cuda-tests", "02-default", "03-million-arms", "04-thompson", "05-scoring")


def test_gpu_check_runs_every_step_at_toy_sizes(tmp_path):
    environment = dict(os.environ, GPU_CHECK_SMOKE="1", PYTHON=sys.executable)
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "gpu-check"), str(tmp_path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "summary.txt").read_text()
    for step in STEPS:
        assert f"== {step}:" in summary
        assert (tmp_path / f"{step}.log").is_file()
    assert summary.count("   exit 0 after") == len(STEPS), summary
    for step in STEPS[1:4]:
        assert (tmp_path / step / "summary.csv").is_file()
    assert "ops/eval" in (tmp_path / "02-default.log").read_text()
