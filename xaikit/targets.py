"""Target objects: which scalar of a model's output an explanation differentiates, per sample.

``target=`` of :func:`xaikit.xai.explain` takes class indices (an int, or one per sample) or
one of these objects, for models that are not classifiers:

* :class:`Class` ``(k)``: the class score, exactly what an int ``k`` means.
* :class:`ClassRegion` ``(k, mask=None, reduce="sum")``: semantic segmentation, the sum (or
  mean) of class k's logits over a mask of pixels, per sample; no mask = the pixels where the
  model predicts k on the clean input (fixed once, like a predicted class).
* :class:`Output` ``(index)``: one unit of a regression output (B,) or (B, K) (any output:
  ``index`` counts its non-batch elements in row-major order).
* :class:`Similarity` ``(reference, normalize=True)``: cosine similarity of the model's
  embedding (B, D) to a reference embedding (D,) or (B, D) (e.g. a CLIP text embedding).
* a callable ``f(outputs) -> (rows,)``: anything else; it gets what the model returned (a
  tensor, dict, tuple or output object) for a chunk of rows and returns one differentiable
  score per row, written with the model's framework.

One object explains the whole batch; its fields may hold one value per sample (a class per
sample, a (B, H, W) mask, a (B, D) reference). A list of objects is refused. The model's
output is read as ``output=`` says; for a dict the default is its ``"logits"`` key, for an
object its ``logits`` attribute.

This module is framework-free: the objects are specs. :meth:`Target.resolve` checks one
against the model's output for the clean batch (host numpy) and gives a :class:`Resolved`
(per-sample host arrays); :func:`row_scores` turns that into the (rows,) scores of a chunk of
rows through the backend's operations, inside the framework's differentiated graph (the
backends call it from ``scores`` and ``grad_step``). The rows of a chunk are told by their
sample index (int64 (rows,)), which is what the engine carries in place of class indices.

Example:
    >>> import numpy as np
    >>> seg = np.array([[[[0.0, 2.0, 0.0]], [[1.0, 3.0, -1.0]]]])  # (B, K, H, W) = (1, 2, 1, 3)
    >>> r = ClassRegion(1, reduce="mean").resolve(seg, channel_first=True)  # where 1 is predicted
    >>> r.arrays["weight"].tolist(), r.arrays["cls"].tolist()
    ([[[0.5, 0.5, 0.0]]], [1])
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend.outputs import pick_output
from xaikit.errors import XaikitTypeError, XaikitValueError, XaikitWarning, describe, describe_name

__all__ = [
    "Bound",
    "Box",
    "Class",
    "ClassRegion",
    "Output",
    "Resolved",
    "Similarity",
    "Target",
    "is_target",
    "row_scores",
]

#: added to the squared norm of an embedding before its square root (cosine similarity)
EPS = 1e-12


@dataclass(frozen=True)
class Resolved:
    """A target checked against the model's output for a batch of B samples.

    Attributes:
        kind: ``"output"``, ``"region"``, ``"similarity"`` or ``"callable"``.
        output: the model output read (index, key or attribute name).
        arrays: per-sample host arrays, each (B, ...): ``"index"`` (int64, output),
            ``"cls"`` (int64) and ``"weight"`` (float, the mask over the output's spatial axes,
            divided by its size for ``reduce="mean"``) for a region, ``"reference"`` (float,
            unit length when normalized) for a similarity.
        axis: the class axis of a region's output (1 once moved there).
        normalize: divide a similarity by the embedding's norm.
        fn: the callable of a ``"callable"`` target.
        static: what a compiled step is keyed on (no arrays).
    """

    kind: str
    output: int | str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    axis: int = 1
    normalize: bool = True
    fn: Callable[[Any], Any] | None = None

    @property
    def static(self) -> tuple[Any, ...]:
        return (self.kind, self.output, self.axis, self.normalize, self.fn)


class Target:
    """Base of the target objects (see the module's docstring)."""

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        """This target checked against the model's output for the clean batch.

        Args:
            out: the output the target reads (:func:`picked`), as a host numpy array (B, ...).
            channel_first: the framework's convention (the class axis of a segmentation
                output: 1 for torch, the last for Keras, unless the target names it).
            output: the output's index, key or attribute name (kept for the rows).
            raw: what the model returned (a callable target reads it).
            batch: the number of samples (default: ``out``'s first axis).
        """
        raise NotImplementedError  # pragma: no cover - every target overrides it


def _classes(k: Any, name: str) -> np.ndarray:
    """``k`` as int64 (1,) or (B,): one class or one per sample (checked later against B)."""
    if isinstance(k, str):
        raise XaikitTypeError(
            f"target={name}(...): {k!r} names a dataset key, which only explain_dataset reads (the values "
            "of each batch); pass the values: an int or one per sample"
        )
    arr = np.asarray(k)
    if isinstance(k, bool) or arr.dtype.kind not in "iu" or arr.ndim > 1 or arr.size == 0:
        raise XaikitTypeError(
            f"target={name}(...): its class/index must be an int or a 1-D sequence of ints (one per "
            f"sample); got {describe(k)}"
        )
    return arr.astype(np.int64).reshape(-1)


def _check_classes(k: Any, name: str) -> None:
    """Check ``k`` at construction; a str names a dataset key (read by ``explain_dataset``)."""
    if not isinstance(k, str):
        _classes(k, name)


def _per_sample(values: np.ndarray, batch: int, what: str) -> np.ndarray:
    if values.shape[0] not in (1, batch):
        raise XaikitValueError(
            f"target={what}: must give one value for the batch or one per sample ({batch}); got "
            f"{values.shape[0]} values"
        )
    return np.broadcast_to(values, (batch, *values.shape[1:])).copy()


def _in_range(values: np.ndarray, n: int, what: str, about: str) -> None:
    if values.min() < 0 or values.max() >= n:
        raise XaikitValueError(
            f"target={what}: {about} must lie in [0, {n - 1}] for this model output; got values "
            f"{sorted(set(values.tolist()))[:10]}"
        )


@dataclass(frozen=True, eq=False)
class Class(Target):
    """The score of class ``k``: exactly what ``target=k`` means (one class, or one per sample).

    Example:
        >>> Class(3).k
        3
    """

    k: Any

    def __post_init__(self) -> None:
        _check_classes(self.k, "Class")

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        return Output(self.k).resolve(out, channel_first, output, raw, batch)


@dataclass(frozen=True, eq=False)
class Output(Target):
    """One unit of the model's output: ``index`` counts the non-batch elements of the output in
    row-major order (a (B,) output has the one index 0, a (B, K) output K). One index, or one per
    sample.

    Example:
        >>> Output(2).resolve(np.zeros((4, 3)), True).arrays["index"].tolist()
        [2, 2, 2, 2]
    """

    index: Any

    def __post_init__(self) -> None:
        _check_classes(self.index, "Output")

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        out = np.asarray(out)
        batch = int(out.shape[0]) if batch is None else batch
        index = _per_sample(_classes(self.index, "Output"), batch, f"Output({self.index!r})")
        _in_range(index, int(np.prod(out.shape[1:], dtype=np.int64)), f"Output({self.index!r})", "index")
        return Resolved("output", output, {"index": index})


@dataclass(frozen=True, eq=False)
class ClassRegion(Target):
    """Semantic segmentation: class ``k``'s logits summed (``reduce="sum"``) or averaged
    (``"mean"``) over ``mask``, per sample.

    Args:
        k: the class, or one per sample.
        mask: (H, W) for every sample or (B, H, W), bool or 0/1 (or any weights); None = the
            pixels where the model predicts k (the argmax over classes of the clean input's
            output, fixed once for every noisy or interpolated row).
        reduce: ``"sum"`` or ``"mean"`` (over the mask's pixels).
        axis: the class axis of the output; None = 1 for torch models (B, K, H, W), the last
            for Keras models (B, H, W, K).
    """

    k: Any
    mask: Any = None
    reduce: str = "sum"
    axis: int | None = None

    def __post_init__(self) -> None:
        _check_classes(self.k, "ClassRegion")
        if not isinstance(self.reduce, str) or self.reduce not in ("sum", "mean"):
            raise XaikitValueError(
                "target=ClassRegion(..., reduce=...): reduce must be 'sum' or 'mean'; "
                f"got {describe_name(self.reduce)}"
            )
        if self.axis is not None and (isinstance(self.axis, bool) or not isinstance(self.axis, int)):
            raise XaikitTypeError(
                f"target=ClassRegion(..., axis=...): axis must be an int or None; got {describe(self.axis)}"
            )

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        what = f"ClassRegion({self.k!r}, ...)"
        out = np.asarray(out)
        batch = int(out.shape[0]) if batch is None else batch
        if out.ndim < 3:
            raise XaikitValueError(
                f"target={what} explains a segmentation output (B, K, H, W) or (B, H, W, K); the model "
                f"output read has shape {out.shape}: pass output= the segmentation logits, or use "
                "target=<class> / Output(index) for a classifier or regressor"
            )
        axis = (1 if channel_first else -1) if self.axis is None else self.axis
        if not (-out.ndim <= axis < out.ndim) or axis % out.ndim == 0:
            raise XaikitValueError(
                f"target={what}: axis {axis} is not a class axis of an output of shape {out.shape}"
            )
        moved = np.moveaxis(out, axis % out.ndim, 1)
        cls = _per_sample(_classes(self.k, "ClassRegion"), batch, what)
        _in_range(
            cls, int(moved.shape[1]), what, f"the class (output of shape {out.shape}, classes on axis {axis})"
        )
        spatial = moved.shape[2:]
        if self.mask is None:
            mask = (moved.argmax(axis=1) == cls.reshape((batch,) + (1,) * len(spatial))).astype(np.float64)
        else:
            given = self.mask
            if hasattr(given, "detach"):
                given = given.detach().cpu().numpy()
            elif hasattr(given, "numpy") and not isinstance(given, np.ndarray):
                given = given.numpy()
            mask = np.asarray(given)
            if mask.dtype.kind not in "biuf" or mask.shape not in (spatial, (batch, *spatial)):
                raise XaikitValueError(
                    f"target={what}: mask must be {spatial} (every sample) or {(batch, *spatial)} (one per "
                    f"sample), bool or numbers, matching the output's spatial axes; got {describe(self.mask)}"
                )
            mask = np.broadcast_to(mask.astype(np.float64), (batch, *spatial))
            if not np.all(np.isfinite(mask)):
                raise XaikitValueError(f"target={what}: mask holds NaN or infinite values")
        empty = np.flatnonzero(~np.any(mask.reshape(batch, -1) != 0, axis=1))
        if empty.size:  # their score is 0 whatever the input: their maps are 0, say why
            where = (
                f"class {cls[empty[0]]} is predicted nowhere" if self.mask is None else "the mask is empty"
            )
            warnings.warn(
                f"target={what}: {where} on samples {empty.tolist()[:10]}"
                f"{' ...' if empty.size > 10 else ''} of {batch}: their region score is 0 whatever the input, "
                "so their maps are 0; give mask= or a class the model predicts there",
                XaikitWarning,
                stacklevel=2,
            )
        weight = np.array(mask, dtype=np.float64)
        if self.reduce == "mean":
            size = weight.reshape(batch, -1).sum(axis=1)
            weight = weight / np.maximum(size, 1.0).reshape((batch,) + (1,) * len(spatial))
        return Resolved("region", output, {"cls": cls, "weight": weight}, axis=axis % out.ndim)


@dataclass(frozen=True, eq=False)
class Similarity(Target):
    """Cosine similarity of the model's embedding (its output flattened per sample, (B, D)) to
    ``reference`` ((D,) for every sample or (B, D)); ``normalize=False``: the dot product."""

    reference: Any
    normalize: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.normalize, (bool, np.bool_)):
            raise XaikitTypeError(
                f"target=Similarity(..., normalize=...): normalize must be True or False; got {describe(self.normalize)}"
            )

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        out = np.asarray(out)
        batch = int(out.shape[0]) if batch is None else batch
        dim = int(np.prod(out.shape[1:], dtype=np.int64))
        given = self.reference
        if hasattr(given, "detach"):
            given = given.detach().cpu().numpy()
        elif hasattr(given, "numpy") and not isinstance(given, np.ndarray):
            given = given.numpy()
        ref = np.asarray(given)
        if ref.dtype.kind not in "iuf" or ref.shape not in ((dim,), (batch, dim)):
            raise XaikitValueError(
                f"target=Similarity(reference): reference must be ({dim},) or ({batch}, {dim}) numbers, the "
                f"size of the model's embedding (output of shape {out.shape}); got {describe(self.reference)}"
            )
        ref = np.broadcast_to(ref.astype(np.float64).reshape(-1, dim), (batch, dim)).copy()
        norms = np.linalg.norm(ref, axis=1)
        if not np.all(np.isfinite(ref)) or (self.normalize and np.any(norms == 0)):
            raise XaikitValueError(
                "target=Similarity(reference): reference must be finite and, for a cosine similarity, non-zero"
            )
        if self.normalize:
            ref = ref / norms[:, None]
        return Resolved("similarity", output, {"reference": ref}, normalize=bool(self.normalize))


def is_target(value: Any) -> bool:
    """Whether ``value`` is a target object or a callable target (not class indices)."""
    return isinstance(value, Target) or (callable(value) and not hasattr(value, "__array__"))


def resolve_callable(fn: Callable[[Any], Any], scores: np.ndarray, output: int | str, batch: int) -> Resolved:
    """A callable target, checked on its scores for the clean batch (host numpy)."""
    if scores.shape != (batch,) or scores.dtype.kind not in "iuf":
        raise XaikitValueError(
            f"target={getattr(fn, '__name__', 'callable')}: a callable target must return one score per "
            f"row, shape ({batch},) for the {batch} samples; it returned {describe(scores)}"
        )
    return Resolved("callable", output, {}, fn=fn)


def picked(raw: Any, output: int | str) -> Any:
    """The output a target object reads: ``output`` of what the model returned, by the rule every
    target follows (:func:`~xaikit.backend.outputs.pick_output`: the default 0 means a dict's
    ``"logits"`` key when it has one)."""
    return pick_output(raw, output)


@dataclass(frozen=True)
class Bound:
    """A resolved target with its per-sample arrays as tensors on the model's device: what the
    engine hands the backend's ``scores`` and ``grad_step`` (``target=``). The backend knows it
    only through :attr:`static`, :attr:`tensors` and :meth:`scores` (the backend layer does not
    import this module)."""

    resolved: Resolved
    tensors: dict[str, Any]

    @property
    def static(self) -> tuple[Any, ...]:
        """What a compiled step is keyed on (the tensors are its arguments)."""
        return self.resolved.static

    def scorer(self) -> Callable[[Any, Any, Any, dict[str, Any]], Any]:
        """``scores(bk, raw, rows, tensors)`` holding no array (a compiled step keeps it)."""
        bare = dataclasses.replace(self.resolved, arrays={})

        def scores(bk: Any, raw: Any, rows: Any, tensors: dict[str, Any]) -> Any:
            return row_scores(bk, raw, rows, bare, tensors)

        return scores

    def scores(self, bk: Any, raw: Any, rows: Any) -> Any:
        """The (rows,) scores of what the model returned for rows of samples ``rows``."""
        return row_scores(bk, raw, rows, self.resolved, self.tensors)


def row_scores(bk: Any, raw: Any, rows: Any, target: Resolved, tensors: dict[str, Any]) -> Any:
    """The (rows,) scores of a chunk of rows, differentiable, in the framework's graph.

    Args:
        bk: the backend (its tensor operations).
        raw: what the model returned for the rows.
        rows: int64 (rows,) the sample of each row (indexes ``tensors``).
        target: the resolved target.
        tensors: ``target.arrays`` as tensors on the model's device (:meth:`Resolved.arrays`).
    """
    if target.kind == "callable":
        scores = target.fn(raw)  # type: ignore[misc]
        n = int(rows.shape[0])
        if tuple(getattr(scores, "shape", ())) != (n,):
            raise XaikitValueError(
                f"target={getattr(target.fn, '__name__', 'callable')}: a callable target must return one "
                f"score per row, shape ({n},) for a chunk of {n} rows; it returned {describe(scores)}"
            )
        return scores
    if target.kind.startswith("box"):
        return box_scores(bk, raw, rows, target, tensors)
    out = bk.working(picked(raw, target.output))  # a half-precision output in float32
    n = int(out.shape[0])
    if target.kind == "output":
        return bk.pick(bk.reshape(out, (n, -1)), bk.gather(tensors["index"], rows))
    if target.kind == "region":
        if target.axis != 1:
            out = bk.moveaxis(out, target.axis, 1)
        plane = bk.pick(out, bk.gather(tensors["cls"], rows))
        return bk.sample_sum(plane * bk.gather(tensors["weight"], rows))
    if target.kind == "similarity":
        emb = bk.reshape(out, (n, -1))
        dot = bk.sample_sum(emb * bk.gather(tensors["reference"], rows))
        return dot / (bk.sample_sum(emb * emb) + EPS) ** 0.5 if target.normalize else dot
    raise XaikitValueError(f"internal error: unknown target kind {target.kind!r}")  # pragma: no cover


# ---- detection: Box -------------------------------------------------------------------------


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of boxes ``a`` (..., 4) and ``b`` (..., 4), (x0, y0, x1, y1), broadcast (host numpy).

    Example:
        >>> box_iou(np.array([0.0, 0.0, 2.0, 2.0]), np.array([[1.0, 0.0, 3.0, 2.0]])).tolist()
        [0.3333333333333333]
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    w = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    h = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = w * h
    area = lambda t: (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])  # noqa: E731
    union = area(a) + area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """(cx, cy, w, h) boxes (DETR/YOLOS ``pred_boxes``) as (x0, y0, x1, y1), same units."""
    c, s = boxes[..., :2], boxes[..., 2:4]
    return np.concatenate([c - s / 2, c + s / 2], axis=-1)


def _field(raw: Any, name: str) -> Any:
    if isinstance(raw, dict):
        return raw.get(name)
    return getattr(raw, name, None)


def _is_box_list(raw: Any) -> bool:
    return (
        isinstance(raw, (list, tuple))
        and len(raw) > 0
        and all(isinstance(d, dict) and {"boxes", "scores", "labels"} <= set(d) for d in raw)
    )


def _tensor_max(a: Any, b: Any) -> Any:
    return (a + b + abs(a - b)) / 2


def _tensor_min(a: Any, b: Any) -> Any:
    return (a + b - abs(a - b)) / 2


@dataclass(frozen=True, eq=False)
class Box(Target):
    """Object detection: the score of the detection that matches ``box`` with label ``k``.

    Three kinds of detector output are read:

    * a torchvision-style list of per-image dicts ``{"boxes": (N, 4) x0y0x1y1, "scores": (N,),
      "labels": (N,)}`` (N varies per image, non-maximum suppression inside the model): the
      score of a row is recomputed on every pass, as pytorch-grad-cam's
      ``FasterRCNNBoxScoreTarget``: the prediction with the best IoU with ``box``; if that IoU
      is > ``iou`` and its label is ``k``, IoU + its score, else 0.
    * a Hugging Face DETR/YOLOS-style output (object or dict) with ``logits`` (B, Q, K+1, the
      last class "no object") and ``pred_boxes`` (B, Q, 4) as (cx, cy, w, h) normalised to
      [0, 1]: converted to (x0, y0, x1, y1) fractions of the image, so ``box`` is given in
      fractions of the image's width and height too. Fixed query slots: the slot matched on
      the clean input is pinned (like a predicted class), a row's score is the class-``k``
      logit of that slot.
    * a YOLO-style tensor (B, N, 4 + K): (x0, y0, x1, y1) then K class scores per anchor;
      fixed slots as above, the score is the class-``k`` score of the pinned anchor.

    Matching (fixed slots): among the slots whose predicted class (argmax) is ``k``, the one
    with the best IoU with ``box``, which must be >= ``iou``; no match is an error naming
    ``target`` with the best IoU found.

    Several boxes per image in one call (stacked): ``box`` (B, T, 4) and ``k`` one label, (T,)
    or (B, T); ``explain`` then returns maps (B, T, ...) (see :func:`unstack`): the images are
    repeated T times and explained as B*T samples in large chunks, much faster than T calls.

    Args:
        box: (4,) for every image or (B, 4), (x0, y0, x1, y1); (B, T, 4) stacked; None with
            ``top``.
        k: the label, or one per image.
        iou: the IoU threshold of a match.
        top: instead of ``box``, the model's own ``top`` highest-scoring detections of class
            ``k`` (fixed slots only), their scores summed.

    Example:
        >>> out = np.zeros((1, 2, 6)); out[0, 1, :4] = [0, 0, 4, 4]; out[0, 1, 5] = 3.0
        >>> Box([0, 0, 4, 5], 1).resolve(out, True).arrays["index"].tolist()  # anchor 1, class 1
        [[11]]
    """

    box: Any
    k: Any
    iou: float = 0.5
    top: int | None = None

    def __post_init__(self) -> None:
        stacked = self.box is not None and np.ndim(self.box) == 3 and np.ndim(self.k) == 2
        _check_classes(np.asarray(self.k).reshape(-1) if stacked else self.k, "Box")  # (B, T) when stacked
        if isinstance(self.iou, bool) or not isinstance(self.iou, (int, float)) or not 0 <= self.iou <= 1:
            raise XaikitValueError(
                f"target=Box(..., iou=...): iou must be a number in [0, 1]; got {describe(self.iou)}"
            )
        if self.top is not None and (
            isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1
        ):
            raise XaikitValueError(
                f"target=Box(..., top=...): top must be None or an int >= 1; got {describe(self.top)}"
            )
        if (self.box is None) == (self.top is None):
            raise XaikitValueError(
                "target=Box(box, k, top=...): give either box (x0, y0, x1, y1) or top=n (the model's "
                f"own top-n detections), not {'both' if self.top is not None else 'neither'}"
            )

    def _boxes(self, batch: int) -> np.ndarray:
        given = self.box
        if hasattr(given, "detach"):
            given = given.detach().cpu().numpy()
        arr = np.asarray(given)
        if arr.dtype.kind not in "iuf" or arr.shape not in ((4,), (batch, 4)) or not np.all(np.isfinite(arr)):
            raise XaikitValueError(
                f"target=Box(box, ...): box must be (4,) or ({batch}, 4) finite numbers (x0, y0, x1, y1); "
                f"got {describe(self.box)}"
            )
        return np.broadcast_to(arr.astype(np.float64).reshape(-1, 4), (batch, 4)).copy()

    def resolve_raw(self, bk: Any, raw: Any, output: int | str, batch: int) -> Resolved:
        """This target checked against what the detector returned for the clean batch (the
        engine's entry: the output is read here, not through ``output=``'s default)."""
        if _is_box_list(raw):
            host = [
                {key: np.asarray(bk.to_numpy(d[key])) for key in ("boxes", "scores", "labels")} for d in raw
            ]
            return self.resolve(host, True, output, raw=host, batch=batch)
        if _field(raw, "pred_boxes") is not None and _field(raw, "logits") is not None:
            host2 = {key: np.asarray(bk.to_numpy(_field(raw, key))) for key in ("logits", "pred_boxes")}
            return self.resolve(host2, True, output, raw=host2, batch=batch)
        return self.resolve(np.asarray(bk.to_numpy(picked(raw, output))), True, output, batch=batch)

    def resolve(
        self, out: Any, channel_first: bool, output: int | str = 0, raw: Any = None, batch: int | None = None
    ) -> Resolved:
        what = (
            f"Box({self.box!r}, {self.k!r})" if self.top is None else f"Box(None, {self.k!r}, top={self.top})"
        )
        if _is_box_list(out):
            batch = len(out) if batch is None else batch
            if self.top is not None:
                raise XaikitValueError(
                    f"target={what}: top= needs fixed detection slots (DETR/YOLO outputs); for a "
                    "torchvision list of dicts give the boxes (e.g. the model's own out[i]['boxes'][:n])"
                )
            if len(out) != batch:
                raise XaikitValueError(
                    f"target={what}: the model returned {len(out)} dicts for {batch} images"
                )
            cls = _per_sample(_classes(self.k, "Box"), batch, what)
            boxes = self._boxes(batch)
            return Resolved(
                "box_list", output, {"box": boxes, "cls": cls, "iou": np.full(batch, float(self.iou))}
            )
        name: int | str
        if isinstance(out, dict) and "pred_boxes" in out:
            logits = np.asarray(out["logits"], dtype=np.float64)
            pred = cxcywh_to_xyxy(np.asarray(out["pred_boxes"], dtype=np.float64))
            scores, n_cls, offset, name = logits[..., :-1], logits.shape[-1] - 1, 0, "logits"
        else:
            arr = np.asarray(out, dtype=np.float64)
            if arr.ndim != 3 or arr.shape[-1] < 5:
                raise XaikitValueError(
                    f"target={what} explains a detector: a list of per-image dicts (boxes, scores, labels), "
                    f"an output with logits and pred_boxes, or a (B, N, 4 + K) tensor; the output read has "
                    f"shape {arr.shape}"
                )
            pred, scores, n_cls, offset, name = arr[..., :4], arr[..., 4:], arr.shape[-1] - 4, 4, output
            logits = arr
        batch = int(scores.shape[0]) if batch is None else batch
        cls = _per_sample(_classes(self.k, "Box"), batch, what)
        _in_range(cls, n_cls, what, "the label")
        width = logits.shape[-1]
        labels = scores.argmax(axis=-1)
        slots = []
        for b in range(batch):
            ok = labels[b] == cls[b]
            if self.top is not None:
                order = np.argsort(-np.where(ok, scores[b, :, cls[b]], -np.inf), kind="stable")[: self.top]
                if ok.sum() < self.top:
                    raise XaikitValueError(
                        f"target={what}: image {b} has {int(ok.sum())} detections of class {cls[b]}, fewer "
                        f"than top={self.top}"
                    )
                slots.append(order)
                continue
            ious = box_iou(self._boxes(batch)[b], pred[b])
            cand = np.where(ok, ious, -1.0)
            best = int(cand.argmax())
            if cand[best] < self.iou:
                raise XaikitValueError(
                    f"target={what}: image {b}: no detection of class {cls[b]} has IoU >= {self.iou} with the "
                    f"box; the best IoU found is {max(float(cand[best]), 0.0):.3f} (of class {cls[b]}) and "
                    f"{float(ious.max()):.3f} (any class): lower iou= or check the box's coordinates"
                    + (" (fractions of the image for pred_boxes outputs)" if name == "logits" else "")
                )
            slots.append(np.array([best]))
        index = np.stack(slots).astype(np.int64) * width + offset + cls[:, None]
        return Resolved("box_slots", name, {"index": index})


def box_scores(bk: Any, raw: Any, rows: Any, target: Resolved, tensors: dict[str, Any]) -> Any:
    """The (rows,) scores of a :class:`Box` target (see :func:`row_scores`)."""
    if target.kind == "box_slots":
        out = bk.working(picked(raw, target.output))
        flat = bk.reshape(out, (int(out.shape[0]), -1))
        index = bk.gather(tensors["index"], rows)
        total = bk.pick(flat, index[:, 0])
        for j in range(1, int(index.shape[1])):
            total = total + bk.pick(flat, index[:, j])
        return total
    if not _is_box_list(raw):
        raise XaikitValueError(
            f"target=Box(...): the model returned {describe(raw)} on a chunk of rows, not the list of "
            "per-image dicts (boxes, scores, labels) it returned on the clean input"
        )
    which = np.asarray(bk.to_numpy(rows)).astype(np.int64)
    boxes = np.asarray(bk.to_numpy(tensors["box"]))
    cls = np.asarray(bk.to_numpy(tensors["cls"]))
    thr = np.asarray(bk.to_numpy(tensors["iou"]))
    out = []
    for r, d in enumerate(raw):
        s = which[r]
        pb, ps = d["boxes"], bk.working(d["scores"])
        zero = bk.working(pb).sum() * 0.0 + ps.sum() * 0.0
        if int(pb.shape[0]) == 0:
            out.append(bk.reshape(zero, (1,)))
            continue
        ious = box_iou(boxes[s], np.asarray(bk.to_numpy(pb), dtype=np.float64))
        j = int(ious.argmax())
        label = int(np.asarray(bk.to_numpy(d["labels"])).reshape(-1)[j])
        if ious[j] > thr[s] and label == int(cls[s]):
            p = bk.working(pb[j])
            q = bk.working(tensors["box"][s])
            w = _tensor_max(_tensor_min(p[2], q[2]) - _tensor_max(p[0], q[0]), 0.0 * p[0])
            h = _tensor_max(_tensor_min(p[3], q[3]) - _tensor_max(p[1], q[1]), 0.0 * p[0])
            inter = w * h
            union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
            out.append(bk.reshape(inter / union + ps[j] + zero, (1,)))
        else:
            out.append(bk.reshape(zero, (1,)))
    return bk.cat(out)


# ---- stacked targets: several targets per image in one call --------------------------------


def unstack(target: Any, batch: int) -> tuple[Any, int] | None:
    """A stacked target (T targets per image: a :class:`Box` whose ``box`` is (B, T, 4)) as the
    target of B*T logical samples (sample ``b * T + t`` is image b's target t) and T; None for
    any other target. The caller repeats each image T times and reshapes the (B*T, ...) maps
    to (B, T, ...).

    Example:
        >>> t, n = unstack(Box(np.zeros((2, 3, 4)), [0, 1, 2]), 2)
        >>> n, np.asarray(t.box).shape, np.asarray(t.k).tolist()
        (3, (6, 4), [0, 1, 2, 0, 1, 2])
    """
    if not isinstance(target, Box) or target.box is None:
        return None
    given = target.box.detach().cpu().numpy() if hasattr(target.box, "detach") else target.box
    boxes = np.asarray(given)
    if boxes.ndim != 3:
        return None
    what = "Box(boxes (B, T, 4), k)"
    if boxes.shape[0] != batch or boxes.shape[2] != 4 or boxes.shape[1] == 0 or boxes.dtype.kind not in "iuf":
        raise XaikitValueError(
            f"target={what}: stacked boxes must be ({batch}, T, 4) numbers (T boxes for each of the {batch} "
            f"images); got {describe(target.box)}"
        )
    n = int(boxes.shape[1])
    k = np.asarray(target.k)
    if k.dtype.kind not in "iu" or isinstance(target.k, bool) or k.shape not in ((), (n,), (batch, n)):
        raise XaikitValueError(
            f"target={what}: k must be one label, ({n},) labels (one per box) or ({batch}, {n}); got "
            f"{describe(target.k)}"
        )
    labels = np.broadcast_to(k.astype(np.int64), (batch, n)).reshape(-1)
    return Box(boxes.reshape(batch * n, 4), labels, iou=target.iou), n
