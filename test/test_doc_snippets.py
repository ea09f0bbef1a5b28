r"""Every Python snippet of the README, docs/botorch.md and docs/distributed.md runs as
pasted: each is
saved as a script of its own and run in a fresh interpreter, in an empty folder
(also its home: Ray Tune writes its results there), with worker processes started by
spawning (macOS's and Windows's default), which re-imports the script in each
worker. The snippets of docs/ax.md continue one another (one Ax client): they run
as one script, in the page's order. (docs/optuna.md's snippets run in
``test/integrations/test_optuna_docs.py``.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/botorch.md", "docs/distributed.md")
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
SNIPPETS = {
    f"{page}:{number}": code
    for page in PAGES
    for number, code in enumerate(SNIPPET.findall((ROOT / page).read_text()))
} | {"docs/ax.md": "\n\n".join(SNIPPET.findall((ROOT / "docs/ax.md").read_text()))}
#: Runs ``snippet.py`` as ``python snippet.py`` would, under the spawn start method.
RUN_SPAWNED = (
    "import multiprocessing, runpy; multiprocessing.set_start_method('spawn'); "
    "runpy.run_path('snippet.py', run_name='__main__')"
)
#: Modules every environment of the tests has.
CORE = {"math", "torch", "botorch", "botorch_sketch", "concurrent"}


def test_the_pages_have_snippets():
    assert sum(key.startswith("README.md") for key in SNIPPETS) >= 4
    assert any(key.startswith("docs/botorch.md") for key in SNIPPETS)
    assert SNIPPETS["docs/ax.md"].count("client.") >= 3


@pytest.mark.parametrize("code", SNIPPETS.values(), ids=SNIPPETS.keys())
def test_snippet_runs_as_pasted(code, tmp_path):
    imported = set(re.findall(r"^(?:from|import) (\w+)", code, re.MULTILINE))
    for module in sorted(imported - CORE):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")
    (tmp_path / "snippet.py").write_text(code)
    env = dict(os.environ, OMP_NUM_THREADS="1", HOME=str(tmp_path))
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
