"""Argument checks with one message shape: ``<name> must be <what>; got <type and value>``.

Example:
    >>> check_int(3, "steps", low=1)
    3
    >>> check_int(0, "steps", low=1)
    Traceback (most recent call last):
    ...
    xaikit.errors.XaikitValueError: steps must be an int >= 1; got int 0
    >>> check_number(0.5, "alpha", low=0, high=1)
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe, describe_name

__all__ = ["check_choice", "check_int", "check_number"]


def _bounds(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"<= {high:g}"
    return ""


def check_int(
    value: Any,
    name: str,
    low: int | None = None,
    high: int | None = None,
    *,
    allow_none: bool = False,
    alternative: str = "",
    kind: type[Exception] = XaikitValueError,
) -> Any:
    """An integer (bools refused, numpy integers accepted) within ``[low, high]``, as ``int``.

    Args:
        value: what the caller passed.
        name: the argument's name, for the message.
        low: inclusive lower bound (None: unbounded).
        high: inclusive upper bound (None: unbounded).
        allow_none: None is accepted (and returned).
        alternative: other accepted values, written before the int in the message
            (e.g. ``"'auto' or "``); the caller handles them before calling.
        kind: the error class for a value of the wrong type (a value out of range is always a
            :class:`~xaikit.errors.XaikitValueError`).

    Raises:
        XaikitValueError: not an int, or out of range (``kind`` for a wrong type).
    """
    if value is None and allow_none:
        return None
    bounds = _bounds(low, high)
    expected = f"{'None or ' if allow_none else ''}{alternative}an int{(' ' + bounds) if bounds else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise kind(f"{name} must be {expected}; got {describe(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise XaikitValueError(f"{name} must be {expected}; got {describe(int(value))}")
    return int(value)


def check_number(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    allow_none: bool = False,
    kind: type[Exception] = XaikitValueError,
) -> Any:
    """A finite real number (bools refused) within the bounds, as ``float``.

    ``low_open`` makes the lower bound exclusive (``> low``).

    Raises:
        XaikitValueError: not a finite number, or out of range (``kind`` for a wrong type).
    """
    if value is None and allow_none:
        return None
    bounds = _bounds(low, high, low_open)
    expected = f"{'None or ' if allow_none else ''}a number{(' ' + bounds) if bounds else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise kind(f"{name} must be {expected}; got {describe(value)}")
    v = float(value)
    below = low is not None and (v <= low if low_open else v < low)
    if not math.isfinite(v) or below or (high is not None and v > high):
        raise XaikitValueError(f"{name} must be {expected}; got {describe(value)}")
    return v


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of the strings ``choices``, else an error naming ``name``, the
    choices and what came (any value: an array or a list is named, never compared element-wise).

    Example:
        >>> check_choice("signed", "rank", ("signed", "magnitude"))
        'signed'
        >>> check_choice(None, "rank", ("signed", "magnitude"))
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitValueError: rank must be one of 'signed', 'magnitude'; got NoneType None
    """
    if not isinstance(value, str) or value not in choices:
        names = ", ".join(map(repr, choices))
        raise XaikitValueError(f"{name} must be one of {names}; got {describe_name(value)}")
    return value


def check_type(value: Any, name: str, types: type | tuple[type, ...], what: str) -> Any:
    """``value`` when it is an instance of ``types``, else an :class:`XaikitTypeError`."""
    if not isinstance(value, types):
        raise XaikitTypeError(f"{name} must be {what}; got {describe(value)}")
    return value


def check_floats(value: Any, name: str, what: str) -> np.ndarray:
    """``value`` as a float64 array (any shape), else an :class:`XaikitTypeError`
    ``<name> must be <what>; got ...``; the caller checks the shape and the values."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise XaikitTypeError(f"{name} must be {what}; got {describe(value)}") from None
