"""More randomization checks beside :func:`~xaikit.evaluate.randomization_test`: the random-logit
test and the efficient and smooth model-parameter randomization tests.

* :func:`random_logit` (Sixt et al., "When Explanations Lie: Why Many Modified BP Attributions
  Fail", ICML 2020, https://arxiv.org/abs/1912.09818): explain each sample for its target class
  and for a randomly drawn *other* class; an explanation of the model's decision should change
  with the class (low similarity is better).
* :func:`efficient_mprt` and :func:`smooth_mprt` (Hedström et al., "Sanity Checks Revisited: An
  Exploration to Repair the Model Parameter Randomisation Test", XAI in Action workshop,
  NeurIPS 2023, https://arxiv.org/abs/2401.06465): eMPRT measures how much more *complex*
  (higher histogram entropy) a map gets when every weight is re-drawn; sMPRT is the layer-by-layer
  test of :func:`~xaikit.evaluate.randomization_test` on maps averaged over noisy copies of the
  input, so that the noise of gradient maps does not pass for a change.

The weights are re-drawn with the recipe of :func:`~xaikit.evaluate.randomization_test` (each
layer's tensors from a seeded normal with the tensor's own spread) and restored bit for bit
afterwards, also when something fails half-way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Backend, get_backend
from xaikit.backend.outputs import check_output
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    check_method_options,
    host,
    input_layout,
    spatial_shape,
    spearman,
    ssim,
    to_spatial,
)
from xaikit.evaluate.randomization import _display_maps, _select, layer_rng, similarity_tables
from xaikit.xai.internal import check_max_batch, health, pin, prepare
from xaikit.xai.registry import canonical

__all__ = [
    "LAYER_ORDERS",
    "SIMILARITIES",
    "EfficientMPRTResult",
    "RandomLogitResult",
    "SmoothMPRTResult",
    "discrete_entropy",
    "efficient_mprt",
    "other_classes",
    "quantus_ssim",
    "random_logit",
    "smooth_mprt",
]

#: similarity names of :func:`random_logit` (a callable is accepted too)
SIMILARITIES = ("ssim", "spearman", "quantus")
#: layer orders of :func:`smooth_mprt`
LAYER_ORDERS = ("bottom_up", "top_down", "independent")

#: what these metrics set themselves, and the argument to use instead
_RESERVED = {
    "target": "the target argument",
    "method": "the method argument",
    "output": "the output argument",
    "model_kwargs": "the model_kwargs argument",
    "framework": "the framework argument",
    "seed": "the seed argument",
    "max_batch": "the max_batch argument",
}


@dataclass
class RandomLogitResult:
    """What :func:`random_logit` measured. Lower scores are better: the explanation of the
    target class differs from that of another class.

    Attributes:
        scores: (B,) the similarity of the map of each sample's target class to the map of its
            random other class (float64).
        targets: (B,) the explained classes.
        others: (B,) the random other classes (never equal to ``targets``).
        maps: the raw attributions for ``targets``.
        maps_other: the raw attributions for ``others``.
        similarity: the similarity's name (``"ssim"``, ``"spearman"``, ``"quantus"`` or the callable's name).
        method: the saliency method.
    """

    scores: np.ndarray
    targets: np.ndarray
    others: np.ndarray
    maps: np.ndarray = field(repr=False)
    maps_other: np.ndarray = field(repr=False)
    similarity: str = "ssim"
    method: str = "vanilla"

    @property
    def mean(self) -> float:
        """The mean score over samples (NaN scores left out; NaN if all are)."""
        return _nanmean(self.scores)


@dataclass
class EfficientMPRTResult:
    """What :func:`efficient_mprt` measured. Higher scores are better: the map got more complex
    (noisier) when the model was destroyed, so it depended on the trained weights.

    Attributes:
        scores: (B,) the relative rise of the complexity, ``(H_random - H_original) / H_original``
            (NaN where ``H_original`` is 0: a map that is one constant).
        complexity_original: (B,) the discrete entropy of each original map.
        complexity_randomized: (B,) the discrete entropy of each map of the fully randomized model.
        targets: (B,) the explained classes.
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

    @property
    def mean(self) -> float:
        """The mean score over samples (NaN scores left out; NaN if all are)."""
        return _nanmean(self.scores)


@dataclass
class SmoothMPRTResult:
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
        targets: (B,) the explained classes.
        order: the layer order.
        nsamples: noisy copies averaged per map (the last one noise-free).
        noise: the noise's standard deviation as a fraction of each sample's value range.
        method: the saliency method.
    """

    scores: np.ndarray
    table: Any
    per_sample: Any
    maps: dict[str, np.ndarray] = field(repr=False)
    targets: np.ndarray = field(repr=False)
    order: str = "bottom_up"
    nsamples: int = 50
    noise: float = 0.1
    method: str = "vanilla"

    @property
    def mean(self) -> float:
        """The mean score over samples (NaN scores left out; NaN if all are)."""
        return _nanmean(self.scores)


def _nanmean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


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


def _setup(
    model: Any, x: Any, method: Any, target: Any, framework: str | None, output: Any,
    model_kwargs: dict[str, Any] | None, method_options: Any, max_batch: Any, seed: Any,
) -> tuple[Backend, str, dict[str, Any], np.ndarray, int]:  # fmt: skip
    """Checked arguments: ``(backend, method, options, targets, class count)``."""
    if not isinstance(method, str):
        raise XaikitTypeError(f"method must be a method name such as 'vanilla'; got {describe(method)}")
    method = canonical(method)
    check_int(seed, "seed", 0)
    check_max_batch(max_batch)
    output = check_output(output)
    options = check_method_options(method_options, _RESERVED)
    bk = get_backend(model, framework)
    input_layout(x, bk)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=model_kwargs)
    with bk.inference(model):  # given classes: one row tells the class count
        pinned = pin(inp, target, output, predict=False)
    return bk, method, options, pinned.host_targets(bk), int(pinned.n_classes or 1)  # type: ignore[return-value]


def _explain(
    model: Any, x: Any, targets: np.ndarray, method: str, framework: str | None, seed: int,
    max_batch: Any, output: Any, model_kwargs: dict[str, Any] | None, options: dict[str, Any],
) -> np.ndarray:  # fmt: skip
    from xaikit.xai.internal import explain

    kwargs = {"output": output, **options}
    if model_kwargs:
        kwargs["model_kwargs"] = model_kwargs
    return np.asarray(
        explain(
            model, x, target=targets, method=method, framework=framework, seed=seed,
            max_batch=max_batch, **kwargs,
        )
    )  # fmt: skip


def _randomized(
    bk: Backend, model: Any, x: Any, layers: Any, targets: np.ndarray, method: str, framework: str | None,
    seed: int, max_batch: Any, output: Any, model_kwargs: dict[str, Any] | None, options: dict[str, Any],
    noise_seed: int | None = None,
) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """The maps of the model with ``layers`` (None: every layer with weights) re-drawn, each by
    :func:`~xaikit.evaluate.randomization.layer_rng` (the recipe of every randomization check),
    and the names of those layers; the weights are restored bit for bit afterwards. ``seed``
    draws the weights and, unless ``noise_seed`` is given, the method's noise."""
    ops = bk.eval
    available = ops.weighted_layers(model)
    chosen = _select(available, layers)
    index = {name: i for i, (name, _) in enumerate(available)}
    saved = ops.snapshot(model)
    try:
        for name, layer in chosen:  # every layer's draw is its own, so the order is moot
            ops.randomize(layer, layer_rng(seed, index[name]))
        noise = seed if noise_seed is None else noise_seed
        with health.deferred():  # a randomized model's degenerate maps are not the user's model's
            maps = _explain(
                model, x, targets, method, framework, noise, max_batch, output, model_kwargs, options
            )
    finally:
        ops.restore(saved)
    return maps, [n for n, _ in chosen]


def _tile_rows(value: Any, copies: int, batch: int) -> Any:
    """``copies`` stacked copies of a per-sample value (first axis = ``batch``); anything else as is."""
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) == 0 or int(shape[0]) != batch:
        return value
    arr = host(value, "model_kwargs value")
    return np.concatenate([arr] * copies, axis=0)


def _tile_kwargs(model_kwargs: dict[str, Any] | None, copies: int, batch: int) -> dict[str, Any] | None:
    if not model_kwargs:
        return model_kwargs
    return {k: _tile_rows(v, copies, batch) for k, v in model_kwargs.items()}


def other_classes(targets: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """A random class per sample, uniform over the ``num_classes - 1`` classes other than its
    target: index ``k`` drawn by ``numpy.random.RandomState(seed).randint(0, num_classes - 1, B)``
    among the other classes in increasing order (the draw of Quantus's ``RandomLogit`` with the
    same seed, for batches of at most its ``batch_size``).

    Example:
        >>> other_classes(np.array([0, 1, 2, 2]), 3, seed=0).tolist()
        [1, 2, 1, 0]
    """
    targets = np.asarray(targets, dtype=np.int64)
    k = np.random.RandomState(int(seed)).randint(0, num_classes - 1, size=targets.shape[0])
    return (k + (k >= targets)).astype(np.int64)


def random_logit(
    model: Any,
    x: Any,
    method: str,
    target: Any = None,
    *,
    num_classes: int | None = None,
    similarity: str | Callable[[np.ndarray, np.ndarray], Any] = "ssim",
    seed: int = 0,
    max_batch: int | str = "auto",
    output: int | str = 0,
    model_kwargs: dict[str, Any] | None = None,
    framework: str | None = None,
    method_options: dict[str, Any] | None = None,
) -> RandomLogitResult:
    """The random-logit test: how similar is the map of the target class to the map of a random
    other class? Lower is better.

    Both maps come from one call of :func:`xaikit.xai.explain` on the batch stacked twice (2B
    rows: the targets, then the other classes).

    Args:
        model: a torch or Keras model returning (batch, classes).
        x: the samples to explain (numpy or tensor, the model's layout).
        method: any method name :func:`xaikit.xai.explain` accepts (``"vanilla"``,
            ``"integrated"``, ``"gradcam"``, ...).
        target: classes to explain (None = the model's predictions on x).
        num_classes: the other class is drawn from classes ``0 .. num_classes - 1`` (default:
            all the model's classes); every target must be below it.
        similarity: ``"ssim"`` (default): a 2-D SSIM of the display masks (absolute maps summed
            over channels, scaled per sample to [0, 1] at the 99th percentile, a 7 x 7 window),
            as :func:`~xaikit.evaluate.randomization_test`; ``"spearman"``: Spearman rank
            correlation of the absolute maps (channels summed); ``"quantus"``: Quantus's
            ``RandomLogit`` default, a 1-D SSIM of the flattened *signed* maps, each batch
            divided by its largest magnitude (so a sample's score depends on the batch; see
            ``docs/evaluate.md`` for the numbers each gives). Or a callable
            ``f(maps, maps_other) -> (B,)`` on the raw maps.
        seed: seed of the other classes (see :func:`other_classes`) and of the method's noise.
        max_batch: rows per fused chunk of the method.
        output: which model output to explain when the model returns several.
        model_kwargs: extra keyword arguments of the model's forward call (per-sample arrays are
            stacked twice with the batch).
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        method_options: options of the method (``nsamples``, ``baseline``, ``layer``, ...).

    Returns:
        A :class:`RandomLogitResult` (``.scores`` per sample, ``.mean``, ``.others``).

    Raises:
        XaikitValueError: a model with fewer than 2 classes, a bad ``num_classes`` or
            ``similarity``.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
        >>> r = random_logit(model, torch.rand(3, 1, 8, 8), "vanilla", similarity="spearman")
        >>> r.scores.shape, bool((r.others != r.targets).all())
        ((3,), True)
    """
    if not (callable(similarity) or (isinstance(similarity, str) and similarity in SIMILARITIES)):
        raise XaikitValueError(
            f"similarity must be one of {', '.join(map(repr, SIMILARITIES))} or a callable "
            f"f(maps, maps_other) -> (B,); got {similarity!r}"
            if isinstance(similarity, str)
            else f"similarity must be one of {', '.join(map(repr, SIMILARITIES))} or a callable; "
            f"got {describe(similarity)}"
        )
    bk, method, options, targets, n_classes = _setup(
        model, x, method, target, framework, output, model_kwargs, method_options, max_batch, seed
    )
    if n_classes < 2:
        raise XaikitValueError(
            f"random_logit needs a model with at least 2 classes; the model returns {n_classes} score per row"
        )
    if num_classes is None:
        num_classes = n_classes
    num_classes = check_int(num_classes, "num_classes", 2)
    if num_classes > n_classes:
        raise XaikitValueError(
            f"num_classes must be at most the model's {n_classes} classes; got {num_classes}"
        )
    if targets.max() >= num_classes:
        raise XaikitValueError(
            f"num_classes must be above every target class (the other class is drawn from the rest); "
            f"got num_classes={num_classes} and target {int(targets.max())}"
        )
    others = other_classes(targets, num_classes, seed)
    shape, caxis = input_layout(x, bk)
    batch = shape[0]
    x_host = host(x, "x")
    both = _explain(
        model, np.concatenate([x_host, x_host]), np.concatenate([targets, others]), method, framework,
        seed, max_batch, output, _tile_kwargs(model_kwargs, 2, batch), options,
    )  # fmt: skip
    maps, maps_other = both[:batch], both[batch:]
    name, scores = _similarity(similarity, maps, maps_other, shape, caxis)
    return RandomLogitResult(scores, targets, others, maps, maps_other, name, method)


def _similarity(
    similarity: Any, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...], caxis: int | None
) -> tuple[str, np.ndarray]:
    batch = shape[0]
    if callable(similarity):
        out = np.asarray(host(similarity(a, b), "similarity's result"), dtype=np.float64).reshape(-1)
        if out.shape != (batch,):
            raise XaikitValueError(
                f"similarity must return one value per sample, shape ({batch},); got shape {out.shape}"
            )
        return getattr(similarity, "__name__", "custom"), out
    if similarity == "ssim":
        return "ssim", ssim(_display_maps(a, caxis), _display_maps(b, caxis))
    if similarity == "quantus":
        return "quantus", quantus_ssim(a, b)
    spatial = spatial_shape(shape, caxis)
    channels = shape[caxis] if caxis is not None else None
    return "spearman", spearman(
        to_spatial(a, spatial, batch, channels=channels), to_spatial(b, spatial, batch, channels=channels)
    )


def quantus_ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quantus 0.6's ``RandomLogit`` similarity (its defaults ``normalise=True``,
    ``similarity_func=ssim``): each of the two batches divided by its own largest |value|, then
    per sample scikit-image's SSIM of the two flattened maps (channels included, a 7-value window
    that runs across row ends), with the pair's max - min as the data range. (B,) float64.

    Example:
        >>> x = np.random.default_rng(0).normal(size=(2, 1, 8, 8))
        >>> quantus_ssim(x, 3 * x).round(6).tolist()  # the same maps up to scale
        [1.0, 1.0]
    """
    from skimage.metrics import structural_similarity

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    out = np.full(a.shape[0], np.nan)
    top_a, top_b = float(np.abs(a).max()), float(np.abs(b).max())
    if top_a == 0 or top_b == 0:
        return out
    flat_a, flat_b = (a / top_a).reshape(len(a), -1), (b / top_b).reshape(len(b), -1)
    if flat_a.shape[1] < 7:
        return out
    for i, (u, v) in enumerate(zip(flat_a, flat_b)):
        span = float(max(u.max(), v.max()) - min(u.min(), v.min()))
        out[i] = structural_similarity(u, v, data_range=span) if span > 0 else 1.0
    return out


def _complexities(
    original: np.ndarray, randomized: np.ndarray, n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, H_original, H_randomized)`` of eMPRT from the two map batches."""
    h0, h1 = discrete_entropy(original, n_bins), discrete_entropy(randomized, n_bins)
    safe = np.where(h0 > 0, h0, 1.0)
    scores = np.where(h0 > 0, (h1 - h0) / safe, np.nan)
    return scores, h0, h1


def efficient_mprt(
    model: Any,
    x: Any,
    method: str,
    target: Any = None,
    *,
    n_bins: int = 100,
    layers: list[str] | None = None,
    seed: int = 0,
    max_batch: int | str = "auto",
    output: int | str = 0,
    model_kwargs: dict[str, Any] | None = None,
    framework: str | None = None,
    method_options: dict[str, Any] | None = None,
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
        seed: seed of the new weights (:func:`~xaikit.evaluate.randomization_test`'s recipe: the
            same layer gets the same weights as there) and of the method's noise.
        max_batch: rows per fused chunk of the method.
        output: which model output to explain when the model returns several.
        model_kwargs: extra keyword arguments of the model's forward call.
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        method_options: options of the method (``nsamples``, ``baseline``, ``layer``, ...).

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
    bk, method, options, targets, _ = _setup(
        model, x, method, target, framework, output, model_kwargs, method_options, max_batch, seed
    )
    args = (targets, method, framework, seed, max_batch, output, model_kwargs, options)
    original = _explain(model, x, *args)
    randomized, chosen = _randomized(bk, model, x, layers, *args)
    scores, h0, h1 = _complexities(original, randomized, n_bins)
    return EfficientMPRTResult(
        scores, h0, h1, targets, chosen, n_bins,
        {"original": original, "randomized": randomized}, method,
    )  # fmt: skip


def _noisy_copies(x_host: np.ndarray, nsamples: int, noise: float, seed: int) -> np.ndarray:
    """``nsamples`` stacked copies of the batch (copy-major, (nsamples * B, ...)): Gaussian noise of
    standard deviation ``noise * (max - min)`` of each sample, the last copy noise-free."""
    batch = x_host.shape[0]
    axes = tuple(range(1, x_host.ndim))
    span = x_host.max(axis=axes, keepdims=True) - x_host.min(axis=axes, keepdims=True)
    rng = np.random.default_rng([int(seed) % (2**63), 7])
    dtype = x_host.dtype if x_host.dtype.kind == "f" else np.dtype(np.float32)
    eps = rng.standard_normal((nsamples - 1, *x_host.shape), dtype=np.float32)
    rows = np.empty((nsamples, *x_host.shape), dtype=dtype)
    rows[:-1] = x_host[None] + eps * (noise * span)[None].astype(np.float32)
    rows[-1] = x_host
    return rows.reshape(nsamples * batch, *x_host.shape[1:])


def smooth_mprt(
    model: Any,
    x: Any,
    method: str,
    target: Any = None,
    *,
    nsamples: int = 50,
    noise: float = 0.1,
    layer_order: str = "bottom_up",
    layers: list[str] | None = None,
    seed: int = 0,
    max_batch: int | str = "auto",
    output: int | str = 0,
    model_kwargs: dict[str, Any] | None = None,
    framework: str | None = None,
    method_options: dict[str, Any] | None = None,
) -> SmoothMPRTResult:
    """The smooth model-parameter randomization test (sMPRT): the layer-by-layer randomization
    test on *denoised* maps, each the mean of the maps of ``nsamples`` noisy copies of the input.
    Lower is better.

    A map is ``mean_n explain(x + eps_n)`` with ``eps_n`` Gaussian of standard deviation
    ``noise * (max(x) - min(x))`` per sample and the last copy noise-free (Quantus's
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
        noise: the noise's standard deviation as a fraction of each sample's value range.
        layer_order: ``"bottom_up"`` (default, as Quantus and the paper: cascading from the
            input side), ``"top_down"`` (cascading from the output layer, the ``"cascading"``
            order of :func:`~xaikit.evaluate.randomization_test`) or ``"independent"`` (one layer
            at a time, the others trained).
        layers: the layers to re-draw (default every layer with weights).
        seed: seed of the new weights (same recipe as
            :func:`~xaikit.evaluate.randomization_test`), of the input noise and of the method's
            own noise.
        max_batch: rows per fused chunk of the method.
        output: which model output to explain when the model returns several.
        model_kwargs: extra keyword arguments of the model's forward call.
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        method_options: options of the method.

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
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not np.isfinite(noise) or noise < 0:
        raise XaikitValueError(f"noise must be a finite number >= 0; got {describe(noise)}")
    if layer_order not in LAYER_ORDERS:
        raise XaikitValueError(
            f"layer_order must be one of {', '.join(map(repr, LAYER_ORDERS))}; got {layer_order!r}"
        )
    bk, method, options, targets, _ = _setup(
        model, x, method, target, framework, output, model_kwargs, method_options, max_batch, seed
    )
    shape, caxis = input_layout(x, bk)
    batch = shape[0]
    ops = bk.eval
    available = ops.weighted_layers(model)
    chosen = _select(available, layers)
    index = {name: i for i, (name, _) in enumerate(available)}
    rows = _noisy_copies(host(x, "x"), nsamples, float(noise), seed)
    tiled = np.tile(targets, nsamples)
    kwargs = _tile_kwargs(model_kwargs, nsamples, batch)

    def run() -> np.ndarray:
        out = _explain(model, rows, tiled, method, framework, seed, max_batch, output, kwargs, options)
        return out.reshape(nsamples, batch, *out.shape[1:]).mean(axis=0, dtype=np.float64)

    steps = chosen if layer_order == "bottom_up" else list(reversed(chosen))
    saved = ops.snapshot(model)
    maps: dict[str, np.ndarray] = {}
    try:
        maps["original"] = run()
        for name, layer in steps:
            if layer_order == "independent":
                ops.restore(saved)
            ops.randomize(layer, layer_rng(seed, index[name]))
            maps[name] = run()
    finally:
        ops.restore(saved)
    channels = shape[caxis] if caxis is not None else None
    table, per_sample = similarity_tables(maps, spatial_shape(shape, caxis), batch, channels, caxis)
    last = per_sample[per_sample["step"] == len(steps)]["spearman_abs"].to_numpy(dtype=np.float64)
    return SmoothMPRTResult(
        last, table, per_sample, maps, targets, layer_order, nsamples, float(noise), method
    )
