"""The vocabulary of runs: modes, their parser, and the key-list normaliser.

One module at the bottom of the package, used by ops, traces, schedulers and ``SaliencyNet``,
so that ``mode="!train"`` and ``inputs=("x", "y")`` mean the same everywhere.

Example:
    >>> sorted(parse_modes(["!train", "!eval"]))
    ['infer', 'test']
    >>> parse_modes(None) == ALL_MODES
    True
    >>> to_list("x"), to_list(("x", "y", "x")), to_list(None)
    (['x'], ['x', 'y'], [])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["ALL_MODES", "MODES", "parse_modes", "to_list"]

#: every mode an op or a trace can run in, in the order a run meets them
MODES = ("train", "eval", "test", "infer")
ALL_MODES: frozenset[str] = frozenset(MODES)


def to_list(
    value: str | Iterable[str] | None, name: str = "inputs", allow_empty: bool = True, unique: bool = True
) -> list[str]:
    """``None``, a key or an iterable of keys as a list of keys (order kept).

    Args:
        value: what the caller passed.
        name: the argument's name, for the error message.
        allow_empty: whether None / an empty list is accepted.
        unique: drop repeated keys (traces, outputs); ops keep them (an op may read a key twice).

    Raises:
        XaikitTypeError: not a string or an iterable of non-empty strings (or empty when not
            allowed).
    """
    if value is None:
        items: list[str] = []
    elif isinstance(value, str):
        items = [value]
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        items = list(value)
    else:
        raise XaikitTypeError(
            f"{name} must be None, a string or an iterable of strings; got {describe(value)}"
        )
    for item in items:
        if not isinstance(item, str) or not item:
            raise XaikitTypeError(f"{name} must hold non-empty strings; got {describe(item)} in {items!r}")
    if not items and not allow_empty:
        raise XaikitTypeError(f"{name} must be a non-empty string or list of strings; got {value!r}")
    return list(dict.fromkeys(items)) if unique else items


def parse_modes(mode: str | Iterable[str] | None) -> frozenset[str]:
    """The set of modes a mode argument covers.

    ``None`` covers every mode; ``"!train"`` every mode but ``train``; several negations remove
    several modes (``["!train", "!eval"]`` is ``{"test", "infer"}``). Negated and plain modes
    cannot be mixed.

    Raises:
        XaikitValueError: an unknown mode, or a mix of negated and plain modes.

    Example:
        >>> sorted(parse_modes("!train")), sorted(parse_modes(["eval", "test"]))
        (['eval', 'infer', 'test'], ['eval', 'test'])
    """
    if mode is None:
        return ALL_MODES
    items = to_list(mode, "mode")
    negated = [m[1:] for m in items if m.startswith("!")]
    plain = [m for m in items if not m.startswith("!")]
    for m in negated + plain:
        if m not in MODES:
            raise XaikitValueError(
                f"mode must be one of {list(MODES)} (optionally prefixed by '!'); got {m!r}"
            )
    if negated and plain:
        raise XaikitValueError(f"mode cannot mix negated and plain modes; got {items!r}")
    if not items:
        return ALL_MODES
    return ALL_MODES - set(negated) if negated else frozenset(plain)
