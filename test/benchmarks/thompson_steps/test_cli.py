r"""The command line: tables, JSON, plots from saved results, usage errors."""

import pytest
import torch

from benchmarks.thompson_steps.cli import main
from benchmarks.thompson_steps.report import (
    format_report,
    load_results,
)
from benchmarks.thompson_steps.steps import StepTimings


def test_command_line_plots_several_arm_counts(capsys, tmp_path):
    threads = torch.get_num_threads()
    path = tmp_path / "sgpts_step_time.png"
    try:
        main(
            [
                "--smoke",
                "--arms",
                "100",
                "150",
                "--methods",
                "sgpts-cached,exact-gpts-incremental",
                "--steps",
                "1",
                "--exact-steps",
                "1",
                "--no-progress",
                "--output-dir",
                str(tmp_path),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "N = 100 arms" in out and "N = 150 arms" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loaded = load_results(str(tmp_path / "thompson_steps.json"))
    assert [r["settings"]["num_arms"] for r in loaded] == [100, 150]
    run = loaded[1]["timings"]["sgpts-cached"][60]
    assert isinstance(run, StepTimings) and run.observations == [60]
    assert format_report(loaded[0]) in out and format_report(loaded[1]) in out
    again = tmp_path / "again"
    main(["--collect", str(tmp_path), "--plot-dir", str(again)])
    assert (again / path.name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        main(["--collect", str(again)])  # holds no results


def test_command_line_prints_the_table(capsys, tmp_path):
    threads = torch.get_num_threads()
    try:
        argv = ["--smoke", "--skip-exact", "--steps", "1", "--no-progress"]
        main([*argv, "--output-dir", str(tmp_path), "--no-plots"])
        out = capsys.readouterr().out
        assert "S-GP-TS" in out and "median ms" in out and "N = 200 arms" in out
        assert "exact GP-TS" not in out
        with pytest.raises(SystemExit):
            main(["--smoke", "--features", "7"])
        assert "`num_features`" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            main(["--smoke", "--threads", "-1"])
        with pytest.raises(SystemExit):  # a removed from-scratch reference
            main(["--smoke", "--methods", "exact-gpts"])
    finally:
        torch.set_num_threads(threads)
