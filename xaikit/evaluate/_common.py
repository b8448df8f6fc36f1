"""Shared pieces of ``xaikit.evaluate``: input layouts, saliency-map reduction, similarity."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xaikit.backend import Backend, framework_of, prefers_channel_first, to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._options import RunSettings
from xaikit.layout import channel_axis_of


def finite_mean(values: Any) -> float:
    """The mean of the finite values (NaN and infinities left out); NaN if there are none."""
    kept = np.asarray(values, dtype=np.float64)
    kept = kept[np.isfinite(kept)]
    return float(kept.mean()) if kept.size else float("nan")


class PerSample:
    """What a metric result with one score per sample (``scores``, (B,)) shares: their mean."""

    scores: np.ndarray

    @property
    def mean(self) -> float:
        """The mean of :attr:`scores` over the samples with a finite score (NaN if none has one)."""
        return finite_mean(self.scores)


def check_bool(value: Any, name: str) -> bool:
    """``value`` when it is True or False (numpy's too), else a clear error naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise XaikitTypeError(f"{name} must be True or False; got {describe(value)}")
    return bool(value)


def host(value: Any, name: str) -> np.ndarray:
    """A numpy copy of an array or tensor, with a clear error for anything else."""
    if value is None or isinstance(value, (str, bytes, dict)):
        raise XaikitTypeError(f"{name} must be an array or tensor; got {describe(value)}")
    try:
        return np.asarray(to_number(value))
    except Exception as exc:
        raise XaikitTypeError(f"{name} must be an array or tensor; got {describe(value)}") from exc


def input_layout(x: Any, bk: Backend) -> tuple[tuple[int, ...], int | None]:
    """The shape of an input batch and its channel axis (None for inputs without one)."""
    if isinstance(x, (list, tuple, dict)):
        raise XaikitTypeError(
            f"x must be one input batch (array or tensor); models with several inputs are not supported "
            f"here; got {describe(x)}"
        )
    shape = tuple(int(d) for d in getattr(x, "shape", np.shape(x)))
    if len(shape) < 2 or shape[0] == 0:
        raise XaikitValueError(
            f"x must be a non-empty batch (batch, ...) with at least 2 axes; got {describe(x)}"
        )
    prefer_first = prefers_channel_first(x, default=bk.channel_first)
    return shape, channel_axis_of(shape, prefer_first)


def short_channel_axis(shape: tuple[int, ...], value: Any, first: bool | None = None) -> int | None:
    """The channel axis (1 or -1) of a 4-D batch, (B, C, H, W) or (B, H, W, C), where it can be
    told, else None: the short axis (at most 4) at either end; where both ends are short, the one
    of size 1 (grayscale: (B, 1, 4, 4) is 4 x 4 pixels, not 1 x 4), else ``first`` (the layout
    the batch is known to have) or the convention of ``value``'s framework (a torch tensor:
    first; TF: last). None where nothing decides (a numpy (B, 3, 4, 4), or no short end axis):
    the caller refuses it rather than guess.

    Example:
        >>> short_channel_axis((2, 1, 4, 4), None), short_channel_axis((2, 8, 8, 3), None)
        (1, -1)
        >>> short_channel_axis((2, 3, 4, 4), None, first=True), short_channel_axis((2, 3, 4, 4), None)
        (1, None)
    """
    short_first, short_last = shape[1] <= 4, shape[-1] <= 4
    if short_first != short_last:
        return 1 if short_first else -1
    if not short_first:
        return None
    if (shape[1] == 1) != (shape[-1] == 1):
        return 1 if shape[1] == 1 else -1
    if first is None and framework_of(value) is not None:
        first = prefers_channel_first(value)
    return None if first is None else (1 if first else -1)


def spatial_shape(shape: tuple[int, ...], channel_axis: int | None) -> tuple[int, ...]:
    return tuple(d for a, d in enumerate(shape) if a != 0 and a != channel_axis)


def to_spatial(
    saliency: Any,
    spatial: tuple[int, ...],
    batch: int,
    name: str = "saliency",
    channels: int | None = None,
    absolute: bool = True,
) -> np.ndarray:
    """Reduce a saliency batch to one value per spatial position, shape (B, *spatial).

    Accepted shapes: ``(B, *spatial)``, ``(B, *spatial, C)`` or ``(B, C, *spatial)`` (C = 1, or
    the input's channel count; any size when ``channels`` is None). Channels are summed by magnitude
    (``absolute=True``) or with their signs; a single-channel map keeps its values, then takes
    the magnitude when ``absolute``.
    """
    arr = host(saliency, name).astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise XaikitValueError(f"{name} holds NaN or infinite values")
    n = len(spatial)
    size = "any size" if channels is None else f"size {' or '.join(map(str, sorted({1, channels})))}"
    expect = (
        f"({batch}, {', '.join(map(str, spatial))}), optionally with a channel axis of {size} first or last"
    )
    if arr.ndim == 0 or arr.shape[0] != batch:
        raise XaikitValueError(
            f"{name} must have one map per sample, shape {expect}; got {describe(saliency)}"
        )
    shape = arr.shape[1:]
    if shape == spatial:
        out = np.abs(arr) if absolute else arr
    elif len(shape) == n + 1 and shape[:n] == spatial and (channels is None or shape[-1] in (1, channels)):
        out = (np.abs(arr) if absolute else arr).sum(axis=-1)
    elif len(shape) == n + 1 and shape[1:] == spatial and (channels is None or shape[0] in (1, channels)):
        out = (np.abs(arr) if absolute else arr).sum(axis=1)
    else:
        raise XaikitValueError(f"{name} must have shape {expect}; got {describe(saliency)}")
    return out


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks of each row's values (ties get their average rank), shape (B, n)."""
    from scipy.stats import rankdata

    flat = np.asarray(values, dtype=np.float64).reshape(values.shape[0], -1)
    return np.asarray(rankdata(flat, axis=1), dtype=np.float64)


def spearman(a: np.ndarray, b: np.ndarray, *, undefined_nan: bool = False) -> np.ndarray:
    """Spearman rank correlation of each pair of rows of ``a`` and ``b`` (B,).

    Convention for constant rows (where the correlation is undefined): two constant rows count
    as identical (1.0); one constant row against a varying one as unrelated (0.0). With
    ``undefined_nan`` such rows are NaN instead (scipy's and Quantus's answer), for a score
    where a constant row ranks nothing.
    """
    ra, rb = ranks(a), ranks(b)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    na, nb = np.sqrt((ra * ra).sum(axis=1)), np.sqrt((rb * rb).sum(axis=1))
    out = np.zeros(ra.shape[0])
    both = (na > 0) & (nb > 0)
    out[both] = (ra[both] * rb[both]).sum(axis=1) / (na[both] * nb[both])
    out[(na == 0) & (nb == 0)] = 1.0
    if undefined_nan:
        out[~both] = np.nan
    return np.clip(out, -1.0, 1.0)


def ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM of each pair of maps in [0, 1] (B,), via scikit-image; NaN where a map is too small
    (a side under 3) for a window."""
    from skimage.metrics import structural_similarity

    out = np.full(a.shape[0], np.nan)
    if a.ndim < 2:
        return out
    side = min(a.shape[1:])
    win = min(7, side if side % 2 else side - 1)
    if win < 3:
        return out
    for i in range(a.shape[0]):
        out[i] = structural_similarity(a[i], b[i], data_range=1.0, win_size=win)
    return out


#: the keys a metric sets itself when it runs a method, and the argument to use instead
RESERVED = {
    "target": "the target argument",
    "method": "the method (or saliency) argument",
    "seed": "the seed argument",
    "max_batch": "the max_batch argument",
    "framework": "the framework argument",
    "output": "the output argument",
    "model_kwargs": "the model_kwargs argument",
}


def check_method_options(options: Any, reserved: dict[str, str] = RESERVED) -> dict[str, Any]:
    """The options of a method named to an evaluation (a dict), refusing the keys the
    evaluation sets itself (``reserved``: key -> the argument to use instead) and ``raw=True``
    (:func:`refuse_raw`)."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise XaikitTypeError(f"method_options must be a dict of options or None; got {describe(options)}")
    taken = sorted(set(options) & set(reserved))
    if taken:
        fixes = "; ".join(f"{k!r}: {reserved[k]}" for k in taken)
        raise XaikitValueError(f"method options {taken} are set by the evaluation itself ({fixes})")
    refuse_raw(options)
    return dict(options)


def refuse_raw(options: Any, where: str = "method options") -> None:
    """An evaluation scores maps: ``raw=True`` (a method's full result instead, such as LIME's
    fit or a CAM at its layer's resolution) is refused with what to do."""
    if options.get("raw") not in (None, False):
        raise XaikitValueError(
            f"{where}: raw={options['raw']!r} asks the method for its full result (a LimeResult, a "
            "CamResult, ...), and the evaluations score its maps; leave raw out (or compute the raw "
            "result with xk.xai.explain(..., raw=True) and pass its maps)"
        )


def maps_or_explain(
    model: Any,
    x: Any,
    saliency: Any,
    target: Any,
    run: RunSettings,
) -> Any:
    """The maps a metric of ``(model, x, saliency)`` scores: ``saliency`` itself, or, when it is a
    method name, that method's maps from :func:`xaikit.xai.explain` with the settings ``run``
    (whose ``method_options`` must not set a key of :data:`RESERVED`)."""
    method_options = run.method_options
    if not isinstance(saliency, str):
        if method_options:
            raise XaikitValueError(
                f"method_options {sorted(method_options)} apply only when saliency is a method name; got maps"
            )
        return saliency
    from xaikit.xai import explain

    method = _saliency_method(saliency)
    return explain(
        model, x, target=target, method=method, framework=run.framework, output=run.output,
        model_kwargs=run.model_kwargs, seed=run.seed, max_batch=run.max_batch, **check_method_options(method_options),
    )  # fmt: skip


def _saliency_method(saliency: str) -> str:
    """The canonical name of a method given as ``saliency``, or an error that lists them."""
    from xaikit.xai.registry import canonical, method_names

    try:
        return canonical(saliency)
    except XaikitValueError:
        raise XaikitValueError(
            f"saliency must be maps or a method name ({', '.join(map(repr, method_names()))}); got {saliency!r}"
        ) from None


def maps_alone_or_explain(
    saliency: Any,
    *,
    model: Any,
    x: Any,
    target: Any,
    run: RunSettings,
) -> tuple[Any, np.ndarray | None]:
    """``(maps, targets)`` for a metric of maps alone (``saliency`` first, ``model=``, ``x=``
    optional): the maps as given, with no model settings beside them (targets None), or, for a
    method name, the method's maps computed on ``model`` and ``x`` with the settings ``run`` for
    the classes ``target`` (None: the model's predictions, pinned), and those classes (B,); a
    target object of :mod:`xaikit.targets` is explained as it resolved on ``x`` (classes -1)."""
    model_kwargs, method_options, framework, output = (
        run.model_kwargs,
        run.method_options,
        run.framework,
        run.output,
    )
    if not isinstance(saliency, str):
        given = [
            name
            for name, value in (
                ("model", model), ("x", x), ("target", target), ("model_kwargs", model_kwargs),
                ("method_options", method_options),
            )
            if value is not None
        ]  # fmt: skip
        if given:
            raise XaikitValueError(
                f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only when saliency is a method "
                f"name; got maps ({describe(saliency)})"
            )
        return saliency, None
    method = _saliency_method(saliency)
    options = check_method_options(method_options)
    if model is None or x is None:
        raise XaikitValueError(
            f"saliency={saliency!r} is a method name: pass model= and x= to compute it; got "
            f"model={describe(model)}, x={describe(x)}"
        )
    from xaikit.backend import get_backend
    from xaikit.xai import explain
    from xaikit.xai.internal import pin, prepare

    bk = get_backend(model, framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=model_kwargs)
    with bk.inference(model):
        pinned = pin(inp, target, output, predict=target is None, objects=True)
    if pinned.spec is not None:  # a target object: its maps, no class (-1)
        explained: Any = fixed_object(target, pinned.spec)
        targets = np.full(inp.batch, -1, dtype=np.int64)
    else:
        targets = bk.to_numpy(pinned.targets).astype(np.int64)
        explained = targets
    maps = explain(
        model, x, target=explained, method=method, framework=framework, output=output, model_kwargs=model_kwargs,
        seed=run.seed, max_batch=run.max_batch, **options,
    )  # fmt: skip
    return maps, np.broadcast_to(targets.reshape(-1), (int(np.shape(maps)[0]),)).copy()


def pin_scored(inp: Any, target: Any, output: int | str = 0) -> tuple[Any, Any, np.ndarray]:
    """``(targets, spec, reported)`` of a metric that scores rows: the pinned row targets on the
    device (classes, or each sample's index when ``target`` is a target object of
    :mod:`xaikit.targets`), the bound object to score them with (``forward_scores(target=spec)``;
    None for classes) and the classes reported in the result, int64 (B,) (-1 per sample for a
    target object: it names no class)."""
    from xaikit.xai.internal import pin

    pinned = pin(inp, target, output, objects=True)
    bk = inp.bk
    if pinned.spec is not None:
        return pinned.targets, pinned.spec, np.full(inp.batch, -1, dtype=np.int64)
    return pinned.targets, None, np.asarray(bk.to_numpy(pinned.targets), dtype=np.int64)


def refuse_object(target: Any, metric: str, why: str) -> None:
    """Refuse a target object (other than :class:`~xaikit.targets.Class`) in a metric that cannot
    honour it, naming ``target`` and why; class indices and None pass."""
    from xaikit.targets import Class, is_target

    if is_target(target) and not isinstance(target, Class):
        raise XaikitValueError(
            f"target={type(target).__name__}(...) (a target object) is not taken by {metric}: {why}; "
            "pass target= class indices (or None) instead"
        )


def fixed_object(target: Any, spec: Any) -> Any:
    """The target object to re-explain with so that every map explains the same thing as the
    clean, pinned pass: a :class:`~xaikit.targets.ClassRegion` with ``mask=None`` becomes the
    region it resolved to on the clean input (its classes and weights, summed), so that a
    randomized or shifted model explains the region the original model predicted; every other
    object does not depend on the model's prediction and is returned as it is."""
    from xaikit.targets import ClassRegion

    if isinstance(target, ClassRegion) and target.mask is None and spec is not None:
        arrays = spec.resolved.arrays
        return dataclasses.replace(target, k=arrays["cls"].copy(), mask=arrays["weight"].copy(), reduce="sum")
    return target


def classes_of(targets: Any, batch: int) -> np.ndarray:
    """The classes a result reports, int64 (B,): ``targets`` as given, or -1 per sample for a
    target object of :mod:`xaikit.targets` (it names no class)."""
    if isinstance(targets, np.ndarray):
        return targets
    return np.full(batch, -1, dtype=np.int64)


def tile_object(target: Any, spec: Any, copies: int) -> Any:
    """The target object for ``copies`` stacked copies of the batch (row r: sample r % B), from
    what it resolved to on the clean batch (``spec``): per-sample classes, masks, indices and
    references tiled; a ``ClassRegion(mask=None)`` keeps the clean input's region on every
    noisy copy; a callable is returned as it is (it scores whatever rows it is given)."""
    from xaikit.targets import ClassRegion, Output, Similarity

    resolved = spec.resolved
    arrays = {name: np.concatenate([arr] * copies, axis=0) for name, arr in resolved.arrays.items()}
    if resolved.kind == "region":
        axis = target.axis if isinstance(target, ClassRegion) else None
        return ClassRegion(arrays["cls"], mask=arrays["weight"], reduce="sum", axis=axis)
    if resolved.kind == "output":
        return Output(arrays["index"])
    if resolved.kind == "similarity":
        return Similarity(arrays["reference"], normalize=resolved.normalize)
    return target
