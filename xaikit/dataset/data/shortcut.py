"""``shortcut``: the ``shapes`` images with a planted shortcut, a coloured corner tag on one class.

A "Clever Hans" test bed: a small square patch of one flat colour (the *tag*) sits in a corner of
``tag_rate`` (default 90%) of one class's training images and of ``tag_other_rate`` (default 2%)
of the other classes' images. A model that learns the tag instead of the shape loses accuracy on
that class's tag-free images, and its explanations put their energy in the tag's corner: what
:func:`xaikit.analyze.dataset` must find without being told where the tag is.

The images are drawn as :mod:`~xaikit.dataset.data.shapes` draws them (one object of five classes,
a background of a base colour, a linear gradient, distractor blobs and pixel noise), with one
change: no object comes within ``gap`` pixels of the tag's square, so the object is never under
the tag, in tagged and tag-free images alike. The tag is painted last, after the pixel noise: its
pixels are exactly ``tag_colour``.

The eval split tags the tagged class at ``eval_tag_rate`` (default 0.5, so one split measures
the tagged and the tag-free accuracy of the class) and the others at ``tag_other_rate``; its
``x_clean`` column holds every eval image without its tag (the same image otherwise), the paired
tag-free test set.

Example:
    >>> from xaikit.dataset.data import shortcut
    >>> train, test = shortcut.load_data(n_train=20, n_eval=10, seed=1)
    >>> sorted(train.keys()), train["tag"].dtype.name, int(shortcut.tag_mask(32).sum())
    (['mask', 'tag', 'x', 'y'], 'bool', 16)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xaikit.checks import check_choice, check_number
from xaikit.dataset.data.shapes import (
    _check_sizes,
    _extent,
    _paint,
    label_mapping,
    shape_masks,
)
from xaikit.dataset.numpy_dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError

__all__ = ["CORNERS", "add_tag", "label_mapping", "load_data", "tag_mask"]

#: the corners a tag can sit in
CORNERS = ("top-left", "top-right", "bottom-left", "bottom-right")
_MAX_ROUNDS = 1000  # redraws of the objects that come near the tag (each round redraws ~10%)


def load_data(
    image_size: int = 32,
    n_train: int = 6000,
    n_eval: int = 1000,
    seed: int = 0,
    tag_class: str = "circle",
    tag_rate: float = 0.9,
    tag_other_rate: float = 0.02,
    eval_tag_rate: float = 0.5,
    tag_size: int | None = None,
    tag_colour: Sequence[int] = (255, 0, 255),
    corner: str = "top-left",
    gap: int = 1,
    distractors: int = 4,
) -> tuple[NumpyDataset, NumpyDataset]:
    """Make the planted-shortcut train and eval datasets.

    The tagged images are chosen exactly: ``round(tag_rate * n)`` of the ``n`` images of the tagged
    class, ``round(tag_other_rate * m)`` of the ``m`` others (picked at random, seeded).

    Args:
        image_size: height and width of the square images (at least 16).
        n_train: number of training images (classes balanced to within one image).
        n_eval: number of evaluation images.
        seed: the seed; the same arguments always give the same images and tags. The two splits
            are drawn from two child seeds: the training images do not depend on ``n_eval``, nor
            the eval images on ``n_train``.
        tag_class: the class whose images carry the tag (a name of :data:`label_mapping`).
        tag_rate: the share of the tagged class's training images that carry the tag, in [0, 1].
        tag_other_rate: the share of the other classes' images (train and eval) with the tag.
        eval_tag_rate: the share of the tagged class's eval images that carry the tag.
        tag_size: the tag's side in pixels (default ``image_size // 8``: 4 at 32x32).
        tag_colour: the tag's RGB colour, three ints in 0..255.
        corner: one of :data:`CORNERS`.
        gap: the least distance, in pixels, between an object and the tag's square.
        distractors: the largest number of small distractor blobs per image (as ``shapes``).

    Returns:
        ``(train, eval)`` NumpyDatasets with ``x`` (N, H, W, 3) uint8 RGB images, ``y`` (N,) int64
        labels, ``mask`` (N, H, W) bool (the object's pixels, never under the tag) and ``tag``
        (N,) bool (the image carries the tag); eval also has ``x_clean``, its images without tag.

    Raises:
        XaikitValueError: a bad size, rate, class, colour or corner, or a tag too big for an
            object to fit beside it.
    """
    _check_sizes(
        image_size, 16, (("n_train", n_train), ("n_eval", n_eval), ("distractors", distractors), ("gap", gap))
    )
    if not isinstance(tag_class, str):
        raise XaikitTypeError(f"tag_class must be a class name (str); got {type(tag_class).__name__}")
    check_choice(tag_class, "tag_class", list(label_mapping))
    rates = {
        name: check_number(value, name, low=0, high=1)
        for name, value in (
            ("tag_rate", tag_rate),
            ("tag_other_rate", tag_other_rate),
            ("eval_tag_rate", eval_tag_rate),
        )
    }
    side = _tag_side(int(image_size), tag_size)
    colour = _colour(tag_colour)
    region = tag_mask(int(image_size), side, corner)
    klass = label_mapping[tag_class]
    keep_out = _grow(region, int(gap))
    splits = []
    # each split from its own child seed: the training images do not change with n_eval
    for n, rate, seq in zip(
        (n_train, n_eval), (rates["tag_rate"], rates["eval_tag_rate"]), np.random.SeedSequence(seed).spawn(2)
    ):
        rng = np.random.default_rng(seq)
        labels = np.array(list(label_mapping.values()), dtype=np.int64)
        y = labels[rng.permutation(np.arange(n) % len(labels))]
        tag = _choose(y == klass, rate, rates["tag_other_rate"], rng)
        clean, mask = _draw(y, int(image_size), rng, int(distractors), keep_out)
        splits.append(
            {
                "x": add_tag(clean, region, colour, where=tag),
                "y": y,
                "mask": mask,
                "tag": tag,
                "x_clean": clean,
            }
        )
    train = NumpyDataset({k: v for k, v in splits[0].items() if k != "x_clean"})
    evaluation = NumpyDataset(splits[1])
    return train, evaluation


def tag_mask(image_size: int, tag_size: int | None = None, corner: str = "top-left") -> np.ndarray:
    """The tag's pixels: a boolean (image_size, image_size) mask, True on the tag's square.

    Example:
        >>> tag_mask(16, 2, "bottom-right").nonzero()
        (array([14, 14, 15, 15]), array([14, 15, 14, 15]))
    """
    if not isinstance(image_size, (int, np.integer)) or image_size < 1:
        raise XaikitValueError(f"image_size must be a positive int; got {image_size!r}")
    check_choice(corner, "corner", CORNERS)
    side = _tag_side(int(image_size), tag_size)
    region = np.zeros((image_size, image_size), dtype=bool)
    rows = slice(0, side) if corner.startswith("top") else slice(image_size - side, image_size)
    cols = slice(0, side) if corner.endswith("left") else slice(image_size - side, image_size)
    region[rows, cols] = True
    return region


def add_tag(
    x: np.ndarray, region: np.ndarray, colour: Sequence[int] = (255, 0, 255), where: np.ndarray | None = None
) -> np.ndarray:
    """A copy of the uint8 images ``x`` (N, H, W, 3) with ``colour`` painted on ``region`` (H, W).

    Args:
        x: the images.
        region: boolean (H, W), e.g. :func:`tag_mask`.
        colour: RGB, three ints in 0..255.
        where: boolean (N,), the images to tag (default: all).
    """
    x = np.asarray(x)
    region = np.asarray(region, dtype=bool)
    if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
        raise XaikitValueError(f"x must be uint8 images (N, H, W, 3); got {x.dtype} of shape {x.shape}")
    if region.shape != x.shape[1:3]:
        raise XaikitValueError(f"region must be (H, W) = {x.shape[1:3]}; got shape {region.shape}")
    rows = np.ones(len(x), dtype=bool) if where is None else np.asarray(where, dtype=bool)
    if rows.shape != (len(x),):
        raise XaikitValueError(f"where must be ({len(x)},) bool; got shape {rows.shape}")
    out = x.copy()
    paint = rows[:, None, None] & region[None]
    out[paint] = np.asarray(_colour(colour), dtype=np.uint8)
    return out


def _tag_side(image_size: int, tag_size: int | None) -> int:
    if tag_size is None:
        return max(2, image_size // 8)
    if not isinstance(tag_size, (int, np.integer)) or not 1 <= tag_size <= image_size // 4:
        raise XaikitValueError(
            f"tag_size must be an int in 1..image_size // 4 = {image_size // 4} (a small corner "
            f"patch that leaves room for the object); got {tag_size!r}"
        )
    return int(tag_size)


def _colour(colour: Sequence[int]) -> tuple[int, int, int]:
    values = list(np.asarray(colour).reshape(-1)) if not isinstance(colour, str) else []
    if len(values) != 3 or not all(float(v).is_integer() and 0 <= v <= 255 for v in values):
        raise XaikitValueError(f"tag_colour must be three ints in 0..255 (RGB); got {colour!r}")
    return int(values[0]), int(values[1]), int(values[2])


def _choose(in_class: np.ndarray, rate: float, other_rate: float, rng: np.random.Generator) -> np.ndarray:
    """(N,) bool: exactly ``round(rate * n)`` of the ``in_class`` rows and ``round(other_rate * m)``
    of the others, at random."""
    tag = np.zeros(in_class.shape[0], dtype=bool)
    for rows, share in ((np.flatnonzero(in_class), rate), (np.flatnonzero(~in_class), other_rate)):
        tag[rng.choice(rows, size=round(share * len(rows)), replace=False)] = True
    return tag


def _grow(region: np.ndarray, gap: int) -> np.ndarray:
    """``region`` dilated by ``gap`` pixels (a square structuring element)."""
    rows, cols = np.nonzero(region)
    out = np.zeros_like(region)
    size = region.shape[0]
    out[
        max(rows.min() - gap, 0) : min(rows.max() + gap + 1, size),
        max(cols.min() - gap, 0) : min(cols.max() + gap + 1, size),
    ] = True
    return out


def _draw(
    y: np.ndarray, size: int, rng: np.random.Generator, n_distractors: int, keep_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Tag-free images and object masks, as ``shapes`` draws them, no object touching ``keep_out``."""
    n = y.shape[0]
    scale = size / 32.0
    radius = np.asarray(rng.uniform(6.0, 10.0, size=n)) * scale
    margin = _extent(y) * radius + 1.0
    angle = np.asarray(rng.uniform(-np.pi / 12, np.pi / 12, size=n))
    cy, cx = np.zeros(n), np.zeros(n)
    mask = np.zeros((n, size, size), dtype=bool)
    todo = np.arange(n)
    for _ in range(_MAX_ROUNDS):
        if todo.size == 0:
            break
        cy[todo] = rng.uniform(margin[todo], size - 1 - margin[todo])
        cx[todo] = rng.uniform(margin[todo], size - 1 - margin[todo])
        mask[todo] = shape_masks(y[todo], size, radius[todo], cy[todo], cx[todo], angle[todo])
        todo = todo[(mask[todo] & keep_out[None]).any(axis=(1, 2))]
    if todo.size:
        raise XaikitValueError(
            f"tag too big: {todo.size} objects found no place away from the tag; make tag_size or "
            "gap smaller or image_size larger"
        )
    return _paint(mask, size, rng, n_distractors), mask
