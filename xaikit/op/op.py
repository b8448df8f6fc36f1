"""The common part of pipeline (numpy) and network (tensor) ops: keys in, keys out, modes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xaikit.modes import ALL_MODES, parse_modes, to_list

#: a key, several keys, or None
Keys = str | Iterable[str] | None

__all__ = ["ALL_MODES", "Keys", "Op", "all_values", "keys_of", "parse_modes", "resolve"]


def keys_of(keys: str | Iterable[str] | None, what: str) -> list[str]:
    """A list of key names from a str, a list/tuple of str, or None (empty); repeats are kept."""
    return to_list(keys, what, unique=False)


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
        self.mode: frozenset[str] = parse_modes(mode)

    def runs_in(self, mode: str) -> bool:
        """Whether the op runs in ``mode``."""
        return mode in self.mode

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(inputs={self.inputs}, outputs={self.outputs}, mode={sorted(self.mode)})"
        )


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
