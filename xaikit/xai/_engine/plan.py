"""Chunk sizes: how many rows one fused pass holds (and, for torch, their memory layout).

:class:`ChunkPlan` fixes them once per model and input shape, from memory and timing probes
within a memory budget (:func:`probes`, :func:`row_cost`, :func:`budget_bytes`);
:func:`default_rows` is the engine's size when nothing was measured; :func:`check_max_batch` and
:func:`check_memory_budget` check the two settings a caller gives.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend import Backend
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.job import Job, device_of

#: the plan fixed per model and (backend, input shapes, output, memory budget): (rows, layout);
#: rows 0 means only the layout is fixed so far (by a job too small to need a size)
_TUNED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[int, str]]] = weakref.WeakKeyDictionary()
#: the measured memory cost of one row, per model and (backend, input shapes, output), bytes
_ROW_BYTES: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[float | None, int | None]]] = (
    weakref.WeakKeyDictionary()
)
_CPU_DEFAULT = 128  # eager sweeps on CPU (see default_rows)
_CPU_CHUNK = 256  # compiled steps and forward-only passes on CPU
#: chunk sizes the plan chooses among; small ones for models whose rows are big
_SIZES = (16, 32, 64, 128, 256)
#: on a CPU the plan keeps a chunk's rows within this many bytes when it can (512 MiB): beyond
#: it, bigger chunks only add page faults and cache misses (resnet18 at 224x224: about 40 MiB
#: per row, so 16 rows), while small models keep the measured 128 / 256
_WORKING_SET = 512 * 2**20
#: on a CPU a forward-only chunk keeps its rows within this many bytes (64 MiB; its floor is 4
#: rows): a ResNet-18 at 224x224 costs 7.6-10.3 MiB per forward-only row (as the probe measures
#: it), so 6-8 rows, whose largest activation (the stem's, 3.2 MB a row) stays under glibc's
#: 32 MiB mmap ceiling and is reused from the heap instead of page-faulted in every chunk (timed
#: with torch; TF's compiled steps follow the same cap, not timed). Measured on a 2-core AMD EPYC
#: (2026-11-27): Score-CAM's 1,024 rows took 9.8 s in chunks of 8, 12.5 s of 16 and 13.3 s of 32
#: (the plan's choice before); occlusion 4.3-5.3 s, 5.5 s and 6.0 s; a plain inference-mode loop
#: ran at 100 rows/s in batches of 4 and 80-87 in batches of 16-32. Small models keep 256.
_CPU_FORWARD_SET = 64 * 2**20
_CPU_FORWARD_FLOOR = 4
#: on an accelerator a forward-only chunk keeps its rows within this many bytes (4 GiB): a
#: ResNet-18 at 224x224 costs about 6 MiB per forward-only row, so 512 rows, where a plain
#: inference-mode loop on an H100/H200 already runs at its best rows/s; bigger chunks only take
#: memory (RISE's 4,000 rows took 26.8 GB in one chunk) at about the same speed (256 to 1,024
#: rows within 10% on an H100; docs/benchmarks.md, "GPU"). Gradient sweeps are not capped so.
_GPU_FORWARD_SET = 4 * 2**30
#: the largest chunk a compiled step's timing probe tries on a CPU
_COMPILED_MAX = 512
#: a timed candidate within this share of the best rows/s counts as as fast (see :func:`pick`)
_CLOSE = 0.95
#: the two throw-away probes (rows) whose peak memory gives the cost of one row
_MEMORY_PROBE = (2, 8)
#: a job times candidate sizes and layouts only when it has this many times the timing probe's
#: rows (the probe then adds at most 1/_PROBE_SHARE to that first call; later calls reuse the plan)
_PROBE_SHARE = 2.5
#: the default memory budget: this fraction of the available RAM (CPU) or free GPU memory
DEFAULT_BUDGET = 0.5


def _tuned(model: Any) -> dict[tuple[Any, ...], tuple[int, str]]:
    try:
        return _TUNED.setdefault(model, {})
    except TypeError:
        return {}


def _row_cache(model: Any) -> dict[tuple[Any, ...], tuple[float | None, int | None]]:
    try:
        return _ROW_BYTES.setdefault(model, {})
    except TypeError:
        return {}


def check_max_batch(value: Any) -> int | str:
    """``"auto"`` or an integer >= 1, else a clear error."""
    if value == "auto":
        return "auto"
    return check_int(value, "max_batch", 1, alternative="'auto' or ")


def check_memory_budget(value: Any) -> int | float:
    """A memory budget: bytes (an int >= 1) or a fraction (a float in (0, 1]) of the memory
    available when the plan is made, else a clear error.

    Example:
        >>> check_memory_budget(0.25), check_memory_budget(2**30)
        (0.25, 1073741824)
        >>> check_memory_budget(1.5)
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitValueError: memory_budget must be a fraction in (0, 1] (float) or bytes (int >= 1); got float 1.5
    """
    expected = "memory_budget must be a fraction in (0, 1] (float) or bytes (int >= 1)"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise XaikitTypeError(f"{expected}; got {describe(value)}")
    if isinstance(value, (int, np.integer)):
        if value < 1:
            raise XaikitValueError(f"{expected}; got {describe(int(value))}")
        return int(value)
    if not (0.0 < float(value) <= 1.0):  # also refuses NaN
        raise XaikitValueError(f"{expected}; got {describe(float(value))}")
    return float(value)


def budget_bytes(bk: Backend, device: Any, budget: int | float) -> int | None:
    """A budget in bytes: an int as it is, a fraction of ``bk.available_memory(device)`` (None
    when that is unknown: no cap)."""
    if isinstance(budget, int):
        return budget
    available = bk.available_memory(device)
    return None if available is None else int(float(budget) * available)


def default_rows(bk: Backend, device: Any, row_elems: int, forward_only: bool = False) -> int:
    """Rows per chunk when nothing was measured.

    CPU: 128 for an eager (torch) forward+backward sweep, where building and folding the rows
    make 128 faster in steady state than the bare model's best (256-512; measured on the LeNet
    SmInt job: about 1.5 s at 128 against 2.1-2.3 s at 256); 256 for compiled (TF) steps, which
    were measured at 256, and for forward-only passes. Accelerators: what fits half the free
    memory by a rough per-row guess (a forward pass alone needs about a quarter of a
    forward+backward).
    """
    if not bk.is_accelerator(device):
        return _CPU_CHUNK if forward_only or bk.pads_chunks() else _CPU_DEFAULT
    free = bk.free_memory(device)
    if not free:
        return 1024
    per_row = max(row_elems, 1) * 4 * (16 if forward_only else 64)  # activations guess
    return int(max(32, min(8192, 0.5 * free / per_row)))


def _fit(limit: int) -> int:
    """The largest of ``_SIZES`` within ``limit`` (``limit`` itself, at least 1, below them).

    Example:
        >>> _fit(300), _fit(128), _fit(100), _fit(20), _fit(9), _fit(0)
        (256, 128, 64, 16, 9, 1)
    """
    fits = [c for c in _SIZES if c <= limit]
    return fits[-1] if fits else max(1, int(limit))


def row_cost(small: tuple[int, float], big: tuple[int, float]) -> float:
    """Bytes per row from two probes ``(rows, peak bytes)``: the larger of the slope between
    them and the big probe's bytes per row (which also carries the fixed cost of a chunk, so
    errs on the safe side when the small probe's peak was hidden by memory freed before it).

    Example:
        >>> row_cost((2, 30e6), (8, 90e6))  # 10 MB per row, 10 MB fixed: slope 10 MB, 11.25 MB/row
        11250000.0
        >>> row_cost((2, 0.0), (8, 40e6))  # the small probe hidden: the slope, 6.7 MB
        6666666.666666667
    """
    (na, pa), (nb, pb) = small, big
    return max((pb - pa) / max(nb - na, 1), pb / max(nb, 1), 0.0)


class ChunkPlan:
    """Chooses the size (and, for torch, the memory layout) of each chunk.

    ``max_batch`` given: that many rows per chunk. ``"auto"``: the plan is fixed the first time
    a model meets an input shape (and output and ``memory_budget``) and reused for every later
    call, so a seeded call gives the same bits the first time and every time after. Making it,
    in :meth:`probe`:

    1. **Memory**: a forward+backward of 2 and then 8 throw-away rows (after a 2-row warm-up),
       each under ``bk.peak_memory`` (the process's peak resident set on a CPU, the allocator's
       peak on a GPU), gives the bytes one row costs (:func:`row_cost`); measured once per model
       and input shape. 12 rows, once: far less than a chunk of the jobs that need a plan.
    2. **Budget**: ``memory_budget`` (bytes, or a fraction of the available RAM / free GPU
       memory, default 0.5) over the row cost caps the chunk.
    3. **Size**: on a CPU the largest of ``_SIZES`` (16 ... 256) within the cap, within the
       engine's default (128 eager, 256 compiled) and, where the cap allows, within
       ``_WORKING_SET`` bytes of rows (so 16-32 rows for a resnet at 224x224, 128 for a LeNet),
       or for forward-only rows within ``_CPU_FORWARD_SET`` bytes (6-8 rows of a ResNet-18 at
       224x224; at least ``_CPU_FORWARD_FLOOR``);
       on a GPU the largest power of two within the cap (at most 8192) and, for forward-only
       rows, within ``_GPU_FORWARD_SET`` bytes of rows (512 rows of a ResNet-18 at 224x224).
    4. **Timing** (CPU): when the job has at least ``_PROBE_SHARE`` times the rows it needs,
       candidates (:meth:`trials`: eager torch, that size and the next one up in both layouts;
       a compiled TF step, that size and twice it, each traced in a warm-up) are timed (best of
       two) on throw-away copies of its first rows, and :func:`pick` keeps the smallest within
       ``_CLOSE`` of the fastest. The probes' rows are thrown
       away, not used for the job, because a job whose first chunks had other sizes than its
       later calls would not give the same bits (the reproducibility rule); their share of the
       first call is at most 1 / ``_PROBE_SHARE``, and later calls pay nothing.

    Layout without timing (a GPU, a small job): the last of ``bk.layouts``
    (channels-last for 4-D torch rows), except for gradient sweeps on an accelerator, which keep
    contiguous rows; forward-only rows ran 1.3x faster channels-last on an H100 (ResNet-18 at
    224x224, cuDNN following the rows' layout with the weights left as they are).

    A job too small to need a size (at most 16 rows: one chunk whatever the plan) runs at the
    default without probing and fixes only the layout. Out-of-memory halves the size (and the
    halved size is what later calls use).
    """

    def __init__(self, job: Job, budget: int | float = DEFAULT_BUDGET) -> None:
        self.job = job
        bk = self.bk = job.bk
        shapes = tuple(tuple(int(d) for d in x.shape[1:]) for x in job.inputs)
        # forward-only rows cost less memory than gradient rows: their plan and row cost are kept apart
        self.row_key = (bk.name, shapes, job.output, *(("forward",) if job.forward_only else ()))
        self.key = (*self.row_key, budget)
        self.budget = budget
        self.device = device_of(job.inputs[0])
        accel = bk.is_accelerator(self.device)
        layouts = bk.layouts(job.inputs)
        self.layouts = layouts
        self.pending = False
        #: bytes per row and the rows the budget allows (None: not measured / no cap)
        self.row_bytes: float | None = None
        self.cap: int | None = None
        # untimed layout (see the class): channels-last where offered, but contiguous rows for
        # gradient sweeps on an accelerator
        first = -1 if job.forward_only or not accel else 0
        if job.max_batch != "auto":
            size = check_max_batch(job.max_batch)
            self.size, self.layout = int(size), layouts[first]
            return
        known = _tuned(job.model).get(self.key)
        if known and known[0]:
            self.size, self.layout = known
            return
        if known:  # only the layout was fixed
            self.layouts = (known[1],)
        self.layout = self.layouts[first]
        self.size = self._default()
        if job.rows <= _SIZES[0]:
            if not known:
                self._fix(0)
            return
        self.pending = True

    def _default(self) -> int:
        bk, job = self.bk, self.job
        row_elems = sum(int(np.prod(x.shape[1:])) for x in job.inputs)
        return default_rows(bk, self.device, row_elems, forward_only=job.forward_only)

    def _fix(self, size: int | None = None) -> None:
        try:
            _TUNED.setdefault(self.job.model, {})[self.key] = (
                self.size if size is None else size,
                self.layout,
            )
        except TypeError:
            pass

    def _measure(self, measure: Callable[[int, str], float | None]) -> tuple[float | None, int | None]:
        """``(bytes per row, rows that fit)``: the row cost (None: not measurable) and, when a
        probe ran out of memory, the most rows the device can hold (else None)."""
        cache = _row_cache(self.job.model)
        if self.row_key not in cache:
            small, big = _MEMORY_PROBE
            result: tuple[float | None, int | None] = (None, None)
            warm = measure(small, self.layout)  # warm-up: first-call allocations, a TF trace
            pa = math.inf if warm is not None and math.isinf(warm) else measure(small, self.layout)
            if pa is not None and math.isinf(pa):
                result = (None, 1)
            elif pa is not None:
                pb = measure(big, self.layout)
                if pb is not None and math.isinf(pb):
                    result = (pa / small, big // 2)
                elif pb is not None:
                    result = (row_cost((small, pa), (big, pb)), None)
            cache[self.row_key] = result
        return cache[self.row_key]

    def _choose(self) -> int:
        if self.bk.is_accelerator(self.device):
            row = self.row_bytes if self.job.forward_only else None  # forward-only rows are capped
            if self.cap is None and not row:
                return self._default()
            rows = self._default() if self.cap is None else min(self.cap, 8192)
            if row:
                rows = min(rows, max(_SIZES[0], int(_GPU_FORWARD_SET // row)))
            return max(1, 1 << (max(1, rows).bit_length() - 1))
        limit = float(self._default())  # the CPU default of this kind of job (forward-only or not)
        if self.row_bytes and self.job.forward_only:
            limit = min(limit, max(_CPU_FORWARD_FLOOR, _CPU_FORWARD_SET // self.row_bytes))
        elif self.row_bytes:
            limit = min(limit, max(_SIZES[0], _WORKING_SET // self.row_bytes))
        if self.cap is not None:
            limit = min(limit, self.cap)
        return _fit(int(limit))

    def probe(
        self,
        measure: Callable[[int, str], float | None],
        timed: Callable[[int, str], float],
    ) -> None:
        """Make the plan (see the class): ``measure(rows, layout)`` returns the peak bytes of a
        throw-away chunk (inf: out of memory, None: not measurable), ``timed(rows, layout)``
        its seconds (inf: out of memory). A fixed plan returns at once."""
        if not self.pending:
            return
        self.pending = False
        job, bk = self.job, self.bk
        self.row_bytes, self.cap = self._measure(measure)
        budget = budget_bytes(bk, self.device, self.budget)
        if self.row_bytes and budget is not None:
            cap = max(1, int(budget // self.row_bytes))
            self.cap = cap if self.cap is None else min(self.cap, cap)
        self.size = self._choose()
        trials = self.trials()
        # warm-up: first-call allocations and kernel selection; a compiled step traces each size
        warm = trials if bk.pads_chunks() else trials[:1]
        if trials and job.rows >= _PROBE_SHARE * sum(c for c, _ in [*warm, *trials, *trials]):
            for t in warm:
                timed(*t)
            rates = {t: t[0] / max(min(timed(*t), timed(*t)), 1e-9) for t in trials}  # best of two
            self.size, self.layout = pick(rates)
        self._fix()

    def trials(self) -> list[tuple[int, str]]:
        """The (size, layout) pairs a big enough job times, on a CPU only: an eager sweep its size
        and the next one up in each layout; a compiled step (TF) its size and twice that (up to
        ``_COMPILED_MAX`` rows), whose best differs most between CPUs (LeNet: 128 rows on one
        2-core machine, 1,024 on an AVX-512 one)."""
        if self.bk.is_accelerator(self.device):
            return []
        compiled = self.bk.pads_chunks()
        if compiled and self.job.forward_only:
            return []
        top = _COMPILED_MAX if compiled else _SIZES[-1]
        if compiled and self.row_bytes:  # within the working set, as the plan's own size is
            top = min(top, max(self.size, int(_WORKING_SET // self.row_bytes)))
        sizes = [c for c in (self.size, 2 * self.size) if c <= top and (self.cap is None or c <= self.cap)]
        return [(c, lay) for lay in self.layouts for c in sizes]

    def next(self, remaining: int) -> tuple[int, str]:
        return min(self.size, remaining), self.layout

    def halve(self) -> None:
        """After an out-of-memory error: halve the size (and remember it)."""
        self.pending = False
        self.size = max(1, self.size // 2)
        if self.job.max_batch == "auto":
            self._fix()


def pick(rates: dict[tuple[int, str], float]) -> tuple[int, str]:
    """The timed candidate to keep: the smallest size whose rows/s come within ``_CLOSE`` of the
    best (its fastest layout). A bigger chunk must be clearly faster: it takes more memory, and
    near a cache's size one timing of a chunk cannot tell a real gain from noise (a LeNet chunk
    of 256 rows on a 2-core AMD EPYC ran at 0.88-0.94x the 64-128-row rate in steady state and
    won its probe by chance).

    Example:
        >>> pick({(128, "a"): 100.0, (256, "a"): 103.0, (128, "b"): 90.0})
        (128, 'a')
        >>> pick({(128, "a"): 100.0, (256, "a"): 110.0})
        (256, 'a')
    """
    best = max(rates.values())
    close = [t for t in rates if rates[t] >= _CLOSE * best]
    return min(close, key=lambda t: (t[0], -rates[t]))


def probes(
    bk: Backend, device: Any, throwaway: Callable[[int, str], None]
) -> tuple[Callable[[int, str], float | None], Callable[[int, str], float]]:
    """``(measure, timed)`` for :meth:`ChunkPlan.probe` from a ``throwaway(size, layout)`` run of
    rows whose results are dropped: its peak memory (None where the device reports none) and its
    seconds; an out-of-memory error in either counts as infinitely costly (and frees the cache)."""

    def guarded(fn: Callable[[], float | None]) -> float | None:
        try:
            return fn()
        except Exception as exc:
            if not bk.is_oom(exc):
                raise
            bk.empty_cache(device)
            return math.inf

    def measure(size: int, layout: str) -> float | None:
        def peak() -> float | None:
            _, found = bk.peak_memory(lambda: throwaway(size, layout), device)
            return None if found is None else float(found)

        return guarded(peak)

    def timed(size: int, layout: str) -> float:
        def seconds() -> float:
            t0 = time.perf_counter()
            throwaway(size, layout)
            return time.perf_counter() - t0

        value = guarded(seconds)
        return math.inf if value is None else value

    return measure, timed
