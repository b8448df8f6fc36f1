"""Class-activation maps: a weighted sum of one layer's activation maps.

For a layer with activations ``A`` (B, C, h, w) and the gradient ``dA = d y_t / d A`` of the
target score ``y_t`` (the model's output for the target class, before any softmax the user did
not put in the model), every method is ``relu(sum_c w_c * A_c)`` or a pixel-wise variant:

* Grad-CAM — Selvaraju et al., 2017, https://arxiv.org/abs/1610.02391:
  ``w_c = mean_ij dA_cij``.
* HiResCAM — Draelos & Carin, 2020, https://arxiv.org/abs/2011.08891:
  ``relu(sum_c dA_c * A_c)`` (pixel-wise).
* XGrad-CAM — Fu et al., 2020, https://arxiv.org/abs/2008.02312:
  ``w_c = sum_ij dA_cij * A_cij / (sum_ij A_cij + 1e-7)``.
* Grad-CAM++ — Chattopadhyay et al., 2018, https://arxiv.org/abs/1710.11063, in the closed
  form for an exponential output (the one pytorch-grad-cam uses):
  ``alpha = dA^2 / (2 dA^2 + sum_ij A_c * dA^3 + 1e-6)`` (0 where dA = 0),
  ``w_c = sum_ij alpha_cij * relu(dA_cij)``.
* LayerCAM — Jiang et al., 2021, https://doi.org/10.1109/TIP.2021.3089943:
  ``relu(sum_c relu(dA_c) * A_c)`` (pixel-wise).
* Eigen-CAM — Muhammad & Yeasin, 2020, https://arxiv.org/abs/2008.00299: the projection of
  the (h*w, C) activations, centred per channel, on their first right-singular vector (no
  gradient, no target); the sign is chosen so that the map correlates positively with the
  channel-mean activation (an SVD's sign is arbitrary).
* Score-CAM — Wang et al., 2020, https://arxiv.org/abs/1910.01279: ``w = softmax_c(y_t(x * M_c))``
  with ``M_c`` the activation map ``A_c`` upsampled to the input (bilinear, corners aligned, as
  pytorch-grad-cam does) and scaled to [0, 1]; B x C masked forward passes, chunked.

The backend facet (``bk.cam``) runs the fused forward+backward of a chunk of rows and returns
``A`` and ``dA`` channel-first for both frameworks; the formulas here run on the host in
float64 on those (B, C, h, w) layer tensors, which are small next to the inputs. The map at the
input's size is the layer map upsampled bilinearly with half-pixel centres
(``align_corners=False``, as ``torch.nn.functional.interpolate(mode="bilinear")`` and captum's
``LayerAttribution.interpolate`` do), without any normalization.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from xaikit.backend import T
from xaikit.backend.facets import CamLayer
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine import (
    DEFAULT_BUDGET,
    _padded_rows,
    check_max_batch,
    chunk_error,
    default_rows,
    forward_rows,
)
from xaikit.xai._progress import for_method
from xaikit.xai.methods import Inputs, call_error
from xaikit.xai.registry import Call, Explained, Method, all_methods, get_method, register_method

__all__ = [
    "CamResult",
    "cam_maps",
    "combine",
    "eigen_components",
    "eigen_projection",
    "find_layer",
    "guided_backprop",
    "guided_gradcam",
    "layer_activations",
    "to_chw",
    "token_grid",
    "upsample",
]

logger = logging.getLogger(__name__)


class CamResult(NamedTuple):
    """A layer-resolution class-activation map (B, h, w) and the name of its layer."""

    maps: np.ndarray
    layer: str


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0)


def _gradcam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    w = g.mean(axis=(2, 3), keepdims=True)
    return _relu((w * a).sum(axis=1))


def _hirescam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    return _relu((g * a).sum(axis=1))


def _layercam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    return _relu((_relu(g) * a).sum(axis=1))


def _xgradcam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    w = (g * a).sum(axis=(2, 3), keepdims=True) / (a.sum(axis=(2, 3), keepdims=True) + 1e-7)
    return _relu((w * a).sum(axis=1))


def _gradcampp(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    g2 = g * g
    g3 = g2 * g
    alpha = g2 / (2 * g2 + a.sum(axis=(2, 3), keepdims=True) * g3 + 1e-6)
    alpha = np.where(g != 0, alpha, 0.0)
    w = (alpha * _relu(g)).sum(axis=(2, 3), keepdims=True)
    return _relu((w * a).sum(axis=1))


def combine(method: str, a: np.ndarray, da: np.ndarray | None) -> np.ndarray:
    """The (B, h, w) map of a gradient CAM method (its record's ``formula``) from ``A`` and
    ``dA`` (B, C, h, w), float64; Eigen-CAM from ``A`` alone.

    Example:
        >>> a = np.ones((1, 2, 2, 2)); da = np.stack([np.full((2, 2), 0.5), -np.ones((2, 2))])[None]
        >>> combine("gradcam", a, da)[0]  # 0.5 * 1 - 1 * 1 < 0: relu
        array([[0., 0.],
               [0., 0.]])
        >>> combine("layercam", a, da)[0]
        array([[0.5, 0.5],
               [0.5, 0.5]])
    """
    a = np.asarray(a, dtype=np.float64)
    record = get_method(method)
    if record.name == "eigencam":
        return _relu(eigen_projection(a))
    if record.formula is None:
        raise XaikitValueError(
            f"method {record.name!r} is not a gradient class-activation map (one formula of a "
            f"layer's activations and gradients); those are {', '.join(gradient_cams())}"
        )
    return record.formula(a, np.asarray(da, dtype=np.float64))


def gradient_cams() -> tuple[str, ...]:
    """The CAM methods computed from a layer's activations and their gradients alone."""
    return tuple(m.name for m in all_methods("cam") if m.formula is not None)


def eigen_components(a: np.ndarray, n: int = 1) -> list[np.ndarray]:
    """Per sample: the (h*w, C) activations, centred per channel, projected on their first
    ``n`` right-singular vectors: ``n`` arrays (B, h, w), the first component first. Each
    component's sign (arbitrary in an SVD) is chosen so that it correlates positively with the
    channel-mean activation; a sample with fewer than ``n`` components gets zeros for the rest.

    Example:
        >>> a = np.zeros((1, 2, 2, 2)); a[0, 0] = [[1, 0], [0, 0]]; a[0, 1] = [[0, 0], [0, 3]]
        >>> first, second = eigen_components(a, 2)
        >>> bool(first[0, 1, 1] > 0), first.shape, second.shape
        (True, (1, 2, 2), (1, 2, 2))
    """
    b, c, h, w = a.shape
    out = [np.zeros((b, h, w)) for _ in range(n)]
    for i in range(b):
        m = np.nan_to_num(a[i]).reshape(c, -1).T  # (h*w, C)
        m = m - m.mean(axis=0)
        _, _, vt = np.linalg.svd(m, full_matrices=False)
        mean_act = a[i].mean(axis=0).reshape(-1)
        for k in range(min(n, vt.shape[0])):
            p = m @ vt[k]
            if float(p @ mean_act) < 0:
                p = -p
            out[k][i] = p.reshape(h, w)
    return out


def eigen_projection(a: np.ndarray) -> np.ndarray:
    """Per sample: the (h*w, C) activations, centred per channel, projected on their first
    right-singular vector, (B, h, w); the sign makes the map correlate positively with the
    channel-mean activation (the first of :func:`eigen_components`)."""
    return eigen_components(a, 1)[0]


def bilinear_matrix(n_in: int, n_out: int, align_corners: bool = False) -> np.ndarray:
    """The (n_out, n_in) matrix of 1-D linear interpolation, as torch's bilinear ``interpolate``
    computes it (half-pixel centres, clamped at 0; or corners aligned).

    Example:
        >>> bilinear_matrix(2, 4)
        array([[1.  , 0.  ],
               [0.75, 0.25],
               [0.25, 0.75],
               [0.  , 1.  ]])
    """
    r = np.zeros((n_out, n_in))
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(i)
    else:
        src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    np.add.at(r, (np.arange(n_out), i0), 1.0 - lam)
    np.add.at(r, (np.arange(n_out), i1), lam)
    return r


def upsample(maps: np.ndarray, size: tuple[int, int], align_corners: bool = False) -> np.ndarray:
    """Bilinear upsampling of (..., h, w) maps to (..., H, W) (see :func:`bilinear_matrix`).

    Example:
        >>> upsample(np.array([[[0.0, 1.0]]]), (1, 4))
        array([[[0.  , 0.25, 0.75, 1.  ]]])
    """
    ry = bilinear_matrix(maps.shape[-2], size[0], align_corners)
    rx = bilinear_matrix(maps.shape[-1], size[1], align_corners)
    return ry @ maps @ rx.T  # two matmuls (a 3-operand einsum runs as a naive loop)


def image_size(inp: Inputs) -> tuple[int, tuple[int, int]]:
    """The first image input (index) and its (H, W) in the model's layout."""
    for i, (t, axis) in enumerate(zip(inp.tensors, inp.channel_axes)):
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 4:
            return i, ((shape[2], shape[3]) if axis == 1 else (shape[1], shape[2]))
        if len(shape) == 3:
            return i, (shape[1], shape[2])
    raise XaikitValueError(
        "class-activation maps need an image input (B, C, H, W), (B, H, W, C) or (B, H, W); got "
        f"shapes {[tuple(int(d) for d in t.shape) for t in inp.tensors]}"
    )


Step = Callable[[list[T], T, "dict[str, Any] | None"], Any]


def _chunked(
    inp: Inputs, targets: T | None, max_batch: int | str, step: Step, forward_only: bool = False
) -> Any:
    """``step(rows, targets, model_kwargs)`` over the batch in chunks of ``max_batch`` rows
    (``"auto"``: the engine's default), halving the chunk on out-of-memory; the results stacked
    (a step that returns a tuple of arrays gets a tuple of stacked arrays).
    For a framework whose compiled step retraces on each new shape (TF) a short chunk is padded
    with copies of its last row, as the engine pads (its results are cut off)."""
    bk = inp.bk
    device = bk.model_device(inp.model)
    if max_batch == "auto":
        row_elems = sum(int(np.prod(t.shape[1:])) for t in inp.tensors)
        chunk = default_rows(bk, device, row_elems, forward_only=forward_only)
    else:
        chunk = int(max_batch)
    pad = bk.pads_chunks()
    where = getattr(inp.tensors[0], "device", None)
    parts: list[Any] = []
    r0 = 0
    while r0 < inp.batch:
        r1 = min(inp.batch, r0 + chunk)
        n = r1 - r0
        size = _padded_rows(n, chunk) if pad else n
        idx = np.minimum(np.arange(r0, r0 + size), r1 - 1)
        try:
            if size == n:
                rows, tg = [t[r0:r1] for t in inp.tensors], None if targets is None else targets[r0:r1]
            else:
                ti = bk.index(idx, where)
                rows = [bk.gather(t, ti) for t in inp.tensors]
                tg = None if targets is None else bk.gather(targets, ti)
            kw = inp.kwargs.rows(idx) if inp.kwargs else None
            out = step(rows, tg, kw)
            parts.append(tuple(o[:n] for o in out) if isinstance(out, tuple) else out[:n])
        except XaikitError:
            raise
        except Exception as exc:
            if bk.is_oom(exc) and chunk > 1:
                bk.empty_cache(device)
                chunk = max(1, chunk // 2)
                continue
            if not bk.is_oom(exc):  # nothing ran before the first chunk: the model cannot take x
                raise (chunk_error(exc, size, inp.batch, bk) if r0 else call_error(inp, exc)) from exc
            raise
        r0 = r1
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(column) for column in zip(*parts))
    return np.concatenate(parts)


Reshape = Callable[[T], T] | tuple[int, int] | None


def check_reshape(value: Any) -> Reshape:
    """``reshape`` as given, checked: None, a callable, or a pair of positive ints (h, w)."""
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise XaikitTypeError(
        "reshape must be None (4-D layers as they are; ViT tokens (B, 1 + h*w, C) to a square "
        f"grid), a (h, w) pair of positive ints or a callable; got {describe(value)}"
    )


def token_grid(n: int) -> tuple[int, int] | None:
    """The square grid of ``n`` ViT tokens: one class token dropped when ``n - 1`` is a square,
    else all of them when ``n`` is; None when neither is.

    Example:
        >>> token_grid(197), token_grid(49), token_grid(12)
        ((14, 14), (7, 7), None)
    """
    for m in (n - 1, n):
        r = math.isqrt(max(m, 0))
        if m > 1 and r * r == m:
            return r, r
    return None


def _layer_check(layer: CamLayer, reshape: Reshape, first: bool) -> None:
    """Raise when ``layer``'s output cannot become a (B, C, h, w) map with ``reshape``."""
    if callable(reshape):
        return
    shape = layer.shape
    if len(shape) == 3:
        if reshape is not None:
            raise XaikitValueError(
                f"reshape={reshape} is for a token output (B, N, C); layer {layer.name!r} already "
                f"gives a 4-D map (B, {', '.join(map(str, shape))}): leave reshape=None"
            )
        h, w = (shape[1], shape[2]) if first else (shape[0], shape[1])
        if h is not None and w is not None and h * w <= 1:
            raise XaikitValueError(
                f"layer {layer.name!r} must give a spatial output with h * w > 1 to make a "
                f"class-activation map; its output is (B, {', '.join(map(str, shape))}): choose an "
                "earlier convolutional layer"
            )
        return
    if len(shape) == 2:
        n = shape[0]
        if reshape is not None:
            if n is not None and n < reshape[0] * reshape[1]:
                raise XaikitValueError(
                    f"reshape={reshape} needs at least {reshape[0] * reshape[1]} tokens; layer "
                    f"{layer.name!r} gives (B, {n}, {shape[1]})"
                )
            return
        if n is None or token_grid(n) is None:
            raise XaikitValueError(
                f"layer {layer.name!r} gives tokens (B, {n}, {shape[1]}) that are not a square grid "
                "(with or without one class token): pass reshape=(h, w) (the last h*w tokens) or a "
                "callable that returns a 4-D map"
            )
        return
    raise XaikitValueError(
        f"layer {layer.name!r} must give a spatial (B, C, h, w) / (B, h, w, C) output, or ViT "
        f"tokens (B, N, C) with reshape=, to make a class-activation map; its output is "
        f"(B, {', '.join(map(str, shape))}): choose a convolutional layer"
    )


def to_chw(a: np.ndarray, first: bool, reshape: Reshape) -> np.ndarray:
    """A layer's output (numpy, after a callable ``reshape``) as channel-first (B, C, h, w):
    4-D channel-last maps are transposed, (B, N, C) tokens keep their last h*w (the class
    token dropped) as an (h, w) grid.

    Example:
        >>> tokens = np.arange(2 * 5 * 3.0).reshape(2, 5, 3)  # a class token and a 2x2 grid
        >>> to_chw(tokens, True, None)[0, 0]
        array([[ 3.,  6.],
               [ 9., 12.]])
    """
    if a.ndim == 4:
        return a if first else a.transpose(0, 3, 1, 2)
    if a.ndim == 3:
        grid = reshape if isinstance(reshape, tuple) else token_grid(a.shape[1])
        if grid is None:  # pragma: no cover - checked by _layer_check
            raise XaikitValueError(f"cannot reshape tokens {a.shape} to a grid: pass reshape=(h, w)")
        h, w = grid
        return a[:, a.shape[1] - h * w :].reshape(a.shape[0], h, w, a.shape[2]).transpose(0, 3, 1, 2)
    raise XaikitValueError(
        f"reshape must give a 4-D map (B, C, h, w) (torch) / (B, h, w, C) (Keras); it gave shape {a.shape}"
    )


def find_layer(inp: Inputs, layer: Any = None, reshape: Reshape = None) -> CamLayer:
    """The layer a CAM explains (see :meth:`~xaikit.backend.facets.CamFacet.resolve`), checked
    to give a map with ``reshape``; the layer found for ``layer=None`` is logged."""
    facet = inp.bk.cam
    kw0 = inp.kwargs.rows(np.arange(1)) if inp.kwargs else None
    try:  # the first call of the model on these inputs: a shape the model cannot take shows here
        found = facet.resolve(inp.model, layer, [t[:1] for t in inp.tensors], kw0)
    except XaikitError:
        raise
    except Exception as exc:
        raise call_error(inp, exc) from exc
    _layer_check(found, reshape, facet.channel_first(inp.model))
    if layer is None:
        logger.info("class-activation map: layer=None chose layer %r (output %s)", found.name, found.shape)
    return found


def cam_maps(
    inp: Inputs,
    targets: T | None,
    method: str,
    layer: Any = None,
    output: int | str = 0,
    max_batch: int | str = "auto",
    reshape: Reshape = None,
    memory_budget: int | float = DEFAULT_BUDGET,
    progress: bool | None = None,
) -> CamResult:
    """The layer-resolution maps (B, h, w) of one CAM method and the layer's name.

    Args:
        inp: the prepared inputs (:func:`~xaikit.xai.methods.prepare`).
        targets: int64 (B,) classes on the model's device (:func:`~xaikit.xai.methods.pin`), or None: each
            row's highest score in the same forward pass (the predicted class; Eigen-CAM needs
            none, Score-CAM pins them first).
        method: the canonical name of a CAM method (``xk.xai.registry.method_names("cam")``).
        layer: a layer name / object, or None: the last layer with a spatial output.
        output: the model output to explain.
        max_batch: rows per fused chunk, or ``"auto"``.
        reshape: how a non-4-D layer output becomes a map (see :func:`to_chw`).
        memory_budget: the memory Score-CAM's B x C masked rows may use (see
            :class:`~xaikit.xai._engine.ChunkPlan`); the one-pass methods run B rows.
        progress: Score-CAM's rows done (True, False or None: shown once the call has run a few
            seconds; :mod:`xaikit.xai._progress`); the one-pass methods have none to report.
    """
    return _cam(inp, targets, method, layer, output, max_batch, reshape, memory_budget, progress)[0]


def _cam(
    inp: Inputs,
    targets: T | None,
    method: str,
    layer: Any,
    output: int | str,
    max_batch: int | str,
    reshape: Reshape,
    memory_budget: int | float = DEFAULT_BUDGET,
    progress: bool | None = None,
) -> tuple[CamResult, np.ndarray | None]:
    """:func:`cam_maps` and, for the one-pass gradient methods, the (B,) explained score of each
    row as their pass read it (None for Eigen-CAM and Score-CAM)."""
    bk = inp.bk
    facet = bk.cam
    found = find_layer(inp, layer, reshape)
    first = facet.channel_first(inp.model)

    def host(t: T) -> np.ndarray:
        if callable(reshape):
            t = reshape(t)
        return to_chw(np.asarray(bk.to_numpy(t), dtype=np.float64), first, reshape)

    if method == "eigencam":
        maps = _relu(eigen_projection(_layer_values(inp, found, output, max_batch, reshape)))
        return CamResult(maps, found.name), None
    if method == "scorecam":
        all_acts = _layer_values(inp, found, output, max_batch, reshape)
        if targets is None:
            from xaikit.xai.methods import pin

            targets = pin(inp, None, output).targets
        maps = _score_cam(inp, targets, all_acts, output, max_batch, memory_budget, progress)  # type: ignore[arg-type]
        return CamResult(maps, found.name), None

    def grads(rows: list[T], tg: T, kw: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray]:
        a, da, scores = facet.grad_step(inp.model, found, rows, tg, output, kw)
        return combine(method, host(a), host(da)), np.asarray(bk.to_numpy(scores), dtype=np.float64)

    maps, scores = _chunked(inp, targets, max_batch, grads)
    return CamResult(maps, found.name), scores


def layer_activations(
    model: Any,
    x: Any,
    layer: Any = None,
    *,
    reshape: Reshape = None,
    output: int | str = 0,
    model_kwargs: Any = None,
    max_batch: int | str = "auto",
    framework: str | None = None,
) -> CamResult:
    """A layer's activations for a batch, channel-first (B, C, h, w) float64 whatever the
    framework, and the layer's name: what Eigen-CAM decomposes, for more than its first
    component (the ``EigenCAM`` trace's ``n_components``). Forward passes only, chunked.

    Args:
        model: a torch module or Keras model.
        x: the input batch (numpy or tensor) in the model's layout or the other one.
        layer: a layer name / object, or None: the last layer with a spatial output.
        reshape: how a token output becomes a map (see :func:`to_chw`).
        output: the model output to run when the model returns several.
        model_kwargs: extra keyword arguments of the model's forward call.
        max_batch: rows per chunk, or ``"auto"``.
        framework: ``"torch"`` or ``"tf"`` when the model is a plain function.
    """
    from xaikit.backend import get_backend
    from xaikit.xai.methods import prepare

    max_batch = check_max_batch(max_batch)
    reshape = check_reshape(reshape)
    bk = get_backend(model, framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=model_kwargs)
    with bk.inference(model):
        found = find_layer(inp, layer, reshape)
        return CamResult(_layer_values(inp, found, output, max_batch, reshape), found.name)


def _layer_values(
    inp: Inputs, found: CamLayer, output: int | str, max_batch: int | str, reshape: Reshape
) -> np.ndarray:
    """The layer's activations for the whole batch, (B, C, h, w) float64 on the host: forward
    passes only, chunked (what Eigen-CAM, Score-CAM and :func:`layer_activations` read)."""
    bk, facet = inp.bk, inp.bk.cam
    first = facet.channel_first(inp.model)

    def acts(rows: list[T], _tg: T, kw: dict[str, Any] | None) -> np.ndarray:
        t = facet.activations(inp.model, found, rows, output, kw)
        if callable(reshape):
            t = reshape(t)
        return to_chw(np.asarray(bk.to_numpy(t), dtype=np.float64), first, reshape)

    return _chunked(inp, None, max_batch, acts, forward_only=True)


def guided_backprop(
    inp: Inputs, targets: T, output: int | str = 0, max_batch: int | str = "auto"
) -> list[np.ndarray]:
    """Guided-backprop gradients of the target scores w.r.t. each input, in the model's layout
    (see :meth:`~xaikit.backend.facets.CamFacet.guided_step`), chunked like the other methods."""
    bk = inp.bk
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in inp.tensors]

    def step(rows: list[T], tg: T, kw: dict[str, Any] | None) -> np.ndarray:
        grads = bk.cam.guided_step(inp.model, rows, tg, output, kw)
        n = int(tg.shape[0])
        return np.concatenate(
            [np.asarray(bk.to_numpy(g), dtype=np.float32).reshape(n, -1) for g in grads], axis=1
        )

    flat = _chunked(inp, targets, max_batch, step)  # (B, sum of the inputs' sizes)
    ends = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    return [flat[:, ends[i] : ends[i + 1]].reshape(inp.batch, *shapes[i]) for i in range(len(shapes))]


def guided_gradcam(
    inp: Inputs,
    targets: T,
    layer: Any = None,
    output: int | str = 0,
    max_batch: int | str = "auto",
    reshape: Reshape = None,
) -> tuple[list[np.ndarray], CamResult]:
    """Guided Grad-CAM: guided backprop times the Grad-CAM map upsampled (bilinear) to the image,
    per input in the model's layout (inputs that are not the image keep their guided gradients
    unscaled), and the Grad-CAM result."""
    cam = cam_maps(inp, targets, "gradcam", layer, output, max_batch, reshape)
    which, size = image_size(inp)
    up = upsample(cam.maps, size)
    grads = guided_backprop(inp, targets, output, max_batch)
    g = grads[which]
    if g.ndim == 4:
        up = up[:, None] if inp.channel_axes[which] == 1 else up[..., None]
    grads[which] = (g * up).astype(np.float32)
    return grads, cam


def _score_cam(
    inp: Inputs,
    targets: T,
    acts: np.ndarray,
    output: int | str,
    max_batch: int | str,
    memory_budget: int | float = DEFAULT_BUDGET,
    progress: bool | None = None,
) -> np.ndarray:
    """Score-CAM: the B x C masked copies of the image input, scored in chunks of rows
    ``r = c * B + b`` (forward only); each chunk's masks are built from the (small) layer
    activations ``acts`` (B, C, h, w), so memory stays one chunk whatever C is. The chunk is
    the engine's forward-only plan (:func:`~xaikit.xai._engine.forward_rows`: ``max_batch``,
    ``memory_budget``, halving on out-of-memory)."""
    bk = inp.bk
    B, C = acts.shape[:2]
    which, (H, W) = image_size(inp)
    ry = bilinear_matrix(acts.shape[2], H, align_corners=True)
    rx = bilinear_matrix(acts.shape[3], W, align_corners=True)
    first = inp.channel_axes[which] == 1
    image = inp.tensors[which]
    four = len(image.shape) == 4

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = np.arange(r0, r1)
        c, b = r // B, r % B
        up = ry @ acts[b, c] @ rx.T  # (rows, H, W)
        lo = up.min(axis=(1, 2), keepdims=True)
        hi = up.max(axis=(1, 2), keepdims=True)
        masks = (up - lo) / (hi - lo + 1e-8)
        if four:
            masks = masks[:, None] if first else masks[..., None]
        idx = bk.index(b, getattr(image, "device", None))
        m = bk.as_tensor(masks, getattr(image, "device", None), inp.dtype)
        return [bk.gather(t, idx) * m if i == which else bk.gather(t, idx) for i, t in enumerate(inp.tensors)]

    with for_method(progress, B * C, "scorecam") as bar:
        scores = forward_rows(
            inp, targets, C, rows_fn, seed=0, output=output, max_batch=max_batch,
            memory_budget=memory_budget, xla=False, progress=bar.advance_to,
        )  # fmt: skip
    s = scores.T  # (B, C): row r = c * B + b
    s = np.exp(s - s.max(axis=1, keepdims=True))
    w = s / s.sum(axis=1, keepdims=True)
    return _relu(np.einsum("bc,bchw->bhw", w, acts))


# ---- the records and their runners --------------------------------------------------------------------
def _check_cam(options: dict[str, Any]) -> None:
    check_reshape(options.get("reshape"))
    if not isinstance(options.get("raw", False), (bool, np.bool_)):
        raise XaikitTypeError(f"raw must be True or False; got {describe(options['raw'])}")


def run_cam(call: Call, *, layer: Any = None, reshape: Any = None, raw: bool = False) -> Explained:
    """The runner of the class-activation maps but Guided Grad-CAM: the (B, H, W) map at the
    input's size (bilinear), or with ``raw`` the layer-resolution :class:`CamResult`."""
    inp = call.inp
    result, scores = _cam(
        inp, call.targets, call.method.name, layer, call.output, check_max_batch(call.max_batch),
        check_reshape(reshape), call.memory_budget, call.progress,
    )  # fmt: skip
    if raw:
        maps = result.maps.astype(np.float32)
        return Explained([maps], scores=scores, detail=CamResult(maps, result.layer))
    _, size = image_size(inp)
    return Explained([upsample(result.maps, size).astype(np.float32)], scores=scores)


def run_guided_gradcam(call: Call, *, layer: Any = None, reshape: Any = None, raw: bool = False) -> Explained:
    """The runner of Guided Grad-CAM: attributions with each input's shape (the caller's layout)."""
    if raw:
        raise XaikitValueError(
            "raw=True gives a layer-resolution map, which guided_gradcam (input-resolution "
            "attributions) does not have: use method='gradcam' with raw=True for its Grad-CAM part"
        )
    inp = call.inp
    grads, _ = guided_gradcam(
        inp,
        call.targets,
        layer,
        call.output,
        check_max_batch(call.max_batch),
        check_reshape(reshape),  # type: ignore[arg-type]
    )
    return Explained(inp.to_user(grads))


_CAM_OPTIONS = {"layer": None, "reshape": None, "raw": False}


def _record(name: str, title: str, **facts: Any) -> None:
    facts.setdefault("run", run_cam)
    register_method(
        Method(
            name,
            "cam",
            title,
            options=_CAM_OPTIONS,
            result=facts.pop("result", "map"),
            layer=True,
            check=_check_cam,
            **facts,
        )
    )


_GRADCAM = "Selvaraju et al., 2017, https://arxiv.org/abs/1610.02391"
_record(
    "gradcam", "Grad-CAM", targets="in_pass", formula=_gradcam, reference=_GRADCAM,
    summary="a layer's channels weighted by their mean gradient: where the evidence for the class sits",
)  # fmt: skip
_record(
    "gradcam++", "Grad-CAM++", aliases=("gradcampp", "gradcam_plus_plus"), targets="in_pass",
    formula=_gradcampp, summary="Grad-CAM with per-pixel weights of positive gradients: several objects",
    reference="Chattopadhyay et al., 2018, https://arxiv.org/abs/1710.11063",
)  # fmt: skip
_record(
    "xgradcam", "XGrad-CAM", targets="in_pass", formula=_xgradcam,
    summary="channels weighted by gradient times activation, normalised: an axiom-based Grad-CAM",
    reference="Fu et al., 2020, https://arxiv.org/abs/2008.02312",
)  # fmt: skip
_record(
    "layercam", "LayerCAM", targets="in_pass", formula=_layercam,
    summary="positive gradients times activations, pixel by pixel: finer maps from earlier layers",
    reference="Jiang et al., 2021, https://doi.org/10.1109/TIP.2021.3089943",
)  # fmt: skip
_record(
    "hirescam", "HiResCAM", targets="in_pass", formula=_hirescam,
    summary="gradients times activations summed over channels: faithful to the layer's own pixels",
    reference="Draelos & Carin, 2020, https://arxiv.org/abs/2011.08891",
)  # fmt: skip
_record(
    "scorecam", "Score-CAM", gradients=False, slow=True,
    summary="channels weighted by the score of the image masked by each: no gradients",
    reference="Wang et al., 2020, https://arxiv.org/abs/1910.01279",
)  # fmt: skip
_record(
    "eigencam", "Eigen-CAM", gradients=False, targets="in_pass",
    summary="the first principal component of a layer's activations: class-agnostic",
    reference="Muhammad & Yeasin, 2020, https://arxiv.org/abs/2008.00299",
)  # fmt: skip
_record(
    "guided_gradcam", "Guided Grad-CAM", aliases=("guidedgradcam",), run=run_guided_gradcam,
    result="input", summary="guided backpropagation times the Grad-CAM map: fine detail where the class is",
    reference=_GRADCAM,
)  # fmt: skip
