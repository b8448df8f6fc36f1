"""The fused chunk engine: every saliency method is one sweep over a row space.

A method is described by a :class:`Job`: B samples, S noise samples, M path steps. Its rows are
indexed ``r = (s * M + m) * B + b`` (sample fastest, then step, then noise sample), so

* vanilla gradients      S = 1, M = 1, no path:   B rows
* SmoothGrad             S noisy copies, M = 1:   B x S rows
* Integrated Gradients   S = 1, M path steps:     B x M rows
* SmInt (SmoothGrad of IG)  S x M:                B x S x M rows
* VarGrad                S noisy copies:          B x S rows (the variance, not the mean)
* Input x Gradient       a one-step path from 0:  B rows (x S when smoothed)
* Expected Gradients     S draws of a reference and a random point on its path: B x S rows
* Blur IG                M blur levels (a custom path, ``Job.path``): B x M rows (x S smoothed)

The engine cuts the row space into chunks of ``max_batch`` rows, builds each chunk's inputs on
the model's device (noise and random baselines come from seeded generators, a pure function of
``(seed, input, s)``, so results do not depend on the chunking), runs one fused
forward+backward per chunk, and reduces the gradients at once into per-sample accumulators.
A path (one noise sample of one input sample) may span chunk boundaries; its partial sum is
carried to the next chunk. Only one chunk of rows is alive at a time.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Backend, T
from xaikit.backend.outputs import as_matrix
from xaikit.checks import check_int
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._kwargs import ModelKwargs

BaselineFn = Callable[[int], list[T]]
PathFn = Callable[[list[T], np.ndarray], tuple[list[T], list[T]]]


def stream_seed(seed: int, *key: int) -> int:
    """A 63-bit seed for one random stream, derived from the call's seed and a key."""
    state = np.random.SeedSequence([int(seed) % (2**63), *key]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


@dataclass
class Job:
    """One attribution sweep. Built by the methods in ``xaikit.xai.methods``."""

    bk: Backend
    model: Any
    inputs: list[T]  # clean inputs, (B, ...) each, on the model's device
    targets: T  # int64 (B,), the class explained for each sample
    n_noise: int = 1  # S
    sigma: list[T] | None = None  # per-input (B, 1, ...) noise std; None = no noise
    alphas: np.ndarray | None = None  # (M,) path nodes; None = plain gradients at the input
    weights: np.ndarray | None = None  # (M,) quadrature weights
    baselines: BaselineFn | None = None  # s -> one (B, ...) baseline per input
    magnitude: bool = False  # average squared per-path attributions
    seed: int = 0
    output: int | str = 0
    max_batch: int | str = "auto"
    dtype: str = "float32"  # rows and accumulators (float32 for a half-precision model)
    xla: bool = False  # compile the TF step with XLA
    model_kwargs: ModelKwargs | None = None  # extra forward arguments; per-sample ones follow the rows
    forward_only: bool = False  # rows cost a forward pass only (perturbation methods): own plan
    variance: bool = False  # VarGrad: the variance over noise samples instead of the mean
    #: s -> (B,) factors of each sample's path position (Expected Gradients' random points on the
    #: straight path): row = baseline + alpha_m * factor_b * (end - baseline); None: all 1
    row_alpha: Callable[[int], np.ndarray] | None = None
    #: a path that is not a straight line (Blur IG): ``path(ends, steps)`` gives, for the noisy
    #: inputs ``ends`` (one (B, ...) tensor per input) of one noise sample and the step indices
    #: ``steps`` (k,), the rows (k*B, ...) and the per-element multipliers (k*B, ...) of their
    #: gradients (the attribution is the sum over steps of gradient x multiplier); ``path_steps``
    #: is the number of steps M. ``baselines`` then only serves the completeness delta.
    path: PathFn | None = None
    path_steps: int = 1
    #: a custom path's start for the noisy inputs of one noise sample (for the completeness delta)
    path_base: Callable[[list[T]], list[T]] | None = None
    #: told the rows done after each chunk of the sweep (a progress bar's ``advance_to``); no sync
    progress: Callable[[int], None] | None = None

    @property
    def batch(self) -> int:
        return int(self.inputs[0].shape[0])

    @property
    def steps(self) -> int:
        if self.path is not None:
            return self.path_steps
        return 1 if self.alphas is None else len(self.alphas)

    @property
    def rows(self) -> int:
        return self.batch * self.steps * self.n_noise


@dataclass
class Result:
    attributions: list[T]
    chunks: list[int] = field(default_factory=list)
    layout: str = "contiguous"


class _PathCache:
    """Per noise sample s: the path ends (noisy inputs), baselines and their differences."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.items: dict[int, tuple[list[T], list[T] | None, list[T] | None]] = {}
        self.factors: dict[int, np.ndarray] = {}  # s -> (B,) path-position factors (row_alpha)
        #: memory layout new items are stored in, so chunk rows built from them inherit it
        self.layout = "contiguous"

    def get(self, s: int) -> tuple[list[T], list[T] | None, list[T] | None]:
        if s not in self.items:
            job, bk = self.job, self.job.bk
            ends = list(job.inputs)
            if job.sigma is not None:
                ends = [
                    x + sig * bk.normal(stream_seed(job.seed, 0, i, s), x.shape, _device_of(x), job.dtype)
                    for i, (x, sig) in enumerate(zip(ends, job.sigma))
                ]
            bases = diffs = None
            if job.path is not None:  # a custom path: its start only serves the completeness delta
                ends = [bk.to_layout(e, self.layout) for e in ends]
                if job.path_base is not None:
                    bases = [bk.to_layout(b, self.layout) for b in job.path_base(ends)]
            elif job.alphas is not None and job.baselines is not None:
                bases = [bk.to_layout(b, self.layout) for b in job.baselines(s)]
                ends = [bk.to_layout(e, self.layout) for e in ends]
                diffs = [e - b for e, b in zip(ends, bases)]
            else:
                ends = [bk.to_layout(e, self.layout) for e in ends]
            self.items[s] = (ends, bases, diffs)
        return self.items[s]

    def factor(self, s: int) -> np.ndarray:
        """The (B,) path-position factors of noise sample s (all 1 without ``row_alpha``)."""
        if s not in self.factors:
            job = self.job
            f = np.ones(job.batch) if job.row_alpha is None else job.row_alpha(s)
            self.factors[s] = np.asarray(f, dtype=np.float64).reshape(job.batch)
        return self.factors[s]

    def forget_before(self, s: int) -> None:
        for key in [k for k in self.items if k < s]:
            del self.items[key]
        for key in [k for k in self.factors if k < s]:
            del self.factors[key]


def _device_of(t: T) -> Any:
    return getattr(t, "device", None)


def _row_weights(bk: Backend, w: np.ndarray, like: T) -> T:
    """Per-row scalars shaped to broadcast against ``like`` (rows, ...)."""
    shape = (len(w),) + (1,) * (len(like.shape) - 1)
    return bk.as_tensor(w.reshape(shape), _device_of(like), bk.dtype_name(like))


class _Sweep:
    """Runs a job chunk by chunk, carrying partial path sums across chunk boundaries.

    Rows come in slices of B (one noise sample s, one path step m, every input sample). A chunk
    is either a run of whole slices (the usual case: its gradients are folded into per-path
    sums by one small matrix product over slices) or a part of one slice (when ``max_batch`` <
    B). ``carry`` holds the (B, ...) partial sums of the noise sample that is still open.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        self.bk = job.bk
        self.cache = _PathCache(job)
        self.B, self.M = job.batch, job.steps
        self.block = self.B * self.M  # rows per noise sample
        self.device = _device_of(job.inputs[0])
        self.acc: list[T] | None = None
        self.acc2: list[T] = []  # sums of squared per-path attributions (VarGrad)
        #: VarGrad's shift: each input's attributions of the first noise sample, subtracted
        #: before the two moments are summed, so that E[a^2] - E[a]^2 does not cancel
        self.shift: list[T] = []
        self.carry: list[T] | None = None
        self.mults: list[T] | None = None  # the current chunk's gradient multipliers (custom path)
        self.w = np.ones(1) if job.weights is None else np.asarray(job.weights, dtype=np.float64)
        self.a = np.ones(1) if job.alphas is None else np.asarray(job.alphas, dtype=np.float64)

    def align(self, r0: int, size: int) -> int:
        """The end of a chunk starting at r0 with about ``size`` rows, on slice boundaries."""
        B = self.B
        if size >= B and r0 % B == 0:
            return r0 + (size // B) * B
        return r0 + min(size, B - r0 % B)

    def _slices(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        q = np.arange(r0 // self.B, (r1 - 1) // self.B + 1)
        s_idx, m_idx = q // self.M, q % self.M
        return s_idx, m_idx, int(s_idx[0]), int(s_idx[-1])

    def _col(self, values: np.ndarray, like: T) -> T:
        """Per-slice scalars shaped (k, 1, ...) to broadcast against (k, B, ...)."""
        return _row_weights(self.bk, values, like)

    def build(self, r0: int, r1: int) -> tuple[list[T], T]:
        """The inputs and targets of rows [r0, r1) (and, for a custom path, ``self.mults``: the
        multipliers of their gradients)."""
        job, bk, B = self.job, self.bk, self.B
        s_idx, m_idx, s0, s1 = self._slices(r0, r1)
        parts = [self.cache.get(s) for s in range(s0, s1 + 1)]
        path = job.alphas is not None and parts[0][1] is not None
        self.mults = None
        rows: list[T] = []
        if r1 - r0 < B or r0 % B:  # part of one slice
            b0, b1 = r0 % B, r0 % B + (r1 - r0)
            ends, bases, diffs = parts[0]
            if job.path is not None:
                full, mult = job.path(ends, m_idx[:1])
                self.mults = [t[b0:b1] for t in mult]
                return [t[b0:b1] for t in full], job.targets[b0:b1]
            for i in range(len(job.inputs)):
                if path:
                    a = float(self.a[m_idx[0]])
                    d = diffs[i][b0:b1]  # type: ignore[index]
                    step = a * d if job.row_alpha is None else self._factor(s0, d, b0, b1) * a * d
                    rows.append(bases[i][b0:b1] + step)  # type: ignore[index]
                else:
                    rows.append(ends[i][b0:b1])
            return rows, job.targets[b0:b1]
        k = len(s_idx)
        # Runs of consecutive slices that share a noise sample: one broadcast op per run.
        starts = np.flatnonzero(np.r_[True, s_idx[1:] != s_idx[:-1]])
        runs = [(int(s_idx[a]), m_idx[a:b]) for a, b in zip(starts, [*starts[1:], k])]
        pieces: list[list[T]] = [[] for _ in job.inputs]
        mults: list[list[T]] = [[] for _ in job.inputs]
        for s, ms in runs:
            ends, bases, diffs = self.cache.get(s)
            if job.path is not None:
                full, mult = job.path(ends, ms)
                for i in range(len(job.inputs)):
                    pieces[i].append(full[i])
                    mults[i].append(mult[i])
                continue
            for i, x in enumerate(job.inputs):
                shape = tuple(int(d) for d in x.shape[1:])
                if not path:
                    pieces[i].append(ends[i])  # no path: one step per noise sample
                    continue
                d = bk.reshape(diffs[i], (1, B, *shape))  # type: ignore[index]
                alpha = self._col(self.a[ms], d)
                if job.row_alpha is not None:
                    alpha = alpha * self._factor(s, d[0], 0, B)[None]
                run = bk.reshape(bases[i], (1, B, *shape)) + alpha * d  # type: ignore[index]
                pieces[i].append(bk.reshape(run, (len(ms) * B, *shape)))
        rows = [bk.cat(p) for p in pieces]
        if job.path is not None:
            self.mults = [bk.cat(m) for m in mults]
        targets = job.targets if k == 1 else bk.cat([job.targets] * k)
        return rows, targets

    def _factor(self, s: int, like: T, b0: int, b1: int) -> T:
        """Noise sample s's path-position factors of samples [b0, b1), shaped to broadcast
        against ``like`` (b1 - b0, ...)."""
        return _row_weights(self.bk, self.cache.factor(s)[b0:b1], like)

    def reduce(self, grads: Sequence[T], r0: int, r1: int) -> None:
        """Fold one chunk's gradients into the per-sample accumulators."""
        job, bk, B = self.job, self.bk, self.B
        s_idx, m_idx, s0, s1 = self._slices(r0, r1)
        n_s = s1 - s0 + 1
        closes = r1 % self.block == 0  # the chunk ends exactly where a noise sample ends
        complete = n_s if closes else n_s - 1
        parts = [self.cache.get(s) for s in range(s0, s0 + complete)]
        partial = r1 - r0 < B or r0 % B != 0
        new_carry: list[T] = []
        for i, g in enumerate(grads):
            if self.mults is not None:  # a custom path: each gradient times its multiplier
                g = g * self.mults[i]
            shape = tuple(int(d) for d in g.shape[1:])
            if partial:
                b0 = r0 % B
                w = float(self.w[m_idx[0]]) if job.alphas is not None else 1.0
                full = bk.zeros((B, *shape), self.device, job.dtype)
                contrib = bk.index_add(full, bk.index(np.arange(b0, b0 + (r1 - r0)), self.device), g * w)
                paths = contrib if self.carry is None else self.carry[i] + contrib
                paths = bk.reshape(paths, (1, B, *shape))
            else:
                k = len(s_idx)
                weights = np.zeros((n_s, k))
                weights[s_idx - s0, np.arange(k)] = self.w[m_idx] if job.alphas is not None else 1.0
                flat = bk.reshape(g, (k, -1))
                paths = bk.matmul(bk.as_tensor(weights, self.device, bk.dtype_name(g)), flat)
                paths = bk.reshape(paths, (n_s, B, *shape))
                if self.carry is not None:
                    head = paths[:1] + bk.reshape(self.carry[i], (1, B, *shape))
                    paths = head if n_s == 1 else bk.cat([head, paths[1:]])
            if complete < n_s:
                new_carry.append(bk.reshape(paths[complete:], (B, *shape)))
            if complete == 0:
                continue
            done = paths[:complete]
            if job.alphas is not None and parts[0][2] is not None:
                done = done * bk.cat([bk.reshape(p[2][i], (1, B, *shape)) for p in parts])  # type: ignore[index]
            if job.magnitude:
                done = done * done
            if job.variance:
                if len(self.shift) == i:
                    self.shift.append(done[:1])
                done = done - self.shift[i]
            total = bk.sum0(done)
            if self.acc is None:
                self.acc = [bk.zeros((B, *x.shape[1:]), self.device, job.dtype) for x in job.inputs]
                if job.variance:
                    self.acc2 = [bk.zeros((B, *x.shape[1:]), self.device, job.dtype) for x in job.inputs]
            self.acc[i] = self.acc[i] + total
            if job.variance:
                self.acc2[i] = self.acc2[i] + bk.sum0(done * done)
        self.carry = new_carry or None
        self.cache.forget_before(s1 if not closes else s1 + 1)

    def finish(self) -> list[T]:
        job = self.job
        if self.acc is None:  # pragma: no cover - every sweep has at least one row
            raise XaikitError("internal error: the sweep produced no rows")
        n = float(job.n_noise)
        if job.variance:
            # VarGrad: E[a^2] - E[a]^2 over the noise samples (captum's definition), of the
            # shifted attributions a - a_0 (the variance is the same; float32 sums of the raw
            # a^2 would cancel to round-off when the variance is small next to the mean, and
            # equal attributions, e.g. zero noise, now give exactly 0)
            return [a2 / n - (a / n) * (a / n) for a, a2 in zip(self.acc, self.acc2)]
        return [a / n for a in self.acc]


# ---- chunk sizing ---------------------------------------------------------------------------------
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
    """Chooses the size (and, for torch on a CPU, the memory layout) of each chunk.

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
       ``_WORKING_SET`` bytes of rows (so 16-32 rows for a resnet at 224x224, 128 for a LeNet);
       on a GPU the largest power of two within the cap (at most 8192).
    4. **Timing** (CPU, eager torch): when the job has at least ``_PROBE_SHARE`` times the rows
       it needs, that size and the next one up, in both layouts, are timed (best of two) on
       throw-away copies of its first rows and the fastest kept. The probes' rows are thrown
       away, not used for the job, because a job whose first chunks had other sizes than its
       later calls would not give the same bits (the reproducibility rule); their share of the
       first call is at most 1 / ``_PROBE_SHARE``, and later calls pay nothing.

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
        self.device = _device_of(job.inputs[0])
        accel = bk.is_accelerator(self.device)
        layouts = bk.layouts(job.inputs)
        self.layouts = layouts
        self.pending = False
        #: bytes per row and the rows the budget allows (None: not measured / no cap)
        self.row_bytes: float | None = None
        self.cap: int | None = None
        if job.max_batch != "auto":
            size = check_max_batch(job.max_batch)
            self.size, self.layout = int(size), layouts[0] if accel else layouts[-1]
            return
        known = _tuned(job.model).get(self.key)
        if known and known[0]:
            self.size, self.layout = known
            return
        if known:  # only the layout was fixed
            self.layouts = (known[1],)
        self.layout = self.layouts[0] if accel else self.layouts[-1]
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
            if self.cap is None:
                return self._default()
            return max(1, 1 << (min(self.cap, 8192).bit_length() - 1))
        limit = float(self._default())  # the CPU default of this kind of job (forward-only or not)
        if self.row_bytes:
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
        if trials and job.rows >= _PROBE_SHARE * (trials[0][0] + 2 * sum(c for c, _ in trials)):
            timed(*trials[0])  # warm-up: first-call allocations and kernel selection
            rates = {t: t[0] / max(min(timed(*t), timed(*t)), 1e-9) for t in trials}  # best of two
            self.size, self.layout = max(rates, key=lambda t: rates[t])
        self._fix()

    def trials(self) -> list[tuple[int, str]]:
        """The (size, layout) pairs a big enough job times: eager sweeps on a CPU only."""
        if self.bk.pads_chunks() or self.bk.is_accelerator(self.device):
            return []
        sizes = [
            c for c in (self.size, 2 * self.size) if c <= _SIZES[-1] and (self.cap is None or c <= self.cap)
        ]
        return [(c, lay) for lay in self.layouts for c in sizes]

    def next(self, remaining: int) -> tuple[int, str]:
        return min(self.size, remaining), self.layout

    def halve(self) -> None:
        """After an out-of-memory error: halve the size (and remember it)."""
        self.pending = False
        self.size = max(1, self.size // 2)
        if self.job.max_batch == "auto":
            self._fix()


def _kwargs_of(mk: ModelKwargs | None, r0: int, r1: int, rows: int) -> dict[str, Any]:
    """``{"model_kwargs": ...}`` for rows [r0, r1) padded to ``rows`` (sample r % B), or {}."""
    return {"model_kwargs": mk.span(r0, r1, rows)} if mk else {}


def chunk_error(exc: Exception, rows: int, batch: int, bk: Backend | None = None) -> XaikitValueError:
    """The error for a model that ran on the B clean samples but fails on a chunk of rows (what
    the model raised on one line, through ``bk.error_text`` when the backend is given)."""
    text = bk.error_text(exc) if bk is not None else str(exc)
    return XaikitValueError(
        f"the model ran on the {batch} samples but raised {type(exc).__name__} on a chunk of {rows} "
        f"rows (an explanation feeds the model perturbed copies of the samples, many rows at a "
        f"time): {text}. A model that holds per-sample values of its own (a tensor of {batch} rows "
        "bound with functools.partial, a closure, an attribute) cannot follow the rows: pass such "
        "values with model_kwargs={name: tensor} instead, so that each row gets its sample's value"
    )


def model_step(job: Job, rows: list[T], targets: T, r0: int, r1: int) -> tuple[T, list[T], T]:
    """``bk.grad_step`` on one chunk (rows [r0, r1) of the job, maybe padded), with the chunk's
    model_kwargs; a model failure on a chunk of other than B rows gets a message that names the
    likely cause (per-sample values bound in the model) and the option that fixes it."""
    n = int(targets.shape[0])
    try:
        return job.bk.grad_step(  # type: ignore[no-any-return]
            job.model, rows, targets, job.output, job.xla, **_kwargs_of(job.model_kwargs, r0, r1, n)
        )
    except XaikitError:
        raise
    except Exception as exc:
        if job.bk.is_oom(exc) or n == job.batch:
            raise
        raise chunk_error(exc, n, job.batch, job.bk) from exc


def sweep(job: Job, memory_budget: int | float = DEFAULT_BUDGET) -> Result:
    """Run a job: all its rows, chunk by chunk, and the per-sample attributions (B, ...).

    An out-of-memory error halves the chunk and starts the sweep again from its first row, so
    the result is exactly that of a call at the halved size (the size later calls use).
    """
    bk = job.bk
    plan = ChunkPlan(job, memory_budget)
    device = _device_of(job.inputs[0])
    total = job.rows
    pad = bk.pads_chunks()

    def run(state: _Sweep, r0: int, r1: int, layout: str, keep: bool) -> None:
        state.cache.layout = layout
        rows, targets = state.build(r0, r1)
        n = r1 - r0
        full = _padded_rows(n, min(plan.size, state.align(0, plan.size)))
        padded = pad and n < full
        if padded:
            rows, targets = _pad(bk, rows, targets, full - n)
        rows = [bk.to_layout(x, layout) for x in rows]
        _scores, grads, _outputs = model_step(job, rows, targets, r0, r1)
        if keep:
            state.reduce([g[:n] for g in grads] if padded else grads, r0, r1)

    def throwaway(size: int, layout: str) -> None:
        probe_state = _Sweep(job)  # its own path cache: nothing of the job's state is touched
        run(probe_state, 0, min(total, probe_state.align(0, size)), layout, keep=False)
        bk.synchronize(device)

    plan.probe(*probes(bk, device, throwaway))
    while True:
        state = _Sweep(job)
        sizes: list[int] = []
        r0 = 0
        try:
            while r0 < total:
                size, layout = plan.next(total - r0)
                r1 = min(total, state.align(r0, size))
                run(state, r0, r1, layout, keep=True)
                sizes.append(r1 - r0)
                r0 = r1
                if job.progress is not None:
                    job.progress(r0)
        except Exception as exc:
            if not bk.is_oom(exc) or plan.size <= 1:
                raise
            del state
            bk.empty_cache(device)
            plan.halve()
            continue
        return Result(state.finish(), sizes, plan.layout)


def _padded_rows(n: int, chunk: int) -> int:
    """Rows a chunk of ``n`` real rows is padded to, for frameworks whose compiled step
    retraces on every new shape: full chunks stay as they are, a smaller (tail or single)
    chunk is padded to the next power of two, so a model sees at most log2(chunk) + 2 shapes
    over its lifetime while padding wastes less than the chunk's own rows.

    Example:
        >>> _padded_rows(256, 256), _padded_rows(32, 256), _padded_rows(33, 256), _padded_rows(200, 256)
        (256, 32, 64, 256)
    """
    if n >= chunk:
        return n
    return min(chunk, 1 << max(0, (n - 1).bit_length()))


def _pad(bk: Backend, rows: list[T], targets: T, extra: int) -> tuple[list[T], T]:
    padded = [
        bk.cat([x, bk.zeros((extra,) + tuple(x.shape[1:]), _device_of(x), bk.dtype_name(x))]) for x in rows
    ]
    zeros_t = bk.index(np.zeros(extra, dtype=np.int64), _device_of(targets))
    return padded, bk.cat([targets, zeros_t])


def forward_scores(
    bk: Backend,
    model: Any,
    rows_fn: Callable[[int, int], tuple[list[T], T]],
    total: int,
    chunk: int,
    output: int | str = 0,
    xla: bool = False,
    sizes: list[int] | None = None,
    model_kwargs: ModelKwargs | None = None,
    batch: int | None = None,
    predicted: list[np.ndarray] | None = None,
) -> T:
    """Target-class scores of ``total`` rows built by ``rows_fn(r0, r1)``: forward only, ``chunk``
    rows at a time, on the device; returns a (total,) tensor. An out-of-memory error halves the
    chunk and redoes the rows (``sizes``, when given, receives the rows of each pass).
    ``model_kwargs`` are cut to the rows: row r belongs to sample r % B (the order of every
    caller's row space). ``predicted``, when given, receives each pass's predicted class per row
    (numpy int64, the argmax of the selected output; the scores then come from the same pass)."""
    chunk = max(1, int(chunk))
    pad = bk.pads_chunks()
    out: list[T] = []
    r0 = 0
    while r0 < total:
        r1 = min(total, r0 + chunk)
        n = r1 - r0
        calling = False  # an error while building the rows is not the model's
        try:
            rows, targets = rows_fn(r0, r1)
            if pad and (size := _padded_rows(r1 - r0, chunk)) > r1 - r0:
                rows, targets = _pad(bk, rows, targets, size - (r1 - r0))
            n = int(targets.shape[0])
            kw = _kwargs_of(model_kwargs, r0, r1, n)
            calling = True
            if predicted is None:
                out.append(bk.scores(model, rows, targets, output, xla, **kw)[: r1 - r0])
            else:
                full = bk.to_numpy(as_matrix(bk.forward(model, rows, output, **kw)))[: r1 - r0]
                picked = full[np.arange(r1 - r0), bk.to_numpy(targets)[: r1 - r0]]
                out.append(bk.as_tensor(picked, bk.model_device(model), "float32"))
                predicted.append(full.argmax(axis=1).astype(np.int64))
        except XaikitError:
            raise
        except Exception as exc:
            if not bk.is_oom(exc) or chunk <= 1:
                if calling and batch is not None and not bk.is_oom(exc) and n != batch:
                    raise chunk_error(exc, n, batch, bk) from exc
                raise
            bk.empty_cache(bk.model_device(model))
            chunk = max(1, chunk // 2)
            continue
        if sizes is not None:
            sizes.append(r1 - r0)
        r0 = r1
    return bk.cat(out)


def endpoint_scores(job: Job, chunk: int) -> tuple[T, T]:
    """Scores at both ends of every path, ``(f(ends), f(baselines))``, each (S, B) on the device.

    Used for the completeness delta of IG-based methods; forward passes only, chunked.
    """
    bk, B = job.bk, job.batch
    cache = _PathCache(job)
    device = _device_of(job.inputs[0])

    def rows_fn(r0: int, r1: int) -> tuple[list[T], T]:
        r = np.arange(r0, r1)
        s_idx, which, b_idx = r // (2 * B), (r % (2 * B)) // B, r % B
        s0, s1 = int(s_idx[0]), int(s_idx[-1])
        parts = [cache.get(s) for s in range(s0, s1 + 1)]
        local = bk.index((s_idx - s0) * 2 * B + which * B + b_idx, device)
        rows = []
        for i in range(len(job.inputs)):
            stack = bk.cat([t for p in parts for t in (p[0][i], p[1][i])])  # type: ignore[index]
            rows.append(bk.gather(stack, local))
        cache.forget_before(s1)
        return rows, bk.gather(job.targets, bk.index(b_idx, device))

    scores = forward_scores(
        bk, job.model, rows_fn, 2 * B * job.n_noise, chunk, job.output, job.xla,
        model_kwargs=job.model_kwargs, batch=B,
    )  # fmt: skip
    scores = bk.reshape(scores, (job.n_noise, 2, B))
    return scores[:, 0], scores[:, 1]


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


def forward_rows(
    inp: Any,
    targets: T,
    per_sample: int,
    rows_fn: Callable[[int, int], list[T]],
    *,
    seed: int,
    output: int | str,
    max_batch: int | str,
    memory_budget: int | float,
    xla: bool,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Scores of the B x ``per_sample`` rows ``rows_fn(r0, r1)`` builds (row r: sample r % B),
    forward passes only, chunked by a :class:`ChunkPlan` of their own (``forward_only``: their
    row cost is measured apart from the gradient jobs'), within ``memory_budget``, an
    out-of-memory error halving the chunk; returns them on the host as float64 (per_sample, B).
    The occlusion, RISE and Score-CAM row spaces run through it. ``progress`` is told the rows
    handed to the model so far (as each chunk is built: no synchronization), and all of them at
    the end (the chunk-size probe's rows are not counted)."""
    bk, model, B = inp.bk, inp.model, inp.batch
    device = getattr(inp.tensors[0], "device", None)
    total = B * per_sample
    job = Job(
        bk=bk,
        model=model,
        inputs=inp.tensors,
        targets=targets,
        n_noise=per_sample,
        seed=seed,
        output=output,
        max_batch=max_batch,
        dtype=inp.dtype,
        xla=xla,
        model_kwargs=inp.kwargs,
        forward_only=True,
    )
    plan = ChunkPlan(job, memory_budget)

    def laid(
        layout: str, tell: Callable[[int], None] | None = None
    ) -> Callable[[int, int], tuple[list[T], T]]:
        def fn(r0: int, r1: int) -> tuple[list[T], T]:
            if tell is not None:
                tell(r0)
            b = bk.index(np.arange(r0, r1) % B, device)
            return [bk.to_layout(t, layout) for t in rows_fn(r0, r1)], bk.gather(targets, b)

        return fn

    def scores(
        n: int,
        size: int,
        layout: str,
        sizes: list[int] | None = None,
        tell: Callable[[int], None] | None = None,
    ) -> T:
        return forward_scores(
            bk, model, laid(layout, tell), n, size, output, xla, sizes=sizes, model_kwargs=inp.kwargs, batch=B
        )

    def throwaway(size: int, layout: str) -> None:
        scores(min(total, size), size, layout)
        bk.synchronize(device)

    plan.probe(*probes(bk, device, throwaway))
    sizes: list[int] = []
    out = bk.to_numpy(scores(total, plan.size, plan.layout, sizes, progress)).astype(np.float64)
    if progress is not None:
        progress(total)
    if sizes and max(sizes) < min(plan.size, total):  # an out-of-memory error halved the chunk
        while plan.size > max(sizes):
            plan.halve()
    return out.reshape(per_sample, B)
