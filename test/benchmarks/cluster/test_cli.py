r"""The command line: table, JSON and PNGs; collecting saved runs gives the same
table."""

import json

from benchmarks.cluster.cli import PRESETS, main
from benchmarks.cluster.methods import METHODS


def test_cli_writes_table_json_and_plots(tmp_path):
    code = main(
        [
            "--problem",
            "rosenbrock:dim=2:arms=200:noise=1:lengthscale=0.5",
            "--methods",
            "bbkb-sync,sgpts-async,uniform",
            "-W",
            "4",
            "-T",
            "24",
            "--seeds",
            "0,1",
            "--ratio-threshold",
            "3",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    results = json.loads((tmp_path / "cluster_results.json").read_text())
    assert len(results["runs"]) == 6 and len(results["rows"]) == 3
    assert results["settings"]["workers"] == 4
    table = (tmp_path / "cluster_table.md").read_text()
    assert table.count("\n") == 5 and "asynchronous S-GP-TS" in table
    assert "synchronous BBKB, C~ = 3" in table
    # the saved full traces give the same table
    collected = tmp_path / "collected"
    assert main(["--collect", str(tmp_path), "--output-dir", str(collected),
                         "--reference", "bbkb-sync-c3"]) == 0  # fmt: skip
    assert (collected / "cluster_table.md").read_text() == table
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "cluster_rosenbrock2_200_w4_regret.png",
        "cluster_rosenbrock2_200_w4_tradeoff.png",
        "cluster_rosenbrock2_200_w4_utilization.png",
    ]


def test_presets_run_known_methods_on_one_problem(capsys):
    for preset in PRESETS.values():
        assert len(preset.block.problems) == 1
        assert set(preset.block.methods) <= set(METHODS)
    assert main(["--list"]) == 0
    line = "cluster-smoke: rosenbrock:dim=8:arms=500:noise=1, W = 8, T = 60"
    assert line in capsys.readouterr().out.splitlines()
