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
carried to the next chunk. Only one chunk of rows is alive at a time. Where the backend has
compiled graphs (TF, ``Backend.fuses_chunks``), a chunk of whole slices of a straight path
that spans at most two noise samples is built, differentiated, folded and reduced in one
compiled call (:func:`fused_chunk`), the same arithmetic as the eager build, step and fold;
so is a chunk of whole slices of a job without a path (SmoothGrad, vanilla gradients: its
noisy copies drawn from the same seeds inside the call, :func:`noise_chunk`).

The chunk size comes from :class:`~xaikit.xai._engine.plan.ChunkPlan`; an out-of-memory error
halves it and starts the sweep again (:func:`sweep`, through the engine's one chunk loop,
:func:`~xaikit.xai._engine.chunks.run_chunks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Backend, Rows, T
from xaikit.errors import XaikitError
from xaikit.xai._engine.chunks import forward_scores, kwargs_of, model_call, pad_rows, padded_rows, run_chunks
from xaikit.xai._engine.job import Job, device_of
from xaikit.xai._engine.plan import DEFAULT_BUDGET, ChunkPlan, probes
from xaikit.xai._engine.seeds import stream_seed


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
                    x + sig * bk.normal(stream_seed(job.seed, 0, i, s), x.shape, device_of(x), job.dtype)
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


def _row_weights(bk: Backend, w: np.ndarray, like: T) -> T:
    """Per-row scalars shaped to broadcast against ``like`` (rows, ...)."""
    shape = (len(w),) + (1,) * (len(like.shape) - 1)
    return bk.as_tensor(w.reshape(shape), device_of(like), bk.dtype_name(like))


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
        self.device = device_of(job.inputs[0])
        self.acc: list[T] | None = None
        self.acc2: list[T] = []  # sums of squared per-path attributions (VarGrad)
        #: VarGrad's shift: each input's attributions of the first noise sample, subtracted
        #: before the two moments are summed, so that E[a^2] - E[a]^2 does not cancel
        self.shift: list[T] = []
        self.carry: list[T] | None = None
        #: zero carries of a fused chunk that continues no path, and its magnitude flag (made once)
        self.zeros: list[T] | None = None
        self.magnitude: T | None = None
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

    def fused(self, r0: int, r1: int, rows_to: int, layout: str, keep: bool = True) -> bool:
        """Rows [r0, r1) (whole slices) built, differentiated, folded per path and reduced in one
        :meth:`~xaikit.backend.Backend.folded_grads` call (:func:`fused_chunk`): the paths the
        chunk completes are added to the accumulators and the one it leaves open is carried,
        as :meth:`reduce` does (``keep=False``: a probe's chunk, whose results are dropped).

        The chunk is padded to ``rows_to`` rows (rounded up to whole slices: more slices of its
        first noise sample, at path position 0, folded with weight 0), and its noise samples to
        two (a copy of the first, folded with weight 0): a compiled body's input signature is
        then the padded chunk's, as the eager step's is, whatever the number of noise samples
        and path steps. False (the chunk takes the eager path) where a chunk of that many slices
        could span more than two noise samples (fewer path steps than slices). Only for jobs
        that are :func:`fusable`.
        """
        job, bk, B = self.job, self.bk, self.B
        s_idx, m_idx, s0, s1 = self._slices(r0, r1)
        k = len(s_idx)
        k_pad = max(k, -(-rows_to // B))
        n_max = 2
        if k_pad > self.M + 1:
            return False
        parts = [self.cache.get(s) for s in range(s0, s1 + 1)]
        n_s = len(parts)
        fill = parts + [parts[0]] * (n_max - n_s)
        sel = np.zeros(k_pad, dtype=np.int64)
        sel[:k] = s_idx - s0
        alpha = np.zeros(k_pad)
        alpha[:k] = self.a[m_idx]
        weights = self._fold_weights(s_idx, m_idx, n_max, k_pad)
        # which of the (padded) noise samples' paths the chunk completes (row 0) and which one it
        # leaves open, to be carried (row 1): the chunk's last noise sample unless it closes it
        closes = r1 % self.block == 0
        complete = n_s if closes else n_s - 1
        ends = np.zeros((2, n_max))
        ends[0, :complete] = 1.0
        if complete < n_s:
            ends[1, n_s - 1] = 1.0
        dtype = bk.dtype_name(job.inputs[0])
        n_in = range(len(job.inputs))
        starts = [[p[1][i] for p in fill] for i in n_in]  # type: ignore[index]
        diffs = [[p[2][i] for p in fill] for i in n_in]  # type: ignore[index]
        if self.zeros is None:  # made once: zero carries
            self.zeros = [bk.zeros(tuple(x.shape), self.device, job.dtype) for x in job.inputs]
        args = (
            starts,
            diffs,
            bk.as_tensor(alpha, self.device, dtype),
            bk.index(sel, self.device),
            bk.as_tensor(weights, self.device, dtype),
            job.targets,
            layout,
            self.carry if self.carry is not None else self.zeros,
            bk.as_tensor(ends, self.device, dtype),
            self._magnitude_flag(),
        )
        out = model_call(
            bk, lambda: bk.folded_grads(job.model, fused_chunk, args, job.output, job.xla), k_pad * B, B
        )
        if not keep:
            return True
        totals, opened = out[: len(n_in)], out[len(n_in) :]
        if complete:
            if self.acc is None:
                self.acc = list(totals)
            else:
                self.acc = [a + t for a, t in zip(self.acc, totals)]
        self.carry = list(opened) if complete < n_s else None
        self.cache.forget_before(s1 if not closes else s1 + 1)
        return True

    def _magnitude_flag(self) -> T:
        """The job's ``magnitude`` as a tensor argument of a fused body (1 or 0), made once."""
        if self.magnitude is None:
            value = np.asarray(1.0 if self.job.magnitude else 0.0)
            self.magnitude = self.bk.as_tensor(value, self.device, self.bk.dtype_name(self.job.inputs[0]))
        return self.magnitude

    def fused_noise(self, r0: int, r1: int, rows_to: int, layout: str, keep: bool = True) -> None:
        """Rows [r0, r1) (whole slices) of a job without a path (:func:`noise_fusable`: one slice
        per noise sample) drawn, differentiated and summed in one
        :meth:`~xaikit.backend.Backend.folded_grads` call (:func:`noise_chunk`); every noise
        sample it holds is complete, so nothing is carried (``keep=False``: a probe's chunk).

        The chunk is padded to ``rows_to`` rows (rounded up to whole slices: copies of its first
        slice, summed with weight 0), so that a compiled body's input signature is the padded
        chunk's whatever the number of noise samples."""
        job, bk, B = self.job, self.bk, self.B
        s_idx = np.arange(r0 // B, r1 // B)
        k = len(s_idx)
        k_pad = max(k, -(-rows_to // B))
        pad = np.r_[s_idx, np.full(k_pad - k, s_idx[0])]
        weights = np.zeros(k_pad)
        weights[:k] = 1.0
        dtype = bk.dtype_name(job.inputs[0])
        sigmas: list[Any] = list(job.sigma) if job.sigma is not None else [None] * len(job.inputs)
        seeds = [
            bk.seed_list([stream_seed(job.seed, 0, i, int(s)) for s in pad], self.device)
            for i in range(len(job.inputs))
        ]
        args = (
            list(job.inputs),
            sigmas,
            seeds,
            bk.as_tensor(weights, self.device, dtype),
            job.targets,
            layout,
            self._magnitude_flag(),
        )
        out = model_call(
            bk, lambda: bk.folded_grads(job.model, noise_chunk, args, job.output, job.xla), k_pad * B, B
        )
        if keep:
            self.acc = list(out) if self.acc is None else [a + t for a, t in zip(self.acc, out)]

    def _fold_weights(self, s_idx: np.ndarray, m_idx: np.ndarray, n: int, cols: int) -> np.ndarray:
        """(n, cols) weights folding a chunk's slices into its noise samples' path sums: slice j
        adds to noise sample ``s_idx[j] - s_idx[0]`` with its step's quadrature weight (1 without
        a path); columns past ``len(s_idx)`` (padding) and rows past the chunk's noise samples
        are 0."""
        weights = np.zeros((n, cols))
        weights[s_idx - s_idx[0], np.arange(len(s_idx))] = (
            self.w[m_idx] if self.job.alphas is not None else 1.0
        )
        return weights

    def _factor(self, s: int, like: T, b0: int, b1: int) -> T:
        """Noise sample s's path-position factors of samples [b0, b1), shaped to broadcast
        against ``like`` (b1 - b0, ...)."""
        return _row_weights(self.bk, self.cache.factor(s)[b0:b1], like)

    def reduce(self, grads: Sequence[T], r0: int, r1: int) -> None:
        """Fold one chunk's gradients into the per-sample accumulators (:func:`fused_chunk` does
        the same for a whole-slice chunk of a :func:`fusable` job, in its one call)."""
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
                weights = self._fold_weights(s_idx, m_idx, n_s, k)
                flat = bk.reshape(g, (k, -1))
                paths = bk.matmul(bk.as_tensor(weights, self.device, bk.dtype_name(g)), flat)
                paths = bk.reshape(paths, (n_s, B, *shape))
                if self.carry is not None:
                    carried = bk.reshape(self.carry[i], (1, B, *shape))
                    paths = paths + carried if n_s == 1 else bk.cat([paths[:1] + carried, paths[1:]])
            if complete < n_s:
                new_carry.append(bk.reshape(paths if complete == 0 else paths[complete:], (B, *shape)))
            if complete == 0:
                continue
            done = paths if complete == n_s else paths[:complete]
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


def fused_chunk(
    bk: Backend,
    grad: Callable[[list[T], T], Sequence[T]],
    starts: list[list[T]],
    diffs: list[list[T]],
    alpha: T,
    sel: T,
    weights: T,
    targets: T,
    layout: str,
    carry: list[T],
    ends: T,
    magnitude: T,
) -> list[T]:
    """A whole-slice chunk of the sweep, written with backend ops only, so that a framework with
    compiled graphs runs it as one graph (:meth:`~xaikit.backend.Backend.folded_grads`): its rows
    built, their gradients folded per path and the paths it completes reduced, with the
    arithmetic of :meth:`_Sweep.build`, the step and :meth:`_Sweep.reduce`.

    Args:
        bk: the backend.
        grad: the model's input gradients of a chunk of rows and their targets.
        starts: per input, the chunk's n noise samples' path starts (B, ...) each.
        diffs: per input, the same noise samples' path ends minus starts.
        alpha: (k,) path position of each slice.
        sel: (k,) which of the noise samples each slice belongs to.
        weights: (n, k) each slice's weight in each noise sample's path sum.
        targets: (B,) the class of each sample.
        layout: the memory layout the model gets its rows in.
        carry: per input, the (B, ...) partial path sums of the first noise sample carried from
            the chunks before (zeros where none is open).
        ends: (2, n): row 0 marks the noise samples whose paths the chunk completes, row 1 the
            one it leaves open (all 0 when it closes its last).
        magnitude: 1 to square each completed path's attributions (SmInt), 0 to keep them.

    Returns:
        Per input the (B, ...) sum of the completed paths' attributions (path sum times the
        path's difference, squared with ``magnitude``), then per input the open path's partial
        sum (B, ...), to be carried.
    """
    k = int(sel.shape[0])
    shapes = [tuple(int(d) for d in firsts[0].shape) for firsts in starts]
    n = int(weights.shape[0])
    rows, steps = [], []
    for i, (firsts, shape) in enumerate(zip(starts, shapes)):
        base = bk.gather(bk.cat([bk.reshape(t, (1, *shape)) for t in firsts]), sel)
        step = bk.cat([bk.reshape(t, (1, *shape)) for t in diffs[i]])  # (n, B, ...)
        picked = base + bk.reshape(alpha, (k, *(1,) * len(shape))) * bk.gather(step, sel)
        rows.append(bk.to_layout(bk.reshape(picked, (k * shape[0], *shape[1:])), layout))
        steps.append(step)
    grads = grad(rows, bk.cat([targets] * k))
    first = bk.as_tensor(np.eye(n, 1), device_of(weights), bk.dtype_name(weights))  # (n, 1): [1, 0, ...]
    totals, opened = [], []
    for g, shape, step, c in zip(grads, shapes, steps, carry):
        paths = bk.reshape(bk.matmul(weights, bk.reshape(g, (k, -1))), (n, -1))
        paths = paths + first * bk.reshape(c, (1, -1))  # the carried part of the first path
        done = paths * bk.reshape(step, (n, -1))
        done = done * (magnitude * done + (1 - magnitude))  # squared where magnitude is 1
        totals.append(bk.reshape(bk.matmul(ends[:1], done), shape))
        opened.append(bk.reshape(bk.matmul(ends[1:], paths), shape))
    return [*totals, *opened]


def noise_chunk(
    bk: Backend,
    grad: Callable[[list[T], T], Sequence[T]],
    inputs: list[T],
    sigmas: list[T],
    seeds: list[Any],
    weights: T,
    targets: T,
    layout: str,
    magnitude: T,
) -> list[T]:
    """A whole-slice chunk of a sweep without a path (SmoothGrad; vanilla gradients), written
    with backend ops only, so that a framework with compiled graphs runs it as one graph
    (:meth:`~xaikit.backend.Backend.folded_grads`): each slice's noisy copy of the inputs drawn
    (:meth:`~xaikit.backend.Backend.normal_at`, the values :class:`_PathCache` draws), the rows'
    gradients taken once, squared with ``magnitude`` and summed over the slices, with the
    arithmetic of :meth:`_Sweep.build`, the step and :meth:`_Sweep.reduce`.

    Args:
        bk: the backend.
        grad: the model's input gradients of a chunk of rows and their targets.
        inputs: the model's inputs (B, ...).
        sigmas: per input, the (B, 1, ...) noise scale, or None for no noise (vanilla).
        seeds: per input, the chunk's k slices' noise seeds (a :meth:`~xaikit.backend.Backend.seed_list`).
        weights: (k,) 1 for each slice of the chunk, 0 for a padding slice.
        targets: (B,) the class of each sample.
        layout: the memory layout the model gets its rows in.
        magnitude: 1 to square each slice's gradients (SmoothGrad's default), 0 to keep them.

    Returns:
        Per input the (B, ...) sum of the chunk's slices' (squared) gradients.
    """
    k = int(weights.shape[0])
    rows = []
    for x, sigma, chunk_seeds in zip(inputs, sigmas, seeds):
        shape = tuple(int(d) for d in x.shape)
        device = device_of(x)
        copies = [
            x if sigma is None else x + sigma * bk.normal_at(chunk_seeds, j, shape, device, bk.dtype_name(x))
            for j in range(k)
        ]
        rows.append(bk.to_layout(bk.cat(copies), layout))
    grads = grad(rows, bk.cat([targets] * k))
    totals = []
    for g, x in zip(grads, inputs):
        shape = tuple(int(d) for d in x.shape)
        g = bk.reshape(g, (k, -1))
        g = g * (magnitude * g + (1 - magnitude))  # squared where magnitude is 1
        totals.append(bk.reshape(bk.matmul(bk.reshape(weights, (1, k)), g), shape))
    return totals


def fusable(job: Job) -> bool:
    """Whether the whole-slice chunks of a job can go through :func:`fused_chunk`: a straight path
    from baselines (IG, SmInt, Input x Gradient), class targets and no model arguments; other
    jobs (no path, a custom path, per-row path factors) take the eager build, step and fold, and
    so does a chunk that :meth:`_Sweep.fused` declines."""
    return _plain(job) and job.alphas is not None and job.baselines is not None


def _plain(job: Job) -> bool:
    """What both fused bodies need: no custom path, not VarGrad (whose two moments and shift
    take the eager fold), no per-row path factors, class targets and no model arguments."""
    return (
        job.path is None
        and not job.variance
        and job.row_alpha is None
        and not job.model_kwargs
        and job.target is None
    )


def noise_fusable(job: Job) -> bool:
    """Whether the whole-slice chunks of a job without a path (SmoothGrad, vanilla gradients)
    can go through :func:`noise_chunk`: :func:`_plain`, and no XLA (whose random number
    generator gives other values for the same seeds than the framework's kernels: the noise
    would depend on the flag)."""
    return _plain(job) and job.alphas is None and not job.xla


def model_step(job: Job, rows: list[T], targets: T, r0: int, r1: int) -> tuple[T, list[T], T]:
    """``bk.grad_step`` on one chunk (rows [r0, r1) of the job, maybe padded), with the chunk's
    model_kwargs; a model failure on a chunk of other than B rows gets a message that names the
    likely cause (per-sample values bound in the model) and the option that fixes it
    (:func:`~xaikit.xai._engine.chunks.model_call`)."""
    n = int(targets.shape[0])
    asked = Rows(job.model, rows, targets, job.output, kwargs_of(job.model_kwargs, r0, r1, n), job.target)
    return model_call(job.bk, lambda: job.bk.grad_step(asked, job.xla), n, job.batch)  # type: ignore[no-any-return]


def sweep(job: Job, memory_budget: int | float = DEFAULT_BUDGET) -> Result:
    """Run a job: all its rows, chunk by chunk, and the per-sample attributions (B, ...).

    An out-of-memory error halves the chunk and starts the sweep again from its first row, so
    the result is exactly that of a call at the halved size (the size later calls use): the
    engine's one chunk loop, :func:`~xaikit.xai._engine.chunks.run_chunks`, with ``restart``.
    """
    bk = job.bk
    plan = ChunkPlan(job, memory_budget)
    device = device_of(job.inputs[0])
    total = job.rows
    pad = bk.pads_chunks()
    fuse = bk.fuses_chunks() and fusable(job)
    fuse_noise = bk.fuses_chunks() and noise_fusable(job)

    def run(state: _Sweep, r0: int, r1: int, size: int, layout: str, keep: bool) -> None:
        """Rows [r0, r1), padded as a chunk of ``size`` rows is (the plan's size: a probe's rows
        are padded as the job's are)."""
        state.cache.layout = layout
        n = r1 - r0
        full = padded_rows(n, min(size, state.align(0, size)))
        whole = n >= state.B and r0 % state.B == 0
        if fuse and whole and state.fused(r0, r1, full if pad else n, layout, keep):
            return
        if fuse_noise and whole:
            state.fused_noise(r0, r1, full if pad else n, layout, keep)
            return
        rows, targets = state.build(r0, r1)
        padded = pad and n < full
        if padded:
            rows, targets = pad_rows(bk, rows, targets, full - n)
        rows = [bk.to_layout(x, layout) for x in rows]
        _scores, grads, _outputs = model_step(job, rows, targets, r0, r1)
        if keep:
            state.reduce([g[:n] for g in grads] if padded else grads, r0, r1)

    def throwaway(size: int, layout: str) -> None:
        probe_state = _Sweep(job)  # its own path cache: nothing of the job's state is touched
        run(probe_state, 0, min(total, probe_state.align(0, size)), plan.size, layout, keep=False)
        bk.synchronize(device)

    plan.probe(*probes(bk, device, throwaway))
    state = _Sweep(job)

    def step(r0: int, r1: int, size: int) -> None:
        run(state, r0, r1, size, plan.layout, keep=True)
        if job.progress is not None:
            job.progress(r1)

    def halved(size: int) -> None:
        nonlocal state
        state = _Sweep(job)  # the sweep starts again: its sums so far are dropped
        while plan.size > size:  # the size later calls use
            plan.halve()

    done = run_chunks(
        bk, device, total, plan.size, step,
        end=lambda r0, size: state.align(r0, min(size, total - r0)), restart=True, on_halve=halved,
    )  # fmt: skip
    return Result(state.finish(), done.sizes, plan.layout)


def endpoint_scores(job: Job, chunk: int) -> tuple[T, T]:
    """Scores at both ends of every path, ``(f(ends), f(baselines))``, each (S, B) on the device.

    Used for the completeness delta of IG-based methods; forward passes only, chunked.
    """
    bk, B = job.bk, job.batch
    cache = _PathCache(job)
    device = device_of(job.inputs[0])

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
        model_kwargs=job.model_kwargs, batch=B, target=job.target,
    )  # fmt: skip
    scores = bk.reshape(scores, (job.n_noise, 2, B))
    return scores[:, 0], scores[:, 1]
