r"""Without ray[tune], the Ray Tune modules raise an ImportError naming the extra
(runs whether or not ray is installed)."""

import importlib
import sys

import pytest

MODULES = (
    "botorch_sketch.integrations.ray_tune",
    "botorch_sketch.integrations.tune_space",
)


@pytest.mark.parametrize("module", MODULES)
def test_import_without_ray_says_how_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray...` fail
    monkeypatch.setitem(sys.modules, "ray.tune", None)
    for name in MODULES:  # ray_tune imports tune_space, which checks for ray
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[distributed\]"'):
        importlib.import_module(module)
