"""Finding the backend of a model or tensor without importing frameworks eagerly."""

from __future__ import annotations

import importlib
from typing import Any

from xaikit.backend.base import Backend
from xaikit.errors import XaikitTypeError, describe, describe_name, missing_framework

_FRAMEWORK_ROOTS = {"torch": "torch", "tensorflow": "tf", "keras": "tf", "tf_keras": "tf"}
_BACKENDS: dict[str, Backend] = {}


def framework_of(obj: Any) -> str | None:
    """``"torch"``, ``"tf"`` or None for a value, judged from the modules of its type's classes.

    Nothing is imported: a value can only belong to a framework that is already loaded.

    Example:
        >>> import numpy as np
        >>> framework_of(np.zeros(3)) is None
        True
    """
    found = _frameworks_of(obj)
    return found[0] if found else None


def _frameworks_of(obj: Any) -> list[str]:
    """Every framework among the modules of ``obj``'s type's classes, nearest class first (a
    Keras 3 layer on the torch backend is both)."""
    roots = (_FRAMEWORK_ROOTS.get(cls.__module__.split(".")[0]) for cls in type(obj).__mro__)
    return list(dict.fromkeys(r for r in roots if r is not None))


def load_backend(name: str) -> Backend:
    """The backend called ``name`` (``"torch"`` or ``"tf"``), importing its framework now.

    Raises:
        MissingFrameworkError: the framework is not installed (the message names the extra).
    """
    if not isinstance(name, str) or name not in ("torch", "tf", "tensorflow", "keras"):
        raise XaikitTypeError(f"framework must be 'torch' or 'tf'; got {describe_name(name)}")
    if name in ("tensorflow", "keras"):
        name = "tf"
    if name not in _BACKENDS:
        module_name = "torch" if name == "torch" else "tensorflow"
        try:
            importlib.import_module(module_name)
        except ImportError:
            raise missing_framework(module_name) from None
        if name == "torch":
            from xaikit.backend.torch import TorchBackend

            _BACKENDS[name] = TorchBackend()
        else:
            from xaikit.backend.tf import TFBackend

            _BACKENDS[name] = TFBackend()
    return _BACKENDS[name]


def get_backend(obj: Any, framework: str | None = None) -> Backend:
    """The backend object for a model or tensor: one per framework, shared by every caller.

    Args:
        obj: a ``torch.nn.Module``, a Keras model, a TF callable, or a tensor.
        framework: force ``"torch"`` or ``"tf"`` (for a plain Python callable wrapping a model).

    Raises:
        XaikitTypeError: ``obj`` belongs to no supported framework and none was named, or
            ``framework`` names another framework than ``obj``'s.
    """
    owns = _frameworks_of(obj)
    own = owns[0] if owns else None
    if framework is not None and own is not None:
        named = load_backend(framework)
        if not any(named is load_backend(r) for r in owns):
            raise XaikitTypeError(
                f"framework={framework!r} does not match the model, a {type(obj).__name__} of "
                f"{'torch' if own == 'torch' else 'TensorFlow/Keras'}: pass framework={own!r} or leave it out"
            )
        return named
    name = own if framework is None else framework
    if name is None:
        raise XaikitTypeError(
            "model must be a torch.nn.Module, a Keras model or a TensorFlow callable "
            f"(or pass framework='torch'/'tf' for a plain function); got {describe(obj)}"
        )
    return load_backend(name)


def prefers_channel_first(value: Any, default: bool = False) -> bool:
    """Whether the framework of a tensor lays images out channel-first by convention (torch);
    ``default`` for numpy arrays and other plain values. Ambiguous shapes are read this way.

    Example:
        >>> import numpy as np
        >>> prefers_channel_first(np.zeros((2, 3, 3, 3))), prefers_channel_first(np.zeros(2), default=True)
        (False, True)
    """
    name = framework_of(value)
    return load_backend(name).channel_first if name is not None else default
