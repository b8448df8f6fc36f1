"""Numpy ops: exact values, per-sample randomness, aligned image and mask, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.op.numpyop import (
    CoarseDropout,
    ExpandDims,
    HorizontalFlip,
    Minmax,
    Normalize,
    PadIfNeeded,
    RandomCrop,
    Sometimes,
)
from xaikit.pipeline import Pipeline


def _run(op, *arrays, seed=0):  # type: ignore[no-untyped-def]
    return op.forward_batch([np.asarray(a) for a in arrays], np.random.default_rng(seed))


def test_normalize_per_channel() -> None:
    x = np.array([[[[0, 128, 255]]]], dtype=np.uint8)  # (1, 1, 1, 3)
    out = _run(Normalize("x", mean=(0.5, 0.5, 0.0), std=(0.5, 0.25, 1.0)), x)[0]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0, 0], [-1.0, (128 / 255 - 0.5) / 0.25, 1.0], rtol=1e-6)
    with pytest.raises(XaikitValueError, match=r"Normalize mean has 3 values but the last .* has 2"):
        _run(Normalize("x"), np.zeros((1, 2, 2, 2)))
    with pytest.raises(XaikitValueError, match="std non-zero"):
        Normalize("x", std=0.0)


def test_minmax_per_sample_and_constant() -> None:
    x = np.array([[1.0, 3.0], [-2.0, 2.0], [5.0, 5.0]])
    out = _run(Minmax("x"), x)[0]
    np.testing.assert_allclose(out, [[0, 1], [0, 1], [0, 0]], atol=1e-6)
    assert np.isfinite(out).all() and out.dtype == np.float32


def test_expand_dims_axis() -> None:
    assert _run(ExpandDims("x", axis=0), np.zeros((4, 3, 2)))[0].shape == (4, 1, 3, 2)
    assert _run(ExpandDims("x"), np.zeros((4, 3, 2)))[0].shape == (4, 3, 2, 1)


def test_pad_if_needed_modes() -> None:
    x = np.arange(2 * 3 * 3).reshape(2, 3, 3)
    out = _run(PadIfNeeded(5, 4, inputs="x"), x)[0]  # reflect: mirror without repeating the edge
    assert out.shape == (2, 5, 4)
    np.testing.assert_array_equal(out, np.pad(x, [(0, 0), (1, 1), (0, 1)], mode="reflect"))
    out = _run(PadIfNeeded(5, 5, image_in="x", border_mode="constant", value=-1), x[..., None])[0]
    assert out.shape == (2, 5, 5, 1) and (out[:, 0] == -1).all() and (out[:, 1:4, 1:4, 0] == x).all()
    assert _run(PadIfNeeded(2, 2, inputs="x"), x)[0].shape == (2, 3, 3)  # large enough: unchanged
    with pytest.raises(XaikitValueError, match="border_mode must be one of"):
        PadIfNeeded(4, 4, inputs="x", border_mode="mirror")


def test_random_crop_is_a_window_aligned_across_keys_and_seeded() -> None:
    n = 64
    x = np.arange(n * 6 * 6 * 2).reshape(n, 6, 6, 2)
    mask = x[..., 0] * 10
    op = RandomCrop(3, 4, image_in="x", mask_in="mask")
    cx, cm = _run(op, x, mask, seed=1)
    assert cx.shape == (n, 3, 4, 2) and cm.shape == (n, 3, 4)
    np.testing.assert_array_equal(cm, cx[..., 0] * 10)  # image and mask cropped together
    tops, lefts = [], []
    for i in range(n):
        t, l = divmod(int(cx[i, 0, 0, 0] - x[i, 0, 0, 0]) // 2, 6)
        np.testing.assert_array_equal(cx[i], x[i, t : t + 3, l : l + 4])
        tops.append(t)
        lefts.append(l)
    assert set(tops) == {0, 1, 2, 3} and set(lefts) == {0, 1, 2}  # every offset, per sample
    np.testing.assert_array_equal(_run(op, x, mask, seed=1)[0], cx)
    with pytest.raises(XaikitValueError, match="does not fit images of 6x6"):
        _run(RandomCrop(7, 7, inputs="x"), x)
    with pytest.raises(XaikitValueError, match="must share batch, height and width"):
        _run(op, x, mask[:, :5])


def test_horizontal_flip_and_sometimes() -> None:
    x = np.arange(2 * 2 * 3).reshape(2, 2, 3)
    np.testing.assert_array_equal(_run(HorizontalFlip(inputs="x"), x)[0], x[:, :, ::-1])
    n = 2000
    xs = np.tile(np.array([[[0, 1]]]), (n, 1, 1))
    out = _run(Sometimes(HorizontalFlip(image_in="x"), prob=0.3), xs)[0]
    flipped = out[:, 0, 0] == 1
    assert 0.25 < flipped.mean() < 0.35
    assert (out[flipped, 0, 1] == 0).all() and (out[~flipped] == xs[~flipped]).all()
    assert (_run(Sometimes(HorizontalFlip(inputs="x"), prob=0.0), xs)[0] == xs).all()
    assert Sometimes(HorizontalFlip(inputs="x", mode="train")).mode == {"train"}
    with pytest.raises(XaikitValueError, match="changed the shape of 'x'"):
        _run(Sometimes(RandomCrop(1, 1, inputs="x"), prob=1.0), xs)
    with pytest.raises(XaikitValueError, match=r"prob must be a number in \[0, 1\]"):
        Sometimes(HorizontalFlip(inputs="x"), prob=1.5)
    with pytest.raises(XaikitTypeError, match="numpy_op must be a NumpyOp"):
        Sometimes(lambda x: x)  # type: ignore[arg-type]


def test_coarse_dropout_hole_counts_and_sizes() -> None:
    x = np.ones((200, 16, 16, 3), dtype=np.float32)
    op = CoarseDropout("x", max_holes=1, max_height=4, max_width=3, min_height=4, min_width=3, fill_value=0.5)
    out = _run(op, x)[0]
    holes = out[..., 0] == 0.5
    assert (holes.sum(axis=(1, 2)) == 12).all()  # one 4x3 hole per image
    assert ((out == 0.5).all(axis=-1) == holes).all()  # all channels of a hole
    rows = holes.any(axis=2).argmax(axis=1)
    assert len(set(rows.tolist())) > 8  # positions vary per sample
    out = _run(CoarseDropout("x", max_holes=3, min_holes=0, max_height=2, max_width=2), x)[0]
    counts = (out[..., 0] == 0).sum(axis=(1, 2))
    assert counts.min() == 0 and counts.max() <= 12 and len(set(counts.tolist())) > 2
    assert (x == 1).all()  # input not modified in place
    with pytest.raises(XaikitValueError, match="0 <= min_height <= max_height"):
        CoarseDropout("x", max_height=2, min_height=3)
    with pytest.raises(XaikitValueError, match="needs images"):
        _run(CoarseDropout("x"), np.ones((2, 3)))


def test_reference_style_augmentation_pipeline_is_seeded() -> None:
    data = {
        "x": np.random.default_rng(0).integers(0, 255, (12, 16, 16, 3)).astype(np.uint8),
        "y": np.arange(12),
    }
    ops = [
        Normalize(inputs="x", outputs="x", mean=(0.4914, 0.4822, 0.4465), std=(0.2471, 0.2435, 0.2616)),
        PadIfNeeded(min_height=20, min_width=20, image_in="x", image_out="x", mode="train"),
        RandomCrop(16, 16, image_in="x", image_out="x", mode="train"),
        Sometimes(HorizontalFlip(image_in="x", image_out="x", mode="train")),
        CoarseDropout(inputs="x", outputs="x", mode="train", max_holes=1),
    ]
    a = Pipeline(train_data=data, eval_data=data, ops=ops, batch_size=6, seed=3)
    b = Pipeline(train_data=data, eval_data=data, ops=ops, batch_size=6, seed=3)
    for ba, bb in zip(a.get_loader("train", 2), b.get_loader("train", 2)):
        np.testing.assert_array_equal(ba["x"], bb["x"])
        assert ba["x"].shape == (6, 16, 16, 3) and ba["x"].dtype == np.float32
    e1 = np.concatenate([bt["x"] for bt in a.get_loader("train", 1)])
    e2 = np.concatenate([bt["x"] for bt in a.get_loader("train", 2)])
    assert not np.array_equal(e1, e2)
    ev = a.get_results(mode="eval")
    expected = (data["x"][:6] / 255.0 - np.array([0.4914, 0.4822, 0.4465])) / np.array(
        [0.2471, 0.2435, 0.2616]
    )
    np.testing.assert_allclose(ev["x"], expected, rtol=1e-5, atol=1e-5)  # type: ignore[index]
