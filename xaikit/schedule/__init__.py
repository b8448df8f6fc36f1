"""Schedulers: values (traces, ops, numbers) that change or switch off from epoch to epoch.

Example:
    >>> import xaikit as xk
    >>> s = xk.schedule.EpochScheduler({1: 0.1, 3: 0.01})
    >>> s.get_current_value(2), s.get_current_value(3)
    (0.1, 0.01)
"""

from __future__ import annotations

from xaikit.schedule.schedule import EpochScheduler, RepeatScheduler, Scheduler, get_current_items

__all__ = ["EpochScheduler", "RepeatScheduler", "Scheduler", "get_current_items"]
