"""``shortcut``: the ``shapes`` images with a coloured corner tag planted on one class."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.dataset.data import shapes, shortcut
from xaikit.errors import XaikitTypeError, XaikitValueError


@pytest.fixture(scope="module")
def data() -> tuple:
    return shortcut.load_data(n_train=500, n_eval=200, seed=3, tag_class="triangle")


def test_rates_are_exact_for_the_seed_and_deterministic(data: tuple) -> None:
    train, test = data
    k = shapes.label_mapping["triangle"]
    assert train["tag"].dtype == np.bool_ and train["tag"].shape == (500,)
    # 100 triangles of 500 (balanced): exactly round(0.9 * 100) tagged, round(0.02 * 400) others
    assert (train["y"] == k).sum() == 100 and train["tag"][train["y"] == k].sum() == 90
    assert train["tag"][train["y"] != k].sum() == 8
    assert (test["y"] == k).sum() == 40 and test["tag"][test["y"] == k].sum() == 20  # eval_tag_rate 0.5
    assert test["tag"][test["y"] != k].sum() == round(0.02 * 160)
    again = shortcut.load_data(n_train=500, n_eval=200, seed=3, tag_class="triangle")
    for a, b in zip(data, again):
        for key in a.keys():
            np.testing.assert_array_equal(a[key], b[key])
    other, _ = shortcut.load_data(n_train=500, n_eval=200, seed=4, tag_class="triangle")
    assert not np.array_equal(other["tag"], train["tag"]) and not np.array_equal(other["x"], train["x"])
    assert sorted(train.keys()) == ["mask", "tag", "x", "y"]
    assert sorted(test.keys()) == ["mask", "tag", "x", "x_clean", "y"]
    assert train["x"].dtype == np.uint8 and train["x"].shape == (500, 32, 32, 3)


def test_tag_pixels_are_the_colour_exactly_where_said(data: tuple) -> None:
    train, test = data
    region = shortcut.tag_mask(32)
    assert region.sum() == 16 and region[:4, :4].all()  # default: 32 // 8 = 4 px, top left
    for ds in (train, test):
        x, tag = ds["x"], ds["tag"]
        on = x[:, region]  # (N, 16, 3)
        assert (on[tag] == np.array([255, 0, 255], dtype=np.uint8)).all()
        # a tag-free image is never the tag colour all over the tag's square (noise alone)
        assert not (on[~tag] == np.array([255, 0, 255])).all(axis=(1, 2)).any()
    # eval: x_clean is x without its tag, the same pixels elsewhere
    x, clean = test["x"], test["x_clean"]
    np.testing.assert_array_equal(x[:, ~region], clean[:, ~region])
    np.testing.assert_array_equal(x[~test["tag"]], clean[~test["tag"]])
    assert (x[test["tag"]][:, region] != clean[test["tag"]][:, region]).any()


def test_the_object_is_never_under_the_tag_nor_beside_it(data: tuple) -> None:
    train, test = data
    near = np.zeros((32, 32), dtype=bool)
    near[:5, :5] = True  # the tag and its gap of 1 px
    for ds in (train, test):
        assert ds["mask"].any(axis=(1, 2)).all()  # every image holds its object
        assert not (ds["mask"] & near).any()
    # the object keeps its flat colour in tagged images: the tag never paints over it
    x = test["x"].astype(np.int64)
    for i in np.flatnonzero(test["tag"])[:20]:
        inside = x[i][test["mask"][i]]
        assert np.abs(inside - np.median(inside, axis=0)).max() <= 0.09 * 255


def test_corners_sizes_colours_and_add_tag() -> None:
    train, _ = shortcut.load_data(
        image_size=24, n_train=50, n_eval=0, seed=1, tag_class="ring", tag_rate=1.0, tag_other_rate=0.0,
        tag_size=3, tag_colour=(0, 255, 0), corner="bottom-right",
    )  # fmt: skip
    ring = train["y"] == shapes.label_mapping["ring"]
    np.testing.assert_array_equal(train["tag"], ring)
    assert (train["x"][ring][:, 21:, 21:] == [0, 255, 0]).all()
    assert not (train["mask"][:, 20:, 20:]).any()
    np.testing.assert_array_equal(
        np.argwhere(shortcut.tag_mask(8, 2, "top-right")), [[0, 6], [0, 7], [1, 6], [1, 7]]
    )
    np.testing.assert_array_equal(
        np.argwhere(shortcut.tag_mask(8, 2, "bottom-left")), [[6, 0], [6, 1], [7, 0], [7, 1]]
    )
    x = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    tagged = shortcut.add_tag(x, shortcut.tag_mask(8, 2), (1, 2, 3), where=np.array([True, False, True]))
    assert (tagged[[0, 2], :2, :2] == [1, 2, 3]).all() and tagged[1].sum() == 0
    assert tagged[:, 2:].sum() == 0 and x.sum() == 0  # a copy; the input is unchanged


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tag_class": "hexagon"}, XaikitValueError, r"tag_class must be one of 'circle'.*got 'hexagon'"),
        ({"tag_class": 2}, XaikitTypeError, "tag_class must be a class name"),
        ({"tag_rate": 1.5}, XaikitValueError, "tag_rate"),
        ({"eval_tag_rate": -0.1}, XaikitValueError, "eval_tag_rate"),
        ({"tag_size": 9}, XaikitValueError, r"tag_size must be an int in 1..image_size // 4 = 8.*got 9"),
        ({"tag_colour": (255, 0)}, XaikitValueError, r"tag_colour must be three ints in 0..255"),
        ({"tag_colour": (256, 0, 0)}, XaikitValueError, r"tag_colour must be three ints"),
        ({"corner": "middle"}, XaikitValueError, r"corner must be one of 'top-left'.*got 'middle'"),
        ({"image_size": 8}, XaikitValueError, "image_size must be an int of at least 16"),
        ({"n_train": -1}, XaikitValueError, "n_train must be a non-negative int"),
        ({"gap": 30}, XaikitValueError, r"tag too big: \d+ objects found no place away from the tag"),
        ({"gap": -1}, XaikitValueError, "gap must be a non-negative int"),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        shortcut.load_data(**{"n_train": 5, "n_eval": 5, **kwargs})


def test_add_tag_rejects_bad_shapes() -> None:
    with pytest.raises(XaikitValueError, match=r"x must be uint8 images \(N, H, W, 3\); got float64"):
        shortcut.add_tag(np.zeros((1, 4, 4, 3)), np.ones((4, 4), dtype=bool))
    with pytest.raises(XaikitValueError, match=r"region must be \(H, W\) = \(4, 4\); got shape \(3, 3\)"):
        shortcut.add_tag(np.zeros((1, 4, 4, 3), dtype=np.uint8), np.ones((3, 3), dtype=bool))
    with pytest.raises(XaikitValueError, match=r"where must be \(1,\) bool; got shape \(2,\)"):
        shortcut.add_tag(np.zeros((1, 4, 4, 3), dtype=np.uint8), np.ones((4, 4), dtype=bool), where=[1, 0])


def test_the_training_split_does_not_depend_on_the_eval_size() -> None:
    a_train, a_eval = shortcut.load_data(n_train=60, n_eval=10, seed=2)
    b_train, _ = shortcut.load_data(n_train=60, n_eval=40, seed=2)
    for key in a_train.keys():
        np.testing.assert_array_equal(a_train[key], b_train[key])
    _, c_eval = shortcut.load_data(n_train=30, n_eval=10, seed=2)
    for key in a_eval.keys():
        np.testing.assert_array_equal(a_eval[key], c_eval[key])
    assert not np.array_equal(a_train["x"][:10], a_eval["x"])
