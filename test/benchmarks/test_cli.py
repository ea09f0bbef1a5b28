import argparse
import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import __main__ as entry
from benchmarks import methods
from benchmarks.arguments import parse_seeds
from benchmarks.cli import (
    apply_options,
    format_seeds,
    main,
    parse_algorithms,
)
from benchmarks.methods import BenchmarkMethod, PolicyConfig
from benchmarks.policies.baselines import Uniform
from benchmarks.presets import PRESETS, get_preset

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture
def restore_threads():
    r"""``--threads`` changes torch's global thread count; put it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_parse_seeds():
    assert parse_seeds("0,1,5") == (0, 1, 5)
    assert parse_seeds("0-3,7") == (0, 1, 2, 3, 7)
    for bad in ("", "a", "1-", "1,1"):
        with pytest.raises(argparse.ArgumentTypeError, match="[Ss]eed"):
            parse_seeds(bad)


def test_parse_algorithms_keeps_preset_options():
    preset = (PolicyConfig("exact-ucb", options={"bayes_radius": 3.0}),)
    configs = parse_algorithms("exact-ucb,fast=exact-bucb,uniform", preset)
    assert [(c.label, c.name) for c in configs] == [
        ("exact-ucb", "exact-ucb"),
        ("fast", "exact-bucb"),
        ("uniform", "uniform"),
    ]
    assert configs[0].options == {"bayes_radius": 3.0} and configs[1].options == {}
    with pytest.raises(ValueError, match="Unknown policy"):
        parse_algorithms("nope", ())


def test_apply_options_routes_by_key_and_target():
    configs = (
        PolicyConfig("exact-ucb"),
        PolicyConfig("exact-bucb", "b2"),
        PolicyConfig("uniform"),
    )
    out = apply_options(configs, ["bayes_radius=2", "b2:batch_size=3", "batch_size=5"])
    assert out[0].options == {"bayes_radius": 2}
    assert out[1].options == {"bayes_radius": 2, "batch_size": 5}  # later option wins
    assert out[2].options == {"batch_size": 5}
    with pytest.raises(ValueError, match="accepts"):
        apply_options(configs, ["typo=1"])
    with pytest.raises(ValueError, match="names no selected policy"):
        apply_options(configs, ["bbkb:bayes_radius=1"])


def test_list_and_entry_point(capsys):
    assert entry.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PRESETS) and "exact-ucb" in out


def test_custom_run_writes_only_to_the_output_dir(
    tmp_path, monkeypatch, capsys, restore_threads
):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out_dir = tmp_path / "results"
    code = main(
        [
            "--problem", "levy:dim=2:arms=60",
            "--methods", "exact-ucb,u=uniform,exact-bucb",
            "-T", "15",
            "--seeds", "0-1",
            "--option", "exact-ucb:bayes_radius=2.0000001",
            "--batch-size", "4",
            "--dtype", "float32",
            "--threads", "2",
            "--output-dir", str(out_dir),
            "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0 and list(cwd.iterdir()) == []
    printed = capsys.readouterr().out
    assert "GFLOP/s" in printed and "regret ratio" in printed
    names = sorted(p.name for p in out_dir.iterdir())
    assert {"summary.csv", "curves.csv", "results.json"} <= set(names)
    assert (
        "levy2_60_regret_ratio.png" in names and "levy2_60_regret_vs_time.png" in names
    )
    with (out_dir / "summary.csv").open() as handle:
        rows = {row["policy"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"exact-ucb", "u", "exact-bucb"}
    assert rows["u"]["max_batch_size"] == "4.0" and rows["exact-bucb"]["seeds"] == "2"
    metadata = json.loads((out_dir / "results.json").read_text())["metadata"]
    assert metadata["matmul_gflops"] > 0 and metadata["dtype"] == "float32"
    assert metadata["torch_threads"] == 2
    assert "exact-ucb (exact-ucb: bayes_radius=2)" in metadata["policies"]  # rounded
    assert "policy exact-ucb (exact-ucb: bayes_radius=2)\n" in printed
    assert "2 threads" in printed and "seeds 0, 1" in printed
    assert len(list((out_dir / "runs").glob("*.json"))) == 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "nope"], "argument --preset: invalid choice: 'nope'"),
        (["--seeds", "1,1"], "argument --seeds: Seed list '1,1'"),
        (["--seeds", "1-"], "argument --seeds: Bad seed list '1-'"),
        (["--option", "typo=1"], "typo"),
        (["--option", "bayes_radius=abc"], "policy bbkb: `bayes_radius`"),
        (["--bayes-radius", "abc"], "policy bbkb: `bayes_radius`"),
        (["--problem", "levy:dim=x"], "levy:dim=x"),
        (["--threads", "-1"], "--threads"),
        (["-T", "0"], "--horizon"),
        (["--device", "cuda:99"], "argument --device: cuda:99"),
        (["--device", "tpu"], "--device"),
        (["--problem", "cadata", "--data-dir", "nowhere"], "--data-dir"),
        (["--threads", "two"], "--threads"),
    ],
)
def test_bad_arguments_end_in_one_line_and_exit_2(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and not (tmp_path / "x").exists()
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_missing_dataset_names_the_flag_and_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("BOTORCH_SKETCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["--preset", "bbkb-cadata", "--smoke"])
    err = capsys.readouterr().err
    assert "cadata.csv" in err and "--data-dir" in err
    assert "BOTORCH_SKETCH_DATA" in err and len(err.splitlines()) == 1


def test_output_dir_that_is_a_file_in_a_subprocess(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for target in (blocker, blocker / "below"):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks"]
            + ["--output-dir", str(target), "-T", "3"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "is a file, not a folder" in done.stderr
    assert blocker.read_text() == ""


class StopOnce(Uniform):
    r"""Uniform play that raises KeyboardInterrupt (a user's Ctrl-C) at the
    ``stop_at``-th ask over all instances."""

    asks = 0
    stop_at = -1

    def ask(self, max_arms=None):
        StopOnce.asks += 1
        if StopOnce.asks == StopOnce.stop_at:
            raise KeyboardInterrupt
        return super().ask(max_arms)


def _deterministic_summaries(out_dir):
    payload = json.loads((out_dir / "results.json").read_text())
    keys = ("cumulative_regret", "regret_ratio", "simple_regret", "num_batches")
    return [
        (run["policy"], run["seed"], [run["summary"][k] for k in keys])
        for run in payload["runs"]
    ]


def test_interrupt_then_resume_equals_an_uninterrupted_run(
    tmp_path, capsys, monkeypatch, restore_threads
):
    monkeypatch.setitem(
        methods.METHODS, "stop-once", BenchmarkMethod("stop-once", "test", StopOnce)
    )
    argv = [
        "--problem", "levy:dim=2:arms=60",
        "--methods", "exact-bucb,stop-once",
        "--batch-size", "2",
        "-T", "8",
        "--seeds", "0-1",
        "--no-plots",
    ]  # fmt: skip
    StopOnce.asks, StopOnce.stop_at = 0, -1
    assert main([*argv, "--output-dir", str(tmp_path / "whole")]) == 0
    printed = capsys.readouterr().out
    assert "T = 8, seeds 0, 1, float64 on cpu, 1 thread," in printed
    assert "run 4/4 done: stop-once | levy2_60 | seed 1" in printed  # not a TTY
    out = tmp_path / "parts"
    # 10 asks per stop-once run (2 warm-up, 4 batches, 4 replayed under the
    # operator counter): the 11th is its second run's.
    StopOnce.asks, StopOnce.stop_at = 0, 11
    assert main([*argv, "--output-dir", str(out)]) == 130
    err = capsys.readouterr().err
    assert "interrupted after 3 finished runs" in err and "--resume" in err
    assert len(list((out / "runs").iterdir())) == 3
    with (out / "summary.csv").open() as handle:
        rows = {(row["policy"], row["seeds"]) for row in csv.DictReader(handle)}
    assert rows == {("exact-bucb", "2"), ("stop-once", "1")}
    partial = json.loads((out / "results.json").read_text())
    assert partial["metadata"]["incomplete"] == "interrupted"
    StopOnce.asks, StopOnce.stop_at = 0, -1
    assert main([*argv, "--output-dir", str(out), "--resume"]) == 0
    assert StopOnce.asks == 10  # only the missing run ran
    assert "resuming: 3 of 4 runs already done" in capsys.readouterr().out
    whole = _deterministic_summaries(tmp_path / "whole")
    assert _deterministic_summaries(out) == whole


def test_sigint_keeps_finished_runs_and_resume_completes(
    tmp_path, capsys, restore_threads
):
    out = tmp_path / "out"
    argv = [
        "--problem", "levy:dim=2:arms=300",
        "--methods", "exact-ucb,uniform",
        "-T", "150",
        "--seeds", "0-5",
        "--output-dir", str(out),
        "--no-plots",
    ]  # fmt: skip
    # the child raises KeyboardInterrupt on SIGINT whatever disposition it
    # inherits (a suite started in the background inherits SIGINT ignored)
    start = (
        "import runpy, signal, sys; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv = ['python -m benchmarks', *sys.argv[1:]]; "
        "runpy.run_module('benchmarks', run_name='__main__')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", start, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while len(list(out.glob("runs/*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    kept = len(list(out.glob("runs/*.json")))
    if process.returncode == 0:  # it finished before the signal arrived
        pytest.skip("the run ended before SIGINT")
    assert process.returncode == 130 and "Traceback" not in err
    assert f"interrupted after {kept} finished runs" in err
    with (out / "summary.csv").open() as handle:
        assert sum(int(row["seeds"]) for row in csv.DictReader(handle)) == kept
    assert main([*argv, "--resume"]) == 0
    assert f"resuming: {kept} of 12 runs already done" in capsys.readouterr().out
    assert len(list(out.glob("runs/*.json"))) == 12


def test_counts_and_seed_lists_read_naturally():
    assert format_seeds([0]) == "seed 0"
    assert format_seeds([0, 1]) == "seeds 0, 1"
    assert format_seeds([0, 1, 2, 3]) == "seeds 0-3"
    assert format_seeds([0, 2, 7]) == "seeds 0, 2, 7"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_runs_in_smoke_mode(name, tmp_path, restore_threads):
    preset = get_preset(name)
    if preset.needs_data and not DATA.is_dir():
        pytest.skip("shared datasets not available")
    out_dir = tmp_path / name
    code = main(
        [
            "--preset", name,
            "--smoke",
            "--data-dir", str(DATA),
            "--output-dir", str(out_dir),
            "--no-progress",
            "--no-plots",
        ]
    )  # fmt: skip
    assert code == 0 and torch.get_num_threads() == 1  # the CLI's default
    payload = json.loads((out_dir / "results.json").read_text())
    ran = {row["policy"] for row in payload["summary"]}
    notes = " ".join(payload["metadata"]["notes"])
    policies, horizon, _, _ = preset.variant(smoke=True)
    for config in policies:  # every policy either ran or was skipped aloud
        assert config.label in ran or f"skipping {config.label}" in notes
    assert {row["horizon"] for row in payload["summary"]} == {horizon}
