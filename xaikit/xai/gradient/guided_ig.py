"""Guided Integrated Gradients: an adaptive path method that integrates along a path it chooses.

Kapishnikov et al., 2021, "Guided Integrated Gradients: an Adaptive Path Method for Removing
Noise", https://arxiv.org/abs/2106.09788. The behaviour matched is PAIR ``saliency``'s
``GuidedIG`` (``saliency/core/guided_ig.py``), step for step.

**What it answers.** Like Integrated Gradients, how much each feature contributed to the
target score's change from a baseline to the input (the attributions sum to about
``f(x) - f(baseline)``). IG integrates along the straight line; along that line the path
crosses regions where the gradient of many features is large but irrelevant (saturated or
noisy), and that noise ends up in the attribution. Guided IG instead moves, at every step,
only the features whose gradient is smallest in absolute value, so the path keeps to where the
model is flat and the attribution concentrates on the features that matter.

**The algorithm** (per path, a point x that starts at the baseline; ``steps`` steps):

1. take the gradient g of the target score at x;
2. step t (alpha = t / steps) must bring the L1 distance of x to the input down to
   ``(1 - alpha)`` of the baseline's. Every feature is kept within ``max_dist`` (in alpha) of
   the straight line: one that fell behind ``alpha - max_dist`` is first moved up to it;
3. then, until the L1 target is met: of the features not yet at ``alpha + max_dist``, select
   the ``fraction`` with the smallest |g| (threshold: the ``fraction`` quantile of |g| over the
   whole sample, numpy's ``'lower'`` rule, features at their upper limit counting as infinite);
   if moving them all to their upper limit is not enough, do so and select again; otherwise
   move them by the share gamma of the way that meets the target exactly;
4. attribution += (x after - x before) * g for every move of the step (g stays the one of 1).

After the last step x is the input, so the sum is a Riemann sum of the gradient along the
chosen path. ``max_dist = 0`` is the straight line (a left-Riemann Integrated Gradients).

**Fusion.** The path depends on the gradients, so its points cannot be built in advance the way
the engine builds IG's. Instead every path of the call, B samples x S noise samples, advances
together: each step is one gradient evaluation of all B x S current points through the engine
(:func:`xaikit.xai._engine.sweep.sweep` of a plain-gradient job: chunks of ``max_batch`` rows, the
memory budget, out-of-memory halving), and the feature selection of every path is done at once
on the host, vectorized over paths: a per-path quantile by ``np.partition`` (linear, not a
sort), per-path gamma, and the inner "select again" loop runs until every path's target is
met, paths that are done dropping out. The selection writes into scratch arrays kept for the
call (no array of the paths' size is made per pass) and is shared out over the CPU cores by
paths, a group of paths per thread (numpy releases the GIL in its loops); the paths are
independent, so any thread count gives the same bits. Row ``r = s * B + b`` is noise sample s
of sample b, so per-sample ``model_kwargs`` follow their rows. Memory is flat in ``steps``:
only the current points, the step's gradients, the scratch arrays and the accumulators live.
The host holds about 20 float64 arrays of the paths' size; when all B x S paths would not fit
within the memory budget (``memory_budget`` bytes, or that fraction of the available RAM) they
run in groups, one after the other, each group fused as above.

**Why float64 on the host.** The selection compares values exactly (``x == x_max``, ``x_alpha <
alpha_min``, ``|g| <= threshold``) and meets the L1 target to a relative 1e-9, as PAIR does in
float64: in float32 the target test could never be met on large inputs (the L1 sum's own
rounding is about 1e-7 of it) and ties would resolve differently from the reference. The
selection is linear in the features per pass and stays on the host in numpy; only the points
(in the model's dtype) go to the device and the gradients come back, once per step. On a CPU
the model's forward+backward dominates; on a GPU the selection does (4 images at 224x224, 16
steps: 0.91 s on an H100 machine, of which the gradients are a few milliseconds per step),
which is why it is spread over the cores.

Options (``xk.xai.explain(model, x, method="guided_ig", **options)``):

* ``steps`` (200, PAIR's ``x_steps``): path steps; the cost is B x S x steps gradient rows.
  Guided IG moves only a fraction of the features per step, so it needs more steps than IG for
  the same completeness; 200 matches PAIR and the paper.
* ``fraction`` (0.25): the share of the features selected per inner iteration.
* ``max_dist`` (0.02): how far (in alpha) a feature may stray from the straight line; 0 is IG
  on the straight line, 1 is unbounded.
* ``baseline`` ("zeros", PAIR's default): "zeros", "black", "mean", "blur" or an array in the
  caller's layout (see :mod:`xaikit.xai._engine.baselines`).
* ``nsamples`` (1 = no smoothing): SmoothGrad over Guided IG, PAIR's ``GetSmoothedMask``: the
  mean over ``nsamples`` noisy copies of the input (the baseline stays fixed), noise std
  ``stdev_spread`` x (max - min) of each sample (0.15); the same seeded noise as xaikit's
  SmoothGrad and SmInt with the same seed.
* ``magnitude`` (None: True when smoothing, like xaikit's SmoothGrad and PAIR): average the
  squared attributions of the noisy copies instead of the attributions.

``return_delta``: the completeness error per sample, sum(attributions) - mean over noise
samples of (f(noisy input) - f(baseline)), float64 (B,); None when ``magnitude`` squares.

Example:
    A batch of images, a 50-step Guided IG of each image's predicted class, and its completeness
    error (``model`` a torch or Keras classifier, ``x`` a batch of images)::

        attr, delta = xk.xai.explain(model, x, method="guided_ig", steps=50, return_delta=True)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.backend.memory import available_ram
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.layout import move, move_back
from xaikit.xai._engine.baselines import FIXED_BASELINES, baseline_array, baseline_values, check_baseline
from xaikit.xai._engine.chunks import forward_scores
from xaikit.xai._engine.job import Job
from xaikit.xai._engine.kwargs import ModelKwargs
from xaikit.xai._engine.progress import for_method
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai._engine.sweep import sweep
from xaikit.xai._engine.threads import host_threads
from xaikit.xai.registry import Call, CallSettings, Explained, Method, register_method

__all__ = ["OPTIONS", "guided_paths", "noisy_inputs", "run"]

#: the options of ``run`` (and of ``explain(..., method="guided_ig")``) besides the engine's
OPTIONS = ("steps", "fraction", "max_dist", "baseline", "nsamples", "stdev_spread", "magnitude")
#: PAIR's tolerance on meeting a step's L1 target (relative and absolute)
EPSILON = 1e-9
#: float64 arrays of the paths' size the host holds at most at once (for the group size)
_HOST_ARRAYS = 20  # inputs, baselines, their difference and copies, point, attributions, gradient, 5 scratch
#: the host memory for the paths when the available RAM is unknown (bytes)
_HOST_FALLBACK = 2**30

#: ``grad_fn(points, rows) -> gradients``: points (n, D) float64 of the paths ``rows``
GradFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Options:
    steps: int = 200
    fraction: float = 0.25
    max_dist: float = 0.02
    baseline: Any = "zeros"
    nsamples: int = 1
    stdev_spread: float = 0.15
    magnitude: bool = False


def check_options(options: dict[str, Any]) -> Options:
    """The checked options of ``run`` (unknown names refused with the list of valid ones)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise XaikitTypeError(
            f"guided_ig got unknown option(s) {unknown}; its options are {', '.join(OPTIONS)} "
            "(and explain's seed, max_batch, memory_budget, return_delta, xla, output, model_kwargs)"
        )
    steps = check_int(options.get("steps", 200), "steps", 1)
    fraction = check_number(options.get("fraction", 0.25), "fraction", 0.0, 1.0)
    max_dist = check_number(options.get("max_dist", 0.02), "max_dist", 0.0, 1.0)
    baseline = options.get("baseline", "zeros")
    check_baseline(baseline, FIXED_BASELINES)
    nsamples = check_int(options.get("nsamples", 1), "nsamples", 1)
    spread = check_number(options.get("stdev_spread", 0.15), "stdev_spread", 0.0)
    magnitude = options.get("magnitude")
    if magnitude is not None and not isinstance(magnitude, (bool, np.bool_)):
        raise XaikitTypeError(f"magnitude must be None, True or False; got {describe(magnitude)}")
    magnitude = nsamples > 1 if magnitude is None else bool(magnitude)
    return Options(steps, fraction, max_dist, baseline, nsamples, spread, magnitude)


def lower_index(n: int, q: float) -> int:
    """The index of numpy's ``'lower'`` quantile ``q`` of ``n`` sorted values (numpy's own
    rounding, taken from numpy itself, so ties at the edge resolve as ``np.quantile`` does).

    Example:
        >>> lower_index(432, 0.25), lower_index(10, 1.0), lower_index(7, 0.0)
        (107, 9, 0)
    """
    return int(np.quantile(np.arange(n, dtype=np.float64), q, method="lower"))


def _isclose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``math.isclose(a, b, rel_tol=EPSILON, abs_tol=EPSILON)`` elementwise (symmetric, unlike
    ``np.isclose``)."""
    return np.abs(a - b) <= np.maximum(EPSILON * np.maximum(np.abs(a), np.abs(b)), EPSILON)


def guided_paths(
    x_input: np.ndarray,
    x_baseline: np.ndarray,
    grad_fn: GradFn,
    steps: int = 200,
    fraction: float = 0.25,
    max_dist: float = 0.02,
    workers: int | None = None,
) -> np.ndarray:
    """Guided IG of n paths at once, framework-free: the attributions (n, D) float64.

    Args:
        x_input: (n, D) the path ends (the inputs, maybe noisy), one path per row.
        x_baseline: (n, D) the path starts.
        grad_fn: ``grad_fn(points, rows)``: the gradients (len(rows), D) of the target score
            at ``points`` (len(rows), D), the current points of the paths ``rows`` (indices
            into the n paths). Called once per step with every path that is not constant.
        steps: path steps (see the module).
        fraction: the share of the features moved per inner pass.
        max_dist: how far (in alpha) a feature may stray from the straight line.
        workers: threads that share a step's selection, each over its own paths (rows are
            independent, so the result is the same bits for any count); default one per CPU
            core, at most one per path.

    A path whose input equals its baseline gets zero attributions and no gradient evaluation.

    Example:
        >>> w = np.array([[1.0, -2.0, 3.0]])
        >>> attr = guided_paths(np.ones((1, 3)), np.zeros((1, 3)), lambda p, r: np.repeat(w, len(r), 0), 7)
        >>> attr.round(12).tolist()  # a constant gradient: every path gives (x - baseline) * w
        [[1.0, -2.0, 3.0]]
    """
    x_input = np.asarray(x_input, dtype=np.float64)
    x_baseline = np.asarray(x_baseline, dtype=np.float64)
    n, d = x_input.shape
    out = np.zeros((n, d), dtype=np.float64)
    diff_all = x_input - x_baseline
    live = np.flatnonzero(np.abs(diff_all).sum(axis=1) != 0)
    if live.size == 0:
        return out
    xi, xb, df = x_input[live], x_baseline[live], diff_all[live]
    l1_total = np.abs(xi - xb).sum(axis=1)
    x = xb.copy()
    attr = np.zeros_like(xi)
    k = lower_index(d, fraction)
    m = len(live)
    threads = host_threads(m) if workers is None else max(1, min(m, int(workers)))
    groups = [_Paths(xi[s], xb[s], df[s], x[s], attr[s], l1_total[s], s) for s in _row_slices(m, threads)]
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    try:
        for step in range(steps):
            grad = np.asarray(grad_fn(x, live), dtype=np.float64).reshape(m, d)
            alpha = (step + 1.0) / steps
            bounds = (max(alpha - max_dist, 0.0), min(alpha + max_dist, 1.0), 1 - (step + 1) / steps)
            if pool is None:
                groups[0].step(grad, *bounds, k)
            else:  # numpy releases the GIL in its loops: the groups run side by side
                for done in [pool.submit(g.step, grad, *bounds, k) for g in groups]:
                    done.result()
    finally:
        if pool is not None:
            pool.shutdown()
    out[live] = attr
    return out


def _row_slices(m: int, parts: int) -> list[slice]:
    """``parts`` contiguous row ranges covering [0, m) as evenly as possible.

    Example:
        >>> _row_slices(5, 2)
        [slice(0, 2, None), slice(2, 5, None)]
    """
    edges = np.linspace(0, m, parts + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


class _Paths:
    """A group of paths (views of rows of the fused arrays) and the scratch arrays of their
    selection, so that a step allocates nothing of the paths' size: every operation writes into
    a buffer, in the same order of operations as the plain expressions, so the bits are those of
    the reference algorithm (see :func:`guided_paths`)."""

    def __init__(
        self,
        xi: np.ndarray,
        xb: np.ndarray,
        df: np.ndarray,
        x: np.ndarray,
        attr: np.ndarray,
        l1_total: np.ndarray,
        rows: slice,
    ) -> None:
        self.xi, self.xb, self.df, self.x, self.attr = xi, xb, df, x, attr
        self.l1_total, self.rows = l1_total, rows
        shape = x.shape
        self.x_start, self.x_max, self.abs_grad, self.absg, self.tmp = (np.empty(shape) for _ in range(5))
        self.at_max, self.sel = np.empty(shape, bool), np.empty(shape, bool)

    def step(
        self, grad_all: np.ndarray, alpha_min: float, alpha_max: float, remaining: float, k: int
    ) -> None:
        """One path step of these paths, in place (the module's steps 2-4)."""
        x, xb, df, tmp = self.x, self.xb, self.df, self.tmp
        grad = grad_all[self.rows]
        np.abs(grad, out=self.abs_grad)
        np.multiply(df, alpha_max, out=self.x_max)
        self.x_max += xb  # xb + df * alpha_max
        l1_target = self.l1_total * remaining
        np.copyto(self.x_start, x)
        # Features behind alpha_min catch up to it. Only the step's first pass can find any
        # (later passes move features forward only), so this is done once per step. A feature
        # with no span (df == 0) gives 0 / 0 = NaN, never behind: it stays at its baseline.
        np.subtract(x, xb, out=tmp)
        with np.errstate(divide="ignore", invalid="ignore"):
            tmp /= df
        behind = np.less(tmp, alpha_min, out=self.sel)
        np.multiply(df, alpha_min, out=tmp)
        tmp += xb  # x_min = xb + df * alpha_min
        np.copyto(x, tmp, where=behind)
        m = x.shape[0]
        active = np.arange(m)
        while active.size:
            full = active.size == m
            na = active.size
            if full:
                xa, xia, x_maxa, target, ga = x, self.xi, self.x_max, l1_target, self.abs_grad
            else:
                xa, xia, x_maxa = x[active], self.xi[active], self.x_max[active]
                target, ga = l1_target[active], self.abs_grad[active]
            t, absg, at_max, sel = tmp[:na], self.absg[:na], self.at_max[:na], self.sel[:na]
            np.subtract(xa, xia, out=t)
            np.abs(t, out=t)
            l1_current = t.sum(axis=1)
            done = _isclose(target, l1_current)
            np.equal(xa, x_maxa, out=at_max)  # excluded from the selection (PAIR: gradient set to inf)
            np.copyto(absg, ga)
            np.copyto(absg, np.inf, where=at_max)
            np.copyto(t, absg)
            t.partition(k, axis=1)
            threshold = t[:, k : k + 1].copy()
            np.less_equal(absg, threshold, out=sel)
            sel &= ~at_max
            if done.any():
                sel &= ~done[:, None]
            np.subtract(xa, x_maxa, out=t)
            np.abs(t, out=t)
            t *= sel
            l1_s = t.sum(axis=1)
            stuck = (l1_s <= 0) & ~done  # nothing left to move: PAIR would loop here forever
            with np.errstate(divide="ignore", invalid="ignore"):
                gamma = (l1_current - target) / l1_s
            gamma[l1_s <= 0] = np.inf
            jump = gamma > 1.0
            if jump.all():
                np.copyto(xa, x_maxa, where=sel)
            else:
                np.subtract(x_maxa, xa, out=t)
                t *= np.where(jump, 1.0, gamma)[:, None]  # a jump moves all the way
                t += xa  # xa + (x_maxa - xa) * part
                t[jump] = x_maxa[jump]
                np.copyto(xa, t, where=sel)
            if not full:
                x[active] = xa
            active = active[jump & ~done & ~stuck]
        # every move of the step is weighted by the step's one gradient: one product per step
        np.subtract(x, self.x_start, out=tmp)
        tmp *= grad
        self.attr += tmp


def noisy_inputs(inp: Any, sigma: T, seed: int, s: int) -> T:
    """Noise sample ``s`` of the (single) input: x + sigma * N(0, 1), on the device, in the
    model's layout; the stream of xaikit's SmoothGrad (key ``(seed, 0, input 0, s)``)."""
    bk, x = inp.bk, inp.tensors[0]
    device = getattr(x, "device", None)
    return x + sigma * bk.normal(stream_seed(seed, 0, 0, s), x.shape, device, inp.dtype)


def _baseline(inp: Any, spec: Any) -> np.ndarray:
    """The baseline of each sample, float64, in the model's layout (B, ...)."""
    bk, x = inp.bk, inp.tensors[0]
    host = bk.to_numpy(x)
    if isinstance(spec, str):
        return baseline_values(host, spec, inp.channel_axes[0], inp.keys[0])
    arr = bk.to_numpy(spec) if bk.is_tensor(spec) else spec  # baseline_array checks and casts
    how = inp.moves[0]
    user_shape = move_back(np.empty(host.shape), how).shape
    values = move(baseline_array(arr, user_shape, inp.keys[0]), how)  # finite: baseline_array checks
    return np.ascontiguousarray(values, dtype=np.float64)


def _row_kwargs(kw: ModelKwargs | None, samples: np.ndarray) -> ModelKwargs | None:
    """``model_kwargs`` of a row space whose row r belongs to sample ``samples[r]``."""
    if not kw:
        return None
    per = kw.rows(samples)
    return ModelKwargs(
        kw.bk,
        len(samples),
        per_sample={k: per[k] for k in kw.per_sample},
        fixed=dict(kw.fixed),
    )


def _group_rows(paths: int, features: int, memory_budget: int | float) -> int:
    """How many paths run fused at once: all of them unless their host arrays would pass the
    budget (bytes, or that fraction of the available RAM)."""
    if isinstance(memory_budget, int):
        cap = memory_budget
    else:
        ram = available_ram()
        cap = int(float(memory_budget) * ram) if ram else _HOST_FALLBACK
    per_path = max(1, features) * 8 * _HOST_ARRAYS
    return max(1, min(paths, cap // per_path))


def run(
    inp: Any,
    targets: T,
    settings: CallSettings,
    *,
    return_delta: bool = False,
    **options: Any,
) -> Any:
    """Guided IG of prepared inputs (``xaikit.xai._engine.inputs.prepare``) for pinned ``targets``.

    Args:
        inp: the prepared ``Inputs`` (one model input).
        targets: int64 (B,) classes on the model's device (each sample's index with a target
            object).
        settings: the call's settings: ``seed`` draws the noise (when ``nsamples`` > 1);
            ``max_batch`` is the rows per chunk of each step's gradient sweep;
            ``memory_budget`` bounds the chunks and the paths' host arrays; ``progress`` reports
            the gradient rows done, ``steps`` x B x ``nsamples`` in all
            (``"guided_ig: 400/1600 rows ..."``); a target object (``settings.target``) scores the
            rows instead of the classes (its per-sample arrays are gathered by each path's sample).
        return_delta: also return the completeness error (see the module).
        **options: ``steps``, ``fraction``, ``max_dist``, ``baseline``, ``nsamples``,
            ``stdev_spread``, ``magnitude`` (see the module).

    Returns:
        The attributions, a numpy array with the input's shape in the caller's layout, in the
        inputs' working dtype (float32; float64 for a float64 model); with ``return_delta``,
        ``(attributions, delta)``, delta float64 (B,) or None when ``magnitude`` squares.
    """
    opts = check_options(options)
    if len(inp.tensors) != 1:
        raise XaikitValueError(
            f"guided_ig explains a model of one input; got {len(inp.tensors)} model inputs "
            f"({', '.join(inp.keys)}): pass the other inputs, which are not explained, in model_kwargs="
        )
    bk, model = inp.bk, inp.model
    x = inp.tensors[0]
    device = getattr(x, "device", None)
    batch = inp.batch
    shape = tuple(int(d) for d in x.shape[1:])
    features = int(np.prod(shape))
    S = opts.nsamples
    clean = bk.to_numpy(x).astype(np.float64).reshape(batch, features)
    base = _baseline(inp, opts.baseline).reshape(batch, features)
    sigma = float(opts.stdev_spread) * (bk.sample_max(x) - bk.sample_min(x)) if S > 1 else None
    paths = batch * S
    seed, output, xla, target = settings.seed, settings.output, settings.xla, settings.target
    group = _group_rows(paths, features, settings.memory_budget)
    acc = np.zeros((batch, features), dtype=np.float64)
    gap = np.zeros(batch, dtype=np.float64)
    chunk = 1
    with for_method(settings.progress, opts.steps * paths, "guided_ig") as bar:
        for g0 in range(0, paths, group):
            rows = np.arange(g0, min(paths, g0 + group))
            samples, noise_ids = rows % batch, rows // batch
            if sigma is None:
                ends = clean[samples]
            else:
                ends = np.empty((len(rows), features), dtype=np.float64)
                for s in np.unique(noise_ids):
                    at = np.flatnonzero(noise_ids == s)
                    noisy = bk.to_numpy(noisy_inputs(inp, sigma, seed, int(s))).reshape(batch, features)
                    ends[at] = noisy[samples[at]]
            starts = base[samples]

            def grad_fn(points: np.ndarray, which: np.ndarray, samples: np.ndarray = samples) -> np.ndarray:
                nonlocal chunk
                owners = samples[which]
                job = Job(
                    bk=bk,
                    model=model,
                    inputs=[bk.as_tensor(points.reshape(len(which), *shape), device, inp.dtype)],
                    targets=bk.gather(targets, bk.index(owners, device)),
                    seed=seed,
                    output=output,
                    max_batch=settings.max_batch,
                    dtype=inp.dtype,
                    xla=bool(xla),
                    model_kwargs=_row_kwargs(inp.kwargs, owners),
                    target=target,
                )
                result = sweep(job, settings.memory_budget)
                chunk = max(chunk, *result.chunks)
                grads = bk.to_numpy(result.attributions[0]).astype(np.float64).reshape(len(which), features)
                bar.update(len(which))  # counted once the step's gradients are on the host
                return grads

            attr = guided_paths(ends, starts, grad_fn, opts.steps, opts.fraction, opts.max_dist)
            if opts.magnitude:
                attr = attr * attr
            for s in np.unique(noise_ids):  # rows of one noise sample belong to distinct samples
                at = np.flatnonzero(noise_ids == s)
                acc[samples[at]] += attr[at]
            if return_delta and not opts.magnitude:
                gap += _score_gap(inp, targets, ends, starts, samples, shape, output, xla, chunk, target)
            bar.advance_to(opts.steps * int(rows[-1] + 1))  # constant paths run no step
    result = (acc / S).reshape(batch, *shape).astype(inp.dtype)
    arr = inp.to_user([result])
    out: Any = arr[0] if inp.keys == ["x"] else arr
    if not return_delta:
        return out
    if opts.magnitude:
        return out, None
    delta = acc.sum(axis=1) / S - gap / S
    return out, delta.astype(np.float64)


def _score_gap(
    inp: Any,
    targets: T,
    ends: np.ndarray,
    starts: np.ndarray,
    samples: np.ndarray,
    shape: tuple[int, ...],
    output: int | str,
    xla: bool,
    chunk: int,
    target: Any = None,
) -> np.ndarray:
    """Per sample, the sum over the group's paths of f(end) - f(start): forward passes only
    (``target``: a bound target object scores them)."""
    bk, n = inp.bk, len(samples)
    device = getattr(inp.tensors[0], "device", None)
    owners = np.concatenate([samples, samples])
    stack = np.concatenate([ends, starts])

    def rows_fn(r0: int, r1: int) -> tuple[list[T], T]:
        pts = bk.as_tensor(stack[r0:r1].reshape(r1 - r0, *shape), device, inp.dtype)
        return [pts], bk.gather(targets, bk.index(owners[r0:r1], device))

    scores = forward_scores(
        bk, inp.model, rows_fn, 2 * n, max(chunk, 1), output, xla,
        model_kwargs=_row_kwargs(inp.kwargs, owners), batch=inp.batch, target=target,
    )  # fmt: skip
    f = bk.to_numpy(scores).astype(np.float64)
    out = np.zeros(inp.batch, dtype=np.float64)
    np.add.at(out, samples, f[:n] - f[n:])
    return out


def runner(call: Call, **options: Any) -> Explained:
    """The runner of ``explain(method="guided_ig")`` (see :mod:`xaikit.xai.registry`)."""
    result = run(call.inp, call.targets, call.settings(), return_delta=call.with_delta, **options)
    out, delta = result if call.with_delta else (result, None)
    return Explained([out], delta)


register_method(
    Method(
        "guided_ig",
        "gradient",
        "Guided IG",
        runner,
        {
            "steps": 200,
            "fraction": 0.25,
            "max_dist": 0.02,
            "baseline": "zeros",
            "nsamples": 1,
            "stdev_spread": 0.15,
            "magnitude": None,
        },
        aliases=("guidedig", "guided_integrated_gradients"),
        noise=True,
        delta=True,
        slow=True,
        check=check_options,
        target_objects=True,
        summary="IG along an adaptive path that moves the least important features first",
        reference="Kapishnikov et al., 2021, https://arxiv.org/abs/2106.09788",
    )
)
