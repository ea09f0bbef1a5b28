r"""Every Python snippet of README.md runs as pasted: each is saved as a script of its
own and run in a fresh interpreter, in an empty folder, with worker processes
started by spawning (macOS's and Windows's default), which re-imports the script
in each worker."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
SNIPPETS = SNIPPET.findall((ROOT / "README.md").read_text())
#: Runs ``snippet.py`` as ``python snippet.py`` would, under the spawn start method.
RUN_SPAWNED = (
    "import multiprocessing, runpy; multiprocessing.set_start_method('spawn'); "
    "runpy.run_path('snippet.py', run_name='__main__')"
)


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize(
    "code", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))]
)
def test_snippet_runs_as_pasted(code, tmp_path):
    imported = set(re.findall(r"^(?:from|import) (\w+)", code, re.MULTILINE))
    for module in imported - {"math", "torch", "botorch", "botorch_sketch"}:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")
    (tmp_path / "snippet.py").write_text(code)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", RUN_SPAWNED],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "every snippet shows what it found"
