"""Epoch-dependent values: wrap a trace, an op or any value so it changes (or turns off) by epoch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.modes import ds_id_matches, parse_modes

__all__ = ["EpochScheduler", "RepeatScheduler", "Scheduler", "get_current_items"]

T = TypeVar("T")


class Scheduler(Generic[T]):
    """Base of the schedulers: a value per epoch (``None`` = off in that epoch)."""

    def get_current_value(self, epoch: int) -> T | None:
        """The value for the 1-based ``epoch`` (``None`` when the item is off)."""
        raise NotImplementedError

    def get_all_values(self) -> list[T | None]:
        """Every value the scheduler can produce, in order of first use, ``None`` included."""
        raise NotImplementedError


def _check_epoch(epoch: Any) -> int:
    check_int(epoch, "epoch (epochs count from 1)", 1, kind=XaikitTypeError)
    return epoch


def _check_not_scheduler(value: Any, where: str) -> None:
    if isinstance(value, Scheduler):
        raise XaikitTypeError(f"{where} cannot itself be a scheduler; got {type(value).__name__}")


class RepeatScheduler(Scheduler[T]):
    """Cycle through a list, one entry per epoch: epoch ``e`` gets ``values[(e - 1) % len(values)]``.

    A list of one entry is allowed (the same value every epoch).

    Args:
        repeat_list: The values, a list or tuple of at least one entry; ``None`` entries switch
            the item off in those epochs.

    Example:
        >>> s = RepeatScheduler(["a", None, None])
        >>> [s.get_current_value(e) for e in range(1, 7)]
        ['a', None, None, 'a', None, None]
    """

    def __init__(self, repeat_list: list[T | None] | tuple[T | None, ...]) -> None:
        if not isinstance(repeat_list, (list, tuple)):
            raise XaikitTypeError(f"repeat_list must be a list of values; got {describe(repeat_list)}")
        if len(repeat_list) < 1:
            raise XaikitValueError("repeat_list must hold at least one value; got an empty list")
        for value in repeat_list:
            _check_not_scheduler(value, "an entry of repeat_list")
        self.repeat_list: list[T | None] = list(repeat_list)

    def get_current_value(self, epoch: int) -> T | None:
        return self.repeat_list[(_check_epoch(epoch) - 1) % len(self.repeat_list)]

    def get_all_values(self) -> list[T | None]:
        return list(self.repeat_list)

    def __repr__(self) -> str:
        return f"RepeatScheduler({self.repeat_list!r})"


class EpochScheduler(Scheduler[T]):
    """Change value at chosen epochs: each epoch uses the entry of the largest key not above it.

    Epochs before the first key get ``None`` (off).

    Args:
        epoch_dict: ``{epoch: value}`` with int epochs >= 1; a ``None`` value switches the item
            off from that epoch on.

    Example:
        >>> s = EpochScheduler({2: "a", 4: None, 5: "b"})
        >>> [s.get_current_value(e) for e in range(1, 7)]
        [None, 'a', 'a', None, 'b', 'b']
    """

    def __init__(self, epoch_dict: Mapping[int, T | None]) -> None:
        if not isinstance(epoch_dict, Mapping):
            raise XaikitTypeError(f"epoch_dict must be a dict {{epoch: value}}; got {describe(epoch_dict)}")
        if not epoch_dict:
            raise XaikitValueError("epoch_dict must hold at least one {epoch: value} entry; got {}")
        for key, value in epoch_dict.items():
            check_int(key, "epoch_dict keys (epochs)", 1, kind=XaikitTypeError)
            _check_not_scheduler(value, f"the value at epoch {key}")
        self.epoch_dict: dict[int, T | None] = dict(sorted(epoch_dict.items()))

    def get_current_value(self, epoch: int) -> T | None:
        epoch = _check_epoch(epoch)
        value: T | None = None
        for key, candidate in self.epoch_dict.items():
            if key > epoch:
                break
            value = candidate
        return value

    def get_all_values(self) -> list[T | None]:
        return list(self.epoch_dict.values())

    def __repr__(self) -> str:
        return f"EpochScheduler({self.epoch_dict!r})"


def _mode_ok(item: Any, modes: set[str] | None) -> bool:
    declared = getattr(item, "mode", None)
    if modes is None or declared is None:
        return True
    item_modes = parse_modes(declared) if isinstance(declared, str) else set(declared)
    return not item_modes or bool(item_modes & modes)


def _ds_ok(item: Any, ds_id: str | None) -> bool:
    allowed = getattr(item, "ds_id", None)
    if ds_id is None or allowed is None:
        return True
    return ds_id_matches({allowed} if isinstance(allowed, str) else set(allowed), ds_id)


def get_current_items(
    items: Iterable[Any],
    mode: str | Iterable[str] | None = None,
    epoch: int | None = None,
    ds_id: str | None = None,
) -> list[Any]:
    """The items active in a mode, epoch and dataset, with schedulers resolved.

    Args:
        items: Traces, ops or schedulers of them.
        mode: Keep items whose ``mode`` covers this mode (or any of these modes); ``None``: all.
            Items without a ``mode`` attribute, or with an empty one, run in every mode.
        epoch: Resolve schedulers at this epoch; ``None`` takes every value of every scheduler
            (used to call ``on_begin``/``on_end`` on every trace a run may use).
        ds_id: Keep items whose ``ds_id`` admits this dataset id; ``None``: all.

    Returns:
        The active items in the given order (each object once), ``None`` values dropped.

    Example:
        >>> get_current_items([RepeatScheduler(["a", None]), "b"], epoch=2)
        ['b']
        >>> get_current_items([EpochScheduler({1: "a", 3: "c"}), "b"])
        ['a', 'c', 'b']
    """
    modes: set[str] | None
    if mode is None:
        modes = None
    elif isinstance(mode, str):
        modes = {mode}
    else:
        modes = set(mode)
    out: list[Any] = []
    seen: set[int] = set()
    for item in items:
        if isinstance(item, Scheduler):
            values = item.get_all_values() if epoch is None else [item.get_current_value(epoch)]
        else:
            values = [item]
        for value in values:
            if value is None or id(value) in seen:
                continue
            if _mode_ok(value, modes) and _ds_ok(value, ds_id):
                seen.add(id(value))
                out.append(value)
    return out
