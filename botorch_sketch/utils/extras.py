r"""How an optional extra is installed. The package is installed from a clone of
its repository (no package index has it), so an extra is installed from the
repository root, e.g. ``pip install -e ".[optuna]"``."""

from __future__ import annotations

__all__ = ["install_command", "install_hint"]


def install_command(extra: str) -> str:
    r"""The command that installs ``extra``, run from the repository root."""
    return f'pip install -e ".[{extra}]"'


def install_hint(extra: str) -> str:
    r"""The sentence an ImportError ends with when ``extra`` is missing."""
    return f"Install it with: {install_command(extra)} (from the repository root)."
