r"""The package's layering and its lean import.

Imports run one way: ``utils -> models -> sampling -> acquisition -> generation ->
integrations / parallel``. A module may import its own layer or a lower one, at module
level or inside a function alike. The benchmark harness (``benchmarks/`` beside the
package) uses the library; the library never imports it, and it is not installed.
"""

from __future__ import annotations

import ast
import configparser
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "botorch_sketch"
LAYERS = {
    "utils": 0,
    "models": 1,
    "sampling": 2,
    "acquisition": 3,
    "generation": 4,
    "integrations": 5,
    "parallel": 5,
}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return (
        LAYERS.get(parts[1])
        if parts[0] == "botorch_sketch" and len(parts) > 1
        else None
    )


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_every_top_level_module_has_a_layer():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert modules | packages == set(LAYERS)


def test_imports_run_one_way():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "botorch_sketch." + ".".join(
            path.relative_to(PACKAGE).with_suffix("").parts
        )
        own = _layer(module)
        if own is None:  # the package's __init__ re-exports every layer
            continue
        for name in _imports(path):
            target = _layer(name)
            if target is not None and target > own:
                violations.append(f"{module} imports {name}")
    assert not violations, "\n".join(violations)


def test_the_library_never_imports_the_benchmark_harness():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0] == "benchmarks"
    ]
    assert offenders == []


def test_only_the_library_is_installed():
    setuptools = pytest.importorskip("setuptools")
    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg")
    include = config["options.packages.find"]["include"].split()
    packages = setuptools.find_packages(str(PACKAGE.parent), include=include)
    assert "botorch_sketch.models" in packages
    assert all(name.split(".")[0] == "botorch_sketch" for name in packages)


#: The subpackages that export their public names with ``__all__``.
EXPORTING = ("models", "sampling", "acquisition", "generation", "integrations", "utils")


@pytest.mark.parametrize("subpackage", EXPORTING)
def test_subpackages_export_their_names(subpackage):
    module = importlib.import_module(f"botorch_sketch.{subpackage}")
    if subpackage == "integrations":  # imported on first use: check the source only
        for name, source in module._EXPORTS.items():
            path = PACKAGE / subpackage / f"{source}.py"
            assert name in _all_of(path), f"{source}.py does not export {name}"
        return
    for name in module.__all__:
        assert getattr(module, name).__module__.startswith(module.__name__), name


def test_top_level_names_come_from_the_subpackages():
    import botorch_sketch
    from botorch_sketch import parallel

    exported = {
        name: getattr(importlib.import_module(f"botorch_sketch.{sub}"), name)
        for sub in EXPORTING
        if sub != "integrations"
        for name in importlib.import_module(f"botorch_sketch.{sub}").__all__
    } | {name: getattr(parallel, name) for name in parallel.__all__}
    for name in botorch_sketch.__all__:
        assert getattr(botorch_sketch, name) is exported[name], name


def _all_of(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in node.targets
        ):
            return ast.literal_eval(node.value)
    return []


def test_import_loads_no_optional_dependency():
    code = (
        "import sys, botorch_sketch, botorch_sketch.integrations; "
        "print(sorted(m for m in ('matplotlib', 'ax', 'ray', 'distributed', "
        "'dask', 'hypothesis', 'nbclient', 'optuna') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
