"""Host threads for the numpy work that runs beside the model (XRAI's region growing, Guided IG's
feature selection): one per CPU core this process may run on, at most one per independent piece.
"""

from __future__ import annotations

import os


def host_threads(pieces: int) -> int:
    """Threads for ``pieces`` independent pieces of host work: the cores this process may run on
    (its CPU affinity where the platform tells it, e.g. under ``taskset``; else the machine's
    count), at most ``pieces``, at least 1.

    Example:
        >>> host_threads(1), host_threads(0), host_threads(10**6) >= 1
        (1, 1, True)
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cores = os.cpu_count() or 1
    return max(1, min(int(pieces), cores))
