import inspect
import subprocess
import sys

import pytest
import torch

from benchmarks import __main__ as entry
from benchmarks import scoring, thompson_steps


def test_scoring_parser_defaults_are_compare_scorings_and_flags_parse():
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(
            scoring.compare_scoring
        ).parameters.items()
    }
    defaults |= {"dtype": "float64", "device": torch.device("cpu")}
    assert vars(scoring.build_parser().parse_args([])) == defaults
    args = scoring.build_parser().parse_args(
        ["--num-train", "40", "--lengthscale", "0.5", "--chunk-size", "7"]
    )
    assert (args.num_train, args.lengthscale, args.chunk_size) == (40, 0.5, 7)


def test_scoring_on_float32_and_bad_devices(capsys):
    argv = ["scoring", "--num-train", "30", "--num-candidates", "40", "--dim", "2"]
    assert entry.main([*argv, "--dtype", "float32"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]  # below the header and rule
    lines = dict(line.split() for line in rows)
    assert float(lines["max_abs_mean_error"]) < 1e-2  # m = n, in single precision
    bad = ["--device", "nonsense"]
    if not torch.cuda.is_available():
        bad = [*bad, "--device", "cuda"]
    for flag, value in zip(bad[::2], bad[1::2], strict=True):
        with pytest.raises(SystemExit) as done:
            entry.main(["scoring", flag, value])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --device: {value!r}" in err or f"--device: {value}:" in err


def test_thompson_steps_parser_reads_lists_and_choices():
    args = thompson_steps.build_parser().parse_args(
        ["--smoke", "--arms", "10", "20", "--t", "5", "--methods", "sgpts-cached"]
    )
    assert args.smoke and args.arms == [10, 20] and args.t == [5]
    assert args.methods == ("sgpts-cached",) and args.threads == 1


@pytest.mark.parametrize("command", ["scoring", "thompson_steps"])
def test_subcommand_help_and_one_line_errors_name_the_subcommand(command, capsys):
    with pytest.raises(SystemExit) as done:
        entry.main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m benchmarks {command}")
    with pytest.raises(SystemExit) as done:
        entry.main([command, "--seed", "x"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"python -m benchmarks {command}: error: argument --seed: invalid int value: "
        "'x' (see --help)"
    ]


def test_scoring_subcommand_runs_a_small_comparison(capsys):
    argv = ["scoring", "--num-train", "30", "--num-candidates", "40", "--dim", "2"]
    assert entry.main(argv) == 0
    rows = capsys.readouterr().out.splitlines()[2:]  # below the header and rule
    lines = dict(line.split() for line in rows)
    assert lines["num_train"] == "30" and lines["num_candidates"] == "40"
    assert float(lines["max_abs_mean_error"]) < 1e-6  # m = n: the exact posterior


def test_cluster_subcommand_runs_and_errors_on_one_line(tmp_path, capsys):
    argv = ["cluster", "--methods", "uniform", "-T", "10", "--output-dir"]
    assert entry.main([*argv, str(tmp_path)]) == 0
    assert "| uniform | 10 |" in capsys.readouterr().out
    assert (tmp_path / "cluster_table.md").exists()
    with pytest.raises(SystemExit) as done:
        entry.main(["cluster", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m benchmarks cluster")
    with pytest.raises(SystemExit) as done:
        entry.main(["cluster", "--workers", "x"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m benchmarks cluster: error: argument -W/--workers: invalid int "
        "value: 'x' (see --help)"
    ]


def test_default_command_without_subcommand_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit):
        entry.main(["--help"])
    out = capsys.readouterr().out
    assert "usage: python -m benchmarks [-h] [--preset NAME]" in out
    assert "python -m benchmarks scoring" in out
    assert "python -m benchmarks thompson_steps" in out
    assert "python -m benchmarks cluster" in out


def _without_matplotlib(argv):
    r"""Run the entry point in a fresh interpreter where matplotlib cannot load."""
    code = (
        "import sys; sys.modules['matplotlib'] = None; "
        "from benchmarks.__main__ import main; "
        f"sys.exit(main({argv!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("argv", [[], ["--list"], ["thompson_steps", "--smoke"]])
def test_missing_bench_extra_is_one_line_and_exit_2(argv):
    done = _without_matplotlib(argv)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "python -m benchmarks: error: matplotlib is missing; install the benchmark "
        'extra: pip install -e ".[bench]" (from the repository root)'
    ]
    assert done.stdout == ""


def test_scoring_needs_no_bench_extra():
    done = _without_matplotlib(["scoring", "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m benchmarks scoring")
