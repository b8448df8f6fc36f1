"""Mask outlines: :func:`xaikit.viz.contour.outline` (exact pixels), ``ImgData``'s
:class:`~xaikit.viz.Contour` overlay (painted pixels: the outline coloured, the inside and the
outside left as the image) and the thumbnail painters of the report."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.errors import XaikitValueError
from xaikit.viz import Contour, ImgData
from xaikit.viz.contour import box_pixels, outline, paint_box, paint_outline

S = 16


def square() -> np.ndarray:
    m = np.zeros((S, S), bool)
    m[4:12, 3:10] = True
    return m


def test_outline_is_the_region_border_inside_it() -> None:
    m = square()
    edge = outline(m)
    want = m.copy()
    want[5:11, 4:9] = False  # the interior
    np.testing.assert_array_equal(edge, want)
    # a region at the image's edge is closed by the edge; a label map outlines each label
    labels = np.zeros((4, 6), np.int64)
    labels[:, :3], labels[:, 3:] = 1, 2
    full, middle = [1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1]  # the image's edge and where 1 meets 2
    assert outline(labels).astype(int).tolist() == [full, middle, middle, full]
    inner = np.zeros((5, 5), np.int64)
    inner[1:4, 1:4] = 7
    inner[2, 2] = 3
    assert outline(inner).astype(int).tolist() == [
        [0, 0, 0, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 1, 1, 1, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0],
    ]
    assert not outline(np.zeros((3, 3), bool)).any()


def _cell_pixels(img: ImgData, column: str) -> tuple[np.ndarray, object]:
    fig = img.paint_figure(dpi=100, cell_size=2.0)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[attr-defined]
    ax = next(a for a in fig.axes if a.get_label() == f"cell:{column}:0")
    return rgb, ax


def _at(rgb: np.ndarray, ax: object, r: int, c: int) -> np.ndarray:
    x, y = ax.transData.transform((c + 0.5, r + 0.5))  # type: ignore[attr-defined]
    return rgb[int(rgb.shape[0] - y), int(x)]


def test_imgdata_paints_the_outline_pixels_and_leaves_the_rest() -> None:
    grey = np.full((1, S, S, 3), 0.5, np.float32)
    m = square()
    img = ImgData(x=[grey, Contour(m[None], color="#ff0000")], plain=grey)
    assert img.kinds("x") == ["image", "contour"]
    np.testing.assert_array_equal(img["x"][1], outline(m)[None])
    rgb, ax = _cell_pixels(img, "x")
    background = _at(rgb, ax, 0, 0)
    assert abs(int(background[0]) - 128) <= 1 and len(set(background.tolist())) == 1
    edge = outline(m)
    for r in range(S):
        for c in range(S):
            got = _at(rgb, ax, r, c).tolist()
            if edge[r, c]:
                assert got == [255, 0, 0], (r, c, got)
            else:
                assert got == background.tolist(), (r, c, got)  # inside and outside: the image


def test_contour_alone_and_refusals() -> None:
    img = ImgData(m=Contour(square()))
    assert img.kinds("m") == ["contour"] and img.batch_sizes == [1]
    rgb, ax = _cell_pixels(img, "m")
    assert _at(rgb, ax, 4, 3).tolist() == [0, 191, 191]  # matplotlib's "c"
    assert _at(rgb, ax, 7, 6).tolist() == [255, 255, 255]  # the figure shows through
    with pytest.raises(
        XaikitValueError, match=r"column 'x': Contour: mask must be \(B, H, W\) or \(H, W\) bool or integer"
    ):
        ImgData(x=[np.zeros((1, S, S)), Contour(np.zeros((1, S, S), np.float32))])
    with pytest.raises(
        XaikitValueError, match=r"column 'x': every overlay element must have the same batch size"
    ):
        ImgData(x=[np.zeros((2, S, S)), Contour(square())])


def test_thumbnail_painters() -> None:
    rgb = np.zeros((8, 8, 3), np.uint8)
    boxed = paint_box(rgb, [2, 1, 6, 5])  # x0, y0, x1, y1: columns 2..5, rows 1..4
    frame = np.zeros((8, 8), bool)
    frame[1, 2:6] = frame[4, 2:6] = frame[1:5, 2] = frame[1:5, 5] = True
    np.testing.assert_array_equal(boxed.any(axis=-1), frame)
    assert boxed[1, 2].tolist() == [0, 255, 255] and not rgb.any()  # a copy
    # the grids draw a box as the outline of the pixels it touches: the same frame
    np.testing.assert_array_equal(outline(box_pixels(np.array([[2, 1, 6, 5]]), (8, 8)))[0], frame)
    jittered = np.array([2.2, 1.1, 5.7, 4.9])
    np.testing.assert_array_equal(
        outline(box_pixels(jittered, (8, 8)))[0], paint_box(rgb, jittered).any(axis=-1)
    )
    half = paint_box(rgb, [4, 2, 12, 10], scale=(0.5, 0.5))
    np.testing.assert_array_equal(half.any(axis=-1), frame)
    assert not paint_box(rgb, [np.nan, 0, 1, 1]).any()
    drawn = paint_outline(rgb, square()[:8, :8])
    np.testing.assert_array_equal(drawn.any(axis=-1), outline(square()[:8, :8]))
