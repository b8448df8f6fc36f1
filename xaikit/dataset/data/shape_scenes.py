"""``shape_scenes``: larger canvases holding one or two shapes of different classes (multi-label).

The pointing game's "Difficult" set (Zhang et al., "Top-down neural attention by excitation
backprop", ECCV 2016 / IJCV 2018) holds the images whose tested object is small (its box covers
less than a quarter of the image) *and* that show another class beside it. The bundled
:mod:`~xaikit.dataset.data.shapes` images hold one object each, so that set is empty there; these
scenes make it a real one, drawn with the same primitives as ``shapes`` (the five shapes of
:data:`~xaikit.dataset.data.shapes.label_mapping`, the background of a base colour, a linear
gradient, small distractor blobs and pixel noise).

Each image holds one shape (probability ``1 - two_objects``), of radius 8 to 24 pixels at 64x64
(so that about half of them cover more than a quarter of the image), or two shapes of two
different classes, of radius 5 to 16 and 5 to 12 pixels at 64x64 (all sizes scale with
``image_size / 64``), placed so that they neither overlap nor touch (their enclosing circles are at
least 2 pixels apart). Every object gets its own flat colour, far from the background's base colour.

Example:
    >>> from xaikit.dataset.data import shape_scenes
    >>> train, test = shape_scenes.load_data(n_train=8, n_eval=4)
    >>> train["x"].shape, train["y"].shape, train["y"].dtype.name, train["segmentation"].dtype.name
    ((8, 64, 64, 3), (8, 5), 'float32', 'int8')
"""

from __future__ import annotations

import numpy as np

from xaikit.checks import check_number
from xaikit.dataset.data.shapes import (
    _MIN_OBJECT_DISTANCE,
    _TRIANGLE_SCALE,
    _add_blobs,
    _background,
    _check_sizes,
    _far_colours,
    _to_uint8,
    label_mapping,
    shape_masks,
)
from xaikit.dataset.numpy_dataset import NumpyDataset
from xaikit.errors import XaikitValueError

__all__ = ["class_masks", "load_data"]

#: per label, the farthest point of the shape from its centre, in radii (a square's corner at
#: 0.8 * sqrt(2), a triangle's circumradius)
_REACH = np.array([1.0, 0.8 * np.sqrt(2.0), _TRIANGLE_SCALE, 1.0, 1.0])
_SINGLE = (8.0, 24.0)  # radius range of a lone shape at 64x64
_PAIR = ((5.0, 16.0), (5.0, 12.0))  # radius ranges of the two shapes of a pair at 64x64
_GAP = 2.0  # pixels between the enclosing circles of two shapes, at 64x64
_TRIES = 64  # candidate positions of the second shape per round
_CHUNK = 512  # images drawn at a time


def load_data(
    image_size: int = 64,
    n_train: int = 4000,
    n_eval: int = 500,
    seed: int = 0,
    two_objects: float = 0.4,
    distractors: int = 2,
) -> tuple[NumpyDataset, NumpyDataset]:
    """Make the ``shape_scenes`` train and eval datasets.

    Args:
        image_size: height and width of the square images (at least 32).
        n_train: number of training images.
        n_eval: number of evaluation images.
        seed: the seed; the same arguments always give the same images.
        two_objects: the probability that an image holds two shapes (of two different classes)
            rather than one, in [0, 1].
        distractors: the largest number of small distractor blobs per image (not a class).

    Returns:
        ``(train, eval)`` NumpyDatasets with ``x`` (N, H, W, 3) uint8 RGB images, ``y`` (N, 5)
        float32 multi-hot labels (1 for each class present), and ``segmentation`` (N, H, W) int8:
        the class label of each object pixel, -1 elsewhere (:func:`class_masks` turns it into
        one boolean mask per class).

    Raises:
        XaikitValueError: an image smaller than 32, negative sizes, ``two_objects`` outside [0, 1].
    """
    _check_sizes(image_size, 32, (("n_train", n_train), ("n_eval", n_eval), ("distractors", distractors)))
    two_objects = check_number(two_objects, "two_objects", low=0, high=1)
    rng = np.random.default_rng(seed)
    x, y, seg = _draw(n_train + n_eval, int(image_size), rng, float(two_objects), int(distractors))
    train = NumpyDataset({"x": x[:n_train], "y": y[:n_train], "segmentation": seg[:n_train]})
    evaluation = NumpyDataset({"x": x[n_train:], "y": y[n_train:], "segmentation": seg[n_train:]})
    return train, evaluation


def class_masks(segmentation: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Boolean (N, H, W) masks: for each image ``i``, the pixels of class ``labels[i]``.

    Example:
        >>> seg = np.array([[[-1, 2], [0, 2]]], dtype=np.int8)
        >>> class_masks(seg, np.array([2])).astype(int).tolist()
        [[[0, 1], [0, 1]]]
    """
    seg = np.asarray(segmentation)
    lab = np.asarray(labels).reshape(-1)
    if seg.ndim != 3 or lab.shape[0] != seg.shape[0]:
        raise XaikitValueError(
            f"segmentation must be (N, H, W) with one label per image; got segmentation of shape "
            f"{seg.shape} and {lab.shape[0]} labels"
        )
    return np.asarray(seg == lab[:, None, None])


def _draw(
    n: int, size: int, rng: np.random.Generator, two_objects: float, n_distractors: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ``n`` images, drawn :data:`_CHUNK` at a time (bounded float64 temporaries)."""
    parts = [
        _draw_chunk(min(_CHUNK, n - start), size, rng, two_objects, n_distractors)
        for start in range(0, n, _CHUNK)
    ]
    if not parts:
        parts = [_draw_chunk(0, size, rng, two_objects, n_distractors)]
    x, y, seg = (np.concatenate([p[k] for p in parts]) for k in range(3))
    return x, y, seg


def _draw_chunk(
    n: int, size: int, rng: np.random.Generator, two_objects: float, n_distractors: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = size / 64.0
    pair = np.asarray(rng.random(n)) < two_objects
    classes = np.argsort(rng.random((n, len(label_mapping))), axis=1)[:, :2]  # two distinct classes
    radius = np.stack(
        [
            np.where(pair, rng.uniform(*_PAIR[0], size=n), rng.uniform(*_SINGLE, size=n)),
            rng.uniform(*_PAIR[1], size=n),
        ],
        axis=1,
    )
    radius = radius * scale
    angle = rng.uniform(-np.pi / 12, np.pi / 12, size=(n, 2))
    centres = np.zeros((n, 2, 2))
    for i in range(n):
        centres[i], radius[i] = _place(classes[i], radius[i], bool(pair[i]), size, _GAP * scale, rng)
    seg = np.full((n, size, size), -1, dtype=np.int8)
    for slot in (0, 1):
        rows = np.flatnonzero(pair) if slot else np.arange(n)
        lab = classes[rows, slot]
        cy, cx = centres[rows, slot, 0], centres[rows, slot, 1]
        drawn = shape_masks(lab, size, radius[rows, slot], cy, cx, angle[rows, slot])
        seg[rows] = np.where(drawn, lab[:, None, None].astype(np.int8), seg[rows])
    y = np.zeros((n, len(label_mapping)), dtype=np.float32)
    y[np.arange(n), classes[:, 0]] = 1.0
    y[pair, classes[pair, 1]] = 1.0
    base = rng.uniform(0.2, 0.8, size=(n, 3))
    colours = np.stack([_far_colours(rng, base, _MIN_OBJECT_DISTANCE, 0.0, 1.0) for _ in (0, 1)], axis=1)
    img = _background(base, size, rng)
    img = _add_blobs(img, colours[:, 0], size, rng, n_distractors)
    for slot in (0, 1):
        on = seg == classes[:, slot, None, None]
        img = np.where(on[..., None], colours[:, slot, None, None, :], img)
    return _to_uint8(img, rng), y, seg


def _place(
    classes: np.ndarray, radius: np.ndarray, pair: bool, size: int, gap: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``(2, 2)`` (row, column) and radii ``(2,)`` of one image's shapes, inside the
    canvas and, for a pair, apart: the radii shrink by 10% each round no position fits."""
    radius = radius.copy()
    reach = _REACH[classes]
    while True:
        margin = reach * radius + 1.0
        first = rng.uniform(margin[0], size - 1 - margin[0], size=2)
        if not pair:
            return np.stack([first, first]), radius
        second = rng.uniform(margin[1], size - 1 - margin[1], size=(_TRIES, 2))
        apart = np.linalg.norm(second - first, axis=1) >= reach @ radius + gap
        if apart.any():
            return np.stack([first, second[int(np.argmax(apart))]]), radius
        radius *= 0.9
