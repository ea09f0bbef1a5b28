r"""registry/botorch_sketch is an OptunaHub package: ``optunahub.load_local_module``
loads it (as ``optunahub.load_module`` loads a downloaded registry folder), its
samplers are the package's and run a study, its README has OptunaHub's front
matter, and every Python snippet of the README runs as written, in order, with
``optunahub.load_module("samplers/botorch_sketch")`` served from the folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")
optunahub = pytest.importorskip("optunahub")
yaml = pytest.importorskip("yaml")  # a dependency of optuna

from botorch_sketch.integrations import optuna as integration  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "registry"
FOLDER = REGISTRY / "botorch_sketch"
README = FOLDER / "README.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)
#: The keys optunahub-registry's header check requires, each non-empty.
REQUIRED = ("author", "title", "description", "tags", "optuna_versions", "license")


def _load():
    return optunahub.load_local_module(
        package="botorch_sketch", registry_root=str(REGISTRY)
    )


def _objective(trial):
    x = trial.suggest_float("x", -5.0, 5.0)
    y = trial.suggest_float("y", -5.0, 5.0)
    return (x - 1.0) ** 2 + (y + 2.0) ** 2


def test_the_folder_has_the_registry_files():
    names = {path.name for path in FOLDER.iterdir() if path.name != "__pycache__"}
    assert {"__init__.py", "README.md", "LICENSE", "requirements.txt"} <= names
    assert (FOLDER / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    requirements = (FOLDER / "requirements.txt").read_text().split()
    assert "botorch-sketch" in requirements
    assert any(line.startswith("optuna>=") for line in requirements)


def test_the_module_exports_the_package_samplers():
    module = _load()
    assert module.__name__ == "optunahub_registry.package.botorch_sketch"
    assert sorted(module.__all__) == ["BBKBSampler", "SGPTSSampler"]
    assert module.BBKBSampler is integration.BBKBSampler
    assert module.SGPTSSampler is integration.SGPTSSampler


@pytest.mark.parametrize("name", ["BBKBSampler", "SGPTSSampler"])
def test_a_loaded_sampler_runs_a_study(name):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = getattr(_load(), name)(seed=0, num_arms=64)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(_objective, n_trials=12)
    states = {trial.state for trial in study.trials}
    assert len(study.trials) == 12 and states == {optuna.trial.TrialState.COMPLETE}
    # the first trial is random, every later one asked the loop after a tell
    assert sampler.told_trials == list(range(11))
    assert sampler.loop is not None and sampler.failed_trials == []


def test_the_readme_has_optunahub_front_matter():
    match = FRONT_MATTER.match(README.read_text())
    assert match is not None, "README.md must open with a --- front matter block"
    header = yaml.safe_load(match.group(1))
    for key in REQUIRED:
        assert header.get(key) not in (None, "", []), f"{key} is missing or empty"
    assert "sampler" in header["tags"]  # required under package/samplers/
    assert all(isinstance(version, str) for version in header["optuna_versions"])
    assert header["license"] == "MIT License"
    assert "MIT License" in (FOLDER / "LICENSE").read_text()


def test_the_readme_names_what_exists():
    from test.test_references import DOTTED, _problem

    names = sorted(set(DOTTED.findall(README.read_text())))
    assert names  # the options classes, the integration module
    assert [f"{name} {_problem(name)}" for name in names if _problem(name)] == []


def test_the_readme_installs_from_a_clone():
    text = README.read_text()
    assert 'pip install -e ".[optuna]"' in text
    assert "pip install botorch-sketch" not in text  # not on any package index
    assert "package/samplers/botorch_sketch/" in text


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_every_python_snippet_of_the_readme_runs(monkeypatch):
    # relative paths of the snippets are the clone's root
    monkeypatch.chdir(ROOT)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    requested = []

    def load_module(package, **kwargs):
        # what OptunaHub does after downloading package/<package> of the registry
        requested.append(package)
        assert package == "samplers/botorch_sketch"
        return _load()

    monkeypatch.setattr(optunahub, "load_module", load_module)
    snippets = SNIPPET.findall(README.read_text())
    assert len(snippets) >= 2
    namespace: dict = {"__name__": "__main__"}
    for code in snippets:
        exec(compile(code, str(README), "exec"), namespace)
    assert requested == ["samplers/botorch_sketch"]
    complete = namespace["study"].get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == len(namespace["study"].trials) > 0
    assert isinstance(namespace["sampler"], integration.BBKBSampler)
