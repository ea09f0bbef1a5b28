r"""Execute every notebook in tutorials/ in its fast mode (``SMOKE_TEST=1``).

Each notebook runs top to bottom in a fresh ``python3`` kernel of the active
environment, from the tutorials directory; any exception fails the test. Notebooks that
use Ax are skipped only when ax-platform is not importable.
"""

import importlib.util
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
#: Seconds one cell may run in the fast mode before the test fails.
CELL_TIMEOUT = 300


def uses_ax(notebook) -> bool:
    return any(
        "import ax" in cell.source
        or "from ax" in cell.source
        or "integrations.ax" in cell.source
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def test_there_are_tutorials():
    assert NOTEBOOKS, f"no notebooks found in {TUTORIALS.name}/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_tutorial_runs_in_smoke_mode(path):
    notebook = nbformat.read(path, as_version=4)
    if uses_ax(notebook) and importlib.util.find_spec("ax") is None:
        pytest.skip('needs ax-platform (pip install "botorch-sketch[ax]")')
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    # One torch thread: the fast mode's small matrices gain nothing from more, and
    # shared CI machines lose a lot to oversubscription.
    client.execute(env={**os.environ, "SMOKE_TEST": "1", "OMP_NUM_THREADS": "1"})


def test_tutorials_are_stored_without_outputs():
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs, f"{path.name}: strip the outputs"
                assert cell.execution_count is None, f"{path.name}: strip the counts"


def test_tutorials_contain_no_machine_paths():
    for path in NOTEBOOKS:
        text = path.read_text()
        for fragment in (f"/{name}/" for name in ("work", "tmp", "root", "home")):
            assert fragment not in text, f"{path.name} contains {fragment!r}"
