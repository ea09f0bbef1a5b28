import math
import sys

import pytest

from botorch_sketch.utils.extras import missing_dependency, require


def test_require_returns_the_module():
    assert require("math", "bench") is math


def test_require_names_the_dependency_and_the_extra(monkeypatch):
    for name in ("tqdm", "tqdm.auto"):  # as if not installed
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError) as raised:
        require("tqdm.auto", "distributed")
    assert str(raised.value) == (
        "This needs the optional dependency tqdm. Install it with: "
        'pip install -e ".[distributed]" (from the repository root).'
    )
    assert isinstance(raised.value.__cause__, ImportError)


def test_missing_dependency_names_what_needs_it():
    error = missing_dependency("ray[tune]", "distributed", "my.module")
    assert str(error).startswith("my.module needs the optional dependency ray[tune].")
