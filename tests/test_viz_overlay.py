"""overlay(): the blend formula, layouts, value ranges and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib import colormaps

from xaikit.backend import to_tensor
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.viz import ImgData, overlay


def test_formula_on_unit_images(rng: np.random.Generator) -> None:
    img = rng.random((2, 5, 6, 3)).astype(np.float32)
    img[:, 0, 0] = (0.0, 0.0, 0.0)
    img[:, 0, 1] = (1.0, 1.0, 1.0)  # image spans [0, 1] -> used as is
    mask = rng.random((2, 5, 6, 1))
    out = overlay(img, mask, alpha=0.4, colormap="viridis", gamma=0.7)
    heat = colormaps["viridis"](mask[..., 0])[..., :3]
    grey = img @ np.array([0.299, 0.587, 0.114])
    w = 0.4 * mask**0.7
    np.testing.assert_allclose(out, (1 - w) * grey[..., None] + w * heat, atol=1e-6)
    assert out.dtype == np.float32 and out.shape == (2, 5, 6, 3)
    assert out.min() >= 0.0 and out.max() <= 1.0
    # the colour-keeping formula of xaikit 0.x
    old = overlay(img, mask, alpha=0.4, colormap="viridis", gamma=1.0, grey=False)
    np.testing.assert_allclose(old, (1 - 0.4 * mask) * img + 0.4 * mask * heat, atol=1e-6)


def test_default_heat_dominates_high_mask_and_zero_mask_is_the_grey_image() -> None:
    img = np.zeros((1, 3, 3, 3), dtype=np.float32)
    img[0, :, :] = (0.9, 0.2, 0.1)  # a red-orange image; its luma is 0.399
    mask = np.zeros((1, 3, 3))
    mask[0, 1, 1] = 1.0
    mask[0, 0, 0] = 0.25
    out = overlay(img, mask)
    luma = 0.299 * 0.9 + 0.587 * 0.2 + 0.114 * 0.1
    # zero mask: exactly the desaturated image, no colour left
    np.testing.assert_allclose(out[0, 2, 2], [luma] * 3, atol=1e-6)
    # full mask: the colormap's top colour (turbo: dark red) with weight 0.85
    top = np.array(colormaps["turbo"](1.0)[:3])
    np.testing.assert_allclose(out[0, 1, 1], 0.85 * top + 0.15 * luma, atol=1e-6)
    assert np.abs(out[0, 1, 1] - top).max() < 0.1 < np.abs(out[0, 1, 1] - luma).max()
    # a quarter of the mask gets half the full weight (gamma 0.5): a visible tint, not a speckle
    quarter = np.array(colormaps["turbo"](0.25)[:3])
    np.testing.assert_allclose(out[0, 0, 0], 0.425 * quarter + 0.575 * luma, atol=1e-6)
    # a grey single-channel image is its own greyscale
    single = overlay(img[..., 0], np.zeros((1, 3, 3)))
    np.testing.assert_allclose(single, 0.9, atol=1e-6)


def test_zero_mask_gives_the_image_and_normalized_inputs_are_rescaled() -> None:
    normalized = np.array([[[-2.0, 0.0], [1.0, 2.0]]])  # (1, 2, 2): a Normalize()d grey image
    out = overlay(normalized, np.zeros((1, 2, 2)))
    expected = np.array([[0.0, 0.5], [0.75, 1.0]])
    np.testing.assert_allclose(out[0], np.repeat(expected[..., None], 3, -1), atol=1e-6)
    # the reference's formula added the minimum twice; here a full mask is a pure blend
    full = overlay(normalized, np.ones((1, 2, 2)), alpha=1.0, colormap="gray")
    np.testing.assert_allclose(full, 1.0, atol=1e-6)
    # uint8 stays uint8-scaled, constant images don't produce NaN
    u8 = overlay(np.full((1, 2, 2, 3), 255, dtype=np.uint8), np.zeros((1, 2, 2)))
    np.testing.assert_allclose(u8, 1.0)
    const = overlay(np.full((1, 3, 3), 7.0), np.full((1, 3, 3), 0.5))
    assert np.isfinite(const).all()


def test_channel_first_framework_input_keeps_layout(framework: str) -> None:
    x = np.zeros((2, 3, 4, 5), dtype=np.float32)
    x[:, 1] = 1.0
    mask = np.zeros((2, 1, 4, 5), dtype=np.float32)
    if framework == "torch":
        out = overlay(to_tensor(x, "torch"), to_tensor(mask, "torch"))
        assert out.shape == (2, 3, 4, 5)
        np.testing.assert_allclose(out, 0.587, atol=1e-6)  # the green image's grey
    else:
        out = overlay(to_tensor(np.moveaxis(x, 1, -1), "tf"), to_tensor(np.moveaxis(mask, 1, -1), "tf"))
        assert out.shape == (2, 4, 5, 3)
        np.testing.assert_allclose(out, 0.587, atol=1e-6)
    colour = overlay(x, mask, grey=False, channel_axis=1)
    np.testing.assert_allclose(colour[:, 1], 1.0)
    np.testing.assert_allclose(colour[:, 0], 0.0)
    assert ImgData({"x saliency": out}).batch_sizes == [2]


def test_bad_inputs() -> None:
    img = np.zeros((2, 4, 4, 3))
    with pytest.raises(XaikitValueError, match=r"mask must hold values in \[0, 1\].*\[-1, 2\]"):
        overlay(img, np.linspace(-1, 2, 32).reshape(2, 4, 4))
    with pytest.raises(
        XaikitValueError, match=r"mask must be one channel of the image's batch and size \(2, 4, 4\)"
    ):
        overlay(img, np.zeros((2, 4, 5)))
    with pytest.raises(XaikitValueError, match=r"mask must be one channel"):
        overlay(img, np.zeros((2, 4, 4, 3)))
    with pytest.raises(XaikitValueError, match=r"image must be \(B, H, W\)"):
        overlay(np.zeros((4, 4)), np.zeros((4, 4)))
    with pytest.raises(XaikitValueError, match="alpha must be a number in \\[0, 1\\]; got int 2"):
        overlay(img, np.zeros((2, 4, 4)), alpha=2)
    with pytest.raises(XaikitValueError, match="gamma must be a number > 0; got int 0"):
        overlay(img, np.zeros((2, 4, 4)), gamma=0)
    with pytest.raises(XaikitValueError, match="colormap must be a matplotlib colormap name; got 'nope'"):
        overlay(img, np.zeros((2, 4, 4)), colormap="nope")
    with pytest.raises(XaikitTypeError, match="colormap must be a colormap name or Colormap; got int 1"):
        overlay(img, np.zeros((2, 4, 4)), colormap=1)  # type: ignore[arg-type]


def test_smooth_blurs_the_mask_and_keeps_its_peak() -> None:
    """``smooth=s``: the mask is Gaussian-blurred (sigma s) and rescaled to its former maximum
    before blending; ``smooth=0`` is the raw mask."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(0)
    img = rng.random((2, 16, 16, 3))
    mask = np.zeros((2, 16, 16))
    mask[0, 8, 8] = 1.0  # one hot pixel
    mask[1] = rng.random((16, 16)) * 0.5
    blurred = gaussian_filter(mask, sigma=(0, 2.0, 2.0), mode="reflect")
    blurred *= (mask.max(axis=(1, 2)) / blurred.max(axis=(1, 2)))[:, None, None]
    np.testing.assert_allclose(overlay(img, mask, smooth=2.0), overlay(img, blurred), atol=1e-6)
    np.testing.assert_array_equal(overlay(img, mask, smooth=0.0), overlay(img, mask))
    spread = overlay(img, mask, smooth=2.0)[0]
    grey = overlay(img, np.zeros_like(mask))[0]
    assert not np.allclose(spread[8, 10], grey[8, 10])  # heat reaches the neighbours
    np.testing.assert_allclose(spread[0, 0], grey[0, 0], atol=1e-3)  # but not the far corner
    with pytest.raises(XaikitValueError, match=r"smooth must be a number >= 0; got int -1"):
        overlay(img, mask, smooth=-1)
