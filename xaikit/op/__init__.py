"""Ops: :mod:`xaikit.op.numpyop` for the pipeline, :mod:`xaikit.op.tensorop` for the network.

Both are imported lazily, and neither loads a framework on import.
"""

from __future__ import annotations

from types import ModuleType

from xaikit._lazy import submodule

__all__ = ["numpyop", "tensorop"]


def __getattr__(name: str) -> ModuleType:
    return submodule(__name__, name, __all__)
