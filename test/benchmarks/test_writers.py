import csv
import json

import pytest

from benchmarks.results import summarize
from benchmarks.writers import checkpoints, format_table, write_results

from .traces import make_seed_traces, make_trace


def test_format_table():
    traces = [
        make_trace(seed=0),
        make_trace(seed=1, values=(1.0, 1.0, 1.0, 1.0)),
        make_trace(policy="q"),
    ]
    table = format_table(summarize(traces, reference="q"))
    assert "0.8750" in table and "time/exact" in table and "update s" in table
    # a title, two tables of a header, a rule and 2 rows, what the band is
    assert len([line for line in table.splitlines() if line]) == 1 + 2 * 4 + 1
    assert max(map(len, table.splitlines())) <= 110
    assert table.splitlines()[0].endswith("(T = 4, 2 seeds; T = 4, 1 seed)")


def test_format_table_shows_the_band_in_brackets():
    finals = {
        "one": [0.3],
        "two": [0.1, 0.9],
        "many": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.05, 0.05, 2.0],
    }
    traces = [t for policy, f in finals.items() for t in make_seed_traces(policy, f)]
    rows = {row["policy"]: row for row in summarize(traces)}
    table = format_table(list(rows.values()))
    assert "+-" not in table and "t-interval" in table.splitlines()[-1]
    assert "0.2500 [0.0500, 0.4500]" in table  # "two": ratio mean [min, max]
    single = format_table([rows["one"]])
    assert "[" not in single and len(single.splitlines()) == 1 + 1 + 3 + 1 + 3


def test_checkpoints():
    assert checkpoints(3).tolist() == [1, 2, 3]
    points = checkpoints(10_000, max_points=50)
    assert points[0] == 1 and points[-1] == 10_000 and len(points) <= 50


def test_write_results(tmp_path):
    traces = [
        make_trace(seed=0),
        make_trace(seed=1),
        make_trace(policy="nan", uniform_regret=0.0),
    ]
    paths = write_results(traces, tmp_path / "out", {"matmul_gflops": 3.0}, 3)
    assert [p.name for p in paths] == ["summary.csv", "curves.csv", "results.json"]
    assert all(p.parent == tmp_path / "out" for p in paths)
    with (tmp_path / "out" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["policy"] for row in rows] == ["p", "nan"]
    with (tmp_path / "out" / "curves.csv").open() as handle:
        curves = list(csv.DictReader(handle))
    assert len(curves) == 3 * 3  # 3 runs x 3 checkpoints
    assert [row["t"] for row in curves[:3]] == ["1", "2", "4"]
    assert float(curves[2]["cumulative_regret"]) == pytest.approx(1.75)
    # Strict JSON: the NaN regret ratio (zero uniform regret) becomes null.
    payload = json.loads(
        (tmp_path / "out" / "results.json").read_text(),
        parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"),
    )
    assert payload["metadata"]["matmul_gflops"] == 3.0
    assert payload["runs"][2]["curves"]["regret_ratio"] == [None, None, None]
    assert payload["runs"][0]["curves"]["t"] == [1, 2, 4]
