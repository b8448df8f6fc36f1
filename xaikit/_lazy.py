"""Lazy sub-modules: a package's ``__getattr__`` imports them on first use, so that importing
the package stays cheap (and loads no framework)."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from types import ModuleType


def submodule(package: str, name: str, names: Collection[str]) -> ModuleType:
    """The sub-module ``<package>.<name>``, imported now if it is one of ``names``.

    Meant as the body of a package's module-level ``__getattr__``; importing a sub-module also
    binds it as an attribute of its package, so ``__getattr__`` is asked once per name.

    Raises:
        AttributeError: ``name`` is not one of ``names`` (what ``getattr`` expects).

    Example:
        >>> submodule("xaikit", "modes", {"modes"}).__name__
        'xaikit.modes'
    """
    if name in names:
        return importlib.import_module(f"{package}.{name}")
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
