r"""Names of a package imported from its modules on first use (PEP 562), so that
importing the package does not import what those modules need."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    r"""The module-level ``__getattr__`` and ``__dir__`` of ``package`` for
    ``exports`` (public name -> the module of ``package`` that defines it).

    Example:
        >>> __getattr__, __dir__ = lazy_exports(__name__, {"BBKBSearch": "ray_tune"})
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *exports})

    return __getattr__, __dir__
