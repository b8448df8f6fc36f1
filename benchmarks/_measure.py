"""Timing and memory helpers of the saliency benchmark: interleaved repetitions, medians, and the
peak resident-set-size increase of one call, sampled in a thread (by xaikit's own
:func:`xaikit.backend.memory.rss_bytes`)."""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xaikit.backend.memory import rss_bytes

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def trimmed_malloc() -> bool:
    """From now on glibc's malloc hands every freed buffer of 128 KiB or more back to the OS (what
    ``MALLOC_ENV`` does for a process started with it), so that the resident-set peak of a call
    is its own and not a high-water mark left in the heap by an earlier call.

    For the memory phase only, after every timed round: on some machines the page faults of the
    returned buffers make torch's CPU kernels much slower (a LeNet forward+backward on a 2-core
    AMD EPYC: 2.7x slower), and the penalty grows with a call's buffer sizes, so timings taken so
    would rank chunked calls below small-batch loops. glibc's adaptive threshold cannot be turned
    back on, so the switch is one way. Returns False where there is no glibc (nothing changed)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 131072) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 131072) == 1
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return ok


class PeakRSS:
    """Context manager: the peak VmRSS increase over the value at entry, sampled every ``period`` s.

    The sampler thread holds the GIL only for a file read; it cannot see a spike shorter than
    the period, so the figure is a lower bound of the true peak (accurate for anything that
    lives for more than a millisecond, which every tensor of a chunk does).
    """

    def __init__(self, period: float = 0.001) -> None:
        self.period = period
        self.base = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.period)

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.base = self.peak = rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.peak = max(self.peak, rss_bytes())
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def increase(self) -> int:
        return max(0, self.peak - self.base)


@dataclass
class Case:
    """One benchmarked call: ``fn()`` does the whole work of the case once."""

    name: str
    group: str  # "bound", "xaikit", "peer", "loop", "memory"
    framework: str
    model: str
    batch: int
    rows: int  # forward+backward rows the case evaluates (its own work, not normalized)
    fn: Callable[[], Any]
    method: str = ""  # which xaikit method it compares with ("vanilla", "smint", "ref", ...)
    note: str = ""
    sync: Callable[[], None] | None = None
    gpu_peak: Callable[[], int | None] | None = None
    gpu_reset: Callable[[], None] | None = None
    times: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    handle: Any = None  # an object the report may inspect (not serialized)
    warmed: bool = False

    def run_once(self, measure_memory: bool = True) -> None:
        gc.collect()
        if self.gpu_reset is not None:
            self.gpu_reset()
        probe = PeakRSS() if measure_memory else None
        if probe is not None:
            probe.__enter__()
        t0 = time.perf_counter()
        self.fn()
        if self.sync is not None:
            self.sync()
        elapsed = time.perf_counter() - t0
        if probe is not None:
            probe.__exit__(None, None, None)
            self.rss.append(probe.increase)
        self.times.append(elapsed)
        if self.gpu_peak is not None:
            peak = self.gpu_peak()
            if peak is not None:
                self.gpu.append(peak)

    def memory_once(self) -> None:
        """One untimed call under the resident-set sampler (the memory phase, after the timed
        rounds and :func:`trimmed_malloc`)."""
        gc.collect()
        with PeakRSS() as probe:
            self.fn()
            if self.sync is not None:
                self.sync()
        self.rss.append(probe.increase)

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def rate(self) -> float:
        return self.rows / self.median if self.times else float("nan")

    @property
    def peak_rss(self) -> int:
        return max(self.rss) if self.rss else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "framework": self.framework,
            "model": self.model,
            "batch": self.batch,
            "rows": self.rows,
            "method": self.method,
            "note": self.note,
            "times_s": self.times,
            "median_s": self.median,
            "rows_per_s": self.rate,
            "peak_rss_increase_bytes": self.rss,
            "peak_gpu_bytes": self.gpu,
            **self.extra,
        }


def interleave(cases: list[Case], reps: int, warmup: bool = True, log: Callable[[str], None] = print) -> None:
    """One untimed warm-up call of every case, then ``reps`` rounds that each call every case
    once, in the same order, so that slow phases of a shared machine hit all cases alike."""
    if warmup:
        warm(cases, log)
    rounds(cases, reps, log)


def warm(cases: list[Case], log: Callable[[str], None] = print) -> None:
    """Call every case once, untimed (tracing, tuning, first-call allocations)."""
    for case in cases:
        if case.warmed:
            continue
        t0 = time.perf_counter()
        case.fn()
        case.warmed = True
        log(
            f"  warm-up {case.framework}/{case.model}/B={case.batch} {case.name}: {time.perf_counter() - t0:.2f}s"
        )


def rounds(
    cases: list[Case], reps: int, log: Callable[[str], None] = print, measure_memory: bool = True
) -> None:
    """``reps`` timed rounds, each calling every case once in the same order (under the
    resident-set sampler unless ``measure_memory`` is False)."""
    for r in range(reps):
        t0 = time.perf_counter()
        for case in cases:
            case.run_once(measure_memory)
        log(f"  round {r + 1}/{reps}: {time.perf_counter() - t0:.1f}s")


def machine() -> dict[str, Any]:
    """CPU model, cores and RAM of this machine."""
    info: dict[str, Any] = {"cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
                    break
        info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    info.setdefault("cpu", "unknown")
    return info


def tuned_chunk(model: Any) -> tuple[int, str]:
    """The chunk size and layout that xaikit's ``max_batch="auto"`` settled on for this model
    (read from the engine's cache, read-only; the engine's CPU default where nothing was cached)."""
    from xaikit.xai._engine import plan as chunk_plan

    found = list(chunk_plan._TUNED.get(model, {}).values())
    return found[0] if found else (chunk_plan._CPU_DEFAULT, "channels_last")


def write_section(path: Path, section: str, start: str, end: str, before: str | None = None) -> None:
    """Replace the text between the markers ``start`` and ``end`` of ``path`` by ``section``
    (which carries the markers), or add it: before the heading ``before`` when given and found,
    else at the end. Written atomically (a temporary file, then a rename)."""
    text = path.read_text() if path.exists() else "# Saliency benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1].lstrip("\n")
    elif before and f"\n{before}" in text:
        head, tail = text.split(f"\n{before}", 1)
        text = head.rstrip("\n") + "\n\n" + section + f"\n{before}" + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
