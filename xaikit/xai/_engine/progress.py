"""Progress of long calls: a tqdm bar on a terminal, else a plain line every few seconds.

One helper for everything in ``xai`` that can run for minutes: :func:`~xaikit.xai.explain_dataset`
(rows of the dataset) and the slow methods of :func:`~xaikit.xai.explain` (XRAI, Guided IG,
occlusion, RISE, Score-CAM: rows of their forward or gradient passes, XRAI's images ranked).

* On a terminal (the stream's ``isatty()``): a tqdm bar.
* Otherwise (a log file, a notebook's captured stderr, CI): one line every :data:`EVERY`
  seconds, ``"<desc>: <done>/<total> <unit> (<pct>%), <rate> <unit>/s, ETA <s> s"``, and a last
  one when the work is done.
* ``enabled=False``: nothing at all.

``delay`` (seconds) holds everything back until the work has run that long: a bar that would
have lived for less is never shown, and no line is written. :func:`for_method` uses it for the
``progress=None`` ("auto") default of ``explain``, so that quick calls stay silent; it also
keeps an auto bar quiet while another bar is open, shown or silent (``explain_dataset`` calling
``explain`` batch by batch shows its own bar only, or nothing with ``progress=False``).

Counting costs nothing on an accelerator: callers report rows as they hand them to the device
(no synchronization is added), so a bar can run ahead of the device by the chunks in flight.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> with Progress(4, desc="demo", unit="rows", every=0.0, stream=out) as bar:
    ...     bar.update(2)
    ...     bar.update(2)
    >>> [line.split(",")[0] for line in out.getvalue().splitlines()]
    ['demo: 2/4 rows (50%)', 'demo: 4/4 rows (100%)']
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

__all__ = ["AUTO_DELAY", "EVERY", "Progress", "check_progress", "for_method"]

#: seconds between two plain progress lines
EVERY = 10.0
#: ``progress=None`` ("auto"): seconds a call runs before its progress shows
AUTO_DELAY = 5.0

#: the clock of every bar (a function of no arguments, in seconds; tests replace it)
now: Callable[[], float] = time.perf_counter

_open = 0  # bars open right now, shown or not (an auto bar stays quiet while another is open)
_open_lock = threading.Lock()


def check_progress(progress: Any) -> bool | None:
    """``progress`` if it is True, False or None, else an error that says what it takes.

    Example:
        >>> check_progress(None) is None
        True
    """
    from xaikit.errors import XaikitTypeError, describe

    if progress is not None and not isinstance(progress, bool):
        raise XaikitTypeError(
            "progress must be None (auto: shown when a slow method runs longer than "
            f"{AUTO_DELAY:g} s), True or False; got {describe(progress)}"
        )
    return progress


class Progress:
    """Work done out of ``total`` units, with its rate and an ETA (see the module docstring).

    Args:
        total: the units of the whole work.
        done: units already done when it starts (a resumed run).
        enabled: False: silent; True or None: on.
        every: seconds between plain lines (default :data:`EVERY`).
        desc: what is counted, the lines' and the bar's prefix.
        unit: the unit's name.
        delay: seconds the work runs before anything is shown (0: from the start).
        stream: where to write (default: ``sys.stderr`` when the bar is made).
    """

    def __init__(
        self,
        total: int,
        done: int = 0,
        enabled: bool | None = True,
        every: float | None = None,
        *,
        desc: str = "explain_dataset",
        unit: str = "rows",
        delay: float = 0.0,
        stream: IO[str] | None = None,
    ) -> None:
        global _open
        self.total, self.done, self.first = int(total), int(done), int(done)
        self.enabled = True if enabled is None else bool(enabled)
        self.every = EVERY if every is None else float(every)
        self.desc, self.unit, self.delay = desc, unit, float(delay)
        self.stream = sys.stderr if stream is None else stream
        self.t0 = self.last = now()
        self.bar: Any = None
        self._lock = threading.Lock()
        with _open_lock:  # every open bar counts, a silent one too: explain_dataset(progress=False)
            _open += 1  # silences the auto bars of the explain calls inside it
        self._counted = True
        if self.enabled:
            isatty = getattr(self.stream, "isatty", None)
            if callable(isatty) and isatty():
                from tqdm import tqdm

                self.bar = tqdm(
                    total=self.total,
                    initial=self.done,
                    unit=unit,
                    desc=desc,
                    file=self.stream,
                    delay=self.delay,
                )

    def update(self, units: int) -> None:
        """``units`` more done."""
        self.advance_to(self.done + int(units))

    def advance_to(self, done: int) -> None:
        """The work is done up to ``done`` units (a count that never goes back: a chunk redone
        after an out-of-memory error is not counted twice)."""
        if not self.enabled:
            self.done = max(self.done, int(done))
            return
        with self._lock:
            done = min(max(self.done, int(done)), max(self.total, self.done))
            step, self.done = done - self.done, done
            if step == 0:
                return
            if self.bar is not None:
                self.bar.update(step)
                return
            t = now()
            finished = self.done >= self.total
            if t - self.t0 < self.delay:
                return
            if t - self.last >= self.every or finished:
                self.last = t
                self._line(t)

    def _line(self, t: float) -> None:
        rate = (self.done - self.first) / max(t - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100 * self.done / max(self.total, 1)
        self.stream.write(
            f"{self.desc}: {self.done}/{self.total} {self.unit} ({pct:.0f}%), "
            f"{rate:.1f} {self.unit}/s, ETA {eta:.0f} s\n"
        )
        self.stream.flush()

    def say(self, line: str) -> None:
        """One line on the stream (through the bar on a terminal); nothing when not enabled."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
            return
        self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Close the bar (idempotent)."""
        global _open
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self._counted:
            with _open_lock:
                _open -= 1
            self._counted = False

    def __del__(self) -> None:  # a bar dropped unclosed must not silence later auto bars
        with contextlib.suppress(Exception):  # at interpreter shutdown there may be nothing left
            self.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def for_method(
    progress: bool | None, total: int, desc: str, unit: str = "rows", stream: IO[str] | None = None
) -> Progress:
    """The bar of one slow method's call: ``progress`` True: shown from the start; False:
    silent; None ("auto"): shown once the call has run :data:`AUTO_DELAY` seconds, and silent
    while another bar is open (an outer loop such as ``explain_dataset`` reports already).

    Example:
        >>> for_method(False, 10, "rise").enabled
        False
    """
    progress = check_progress(progress)
    if progress is None:
        return Progress(total, 0, _open == 0, desc=desc, unit=unit, delay=AUTO_DELAY, stream=stream)
    return Progress(total, 0, progress, desc=desc, unit=unit, stream=stream)
