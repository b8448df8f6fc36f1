"""Boxes drawn by ImgData over an image: the pixels under a box edge change, the others do not."""

from __future__ import annotations

import numpy as np

import xaikit as xk


def test_a_drawn_box_changes_the_pixels_under_its_edges_only() -> None:
    x = np.zeros((1, 32, 32, 3), np.uint8)  # a black image: its area in the painting is black
    box = np.array([[[8.0, 8.0, 16.0, 16.0]]])  # x0, y0, width, height: edges at 1/4 and 3/4
    plain = xk.viz.ImgData(image=x).paint_numpy(dpi=100)[0].astype(int)
    drawn = xk.viz.ImgData(image=[x, box]).paint_numpy(dpi=100)[0].astype(int)
    assert plain.shape == drawn.shape
    black = plain.sum(axis=-1) == 0
    rows = black.sum(axis=1) > black.sum(axis=1).max() // 2  # the image's rows (not the title's text)
    ys, xs = np.nonzero(black & rows[:, None])  # the image's pixels in the painting
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    at = lambda fy, fx: (y0 + int(fy * (y1 - y0)), x0 + int(fx * (x1 - x0)))  # noqa: E731
    changed = np.abs(drawn - plain).sum(axis=-1) > 0
    for fy, fx in [(0.5, 0.25), (0.5, 0.75), (0.75, 0.5), (0.25, 0.5)]:  # the four edges' middles
        cy, cx = at(fy, fx)
        assert changed[cy - 2 : cy + 3, cx - 2 : cx + 3].any(), (fy, fx)
    inside, outside = (
        changed[at(0.4, 0.4)[0] : at(0.6, 0.6)[0], at(0.4, 0.4)[1] : at(0.6, 0.6)[1]],
        changed[y0 : at(0.1, 0)[0], x0:x1],
    )
    assert not inside.any() and not outside.any()  # the box's middle and the image's top band
    assert not changed[:y0].any() and not changed[y1:].any()  # nothing outside the image moves


def test_boxes_over_an_image_stay_boxes_when_the_column_has_a_colormap() -> None:
    """An image-only option (a colormap, a value range) reads a lone (B, H, 4) value as images,
    but over a base image of another size a (B, N, 4) layer is still boxes, drawn as boxes."""
    x = np.random.default_rng(0).random((2, 32, 32)).astype(np.float32)
    box = np.array([[[8.0, 8.0, 16.0, 16.0]]] * 2)
    for options in ({"colormaps": {"image": "viridis"}}, {"vranges": {"image": (0.0, 1.0)}}):
        data = xk.viz.ImgData(image=[x, box], **options)
        assert [layer.kind for layer in data._columns["image"]] == ["image", "boxes"]
        plain = xk.viz.ImgData(image=x, **options).paint_numpy(dpi=60)[0].astype(int)
        drawn = data.paint_numpy(dpi=60)[0].astype(int)
        assert plain.shape == drawn.shape and (np.abs(drawn - plain).sum(axis=-1) > 0).any()
    # a mask of the base image's size (here 4 pixels wide) is an image layer, as before
    wide = np.random.default_rng(1).random((2, 32, 4))
    data = xk.viz.ImgData(
        image=[np.random.default_rng(2).random((2, 32, 4, 3)), wide], colormaps={"image": "magma"}
    )
    assert [layer.kind for layer in data._columns["image"]] == ["image", "image"]
