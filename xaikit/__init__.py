"""xaikit: explain TensorFlow and PyTorch image models with one API.

Sub-packages are imported lazily, so ``import xaikit`` loads neither framework (and not even
matplotlib) until something that needs it is used.

Example:
    >>> import xaikit as xk
    >>> xk.__version__
    '0.1.0'
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from xaikit._lazy import submodule
from xaikit.errors import (
    DegenerateMapWarning,
    IncompleteMapWarning,
    XaikitError,
    XaikitTypeError,
    XaikitValueError,
    XaikitWarning,
    XaikitWriteError,
)

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY_ATTRS = {
    "ImgData": "xaikit.viz",
    "Pipeline": "xaikit.pipeline",
    "Network": "xaikit.network",
    "Estimator": "xaikit.estimator",
    "build": "xaikit.network",
}
_SUBPACKAGES = {
    "analyze",
    "architecture",
    "backend",
    "dataset",
    "evaluate",
    "inspect",
    "op",
    "schedule",
    "targets",
    "trace",
    "viz",
    "xai",
}

__all__ = [
    "DegenerateMapWarning",
    "Estimator",
    "ImgData",
    "IncompleteMapWarning",
    "Network",
    "Pipeline",
    "XaikitError",
    "XaikitTypeError",
    "XaikitValueError",
    "XaikitWarning",
    "XaikitWriteError",
    "__version__",
    "build",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
        globals()[name] = value
        return value
    return submodule(__name__, name, _SUBPACKAGES)


def __dir__() -> list[str]:
    return sorted(set(__all__) | _SUBPACKAGES)
