import csv
import json
from pathlib import Path

import pytest
import torch

from botorch_sketch.benchmarks import __main__ as entry
from botorch_sketch.benchmarks.cli import (
    apply_options,
    main,
    parse_algorithms,
    parse_seeds,
)
from botorch_sketch.benchmarks.presets import PRESETS, get_preset
from botorch_sketch.benchmarks.registry import PolicyConfig

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
        with pytest.raises(ValueError, match="[Ss]eed"):
            parse_seeds(bad)


def test_parse_algorithms_keeps_preset_options():
    preset = (PolicyConfig("exact-ucb", options={"radius": 3.0}),)
    configs = parse_algorithms("exact-ucb,fast=exact-bucb,uniform", preset)
    assert [(c.label, c.name) for c in configs] == [
        ("exact-ucb", "exact-ucb"),
        ("fast", "exact-bucb"),
        ("uniform", "uniform"),
    ]
    assert configs[0].options == {"radius": 3.0} and configs[1].options == {}
    with pytest.raises(ValueError, match="Unknown policy"):
        parse_algorithms("nope", ())


def test_apply_options_routes_by_key_and_target():
    configs = (
        PolicyConfig("exact-ucb"),
        PolicyConfig("exact-bucb", "b2"),
        PolicyConfig("uniform"),
    )
    out = apply_options(configs, ["radius=2", "b2:batch_size=3", "batch_size=5"])
    assert out[0].options == {"radius": 2}
    assert out[1].options == {"radius": 2, "batch_size": 5}  # later option wins
    assert out[2].options == {"batch_size": 5}
    with pytest.raises(ValueError, match="accepts"):
        apply_options(configs, ["typo=1"])
    with pytest.raises(ValueError, match="names no selected policy"):
        apply_options(configs, ["bbkb:radius=1"])


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
            "--algorithms", "exact-ucb,u=uniform,exact-bucb",
            "-T", "15",
            "--seeds", "0-1",
            "--option", "exact-ucb:radius=2",
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
    assert "exact-ucb (exact-ucb: radius=2)" in metadata["policies"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--preset", "nope"],
        ["--option", "typo=1"],
        ["--problem", "levy:dim=x"],
        ["--seeds", "1", "--num-seeds", "2"],
        ["--threads", "-1"],
    ],
)
def test_bad_arguments_exit_with_usage_error(argv, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and not (tmp_path / "x").exists()


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
    for config in preset.policies:  # every policy either ran or was skipped aloud
        assert config.label in ran or f"skipping {config.label}" in notes
    assert {row["horizon"] for row in payload["summary"]} == {preset.smoke_horizon}
