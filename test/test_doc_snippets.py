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

import functools
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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
#: A snippet that starts Ray (``import ray``, ``from ray import tune``, the engine
#: ``"ray"``).
USES_RAY = re.compile(r"\bray\b")
#: Modules every environment of the tests has.
CORE = {"math", "torch", "botorch", "botorch_sketch", "concurrent"}


def _missing(code: str) -> str | None:
    r"""A module the snippet imports that is not installed (None if all are)."""
    imported = set(re.findall(r"^(?:from|import) (\w+)", code, re.MULTILINE))
    return next(
        (m for m in sorted(imported - CORE) if importlib.util.find_spec(m) is None),
        None,
    )


def _run(code: str) -> subprocess.CompletedProcess:
    r"""``code`` as ``snippet.py`` in an empty folder that is also its home."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "snippet.py").write_text(code)
        env = dict(os.environ, OMP_NUM_THREADS="1", HOME=folder)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        return subprocess.run(
            [sys.executable, "-c", RUN_SPAWNED],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )


@functools.cache
def _results() -> dict[str, subprocess.CompletedProcess]:
    r"""Every runnable snippet's run, in two lanes side by side: those that start
    Ray (mostly waiting for it to come up) one after another, and the others."""
    runnable = {key: code for key, code in SNIPPETS.items() if not _missing(code)}
    lanes = [
        [key for key, code in runnable.items() if bool(USES_RAY.search(code)) == ray]
        for ray in (True, False)
    ]

    def run_lane(keys: list[str]) -> dict[str, subprocess.CompletedProcess]:
        return {key: _run(runnable[key]) for key in keys}

    with ThreadPoolExecutor(len(lanes)) as pool:
        return {k: v for lane in pool.map(run_lane, lanes) for k, v in lane.items()}


def test_the_pages_have_snippets():
    assert sum(key.startswith("README.md") for key in SNIPPETS) >= 4
    assert any(key.startswith("docs/botorch.md") for key in SNIPPETS)
    assert SNIPPETS["docs/ax.md"].count("client.") >= 3


@pytest.mark.parametrize("key", SNIPPETS)
def test_snippet_runs_as_pasted(key):
    if missing := _missing(SNIPPETS[key]):
        pytest.skip(f"needs {missing}")
    done = _results()[key]
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "every snippet shows what it found"
