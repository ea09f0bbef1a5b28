r"""Every dotted ``botorch_sketch.`` or ``benchmarks.`` name in the docs, the README,
the tutorials and the docstrings of the package and of the benchmark harness names
something that exists, in the module that defines it (or in a package that exports
it), so that a moved name leaves no stale reference."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"(?<![\w./-])(?:botorch_sketch|benchmarks)(?:\.[A-Za-z_]\w*)+")


def _texts() -> dict[str, str]:
    texts = {}
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md")]:
        texts[path.name] = path.read_text()
    for path in ROOT.glob("tutorials/*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        texts[path.name] = "\n".join("".join(cell["source"]) for cell in cells)
    for folder in ("botorch_sketch", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            texts[str(path.relative_to(ROOT))] = path.read_text()
    return texts


def _problem(name: str) -> str | None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            missing = error.name if isinstance(error, ModuleNotFoundError) else None
            if missing is not None and module_name.startswith(missing):
                continue  # not a module: try a shorter prefix
            return None  # an optional dependency is missing: cannot check
        target = module
        for part in parts[cut:]:
            if not hasattr(target, part):
                return "does not exist"
            target = getattr(target, part)
        if cut < len(parts):
            named = getattr(module, parts[cut])
            home = getattr(named, "__module__", module_name)
            defined = inspect.isclass(named) or inspect.isfunction(named)
            if defined and home != module_name:
                if parts[cut] not in getattr(module, "__all__", ()):
                    return f"lives in {home}"
        return None
    return "does not exist"


def test_dotted_names_resolve_where_they_live():
    stale = [
        f"{where}: {name} {problem}"
        for where, text in sorted(_texts().items())
        for name in sorted(set(DOTTED.findall(text)))
        if not name.endswith((".py", ".md", ".ipynb"))
        and (problem := _problem(name)) is not None
    ]
    assert not stale, "\n".join(stale)


def test_a_name_behind_a_missing_optional_dependency_is_not_checked():
    # A machine without Ray (the GPU machine had none): the integration raises its
    # own ImportError naming the extra, which must not fail the reference check.
    code = (
        "import sys; sys.modules['ray'] = None; "
        "from test.test_references import _problem; "
        "print(_problem('botorch_sketch.integrations.ray_tune.BBKBSearch'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"
