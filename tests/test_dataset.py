"""NumpyDataset and the bundled datasets (shapes, digits)."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.dataset import NumpyDataset
from xaikit.dataset.data import digits, shapes
from xaikit.errors import XaikitTypeError, XaikitValueError


def _ds(n: int = 10) -> NumpyDataset:
    return NumpyDataset({"x": np.arange(n * 2).reshape(n, 2), "y": np.arange(n) * 10})


# ---- NumpyDataset ------------------------------------------------------------------------------
def test_indexing_and_columns() -> None:
    ds = _ds()
    assert len(ds) == 10
    assert ds[3]["x"].tolist() == [6, 7] and int(ds[3]["y"]) == 30
    assert int(ds[-1]["y"]) == 90
    assert ds["y"].tolist() == list(range(0, 100, 10))
    assert ds[[4, 1]]["y"].tolist() == [40, 10]
    assert ds[2:4]["x"].tolist() == [[4, 5], [6, 7]]
    assert [int(s["y"]) for s in ds][:3] == [0, 10, 20]
    ds["index"] = np.arange(10)
    assert ds.keys() == ["x", "y", "index"] and int(ds[7]["index"]) == 7


def test_bad_access_and_columns() -> None:
    ds = _ds()
    with pytest.raises(XaikitValueError, match="key 'z' is not a column"):
        ds["z"]
    with pytest.raises(XaikitValueError, match="index 10 is out of range"):
        ds[10]
    with pytest.raises(XaikitValueError, match=r"column 'w' must have 10 rows .* shape \(9,\)"):
        ds["w"] = np.zeros(9)
    with pytest.raises(XaikitValueError, match="must have 3 rows"):
        NumpyDataset({"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(XaikitValueError, match="sample axis"):
        ds["s"] = 3.0
    with pytest.raises(XaikitTypeError, match="dict of arrays"):
        NumpyDataset([1, 2])  # type: ignore[arg-type]
    with pytest.raises(XaikitTypeError, match="str name"):
        ds[3] = np.zeros(10)  # type: ignore[index]
    with pytest.raises(XaikitTypeError, match="1-D list of ints"):
        ds[[0.5]]


def test_split_by_range_removes_samples() -> None:
    ds = _ds()
    part = ds.split(range(2, 5))
    assert part["y"].tolist() == [20, 30, 40]
    assert ds["y"].tolist() == [0, 10, 50, 60, 70, 80, 90]
    assert ds["x"].shape == (7, 2)


def test_split_fractions_counts_disjoint_and_seeded() -> None:
    ds = _ds(20)
    a, b, c = ds.split(0.25, 3, [0, 1], seed=5)
    assert (len(a), len(b), len(c), len(ds)) == (5, 3, 2, 10)
    got = np.concatenate([a["y"], b["y"], c["y"], ds["y"]])
    assert sorted(got.tolist()) == list(range(0, 200, 10))  # a partition of the original
    assert c["y"].tolist() == [0, 10]
    assert not set(a["y"].tolist()) & {0, 10}
    ds2 = _ds(20)
    a2, b2, _ = ds2.split(0.25, 3, [0, 1], seed=5)
    assert a2["y"].tolist() == a["y"].tolist() and b2["y"].tolist() == b["y"].tolist()
    assert a["x"][:, 0].tolist() == (a["y"] // 5).tolist()  # rows stay aligned across columns


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ((1.5,), r"fraction must lie in \(0, 1\); got 1.5"),
        ((0.0,), r"fraction must lie in \(0, 1\)"),
        ((0.6, 0.6), "sum to at most 1; got 1.2"),
        ((0,), "count must be at least 1; got 0"),
        ((11,), "only 10 are left"),
        ((range(8, 12),), r"indices must lie in \[0, 10\)"),
        (([1, 1],), "must not repeat"),
        (([1, 2], [2]), "must not repeat"),
        ((range(10),), "leave this dataset empty"),
        ((), "at least one"),
    ],
)
def test_split_errors(sizes: tuple, message: str) -> None:
    ds = _ds()
    with pytest.raises(XaikitValueError, match=message):
        ds.split(*sizes)
    assert len(ds) == 10  # nothing removed on error


def test_split_type_error() -> None:
    with pytest.raises(XaikitTypeError, match="fractions, counts or iterables"):
        _ds().split("abc")  # type: ignore[arg-type]
    with pytest.raises(XaikitTypeError, match="fractions, counts or indices"):
        _ds().split(True)


# ---- shapes ------------------------------------------------------------------------------------
def test_shapes_deterministic_and_typed() -> None:
    tr1, ev1 = shapes.load_data(n_train=60, n_eval=25, seed=3)
    tr2, ev2 = shapes.load_data(n_train=60, n_eval=25, seed=3)
    tr3, _ = shapes.load_data(n_train=60, n_eval=25, seed=4)
    for key in ("x", "y", "mask"):
        np.testing.assert_array_equal(tr1[key], tr2[key])
        np.testing.assert_array_equal(ev1[key], ev2[key])
    assert not np.array_equal(tr1["x"], tr3["x"])
    assert tr1["x"].shape == (60, 32, 32, 3) and tr1["x"].dtype == np.uint8
    assert tr1["y"].shape == (60,) and tr1["y"].dtype == np.int64
    assert tr1["mask"].shape == (60, 32, 32) and tr1["mask"].dtype == np.bool_
    assert len(ev1) == 25
    assert np.bincount(tr1["y"], minlength=5).tolist() == [12] * 5
    counts = np.bincount(ev1["y"], minlength=5)
    assert counts.max() - counts.min() <= 1
    assert shapes.label_mapping == {"circle": 0, "square": 1, "triangle": 2, "cross": 3, "ring": 4}


def test_shapes_mask_is_exactly_the_object() -> None:
    train, _ = shapes.load_data(n_train=200, n_eval=0, seed=1)
    x = train["x"].astype(np.float64) / 255.0
    for i in range(len(train)):
        m = train["mask"][i]
        assert 20 <= m.sum() <= 0.5 * m.size
        inside = x[i][m]
        colour = np.median(inside, axis=0)
        # flat object colour (up to pixel noise) under the mask ...
        assert np.abs(inside - colour).max() <= 0.09
        # ... and clearly different from every pixel outside it
        outside = x[i][~m]
        assert np.linalg.norm(outside - colour, axis=-1).min() >= 0.15


def test_shapes_class_geometry() -> None:
    train, _ = shapes.load_data(n_train=100, n_eval=0, seed=2)
    y, mask = train["y"], train["mask"]
    for i in range(len(train)):
        m = mask[i]
        rows, cols = np.nonzero(m)
        cy, cx = round(rows.mean()), round(cols.mean())
        fill = m.sum() / ((np.ptp(rows) + 1) * (np.ptp(cols) + 1))
        if y[i] == shapes.label_mapping["ring"]:
            assert not m[cy, cx]  # a hole in the middle
        else:
            assert m[cy, cx]
        if y[i] == shapes.label_mapping["circle"]:
            assert 0.7 < fill < 0.86  # pi/4 of the bounding box


def test_shapes_subset_size_and_errors() -> None:
    train, _ = shapes.load_data(image_size=48, n_train=12, n_eval=4, classes=["ring", "cross"])
    assert train["x"].shape == (12, 48, 48, 3)
    assert set(np.unique(train["y"]).tolist()) == {3, 4}
    with pytest.raises(XaikitValueError, match="classes must be distinct names"):
        shapes.load_data(n_train=4, n_eval=0, classes=["hexagon"])
    with pytest.raises(XaikitTypeError, match="list of class names"):
        shapes.load_data(n_train=4, n_eval=0, classes="circle")
    with pytest.raises(XaikitValueError, match="image_size must be an int of at least 16"):
        shapes.load_data(image_size=8)
    with pytest.raises(XaikitValueError, match="n_train must be a non-negative int"):
        shapes.load_data(n_train=-1)


# ---- digits ------------------------------------------------------------------------------------
def test_digits_shapes_and_split() -> None:
    train, ev = digits.load_data()
    assert len(train) + len(ev) == 1797 and len(ev) == 359
    assert train["x"].shape[1:] == (28, 28, 1) and train["x"].dtype == np.uint8
    assert train["y"].dtype == np.int64 and set(np.unique(train["y"]).tolist()) == set(range(10))
    assert train["x"].max() == 255 and train["x"].min() == 0
    small, _ = digits.load_data(image_size=8)
    from sklearn.datasets import load_digits

    raw = np.rint(load_digits().images / 16 * 255).astype(np.uint8)  # (1797, 8, 8)
    # 8x8 keeps the original pixels (mapped to 0..255): every sample is one of the originals
    flat = raw.reshape(len(raw), -1)
    for i in range(5):
        assert (flat == small["x"][i].reshape(-1)).all(axis=1).any()
    near, _ = digits.load_data(image_size=32, resample="nearest")
    # nearest upscaling by 4 repeats each pixel in 4x4 blocks
    np.testing.assert_array_equal(near["x"][0, ::4, ::4], near["x"][0, 3::4, 3::4])
    with pytest.raises(XaikitValueError, match="eval_fraction"):
        digits.load_data(eval_fraction=1.0)
    with pytest.raises(XaikitValueError, match="resample"):
        digits.load_data(resample="cubic")
