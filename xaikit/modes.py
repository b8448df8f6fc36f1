"""The vocabulary of runs: modes and dataset ids, their parsers, and the key-list normaliser.

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

__all__ = ["ALL_MODES", "MODES", "ds_id_matches", "parse_ds_ids", "parse_modes", "to_list"]

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


def parse_ds_ids(ds_id: str | Iterable[str] | None) -> set[str]:
    """Resolve a ds_id argument into a set (empty = every dataset; ``"!a"`` = every one but ``a``).

    Example:
        >>> sorted(parse_ds_ids(["ds1", "ds2"])), sorted(parse_ds_ids("!ds1"))
        (['ds1', 'ds2'], ['!ds1'])
    """
    items = to_list(ds_id, "ds_id")
    negated = [d for d in items if d.startswith("!")]
    for d in items:
        name = d[1:] if d.startswith("!") else d
        if not name or any(c in name for c in "|;!"):
            raise XaikitValueError(
                f"ds_id must be a non-empty name without '|', ';' or '!' (except a leading '!'); got {d!r}"
            )
    if negated and len(negated) != len(items):
        raise XaikitValueError(f"ds_id cannot mix negated and plain ids; got {items!r}")
    return set(items)


def ds_id_matches(allowed: set[str], ds_id: str) -> bool:
    """Whether an item whose ``ds_id`` set is ``allowed`` runs on the dataset ``ds_id``."""
    if not allowed:
        return True
    if all(a.startswith("!") for a in allowed):
        return f"!{ds_id}" not in allowed
    return ds_id in allowed
