"""Host memory facts for the chunk plan, with no framework: available RAM and the peak resident
set of one call.

The peak is read exactly where Linux allows it (``/proc/self/clear_refs`` resets the
high-water mark ``VmHWM``, Linux >= 4.0), else sampled every millisecond in a thread (a lower
bound: a spike shorter than the period is missed). Before each measurement, glibc's free heap
is returned to the OS (``malloc_trim``) so that memory freed by earlier work cannot hide what
the call allocates. ``psutil`` is used where it is installed, ``/proc`` otherwise.

Side effect: resetting ``VmHWM`` also lowers what ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
reports afterwards (it reads the same high-water mark); code that relies on the process's
lifetime peak should read it before the first ``max_batch="auto"`` plan is made.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["available_ram", "host_peak", "rss_bytes", "trim_heap"]

_STATUS = "/proc/self/status"


def _status_kib(field: str) -> int | None:
    try:
        with open(_STATUS) as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


_PROCESS: list[Any] = []  # the psutil.Process of this process, once made


def rss_bytes() -> int:
    """The process's resident set size in bytes (0 when it cannot be read)."""
    try:
        if not _PROCESS:
            import psutil

            _PROCESS.append(psutil.Process())
        return int(_PROCESS[0].memory_info().rss)
    except Exception:  # psutil missing or refused: /proc
        kib = _status_kib("VmRSS:")
        return 0 if kib is None else kib * 1024


def available_ram() -> int | None:
    """RAM available to new allocations without swapping, in bytes (None when unknown).

    ``psutil.virtual_memory().available`` where installed, else ``MemAvailable`` of
    ``/proc/meminfo``.
    """
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def trim_heap() -> None:
    """Give glibc's free heap back to the OS (no-op elsewhere)."""
    try:
        name = ctypes.util.find_library("c")
        if name:
            ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel or the sandbox refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM:") is not None


class _Sampler:
    def __init__(self, period: float) -> None:
        self.period = period
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.period)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def host_peak(fn: Callable[[], Any], period: float = 0.001) -> tuple[Any, int | None]:
    """Run ``fn()`` and return ``(its result, the peak RSS increase during it in bytes)``.

    The increase is over the resident set just before the call (after a garbage collection and
    a ``malloc_trim``); None when the resident set cannot be read at all.

    Example:
        >>> import numpy as np
        >>> _, peak = host_peak(lambda: np.ones(32 * 2**20 // 8).sum())
        >>> peak is None or peak > 16 * 2**20
        True
    """
    gc.collect()
    trim_heap()
    base = rss_bytes()
    if not base:
        return fn(), None
    if _reset_hwm():
        base = (_status_kib("VmRSS:") or 0) * 1024
        out = fn()
        hwm = (_status_kib("VmHWM:") or 0) * 1024
        return out, max(0, hwm - base)
    with _Sampler(period) as sampler:
        out = fn()
    return out, max(0, sampler.peak - base)
