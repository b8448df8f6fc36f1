"""The one exception family of xaikit.

Every error that xaikit raises on purpose derives from :class:`XaikitError`, so a caller can catch
them all at once. Bad values also derive from :class:`ValueError` and bad types from
:class:`TypeError`, so code written against the standard exceptions keeps working.

Messages say which argument or key was wrong, what was expected and what came.

Warnings that xaikit gives on purpose derive from :class:`XaikitWarning` (a ``UserWarning``), so
``warnings.filterwarnings("ignore", category=XaikitWarning)`` silences them all.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = [
    "DegenerateMapWarning",
    "IncompleteMapWarning",
    "MissingFrameworkError",
    "XaikitError",
    "XaikitTypeError",
    "XaikitValueError",
    "XaikitWarning",
    "XaikitWriteError",
    "describe",
]


class XaikitError(Exception):
    """Base class of every error raised on purpose by xaikit."""


class XaikitValueError(XaikitError, ValueError):
    """An argument has the right type but a wrong value (shape, range, unknown name, ...)."""


class XaikitTypeError(XaikitError, TypeError):
    """An argument has the wrong type."""


class MissingFrameworkError(XaikitError, ImportError):
    """A deep-learning framework that the call needs is not installed."""


class XaikitWriteError(XaikitError, OSError):
    """A file cannot be written where it was asked for (a read-only or missing place, a file
    where a folder should be); the message names the destination, not a temporary file."""


class XaikitWarning(UserWarning):
    """Base class of every warning given on purpose by xaikit."""


class DegenerateMapWarning(XaikitWarning):
    """Explanation maps that cannot be explanations: NaN / inf, all zero, constant, or below float32
    resolution of the explained score (see :mod:`xaikit.xai.health`). Given once per (model,
    method, status) in a process; silence it with
    ``warnings.filterwarnings("ignore", category=xaikit.DegenerateMapWarning)``."""


class IncompleteMapWarning(XaikitWarning):
    """DeepLIFT / DeepLiftShap attributions that do not add up to the score change
    ``f(x) - f(baseline)`` beyond float rounding: an operation of the model has no DeepLIFT rule
    and passes its plain gradient (see ``docs/rules.md``). Given once per (model, method) in a
    process; silence it with ``warnings.filterwarnings("ignore", category=xaikit.IncompleteMapWarning)``."""


_EXTRAS = {"torch": "torch", "tensorflow": "tf"}


def missing_framework(framework: str) -> MissingFrameworkError:
    """Build the error for a framework that is needed but not importable.

    Args:
        framework: ``"torch"`` or ``"tensorflow"``.

    Returns:
        An error whose message names the pip extra that installs it.
    """
    extra = _EXTRAS.get(framework, framework)
    cpu = ' (or "xaikit[tf-cpu]" for the CPU-only wheel)' if extra == "tf" else ""
    return MissingFrameworkError(
        f"{framework} is needed for this call but is not installed; "
        f'install it with: pip install "xaikit[{extra}]"{cpu}'
    )


def describe(value: Any) -> str:
    """A short description of a value for error messages: its type, and shape/dtype when it has one.

    Example:
        >>> import numpy as np
        >>> describe(np.zeros((2, 3), dtype=np.float32))
        'ndarray of shape (2, 3) and dtype float32'
        >>> describe("abc")
        "str 'abc'"
    """
    shape = getattr(value, "shape", None)
    if shape is not None:
        dtype = getattr(value, "dtype", None)
        dims = tuple(int(d) if d is not None else None for d in shape)
        dtype_name = getattr(dtype, "name", None) or str(dtype).replace("torch.", "")
        return f"{type(value).__name__} of shape {dims} and dtype {dtype_name}"
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def describe_name(value: Any) -> str:
    """What came where one of a few names was expected: a string quoted as it is, anything else
    (an array, a list, None) described by :func:`describe`.

    Example:
        >>> describe_name("zzz"), describe_name(["a"])
        ("'zzz'", 'list')
    """
    return repr(value) if isinstance(value, str) else describe(value)


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_level() -> int:
    """The ``stacklevel`` of the first frame outside the xaikit package, counted from the caller
    of this function: a warning points at the user's line, however deep the call."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
