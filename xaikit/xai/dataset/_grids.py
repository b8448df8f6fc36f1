"""Grids of a dataset explanation: the first samples, the most and the least confident (by the
stored ``score``), each row the sample, the image, its map (with a colorbar) and the map laid
over the image; for a run that explains a box (``Box``) or a masked region (``ClassRegion``
with a mask), fixed or per sample, the box or the mask's outline is drawn on the image and
the overlay.

:func:`pick_samples` chooses the samples, :func:`dataset_grid` builds one grid (an
:class:`~xaikit.viz.ImgData`; painting is ``viz``'s), :func:`save_grids` writes the PNGs of
``xaikit explain``. The gallery's ``docs/img/dataset_grids.png`` is built by the same functions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xaikit.errors import XaikitError
from xaikit.layout import channel_axis_of
from xaikit.targets import Box, ClassRegion
from xaikit.xai._engine.display import to_display
from xaikit.xai.dataset._sources import Source
from xaikit.xai.registry import title as method_title

if TYPE_CHECKING:
    from xaikit.viz import ImgData

#: the grids of :func:`save_grids`, in order
GRIDS = ("first", "most_confident", "least_confident")


def pick_samples(table: Any, n: int) -> dict[str, np.ndarray]:
    """The sample indices of each grid of :data:`GRIDS`: the first ``n`` rows of ``table``, the
    ``n`` of highest score (best first) and the ``n`` of lowest score (worst first); ties keep
    the table's order.

    Example:
        >>> import pandas as pd
        >>> t = pd.DataFrame({"index": [0, 1, 2, 3], "score": [0.5, 0.9, 0.2, 0.9]})
        >>> {k: v.tolist() for k, v in pick_samples(t, 2).items()}
        {'first': [0, 1], 'most_confident': [1, 3], 'least_confident': [2, 0]}
    """
    index = table["index"].to_numpy()
    score = table["score"].to_numpy()
    low_first = np.argsort(score, kind="stable")
    high_first = np.argsort(-score, kind="stable")
    return {
        "first": index[:n],
        "most_confident": index[high_first[:n]],
        "least_confident": index[low_first[:n]],
    }


def display_images(x: np.ndarray) -> np.ndarray:
    """(B, H, W, 3) images in [0, 1] to paint and to lay maps over: channel-first batches moved
    to channel-last, grayscale repeated to RGB, and values outside [0, 1] scaled per image from
    its minimum to its maximum (normalized model inputs).

    Example:
        >>> rgb = display_images(np.array([[[0.0, 2.0], [1.0, 1.0]]]))  # one 2x2 grayscale image
        >>> rgb.shape, rgb[0, :, :, 0].tolist()
        ((1, 2, 2, 3), [[0.0, 1.0], [0.5, 0.5]])
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 3:
        x = x[..., None]
    elif channel_axis_of(x.shape, prefer_first=True) == 1:
        x = x.transpose(0, 2, 3, 1)
    if x.shape[-1] == 1:
        x = np.repeat(x, 3, axis=-1)
    if x.size and (x.min() < 0 or x.max() > 1):
        lo = x.min(axis=(1, 2, 3), keepdims=True)
        span = x.max(axis=(1, 2, 3), keepdims=True) - lo
        x = (x - lo) / np.where(span > 0, span, 1.0)
    return x


def dataset_grid(
    result: Any, source: Source, idx: np.ndarray, title: str, table: Any = None
) -> ImgData | None:
    """The grid of samples ``idx`` (committed ones) of ``result`` (a
    :class:`~xaikit.xai.DatasetExplanation`) read from ``source``: one row per sample with
    ``#index pred P (score)`` (then the file's name, if any, and ``label L`` where a label
    differs, in red; P and L are class names where the run has them), the image, its map
    scaled for display (a column titled with the method's name, e.g. "Grad-CAM", with a
    colorbar) and the map laid over the image. None when the samples are not images (no
    grid). ``table`` is ``result.table`` when the caller has read it already."""
    from xaikit.viz import ImgData

    idx = np.asarray(idx, dtype=np.int64)
    x = np.concatenate([source.get(int(i), int(i) + 1).x for i in idx])
    if x.ndim not in (3, 4):
        return None
    raw = np.asarray(result.attributions.get_orthogonal_selection((idx,)))
    axis = channel_axis_of(raw.shape, prefer_first=x.ndim == 4 and channel_axis_of(x.shape, True) == 1)
    mask = to_display(raw, axis)
    if mask.ndim == 4:
        mask = mask[:, 0] if axis == 1 else mask[..., 0]
    rows = (result.table if table is None else table).set_index("index").loc[idx]
    names = result.manifest.get("classes")
    text, colors = [], []
    explained = target_captions(result, idx, names)
    for j, (i, p, s, y, f) in enumerate(
        zip(idx, rows["prediction"], rows["score"], rows["label"], rows["file"])
    ):
        wrong = y >= 0 and p >= 0 and y != p
        name = os.path.basename(str(f))
        name = name if len(name) <= 24 else "…" + name[-23:]
        text.append(
            (
                f"#{i} pred {_class(p, names)} ({s:.2f})"
                if explained is None
                else f"#{i} {explained[j]} ({s:.2f})"
            )
            + (f"\n{name}" if name else "")
            + (f"\nlabel {_class(y, names)}" if wrong else "")
        )
        colors.append("red" if wrong else None)
    image = display_images(x)
    column = method_title(result.manifest["method"])
    marks = target_marks(result, idx, image.shape[1:3])
    drawn = [] if marks is None else [marks]
    return ImgData(
        {"sample": text, "image": [image, *drawn], column: mask, "overlay": [image, mask, *drawn]},
        colormaps={column: "inferno", "overlay": "inferno"},
        vranges={"image": (0.0, 1.0), column: (0.0, 1.0), "overlay": (0.0, 1.0)},
        colorbars={column},
        text_colors={"sample": colors},
        figure_title=title,
    )


def target_marks(result: Any, idx: np.ndarray, hw: tuple[int, ...]) -> Any:
    """What the grid draws of the explained target of samples ``idx`` on (H, W) = ``hw``
    images, as a :class:`~xaikit.viz.Contour`: a ``ClassRegion``'s masks, or a ``Box``'s boxes
    as the pixels they touch (:func:`~xaikit.viz.contour.box_pixels`; a box all in [0, 1] is
    read as fractions of the image), so the frame is drawn on the image's pixels as the
    report's thumbnails draw it; None for any other target."""
    from xaikit.viz import Contour
    from xaikit.viz.contour import box_pixels

    try:
        target = result.targets_of(idx)
    except (XaikitError, AttributeError, KeyError, ValueError):
        return None
    n = len(idx)
    if isinstance(target, Box) and target.box is not None:
        boxes = np.broadcast_to(np.asarray(target.box, np.float64).reshape(-1, 4), (n, 4)).copy()
        if boxes.size and np.all((boxes >= 0) & (boxes <= 1)):
            boxes *= np.array([hw[1], hw[0], hw[1], hw[0]], np.float64)
        return Contour(box_pixels(boxes, (int(hw[0]), int(hw[1]))))
    if isinstance(target, ClassRegion) and target.mask is not None:
        masks = np.asarray(target.mask)
        masks = np.broadcast_to(masks, (n, *masks.shape[-2:])) != 0
        return Contour(masks)
    return None


def target_captions(result: Any, idx: np.ndarray, names: list[str] | None) -> list[str] | None:
    """What each of samples ``idx`` explains, for the grid's text, when the run explained a
    target object (its table's ``prediction`` is then -1 and its ``score`` the object's score):
    ``"box <class>"``, ``"region <class>"``, ``"class <class>"``, ``"output <index>"`` or
    ``"similarity"``; None for a run that explained classes."""
    described = result.manifest.get("target")
    if not isinstance(described, dict):
        return None
    target = result.targets_of(idx)
    kind = type(target).__name__
    if kind == "Output":
        return [f"output {v}" for v in np.broadcast_to(np.asarray(target.index), (len(idx),))]
    if kind not in ("Class", "ClassRegion", "Box"):
        return ["similarity" if kind == "Similarity" else kind.lower()] * len(idx)
    word = {"Class": "class", "ClassRegion": "region", "Box": "box"}[kind]
    k = np.asarray(target.k)
    if k.ndim > 1:  # never for a store (stacked boxes are refused); one word rather than a guess
        return [word] * len(idx)
    return [f"{word} {_class(v, names)}" for v in np.broadcast_to(k, (len(idx),))]


def _class(index: Any, names: list[str] | None) -> str:
    """A class for the grid's text: its name where the run has names, else its index."""
    i = int(index)
    if names is not None and 0 <= i < len(names):
        name = str(names[i])
        return name if len(name) <= 20 else name[:19] + "…"
    return str(i)


def save_grids(result: Any, source: Source, folder: str | os.PathLike[str], n: int = 8) -> list[Path]:
    """Write ``first.png``, ``most_confident.png`` and ``least_confident.png`` into ``folder``
    (``n`` samples each, committed samples only), titled with the method's name (e.g.
    "Grad-CAM: most confident"); returns the paths."""
    table = result.table
    if len(table) == 0:
        return []
    paths = []
    method = method_title(result.manifest["method"])
    for name, idx in pick_samples(table, n).items():
        grid = dataset_grid(result, source, idx, f"{method}: {name.replace('_', ' ')}", table)
        if grid is None:  # not images: no grid
            return []
        path = Path(folder) / f"{name}.png"
        grid.paint_figure(save_path=path, dpi=72)
        paths.append(path)
    return paths
