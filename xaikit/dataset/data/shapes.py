"""``shapes``: synthetic colour images of simple shapes over cluttered backgrounds.

Each image holds exactly one object of one of five classes (:data:`label_mapping`), drawn in a
flat colour at a random position, size and (for the polygons) rotation, over a background made
of a base colour, a linear colour gradient, pixel noise and a few small distractor blobs. The
object alone decides the label, and ``mask`` marks exactly the object's pixels, so a saliency
map can be scored against where the evidence really is.

Colours are chosen with margins: the object's colour is far from the background's base colour
and from every distractor's colour, so every pixel under the mask differs clearly from every
pixel outside it (by at least about 0.15 of the full range per pixel, in RGB distance).

Everything is made with numpy from one seed, vectorized over images with coordinate grids
(7000 images of 32x32 take well under a second).

Example:
    >>> from xaikit.dataset.data import shapes
    >>> train, test = shapes.load_data(n_train=10, n_eval=5)
    >>> train["x"].shape, train["x"].dtype.name, train["mask"].shape, len(test)
    ((10, 32, 32, 3), 'uint8', (10, 32, 32), 5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xaikit.dataset.numpy_dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError

__all__ = ["label_mapping", "load_data", "shape_masks"]

#: class name -> label
label_mapping: dict[str, int] = {"circle": 0, "square": 1, "triangle": 2, "cross": 3, "ring": 4}

_MIN_OBJECT_DISTANCE = 0.6  # RGB distance between the object and the background base colour
_MIN_DISTRACTOR_DISTANCE = 0.45  # RGB distance between the object and each distractor blob
_GRADIENT = 0.10  # largest gradient offset per channel, either side of the base colour
_NOISE = 0.04  # largest pixel noise per channel
_TRIANGLE_SCALE = 1.2  # triangles' circumradius / radius, so their area is like the others'


def load_data(
    image_size: int = 32,
    n_train: int = 6000,
    n_eval: int = 1000,
    seed: int = 0,
    classes: Sequence[str] | None = None,
    distractors: int = 4,
) -> tuple[NumpyDataset, NumpyDataset]:
    """Make the ``shapes`` train and eval datasets.

    Args:
        image_size: height and width of the square images (at least 16).
        n_train: number of training images.
        n_eval: number of evaluation images.
        seed: the seed; the same arguments always give the same images.
        classes: names of the classes to draw (a subset of :data:`label_mapping`, which keeps
            its labels); None for all five.
        distractors: the largest number of small distractor blobs per image (each image gets
            between 0 and this many).

    Returns:
        ``(train, eval)`` NumpyDatasets with ``x`` (N, H, W, 3) uint8 RGB images, ``y`` (N,)
        int64 labels (classes balanced to within one image), and ``mask`` (N, H, W) bool, True
        exactly on the object's pixels.

    Raises:
        XaikitValueError: an image smaller than 16, negative sizes, an unknown class name.
    """
    _check_sizes(image_size, 16, (("n_train", n_train), ("n_eval", n_eval), ("distractors", distractors)))
    if classes is None:
        names = list(label_mapping)
    else:
        if isinstance(classes, str):
            raise XaikitTypeError(f"classes must be a list of class names; got the str {classes!r}")
        names = list(classes)
        unknown = [c for c in names if c not in label_mapping]
        if unknown or not names or len(set(names)) != len(names):
            raise XaikitValueError(
                f"classes must be distinct names among {list(label_mapping)}; got {list(classes)!r}"
            )
    rng = np.random.default_rng(seed)
    labels = np.array([label_mapping[c] for c in names], dtype=np.int64)
    # balanced within each split: cycle the classes, then shuffle
    y_train = labels[rng.permutation(np.arange(n_train) % len(labels))]
    y_eval = labels[rng.permutation(np.arange(n_eval) % len(labels))]
    y = np.concatenate([y_train, y_eval])
    x, mask = _draw(y, int(image_size), rng, int(distractors))
    train = NumpyDataset({"x": x[:n_train], "y": y[:n_train], "mask": mask[:n_train]})
    evaluation = NumpyDataset({"x": x[n_train:], "y": y[n_train:], "mask": mask[n_train:]})
    return train, evaluation


def _check_sizes(image_size: Any, smallest: int, counts: Sequence[tuple[str, Any]]) -> None:
    """Check the arguments of a ``load_data``: ``image_size`` an int of at least ``smallest`` and
    each ``(name, value)`` of ``counts`` a non-negative int; the first bad one is a
    :class:`~xaikit.errors.XaikitValueError` that names it."""
    if not isinstance(image_size, (int, np.integer)) or image_size < smallest:
        raise XaikitValueError(f"image_size must be an int of at least {smallest}; got {image_size!r}")
    for name, n in counts:
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise XaikitValueError(f"{name} must be a non-negative int; got {n!r}")


def _far_colours(
    rng: np.random.Generator, ref: np.ndarray, min_dist: float, low: float, high: float
) -> np.ndarray:
    """One colour per row of ``ref`` (..., 3), at least ``min_dist`` away from it when possible
    (the farthest of 16 candidates otherwise)."""
    cands = rng.uniform(low, high, size=(16, *ref.shape))
    dist = np.linalg.norm(cands - ref[None], axis=-1)
    ok = dist >= min_dist
    pick = np.where(ok.any(axis=0), ok.argmax(axis=0), dist.argmax(axis=0))
    return np.take_along_axis(cands, pick[None, ..., None], axis=0)[0]


def _object_masks(y: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Boolean (N, H, W) object masks, one shape per label, at random sizes and positions."""
    n = y.shape[0]
    scale = size / 32.0
    radius = np.asarray(rng.uniform(6.0, 10.0, size=n)) * scale
    margin = _extent(y) * radius + 1.0
    cy = np.asarray(rng.uniform(margin, size - 1 - margin))
    cx = np.asarray(rng.uniform(margin, size - 1 - margin))
    angle = np.asarray(rng.uniform(-np.pi / 12, np.pi / 12, size=n))
    return shape_masks(y, size, radius, cy, cx, angle)


def _extent(y: np.ndarray) -> np.ndarray:
    """Per label, the farthest point of the shape from its centre, in radii."""
    return np.where(y == label_mapping["triangle"], _TRIANGLE_SCALE, 1.0)


def shape_masks(
    y: np.ndarray, size: int, radius: np.ndarray, cy: np.ndarray, cx: np.ndarray, angle: np.ndarray
) -> np.ndarray:
    """Boolean (N, size, size) masks of the shapes of labels ``y`` (N,) at given geometry.

    The drawing primitive of :func:`load_data` (and of :mod:`xaikit.dataset.data.shape_scenes`):
    shape ``k`` has radius ``radius[k]`` (pixels; a triangle's circumradius is 1.2 times it, so
    that the shapes' areas are alike), centre ``(cy[k], cx[k])`` (row, column) and rotation
    ``angle[k]`` (radians; the circle and ring do not change).
    """
    grid = np.arange(size, dtype=np.float64)
    dy = grid[None, :, None] - cy[:, None, None]
    dx = grid[None, None, :] - cx[:, None, None]
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    u = cos * dx + sin * dy  # rotated coordinates
    v = -sin * dx + cos * dy
    r = radius[:, None, None]
    dist = np.sqrt(dx**2 + dy**2)
    drawn = {
        "circle": dist <= r,
        "square": np.maximum(np.abs(u), np.abs(v)) <= 0.8 * r,
        "triangle": _triangle(u, v, _TRIANGLE_SCALE * r),
        "cross": ((np.abs(u) <= 0.3 * r) & (np.abs(v) <= r)) | ((np.abs(v) <= 0.3 * r) & (np.abs(u) <= r)),
        "ring": (dist <= r) & (dist >= 0.55 * r),
    }
    mask = np.zeros((y.shape[0], size, size), dtype=bool)
    for name, label in label_mapping.items():
        rows = y == label
        mask[rows] = drawn[name][rows]
    return mask


def _triangle(u: np.ndarray, v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """An upward equilateral triangle with circumradius ``r``: inside all three edge half-planes."""
    inside = np.ones(np.broadcast_shapes(u.shape, r.shape), dtype=bool)
    for theta in (np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3):
        inside &= u * np.cos(theta) + v * np.sin(theta) <= 0.5 * r
    return inside


def _draw(
    y: np.ndarray, size: int, rng: np.random.Generator, n_distractors: int
) -> tuple[np.ndarray, np.ndarray]:
    mask = _object_masks(y, size, rng)
    return _paint(mask, size, rng, n_distractors), mask


def _paint(mask: np.ndarray, size: int, rng: np.random.Generator, n_distractors: int) -> np.ndarray:
    """(n, size, size, 3) uint8 images: a background with distractor blobs, and each object's
    (n, size, size) ``mask`` in a flat colour far from both."""
    n = mask.shape[0]
    base = rng.uniform(0.2, 0.8, size=(n, 3))
    obj = _far_colours(rng, base, _MIN_OBJECT_DISTANCE, 0.0, 1.0)
    img = _background(base, size, rng)
    img = _add_blobs(img, obj, size, rng, n_distractors)
    img = np.where(mask[..., None], obj[:, None, None, :], img)
    return _to_uint8(img, rng)


def _background(base: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """(N, H, W, 3) floats: each base colour (N, 3) plus a linear gradient in a random direction."""
    n = base.shape[0]
    grid = np.linspace(-1.0, 1.0, size)
    direction = rng.uniform(0, 2 * np.pi, size=n)
    ramp = (
        np.cos(direction)[:, None, None] * grid[None, None, :]
        + np.sin(direction)[:, None, None] * grid[None, :, None]
    )
    ramp = ramp / np.sqrt(2.0)  # in [-1, 1]
    tint = rng.uniform(-_GRADIENT, _GRADIENT, size=(n, 1, 1, 3))
    return np.asarray(base[:, None, None, :] + ramp[..., None] * tint)


def _add_blobs(
    img: np.ndarray, obj: np.ndarray, size: int, rng: np.random.Generator, n_distractors: int
) -> np.ndarray:
    """``img`` with 0 to ``n_distractors`` small discs/squares per image, of colours far from
    the object colours ``obj`` (N, 3)."""
    n = img.shape[0]
    grid_i = np.arange(size, dtype=np.float64)
    count = rng.integers(0, n_distractors + 1, size=n) if n_distractors else np.zeros(n, dtype=np.int64)
    for k in range(n_distractors):
        active = np.asarray(count > k)
        rad = np.asarray(rng.uniform(1.0, 2.2, size=n)) * size / 32.0
        py = np.asarray(rng.uniform(0, size - 1, size=n))
        px = np.asarray(rng.uniform(0, size - 1, size=n))
        square = np.asarray(rng.random(n)) < 0.5
        ddy = grid_i[None, :, None] - py[:, None, None]
        ddx = grid_i[None, None, :] - px[:, None, None]
        disc = ddx**2 + ddy**2 <= rad[:, None, None] ** 2
        box = np.maximum(np.abs(ddx), np.abs(ddy)) <= rad[:, None, None]
        blob = np.where(square[:, None, None], box, disc) & active[:, None, None]
        colour = _far_colours(rng, obj, _MIN_DISTRACTOR_DISTANCE, 0.0, 1.0)
        img = np.where(blob[..., None], colour[:, None, None, :], img)
    return img


def _to_uint8(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pixel noise added, then rounded to uint8 RGB."""
    img = img + rng.uniform(-_NOISE, _NOISE, size=img.shape)
    return np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)
