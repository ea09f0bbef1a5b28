r"""The notebooks in tutorials/: stored executed, and runnable in their fast mode.

Each notebook is committed executed in its full mode (``SMOKE_TEST`` unset), so a reader
of the repository sees its figures and tables; its first cell states the measured
full-mode run time. The tests check those stored outputs and execute every notebook top
to bottom in its fast mode (``SMOKE_TEST=1``) in a fresh ``python3`` kernel of the
active environment, from the tutorials directory, without writing anything back; any
exception fails the test. Notebooks that use Ax are skipped only when ax-platform is not
importable.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
IDS = [path.stem for path in NOTEBOOKS]
#: Seconds one cell may run in the fast mode before the test fails.
CELL_TIMEOUT = 300
#: The statement every notebook's first cell carries, e.g. "Full-mode run time: 40 s".
RUN_TIME = re.compile(r"Full-mode run time: (about )?\d[\d.,]* (s|min)\b")
#: Size limits that keep the stored outputs readable: the whole file, one text output.
MAX_NOTEBOOK_BYTES = 2_000_000
MAX_TEXT_CHARS = 5_000


def uses_ax(notebook) -> bool:
    return any(
        "import ax" in cell.source
        or "from ax" in cell.source
        or "integrations.ax" in cell.source
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    return output.get("data", {}).get("text/plain", "")


def test_there_are_tutorials():
    assert NOTEBOOKS, f"no notebooks found in {TUTORIALS.name}/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_tutorial_runs_in_smoke_mode(path):
    stored = path.read_bytes()
    notebook = nbformat.read(path, as_version=4)
    if uses_ax(notebook) and importlib.util.find_spec("ax") is None:
        pytest.skip('needs ax-platform (pip install -e ".[ax]")')
    for cell in code_cells(notebook):
        cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    # One torch thread: the fast mode's small matrices gain nothing from more, and
    # shared CI machines lose a lot to oversubscription.
    client.execute(env={**os.environ, "SMOKE_TEST": "1", "OMP_NUM_THREADS": "1"})
    assert all(cell.execution_count for cell in code_cells(notebook))
    assert path.read_bytes() == stored, f"{path.name} was modified by the fast run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_tutorial_is_stored_executed(path):
    notebook = nbformat.read(path, as_version=4)
    assert RUN_TIME.search(notebook.cells[0].source), (
        f"{path.name}: the first cell must state the measured full-mode run time "
        "('Full-mode run time: ...')"
    )
    cells = code_cells(notebook)
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execute it top to bottom in a fresh kernel, got counts {counts}"
    )
    outputs = [output for cell in cells for output in cell.outputs]
    errors = [output.ename for output in outputs if output.output_type == "error"]
    assert not errors, f"{path.name}: stored outputs contain errors {errors}"
    assert any("image/png" in output.get("data", {}) for output in outputs), (
        f"{path.name}: no figure in the stored outputs"
    )
    for output in outputs:
        assert len(output_text(output)) <= MAX_TEXT_CHARS, (
            f"{path.name}: a text output over {MAX_TEXT_CHARS} characters"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_tutorial_has_no_volatile_metadata(path):
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES, f"{path.name} is too large"
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        assert "execution" not in cell.metadata, (
            f"{path.name}: strip the execution timestamps from the cell metadata"
        )


def test_tutorials_contain_no_machine_paths():
    for path in NOTEBOOKS:
        text = path.read_text()
        for fragment in (f"/{name}/" for name in ("work", "tmp", "root", "home")):
            assert fragment not in text, f"{path.name} contains {fragment!r}"


def test_tutorials_need_only_the_installed_package():
    pattern = re.compile(r"^\s*(from|import)\s+benchmarks\b", re.MULTILINE)
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        sources = [cell.source for cell in code_cells(notebook)]
        assert not any(pattern.search(source) for source in sources), (
            f"{path.name} imports the repository's benchmark harness"
        )
