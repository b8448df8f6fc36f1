"""The common part of pipeline (numpy) and network (tensor) ops: keys in, keys out, modes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["ALL_MODES", "Op", "all_values", "keys_of", "parse_modes", "resolve"]

#: every mode an op can run in
ALL_MODES = frozenset({"train", "eval", "test", "infer"})


def parse_modes(mode: str | Iterable[str] | None) -> set[str] | None:
    """Normalize a mode argument to a set of modes (None: every mode).

    A mode may be negated with ``!``: ``"!train"`` means every mode except ``"train"``.

    Example:
        >>> sorted(parse_modes("!train"))
        ['eval', 'infer', 'test']
        >>> sorted(parse_modes(["eval", "test"]))
        ['eval', 'test']
    """
    if mode is None:
        return None
    items = [mode] if isinstance(mode, str) else list(mode)
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise XaikitTypeError(f"mode must be a str or a list of str; got {describe(item)}")
        name = item[1:] if item.startswith("!") else item
        if name not in ALL_MODES:
            raise XaikitValueError(
                f"mode must be one of {sorted(ALL_MODES)} (optionally with '!'); got {item!r}"
            )
        out |= set(ALL_MODES - {name}) if item.startswith("!") else {name}
    return out


def keys_of(keys: str | Iterable[str] | None, what: str) -> list[str]:
    """A list of key names from a str, a list/tuple of str, or None (empty)."""
    if keys is None:
        return []
    items = [keys] if isinstance(keys, str) else list(keys)
    for k in items:
        if not isinstance(k, str):
            raise XaikitTypeError(f"{what} must be a key name or a list of key names; got {describe(k)}")
    return items


class Op:
    """Base of all ops: reads ``inputs`` keys of a batch and writes ``outputs`` keys.

    Args:
        inputs: key or keys read.
        outputs: key or keys written.
        mode: modes the op runs in (None: all; ``"!train"`` negates).
    """

    def __init__(
        self,
        inputs: str | Iterable[str] | None = None,
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
    ) -> None:
        self.inputs: list[str] = keys_of(inputs, "inputs")
        self.outputs: list[str] = keys_of(outputs, "outputs")
        self.mode: set[str] | None = parse_modes(mode)

    def runs_in(self, mode: str) -> bool:
        """Whether the op runs in ``mode``."""
        return self.mode is None or mode in self.mode

    def __repr__(self) -> str:
        return f"{type(self).__name__}(inputs={self.inputs}, outputs={self.outputs}, mode={self.mode})"


def resolve(items: Iterable[Any], mode: str, epoch: int) -> list[Any]:
    """The ops to run in ``mode`` at ``epoch``: schedulers (anything with ``get_current_value``)
    are replaced by their value for the epoch, and ``None`` values and ops of other modes are
    dropped."""
    out = []
    for item in items:
        if hasattr(item, "get_current_value"):
            item = item.get_current_value(epoch)
        if item is None:
            continue
        if getattr(item, "runs_in", None) is not None and not item.runs_in(mode):
            continue
        out.append(item)
    return out


def all_values(item: Any) -> list[Any]:
    """Every op an item may stand for: the op itself, or each non-None value of a scheduler."""
    if hasattr(item, "get_all_values"):
        return [v for v in item.get_all_values() if v is not None]
    return [item]
