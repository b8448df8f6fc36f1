"""Two repairs of the model-parameter randomization test (Hedström et al., "Sanity Checks
Revisited: An Exploration to Repair the Model Parameter Randomisation Test", XAI in Action
workshop, NeurIPS 2023, https://arxiv.org/abs/2401.06465):

* :func:`efficient_mprt` (eMPRT) measures how much more *complex* (higher histogram entropy) a map
  gets when every weight is re-drawn;
* :func:`smooth_mprt` (sMPRT) is the layer-by-layer test of
  :func:`~xaikit.evaluate.randomization_test` on maps averaged over noisy copies of the input, so
  that the noise of gradient maps does not pass for a change.

The weights are re-drawn with the recipe of :func:`~xaikit.evaluate.randomization_test` (each
layer's tensors from a seeded normal with the tensor's own spread) and restored bit for bit
afterwards, also when something fails half-way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from xaikit.checks import check_choice, check_int, check_number
from xaikit.errors import XaikitValueError, describe
from xaikit.evaluate._common import PerSample, classes_of, host, input_layout, spatial_shape, tile_object
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate._rerun import explain_rows, randomized_maps, start, tile_kwargs
from xaikit.evaluate.randomization import layer_rng, select_layers, similarity_tables
from xaikit.xai.internal import pin, prepare

__all__ = [
    "LAYER_ORDERS",
    "EfficientMPRTResult",
    "SmoothMPRTResult",
    "complexity_rise",
    "discrete_entropy",
    "efficient_mprt",
    "smooth_mprt",
]

#: layer orders of :func:`smooth_mprt`
LAYER_ORDERS = ("bottom_up", "top_down", "independent")

#: the positional parameters of the MPRT variants before the options became keyword-only
_OLD_ORDER = ("model", "x", "method", "target")


@dataclass
class EfficientMPRTResult(PerSample):
    """What :func:`efficient_mprt` measured. Higher scores are better: the map got more complex
    (noisier) when the model was destroyed, so it depended on the trained weights.

    Attributes:
        scores: (B,) the relative rise of the complexity, ``(H_random - H_original) / H_original``
            (NaN where ``H_original`` is 0: a map that is one constant).
        complexity_original: (B,) the discrete entropy of each original map.
        complexity_randomized: (B,) the discrete entropy of each map of the fully randomized model.
        targets: (B,) the explained classes (-1 for a target object).
        layers: the layers re-drawn.
        n_bins: bins of the histograms.
        maps: raw attributions, ``{"original": ..., "randomized": ...}``.
        method: the saliency method.
    """

    scores: np.ndarray
    complexity_original: np.ndarray
    complexity_randomized: np.ndarray
    targets: np.ndarray
    layers: list[str]
    n_bins: int
    maps: dict[str, np.ndarray] = field(repr=False)
    method: str = "vanilla"

    @property
    def ratio(self) -> np.ndarray:
        """(B,) ``H_random / H_original`` (= ``scores + 1``; 1 = unchanged complexity)."""
        return self.scores + 1.0


@dataclass
class SmoothMPRTResult(PerSample):
    """What :func:`smooth_mprt` measured. Lower scores are better: the denoised map of the
    randomized model no longer resembles the original one.

    Attributes:
        scores: (B,) the Spearman rank correlation of the absolute denoised maps of the last
            step (every chosen layer re-drawn in the cascading orders) with the original ones.
        table: a pandas DataFrame, one row per step (``step``, ``layer``, ``spearman_abs``,
            ``spearman``, ``ssim``: means over samples), as in
            :func:`~xaikit.evaluate.randomization_test`.
        per_sample: the same per sample (long format).
        maps: the denoised maps, ``{"original": ..., "<layer>": ...}`` in step order.
        targets: (B,) the explained classes (-1 for a target object).
        order: the layer order.
        nsamples: noisy copies averaged per map (the last one noise-free).
        stdev_spread: the noise's standard deviation as a fraction of each sample's value range.
        method: the saliency method.
    """

    scores: np.ndarray
    table: Any
    per_sample: Any
    maps: dict[str, np.ndarray] = field(repr=False)
    targets: np.ndarray = field(repr=False)
    order: str = "bottom_up"
    nsamples: int = 50
    stdev_spread: float = 0.1
    method: str = "vanilla"


def discrete_entropy(maps: Any, n_bins: int = 100) -> np.ndarray:
    """The entropy (natural log) of the histogram of each map's values, (B,).

    Each map (all its values, channels included, as given) is binned into ``n_bins`` equal bins
    between its minimum and maximum; ``H = -sum_k p_k log p_k`` over the bins' fractions ``p_k``.
    A constant map has entropy 0. This is the complexity of :func:`efficient_mprt` (Quantus's
    ``discrete_entropy`` with its default 100 bins).

    Example:
        >>> discrete_entropy(np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]]), n_bins=4).round(4).tolist()
        [1.3863, 0.0]
    """
    n_bins = check_int(n_bins, "n_bins", 1)
    arr = host(maps, "maps").astype(np.float64)
    if arr.ndim < 2 or arr.shape[0] == 0:
        raise XaikitValueError(f"maps must be a batch (B, ...) of maps; got {describe(maps)}")
    if not np.all(np.isfinite(arr)):
        raise XaikitValueError("maps hold NaN or infinite values")
    flat = arr.reshape(arr.shape[0], -1)
    out = np.zeros(flat.shape[0])
    for i, row in enumerate(flat):
        counts, _ = np.histogram(row, bins=n_bins)
        p = counts[counts > 0] / counts.sum()
        out[i] = 0.0 - float((p * np.log(p)).sum())  # 0.0, not -0.0, for a constant map
    return out


def complexity_rise(
    original: np.ndarray, randomized: np.ndarray, n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, H_original, H_randomized)`` of eMPRT from the two map batches: the relative
    rise of the :func:`discrete_entropy` (NaN where the original map's entropy is 0)."""
    entropy_original = discrete_entropy(original, n_bins)
    entropy_randomized = discrete_entropy(randomized, n_bins)
    safe = np.where(entropy_original > 0, entropy_original, 1.0)
    scores = np.where(entropy_original > 0, (entropy_randomized - entropy_original) / safe, np.nan)
    return scores, entropy_original, entropy_randomized


@public(old_order=_OLD_ORDER)
def efficient_mprt(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    n_bins: int = 100,
    layers: Sequence[str] | None = None,
    **run: Unpack[RunOptions],
) -> EfficientMPRTResult:
    """The efficient model-parameter randomization test (eMPRT): how much more complex does each
    map get when every layer's weights are re-drawn? Higher is better.

    Per sample, ``score = (H(a_random) - H(a)) / H(a)``, with ``H`` the :func:`discrete_entropy`
    of the map's histogram (``n_bins`` bins), ``a`` the map of the trained model and ``a_random``
    the map of the model with every chosen layer re-drawn at once (Quantus's ``EfficientMPRT``
    defaults: its bottom-up cascade with ``skip_layers=True`` compares only the fully randomized
    model, and ``n_bins`` is 100 when no bin rule is given). The targets are the trained model's,
    for both maps.

    Args:
        model: a torch or Keras model (weights changed in place during the test and restored
            exactly afterwards, also on errors).
        x: the samples to explain (numpy or tensor, the model's layout).
        method: any method name :func:`xaikit.xai.explain` accepts.
        target: classes to explain (None = the trained model's predictions on x).
        n_bins: bins of each map's histogram.
        layers: the layers to re-draw (default every layer with weights; see
            :func:`~xaikit.evaluate.model_layers`).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws the
            new weights (:func:`~xaikit.evaluate.randomization_test`'s recipe: the same layer
            gets the same weights as there).

    Returns:
        An :class:`EfficientMPRTResult` (``.scores``, ``.ratio``, the two complexities).

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> r = efficient_mprt(model, torch.rand(2, 1, 8, 8), "vanilla", n_bins=10)
        >>> r.scores.shape, r.layers
        ((2,), ['1', '3'])
    """
    n_bins = check_int(n_bins, "n_bins", 1)
    bk, rerun, targets, _ = start(model, x, method, target=target, run=RunSettings.of(run))
    original = explain_rows(model, x, targets, rerun)
    randomized, chosen = randomized_maps(bk, model, x, targets, rerun, layers=layers)
    scores, entropy_original, entropy_randomized = complexity_rise(original, randomized, n_bins)
    return EfficientMPRTResult(
        scores, entropy_original, entropy_randomized, classes_of(targets, len(original)), chosen, n_bins,
        {"original": original, "randomized": randomized}, rerun.method,
    )  # fmt: skip


def _noisy_copies(x_host: np.ndarray, nsamples: int, stdev_spread: float, seed: int) -> np.ndarray:
    """``nsamples`` stacked copies of the batch (copy-major, (nsamples * B, ...)): Gaussian noise of
    standard deviation ``stdev_spread * (max - min)`` of each sample, the last copy noise-free."""
    batch = x_host.shape[0]
    axes = tuple(range(1, x_host.ndim))
    span = x_host.max(axis=axes, keepdims=True) - x_host.min(axis=axes, keepdims=True)
    rng = np.random.default_rng([int(seed) % (2**63), 7])
    dtype = x_host.dtype if x_host.dtype.kind == "f" else np.dtype(np.float32)
    eps = rng.standard_normal((nsamples - 1, *x_host.shape), dtype=np.float32)
    rows = np.empty((nsamples, *x_host.shape), dtype=dtype)
    rows[:-1] = x_host[None] + eps * (stdev_spread * span)[None].astype(np.float32)
    rows[-1] = x_host
    return rows.reshape(nsamples * batch, *x_host.shape[1:])


@public(renamed={"noise": "stdev_spread"}, old_order=_OLD_ORDER)
def smooth_mprt(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 50,
    stdev_spread: float = 0.1,
    order: str = "bottom_up",
    layers: Sequence[str] | None = None,
    **run: Unpack[RunOptions],
) -> SmoothMPRTResult:
    """The smooth model-parameter randomization test (sMPRT): the layer-by-layer randomization
    test on *denoised* maps, each the mean of the maps of ``nsamples`` noisy copies of the input.
    Lower is better.

    A map is ``mean_n explain(x + eps_n)`` with ``eps_n`` Gaussian of standard deviation
    ``stdev_spread * (max(x) - min(x))`` per sample and the last copy noise-free (Quantus's
    ``SmoothMPRT``); all copies of a step go to one call of :func:`xaikit.xai.explain`
    (``nsamples * B`` rows), and the same noise is used at every step, so that the steps differ
    by the weights only. After each step the denoised map is compared with the original
    denoised map like :func:`~xaikit.evaluate.randomization_test` does (Spearman of the
    absolute and of the signed maps, SSIM of the display masks).

    Args:
        model: a torch or Keras model (weights changed in place during the test and restored
            exactly afterwards, also on errors).
        x: the samples to explain (numpy or tensor, the model's layout).
        method: any method name :func:`xaikit.xai.explain` accepts.
        target: classes to explain (None = the trained model's predictions on x, at every step).
        nsamples: copies averaged per map (at least 1; 1 = the plain map).
        stdev_spread: the noise's standard deviation as a fraction of each sample's value range
            (SmoothGrad's ``stdev_spread``; Quantus's ``noise_magnitude``).
        order: ``"bottom_up"`` (default, as Quantus and the paper: cascading from the
            input side), ``"top_down"`` (cascading from the output layer, the ``"cascading"``
            order of :func:`~xaikit.evaluate.randomization_test`) or ``"independent"`` (one layer
            at a time, the others trained).
        layers: the layers to re-draw (default every layer with weights).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws the
            new weights (same recipe as :func:`~xaikit.evaluate.randomization_test`) and the
            input noise.

    Returns:
        A :class:`SmoothMPRTResult`: ``.table`` per step, ``.scores`` the Spearman (absolute
        maps) of the last step per sample.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> r = smooth_mprt(model, torch.rand(2, 1, 8, 8), "vanilla", nsamples=4)
        >>> r.table["layer"].tolist(), r.scores.shape
        (['1', '3'], (2,))
    """
    nsamples = check_int(nsamples, "nsamples", 1)
    stdev_spread = check_number(stdev_spread, "stdev_spread", 0.0)
    check_choice(order, "order", LAYER_ORDERS)
    bk, rerun, targets, _ = start(model, x, method, target=target, run=RunSettings.of(run))
    shape, channel_axis = input_layout(x, bk)
    batch = shape[0]
    ops = bk.eval
    available = ops.weighted_layers(model)
    chosen = select_layers(available, layers)
    index = {name: i for i, (name, _) in enumerate(available)}
    rows = _noisy_copies(host(x, "x"), nsamples, float(stdev_spread), rerun.seed)
    if isinstance(targets, np.ndarray):
        tiled: Any = np.tile(targets, nsamples)
    else:  # a target object, resolved on the clean batch and stacked for the noisy copies
        inp = prepare(bk, model, [x], ["x"], model_kwargs=rerun.model_kwargs)
        with bk.inference(model):
            spec = pin(inp, target, rerun.output, objects=True).spec
        tiled = tile_object(target, spec, nsamples)
    tiled_run = replace(rerun, model_kwargs=tile_kwargs(rerun.model_kwargs, nsamples, batch))

    def mean_maps() -> np.ndarray:
        out = explain_rows(model, rows, tiled, tiled_run)
        return out.reshape(nsamples, batch, *out.shape[1:]).mean(axis=0, dtype=np.float64)

    steps = chosen if order == "bottom_up" else list(reversed(chosen))
    saved = ops.snapshot(model)
    maps: dict[str, np.ndarray] = {}
    try:
        maps["original"] = mean_maps()
        for name, layer in steps:
            if order == "independent":
                ops.restore(saved)
            ops.randomize(layer, layer_rng(rerun.seed, index[name]))
            maps[name] = mean_maps()
    finally:
        ops.restore(saved)
    channels = shape[channel_axis] if channel_axis is not None else None
    table, per_sample = similarity_tables(
        maps, spatial_shape(shape, channel_axis), batch, channels, channel_axis
    )
    last = per_sample[per_sample["step"] == len(steps)]["spearman_abs"].to_numpy(dtype=np.float64)
    return SmoothMPRTResult(
        last,
        table,
        per_sample,
        maps,
        classes_of(targets, batch),
        order,
        nsamples,
        float(stdev_spread),
        rerun.method,
    )
