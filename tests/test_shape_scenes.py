"""``shape_scenes``: multi-label scenes of one or two shapes, and the ``shapes`` drawing primitive."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import distance_transform_edt

from xaikit.dataset.data import shape_scenes, shapes
from xaikit.errors import XaikitValueError


@pytest.fixture(scope="module")
def scenes() -> tuple:
    return shape_scenes.load_data(n_train=150, n_eval=30, seed=5)


def test_deterministic_typed_and_labels_match_the_segmentation(scenes: tuple) -> None:
    train, test = scenes
    again, _ = shape_scenes.load_data(n_train=150, n_eval=30, seed=5)
    other, _ = shape_scenes.load_data(n_train=150, n_eval=30, seed=6)
    for key in ("x", "y", "segmentation"):
        np.testing.assert_array_equal(train[key], again[key])
    assert not np.array_equal(train["x"], other["x"])
    assert train["x"].shape == (150, 64, 64, 3) and train["x"].dtype == np.uint8
    assert train["y"].shape == (150, 5) and train["y"].dtype == np.float32
    assert train["segmentation"].shape == (150, 64, 64) and train["segmentation"].dtype == np.int8
    assert len(test) == 30
    for ds in (train, test):
        for y, seg in zip(ds["y"], ds["segmentation"]):
            # y is multi-hot and names exactly the classes painted, each with pixels
            assert set(np.unique(y).tolist()) <= {0.0, 1.0} and y.sum() in (1, 2)
            assert set(np.flatnonzero(y).tolist()) == set(np.unique(seg).tolist()) - {-1}
    pairs = (train["y"].sum(axis=1) == 2).mean()
    assert 0.25 < pairs < 0.55  # two_objects=0.4 by default
    every_class = train["y"].sum(axis=0)
    assert every_class.min() > 0.6 * every_class.mean()


def test_each_object_is_a_flat_colour_apart_from_the_other(scenes: tuple) -> None:
    train, _ = scenes
    x = train["x"].astype(np.float64) / 255.0
    for i in range(len(train)):
        seg = train["segmentation"][i]
        labels = np.flatnonzero(train["y"][i])
        for label in labels:
            m = seg == label
            inside = x[i][m]
            colour = np.median(inside, axis=0)
            assert np.abs(inside - colour).max() <= 0.09  # one flat colour, up to pixel noise
            # the background's base colour (the image's median outside the objects) is far away
            assert np.linalg.norm(np.median(x[i][seg < 0], axis=0) - colour) >= 0.4
        if len(labels) == 2:  # the two objects neither overlap nor touch
            apart = distance_transform_edt(seg != labels[0])[seg == labels[1]].min()
            assert apart >= 2.0


def test_sizes_make_small_and_large_objects(scenes: tuple) -> None:
    train, _ = scenes
    seg, y = train["segmentation"], train["y"]
    single = y.sum(axis=1) == 1
    area = np.array([(s >= 0).sum() for s in seg]) / (64 * 64)
    # lone shapes: radius 8..24 px, so a good share covers more than a quarter of the image
    assert area[single].max() > 0.3 and area[single].min() < 0.06
    assert np.mean(area[single] > 0.15) > 0.25
    # pairs: radius 5..16 and 5..12 px, every object smaller than a quarter of the image
    for i in np.flatnonzero(~single):
        for label in np.flatnonzero(y[i]):
            assert (seg[i] == label).sum() < 64 * 64 / 4
    big, _ = shape_scenes.load_data(image_size=96, n_train=20, n_eval=0, seed=5)
    assert big["x"].shape == (20, 96, 96, 3)  # sizes scale with the image


def test_class_masks_and_bad_arguments() -> None:
    seg = np.array([[[-1, 1], [3, 1]], [[0, 0], [-1, 2]]], dtype=np.int8)
    np.testing.assert_array_equal(
        shape_scenes.class_masks(seg, np.array([1, 2])), [[[0, 1], [0, 1]], [[0, 0], [0, 1]]]
    )
    with pytest.raises(
        XaikitValueError, match=r"one label per image; got segmentation of shape \(2, 2, 2\) and 3"
    ):
        shape_scenes.class_masks(seg, np.array([1, 2, 3]))
    with pytest.raises(XaikitValueError, match="image_size must be an int of at least 32; got 16"):
        shape_scenes.load_data(image_size=16)
    with pytest.raises(XaikitValueError, match="n_eval must be a non-negative int; got -2"):
        shape_scenes.load_data(n_eval=-2)
    with pytest.raises(XaikitValueError, match=r"two_objects must be a number in \[0, 1\]; got float 1.5"):
        shape_scenes.load_data(two_objects=1.5)
    only_one, _ = shape_scenes.load_data(n_train=10, n_eval=0, two_objects=0.0)
    assert np.all(only_one["y"].sum(axis=1) == 1)
    only_two, _ = shape_scenes.load_data(n_train=10, n_eval=0, two_objects=1.0)
    assert np.all(only_two["y"].sum(axis=1) == 2)


def test_shape_masks_draws_the_shapes_by_their_geometry() -> None:
    y = np.array([0, 1, 4], dtype=np.int64)  # circle, square, ring
    radius, centre, angle = np.array([10.0, 10.0, 10.0]), np.full(3, 20.0), np.zeros(3)
    m = shapes.shape_masks(y, 41, radius, centre, centre, angle)
    grid = np.arange(41) - 20.0
    dist = np.sqrt(grid[:, None] ** 2 + grid[None, :] ** 2)
    np.testing.assert_array_equal(m[0], dist <= 10)
    np.testing.assert_array_equal(m[1], np.maximum(np.abs(grid[:, None]), np.abs(grid[None, :])) <= 8)
    np.testing.assert_array_equal(m[2], (dist <= 10) & (dist >= 5.5))
