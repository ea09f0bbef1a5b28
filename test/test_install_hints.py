r"""Install hints work from a clone: no file of the package, the docs, the README,
the tutorials or the tests tells to ``pip install`` the package by its name with
an extra (no package index has it); each hint names an extra of pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from botorch_sketch.utils.extras import install_command, install_hint

ROOT = Path(__file__).resolve().parents[1]
#: An install by the package name with an extra in brackets, quoted or not.
BY_NAME = re.compile(r"pip install \\?[\"']?botorch[-_]sketch\[")
#: ``pip install -e ".[optuna]"``: the extra.
FROM_CLONE = re.compile(r"pip install -e \\?[\"']?\.\[([\w,-]+)\]")


def _files() -> list[Path]:
    suffixes = {".py", ".md", ".ipynb", ".cfg", ".toml"}
    found = [ROOT / "README.md"]
    for folder in ("botorch_sketch", "docs", "tutorials", "test"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in suffixes]
    return found


def test_no_file_installs_the_package_by_name():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BY_NAME.search(line)
    ]
    assert offenders == []


def test_every_hint_names_an_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as file:
        extras = set(tomllib.load(file)["project"]["optional-dependencies"])
    named = {
        extra
        for path in _files()
        for match in FROM_CLONE.finditer(path.read_text())
        for extra in match.group(1).split(",")
    }
    assert {"optuna", "ax", "distributed", "bench"} <= named <= extras


def test_the_hint_is_a_command_from_the_repository_root():
    assert install_command("optuna") == 'pip install -e ".[optuna]"'
    assert install_hint("ax") == (
        'Install it with: pip install -e ".[ax]" (from the repository root).'
    )
