r"""Optional dependencies: how an extra is installed, and the one way the package
imports a dependency that an extra provides.

The package is installed from a clone of its repository (no package index has it),
so an extra is installed from the repository root, e.g. ``pip install -e
".[optuna]"``. A module that needs an optional dependency either imports it at the
top and turns the failure into :func:`missing_dependency`::

    try:
        import optuna  # noqa: F401
    except ImportError as error:
        raise missing_dependency("optuna", "optuna", __name__) from error

or imports it when first needed with :func:`require`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["install_command", "install_hint", "missing_dependency", "require"]


def install_command(extra: str) -> str:
    r"""The command that installs ``extra``, run from the repository root."""
    return f'pip install -e ".[{extra}]"'


def install_hint(extra: str) -> str:
    r"""The sentence an ImportError ends with when ``extra`` is missing."""
    return f"Install it with: {install_command(extra)} (from the repository root)."


def missing_dependency(
    dependency: str, extra: str, needed_by: str | None = None
) -> ImportError:
    r"""The ImportError for a missing optional ``dependency`` (a distribution name,
    e.g. ``"ax-platform"``): what needs it, and how ``extra`` installs it."""
    who = needed_by if needed_by is not None else "This"
    return ImportError(
        f"{who} needs the optional dependency {dependency}. {install_hint(extra)}"
    )


def require(module: str, extra: str) -> ModuleType:
    r"""Import ``module``, or raise :func:`missing_dependency` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise missing_dependency(module.split(".")[0], extra) from error
