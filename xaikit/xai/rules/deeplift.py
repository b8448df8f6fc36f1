"""DeepLIFT with the Rescale rule (Shrikumar et al., 2017, https://arxiv.org/abs/1704.02685) and
DeepLiftShap (Lundberg & Lee, 2017, https://arxiv.org/abs/1705.07874): each sample's score
change ``f(x) - f(baseline)`` shared out over its input elements by one modified backward pass
(``bk.relevance.deeplift_step``: each nonlinearity's derivative replaced by the Rescale
multiplier ``(y - y0) / (x - x0)``, max pooling by the rule that routes the change through the
argmaxes), so that the attributions sum to it (summation-to-delta).

* ``"deeplift"``: against one baseline per sample (``baseline="zeros"`` or another name of
  :data:`~xaikit.xai._engine.baselines.FIXED_BASELINES`, or an array broadcastable to x).
* ``"deepliftshap"``: the mean of DeepLIFT against each of ``nsamples`` references drawn, per
  sample and without repeats, from a reference set (``baselines=`` an array (N, ...); default
  the batch itself); all N when ``nsamples`` is not given and N <= :data:`DEFAULT_REFERENCES`.

Every (sample, reference) pair is one row of a row space of B x K rows (row r: sample r % B,
its reference r // B), run in chunks through the engine's chunk loop; a chunk of m pairs is one
forward and one backward pass of 2m model rows (the inputs, then their references), so
``max_batch`` counts model rows and a chunk holds ``max_batch // 2`` pairs (at least one).

With a rule at every nonlinearity the attributions add up to the score change by construction
(the completeness delta is float rounding: below 5e-6 of ``|f(x) - f(baseline)|`` on ResNets in
float32). An operation without a rule (a ReLU written ``torch.where(z > 0, z, 0)``, a
TorchScript function, a softmax, an activation inside a Keras ``Lambda``) passes its plain
gradient, and the sum misses: where a sample's ``|delta|`` exceeds :data:`COMPLETENESS_TOL` of
``|f(x) - f(baseline)|`` plus :data:`ROUNDING_FLOOR` of the magnitudes it is computed from,
:func:`check_completeness` gives an :class:`~xaikit.errors.IncompleteMapWarning` (once per model
and method), from the delta already computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xaikit.backend import Rows, T
from xaikit.errors import IncompleteMapWarning, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.baselines import FIXED_BASELINES, check_baseline
from xaikit.xai._engine.chunks import chunk_error, padded_rows, run_chunks
from xaikit.xai._engine.inputs import call_error
from xaikit.xai._engine.plan import check_max_batch, default_rows
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai.gradient.sweep import baseline_fn, reference_set
from xaikit.xai.health import warn_once
from xaikit.xai.registry import Call, Explained, Method, count, register_method, title

__all__ = [
    "COMPLETENESS_TOL",
    "DEFAULT_REFERENCES",
    "ROUNDING_FLOOR",
    "check_completeness",
    "pair_attributions",
    "run_deeplift",
    "run_deepliftshap",
]

#: DeepLiftShap's references per sample when ``nsamples`` is not given: all N, at most this many
DEFAULT_REFERENCES = 100
#: the seeded stream of DeepLiftShap's reference draws (the engine's streams 0-2 are noise,
#: uniform baselines and Expected Gradients' draws)
_DRAWS = 5
#: a sample's attributions do not add up when its ``|delta|`` exceeds this fraction of
#: ``|f(x) - f(baseline)|`` (plus :data:`ROUNDING_FLOOR`): float rounding stays below 5e-6 of it
#: (float32 ResNets, DeepLiftShap included), an operation without a rule misses by 5e-2 to 16 times
#: it (a softmax output: 8e-4 to 0.28)
COMPLETENESS_TOL = 1e-3
#: the rounding allowance added to that, as a fraction of ``sum |attributions| + |f(x)| +
#: |f(baseline)|``, for a score that barely changes: the delta's float rounding stays below 1e-7 of
#: that sum (float32)
ROUNDING_FLOOR = 1e-5


def pair_attributions(
    call: Call, refs: list[T], index: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """DeepLIFT of every sample against each of its references, averaged per sample.

    Args:
        call: the call (inputs, pinned classes, chunking, output).
        refs: each model input's reference rows (N, ...), in the model's layout on its device.
        index: int (B, K): the reference rows of each sample.

    Returns:
        ``(attributions, delta, chunk sizes)``: per input the (B, ...) mean attributions in the
        model's layout (float64), the (B,) completeness delta
        ``sum(attributions) - (f(x) - mean f(references))``, and the pairs of each chunk.
    """
    inp, bk = call.inp, call.bk
    targets = call.targets
    if targets is None:  # pragma: no cover - the records pin their classes
        raise XaikitValueError("internal error: DeepLIFT runs on pinned classes")
    batch, k = index.shape
    device = bk.model_device(inp.model)
    where = getattr(inp.tensors[0], "device", None)
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in inp.tensors]
    acc = [np.zeros((batch, int(np.prod(s))), dtype=np.float64) for s in shapes]
    f_x = np.zeros(batch, dtype=np.float64)
    f_ref = np.zeros(batch, dtype=np.float64)
    max_batch = check_max_batch(call.max_batch)
    if max_batch == "auto":
        rows = default_rows(bk, device, sum(int(np.prod(s)) for s in shapes))
    else:
        rows = int(max_batch)
    pad = bk.pads_chunks()

    def pairs_of(r0: int, r1: int, size: int) -> np.ndarray:
        """The pairs a chunk [r0, r1) runs: padded with copies of its last one (TF)."""
        n = r1 - r0
        return np.minimum(np.arange(r0, r0 + (padded_rows(n, size) if pad else n)), r1 - 1)

    def step(r0: int, r1: int, size: int) -> None:
        n = r1 - r0
        pairs = pairs_of(r0, r1, size)
        samples = pairs % batch
        picked = bk.index(samples, where)
        xs = [bk.gather(t, picked) for t in inp.tensors]
        ref_rows = bk.index(index[samples, pairs // batch], where)
        bs = [bk.gather(r, ref_rows) for r in refs]
        kw = inp.kwargs.rows(np.concatenate([samples, samples])) if inp.kwargs else None
        asked = Rows(inp.model, xs, bk.gather(targets, picked), call.output, kw, call.spec)
        attributions, fx, fb = bk.relevance.deeplift_step(asked, bs)
        own = samples[:n]
        for i, a in enumerate(attributions):
            np.add.at(acc[i], own, np.asarray(bk.to_numpy(a), dtype=np.float64)[:n].reshape(n, -1))
        f_x[own] = np.asarray(bk.to_numpy(fx), dtype=np.float64)[:n]
        np.add.at(f_ref, own, np.asarray(bk.to_numpy(fb), dtype=np.float64)[:n])

    def error(exc: Exception, r0: int, r1: int, size: int) -> Exception:
        if not r0:  # nothing ran before the first chunk: the model cannot take x
            return call_error(inp, exc)
        return chunk_error(exc, 2 * len(pairs_of(r0, r1, size)), inp.batch, bk)

    done = run_chunks(bk, device, batch * k, max(1, rows // 2), step, error=error)
    means = [a / k for a in acc]
    delta = sum(m.sum(axis=1) for m in means) - (f_x - f_ref / k)
    check_completeness(call, delta, f_x, f_ref / k, sum(np.abs(m).sum(axis=1) for m in means))
    return [m.reshape(batch, *s) for m, s in zip(means, shapes)], delta, done.sizes


_CAUSES = {
    "torch": (
        "a ReLU written as torch.where(z > 0, z, 0), a TorchScript function called in forward, a "
        "softmax, a normalization or a product of two tensors",
        "write ReLUs as nn.ReLU / torch.relu (z.clamp(min=0), nn.Threshold and torch.maximum(z, c) "
        "have rules too)",
    ),
    "tf": (
        "an activation computed inside a Lambda or custom layer's call (keras.ops.maximum, "
        "tf.maximum, tf.where, tf.clip_by_value), a softmax, a normalization or a product of two tensors",
        "compute ReLUs as a ReLU activation or layer (activation='relu', keras.layers.ReLU)",
    ),
}


def check_completeness(call: Call, delta: np.ndarray, f_x: np.ndarray, f_ref: np.ndarray, mass: Any) -> bool:
    """Warn (:class:`~xaikit.errors.IncompleteMapWarning`, once per model and method) when some
    samples' attributions miss their score change beyond float rounding: ``|delta| >``
    :data:`COMPLETENESS_TOL` ``* |f(x) - f_ref| +`` :data:`ROUNDING_FLOOR` ``* (mass + |f(x)| +
    |f_ref|)``, ``mass`` being each sample's ``sum |attributions|``; NaN is left to the health
    check. Returns whether any sample missed."""
    change = np.abs(f_x - f_ref)
    allowed = COMPLETENESS_TOL * change + ROUNDING_FLOOR * (np.asarray(mass) + np.abs(f_x) + np.abs(f_ref))
    missed = np.abs(delta) > allowed
    if not missed.any():
        return False
    name = call.method.name
    shap = name == "deepliftshap"
    gap = "f(x) - mean f(references)" if shap else "f(x) - f(baseline)"
    with np.errstate(divide="ignore", invalid="ignore"):
        share = float(np.max(np.abs(delta[missed]) / change[missed]))
    how = (
        f"|delta| up to {100 * share:.3g} % of |{gap}|"
        if np.isfinite(share)
        else f"|delta| up to {float(np.max(np.abs(delta[missed]))):.3g}, and |{gap}| is 0"
    )
    cause, fix = _CAUSES.get(call.bk.name, _CAUSES["torch"])
    message = (
        f"{title(name)} ({name}): the attributions do not add up to {gap} for {int(missed.sum())} of "
        f"{len(delta)} samples ({how}; float rounding alone stays below {COMPLETENESS_TOL:.1%}). Likely "
        f"cause: an operation of the model without a DeepLIFT rule, through which the map is the plain "
        f"gradient: {cause}; or activations so small that |a - a0| < 1e-7, where the multipliers fall "
        f"back to the derivative (a random model whose BatchNorm statistics were never calibrated). Fix: "
        f"{fix}; explain the logits, not a softmax output; return_delta=True gives each sample's delta. "
        "(Shown once per model and method; silence it with warnings.filterwarnings('ignore', "
        "category=xaikit.IncompleteMapWarning).)"
    )
    warn_once(message, IncompleteMapWarning, method=name, model=call.inp.model, status="incomplete")
    return True


def _specs(baseline: Any) -> list[Any]:
    """The baseline of each input as given: one for all, a dict by input name, or a list."""
    if isinstance(baseline, Mapping):
        return list(baseline.values())
    if isinstance(baseline, (list, tuple)) and not all(isinstance(v, (int, float)) for v in baseline):
        return list(baseline)
    return [baseline]


def _check_deeplift(options: dict[str, Any]) -> None:
    if "baseline" in options:
        for spec in _specs(options["baseline"]):
            if isinstance(spec, str) or spec is None:
                check_baseline(spec, FIXED_BASELINES)


def _check_deepliftshap(options: dict[str, Any]) -> None:
    count(options.get("nsamples"), "nsamples")
    value = options.get("baselines")
    if isinstance(value, (str, bytes, Mapping)) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value)
    ):
        raise XaikitTypeError(
            "baselines of deepliftshap must be an array of reference samples (N, ...) shaped like the "
            f"input's samples (a list of them for several inputs), or None (the batch itself); got {describe(value)}"
        )


def _result(call: Call, values: list[np.ndarray], delta: np.ndarray, chunks: list[int]) -> Explained:
    arrays = call.inp.to_user([v.astype(call.inp.dtype) for v in values])
    return Explained(arrays, delta if call.with_delta else None, chunks)


def run_deeplift(call: Call, *, baseline: Any = "zeros") -> Explained:
    """The runner of ``"deeplift"``: attributions with each input's shape, in the caller's
    layout, against one baseline per sample (a fixed baseline name or an array)."""
    _check_deeplift({"baseline": baseline})
    bases = baseline_fn(call.inp, baseline, call.seed)(0)
    index = np.arange(call.batch)[:, None]
    return _result(call, *pair_attributions(call, bases, index))


def run_deepliftshap(call: Call, *, baselines: Any = None, nsamples: int | None = None) -> Explained:
    """The runner of ``"deepliftshap"``: the mean of DeepLIFT against ``nsamples`` references
    per sample, drawn without repeats from the reference set (seeded), or all of them."""
    _check_deepliftshap({"baselines": baselines, "nsamples": nsamples})
    refs = reference_set(call.inp, baselines, "baselines", "deepliftshap")
    n_refs, batch = int(refs[0].shape[0]), call.batch
    k = min(n_refs, DEFAULT_REFERENCES) if nsamples is None else int(nsamples)
    if k > n_refs:
        raise XaikitValueError(
            f"nsamples of deepliftshap must be at most the number of reference samples ({n_refs}): "
            f"each sample is explained against nsamples distinct references; got nsamples={k}. Pass "
            "more references (baselines=) or a smaller nsamples"
        )
    every = np.tile(np.arange(n_refs), (batch, 1))
    if k < n_refs:  # a seeded draw without repeats per sample, independent of the chunking
        every = np.random.default_rng(stream_seed(call.seed, _DRAWS)).permuted(every, axis=1)[:, :k]
    return _result(call, *pair_attributions(call, refs, every))


_SHRIKUMAR = "Shrikumar et al., 2017, https://arxiv.org/abs/1704.02685"
register_method(
    Method(
        "deeplift", "rules", "DeepLIFT", run_deeplift, {"baseline": "zeros"}, aliases=("deep_lift",),
        delta=True, check=_check_deeplift, reference=_SHRIKUMAR, target_objects=True,
        summary="the score's change from a baseline shared out by Rescale multipliers: sums to f(x) - f(baseline)",
    )
)  # fmt: skip
register_method(
    Method(
        "deepliftshap", "rules", "DeepLiftShap", run_deepliftshap, {"baselines": None, "nsamples": None},
        aliases=("deep_lift_shap", "deepshap", "deep_shap"), noise=True, delta=True, check=_check_deepliftshap, target_objects=True,
        reference="Lundberg & Lee, 2017, https://arxiv.org/abs/1705.07874",
        summary="DeepLIFT averaged over reference samples: SHAP values of a network, approximately",
    )
)  # fmt: skip
