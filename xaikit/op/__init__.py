"""Ops: :mod:`xaikit.op.numpyop` for the pipeline, :mod:`xaikit.op.tensorop` for the network.

Both are imported lazily, and neither loads a framework on import.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["numpyop", "tensorop"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        module = importlib.import_module(f"xaikit.op.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'xaikit.op' has no attribute {name!r}")
