r"""Every Python snippet of docs/optuna.md runs as written, in the page's order:
the plain ones in one namespace (later snippets use the objective of the first),
the scripts (``# create.py: ...``) as real processes in one folder, the worker
script four times at once on a fresh SQLite file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "optuna.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
SCRIPT = re.compile(r"# (\w+\.py):")
#: Script -> the argument lists of the processes started at once, as the page says.
RUNS = {"create.py": [[]], "worker.py": [["0"], ["1"], ["2"], ["3"]]}


def _run_script(path: Path, runs: list[list[str]]) -> None:
    r"""Start ``path`` once per argument list, all at once, in its folder; each
    must exit with status 0."""
    path_entries = os.pathsep.join([str(ROOT), *sys.path])
    # one thread per process: the four workers share the machine's cores
    env = dict(os.environ, PYTHONPATH=path_entries, OMP_NUM_THREADS="1")
    processes = [
        subprocess.Popen(
            [sys.executable, path.name, *args],
            cwd=path.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in runs
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"{path.name} {process.args[2:]}:\n{stderr}"


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_every_python_snippet_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    snippets = SNIPPET.findall(DOC.read_text())
    scripts = [m.group(1) for code in snippets if (m := SCRIPT.match(code))]
    assert scripts == list(RUNS)  # a new script needs its runs here
    assert len(snippets) > len(scripts)
    namespace: dict = {"__name__": "__main__"}
    for code in snippets:
        script = SCRIPT.match(code)
        if script is None:
            exec(compile(code, str(DOC), "exec"), namespace)
            continue
        path = tmp_path / script.group(1)
        path.write_text(code)
        _run_script(path, RUNS[path.name])
    study = namespace["study"]  # the last snippet's: the workers' study
    assert (
        study.study_name == "search" and namespace["storage"].heartbeat_interval == 60
    )
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == len(study.trials) == 4 * 10  # 4 workers, 10 trials each
