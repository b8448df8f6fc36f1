"""``denormalize=``: normalized model inputs are drawn as the real picture (values, layouts, errors)."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.denormalize import denormalize, to_denormalizer
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.viz import ImgData, overlay

MEAN = (0.485, 0.456, 0.406)  # ImageNet, as torchvision pipelines normalize
STD = (0.229, 0.224, 0.225)


def pixels(rng: np.random.Generator, shape: tuple[int, ...] = (2, 6, 5, 3)) -> np.ndarray:
    """Images in [0, 1] whose values are exact multiples of 1/255 (as decoded uint8 pictures)."""
    return (rng.integers(0, 256, size=shape) / 255.0).astype(np.float32)


def normalized(img: np.ndarray, axis: int = -1) -> np.ndarray:
    shape = [1] * img.ndim
    shape[axis] = 3
    return ((img - np.reshape(MEAN, shape)) / np.reshape(STD, shape)).astype(np.float32)


def test_imagenet_inputs_come_back_to_their_pixels_in_either_layout(rng: np.random.Generator) -> None:
    img = pixels(rng)
    last = denormalize(normalized(img), MEAN, STD)
    assert last.dtype == np.float32 and last.shape == img.shape
    np.testing.assert_allclose(last, img, atol=1e-6)
    first = denormalize(normalized(img.transpose(0, 3, 1, 2), axis=1), MEAN, STD)
    np.testing.assert_allclose(first, img.transpose(0, 3, 1, 2), atol=1e-6)
    # an ambiguous shape (3 at both ends) follows channel_axis
    sq = pixels(rng, (1, 3, 4, 3))
    np.testing.assert_allclose(denormalize(normalized(sq, axis=1), MEAN, STD, channel_axis=1), sq, atol=1e-6)


def test_byte_statistics_give_back_the_uint8_pixels_and_values_are_clipped(rng: np.random.Generator) -> None:
    raw = rng.integers(0, 256, size=(2, 4, 4, 3)).astype(np.uint8)
    x = raw / 127.5 - 1.0  # keras.applications' "tf" preprocessing
    out = denormalize(x, 127.5, 127.5)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, raw)
    caffe_mean = (103.939, 116.779, 123.68)
    np.testing.assert_array_equal(denormalize(raw - np.array(caffe_mean), caffe_mean, 1.0), raw)
    # out-of-range values (noise, augmentation) are clipped to the pixel range
    assert denormalize(np.array([[[-9.0, 9.0]]]), 0.5, 0.5).tolist() == [[[0.0, 1.0]]]
    assert denormalize(np.array([[[-9.0, 9.0]]]), 127.5, 127.5).tolist() == [[[0, 255]]]
    # one number for a grey (B, H, W) batch
    np.testing.assert_allclose(
        denormalize(np.full((1, 2, 2), 2.0), 0.1, 0.3), np.full((1, 2, 2), 0.7), atol=1e-6
    )


@pytest.mark.parametrize(
    ("spec", "images", "err", "match"),
    [
        (
            (MEAN, STD),
            np.zeros((1, 4, 4, 1)),
            XaikitValueError,
            r"denormalize: mean has 3 values, but the images have 1 channel",
        ),
        (
            ((0.5,) * 4, 0.5),
            np.zeros((1, 4, 4, 3)),
            XaikitValueError,
            r"mean has 4 values.*3 channel.*one value per channel",
        ),
        (
            (0.5, (0.2, 0.0, 0.2)),
            None,
            XaikitValueError,
            r"denormalize: std must be positive.*got \[0.2, 0.0, 0.2\]",
        ),
        ((0.5, float("nan")), None, XaikitValueError, r"denormalize: std must be finite"),
        (((0.1, 0.2), (0.1, 0.2, 0.3)), None, XaikitValueError, r"one value per channel each.*got 2 and 3"),
        ("imagenet", None, XaikitTypeError, r"denormalize must be None, \(mean, std\).*got str"),
        ((0.1, 0.2, 0.3), None, XaikitTypeError, r"denormalize must be None, \(mean, std\)"),
        (("a", 1.0), None, XaikitTypeError, r"denormalize: mean must be a number"),
        ((0.5, [0.2, "wide"]), None, XaikitTypeError, r"denormalize: std must be a number or one number per"),
        (([[0.1]], 1.0), None, XaikitValueError, r"mean must be a number or a flat sequence"),
        (
            lambda x: x[:1],
            np.zeros((2, 4, 4, 3)),
            XaikitValueError,
            r"denormalize: the display function must return one image per sample \(2\)",
        ),
    ],
)
def test_bad_options_name_denormalize_what_was_expected_and_got(spec, images, err, match) -> None:
    with pytest.raises(err, match=match):
        den = to_denormalizer(spec)
        assert den is not None
        den.apply(images)


def test_overlay_draws_the_denormalized_picture(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    img = pixels(rng)
    mask = rng.random((2, 6, 5))
    plain = overlay(img, mask, alpha=0.3, grey=False)
    ours = overlay(normalized(img), mask, alpha=0.3, grey=False, denormalize=(MEAN, STD))
    np.testing.assert_allclose(ours, plain, atol=1e-6)
    # alpha 0 is the picture itself; a channel-first torch tensor stays channel-first
    x = torch.as_tensor(normalized(img.transpose(0, 3, 1, 2), axis=1))
    out = overlay(x, mask, alpha=0.0, grey=False, denormalize=(MEAN, STD))
    np.testing.assert_allclose(out, img.transpose(0, 3, 1, 2), atol=1e-6)
    # without it, the normalized values are min-max stretched: not the picture
    assert np.abs(overlay(normalized(img), mask, alpha=0.0, grey=False) - img).max() > 0.05
    # a display function (here a channel flip, as after BGR preprocessing) is applied as given
    flip = overlay(img[..., ::-1], mask, alpha=0.0, grey=False, denormalize=lambda b: b[..., ::-1])
    np.testing.assert_allclose(flip, img, atol=1e-7)


def test_imgdata_column_is_painted_with_the_original_pixels(rng: np.random.Generator) -> None:
    img = pixels(rng)
    mask = rng.random((2, 6, 5, 1)).astype(np.float32)
    grid = ImgData(
        {"x": normalized(img), "x + mask": [normalized(img), mask], "raw": normalized(img)},
        denormalize={"x": (MEAN, STD), "x + mask": (MEAN, STD)},
    )
    np.testing.assert_allclose(grid["x"][0], img, atol=1e-6)
    base, top = grid["x + mask"]
    np.testing.assert_allclose(base, img, atol=1e-6)
    np.testing.assert_array_equal(top, mask[..., 0])  # the overlaid mask is left alone
    np.testing.assert_array_equal(grid["raw"][0], normalized(img))  # not named: as given
    fig = grid.paint_figure(dpi=20)
    cells = {ax.get_label(): ax for ax in fig.axes}
    for row in range(2):
        painted = np.asarray(cells[f"cell:x:{row}"].images[0].get_array())
        np.testing.assert_allclose(painted, img[row], atol=1e-6)
    with pytest.raises(XaikitValueError, match=r"denormalize names unknown column\(s\) \['y'\]"):
        ImgData(x=img, denormalize={"y": (MEAN, STD)})
    with pytest.raises(XaikitTypeError, match=r"denormalize must be a dict \{column"):
        ImgData(x=img, denormalize=(MEAN, STD))  # type: ignore[arg-type]
    with pytest.raises(
        XaikitValueError, match=r"denormalize\['x'\]: mean has 3 values, but the images have 1"
    ):
        ImgData(x=img[..., :1], denormalize={"x": (MEAN, STD)})


def test_saliency_trace_shows_the_real_picture_and_explains_the_normalized_input(
    framework: str, rng: np.random.Generator
) -> None:
    from tests.test_trace_xai_saliency import tiny_model
    from xaikit.trace.xai import Saliency

    img = pixels(rng, (3, 8, 8, 3))
    x = normalized(img)
    model = tiny_model(framework)
    opts = {"samples": {"x": x}, "smoothing": 2, "integrating": (2, 0), "seed": 0, "overlay_smooth": 0}
    plain = Saliency(model, "x", "y_pred", **opts).explain({"x": x})
    trace = Saliency(model, "x", "y_pred", denormalize=(MEAN, STD), **opts)
    grid = trace.explain({"x": x})
    np.testing.assert_allclose(grid["x"][0], img, atol=1e-6)
    for column in ("saliency", "Smoothed saliency", "Integrated saliency"):  # masks of the model's input
        np.testing.assert_array_equal(grid[column][0], plain[column][0])
    mask = grid["Integrated saliency"][0]
    np.testing.assert_allclose(grid["x saliency"][0], overlay(img, mask), atol=1e-6)
    with pytest.raises(XaikitValueError, match=r"denormalize: std must be positive"):
        Saliency(model, "x", "y_pred", denormalize=(MEAN, 0.0))
    with pytest.raises(XaikitValueError, match=r"denormalize names \['z'\], which are not model_inputs"):
        Saliency(model, "x", "y_pred", denormalize={"z": (MEAN, STD)})
    bad = Saliency(model, "x", "y_pred", denormalize=((0.5,) * 4, 0.5), **opts)
    with pytest.raises(XaikitValueError, match=r"denormalize: mean has 4 values, but the images have 3"):
        bad.explain({"x": x})
