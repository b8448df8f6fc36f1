"""ImgData: layout, cell kinds, value ranges, colormaps, overlays, saving and bad inputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.viz import ImgData, display_range
from xaikit.viz._image import PER_IMAGE, cell_range, fixed_range, to_channels_last, to_unit


def _cells(fig: Figure, column: str) -> list:
    return [ax for ax in fig.axes if ax.get_label().startswith(f"cell:{column}:")]


def _images(ax) -> list:
    return ax.get_images()


def _pixel_at_center(
    img: ImgData, column: str, row: int = 0, dpi: int = 40, where: tuple[float, float] = (0.5, 0.5)
) -> np.ndarray:
    """The painted pixel at fraction ``where`` = (x from left, y from top) of a cell."""
    fig = img.paint_figure(dpi=dpi)
    ax = next(a for a in fig.axes if a.get_label() == f"cell:{column}:{row}")
    fig.canvas.draw()
    bbox = ax.get_window_extent()
    arr = img.paint_numpy(dpi=dpi)[0]
    height = arr.shape[0]
    x = int(bbox.x0 + where[0] * bbox.width)
    y = int(height - (bbox.y1 - where[1] * bbox.height))
    return arr[y, x]


# ------------------------------------------------------------------ package wiring
def test_lazy_exports_and_no_matplotlib_on_import() -> None:
    assert xk.ImgData is ImgData
    code = (
        "import sys, xaikit\n"
        "assert 'matplotlib' not in sys.modules\n"
        "ImgData = xaikit.ImgData\n"
        "assert 'matplotlib' in sys.modules\n"
        "import xaikit.viz\n"
        "assert ImgData is xaikit.viz.ImgData\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_pyplot_is_used() -> None:
    code = (
        "import sys, numpy as np\n"
        "from xaikit.viz import ImgData\n"
        "ImgData(x=np.zeros((1, 4, 4))).paint_numpy(dpi=10)\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ layout and kinds
def test_reference_call_layout_titles_and_text() -> None:
    rng = np.random.default_rng(0)
    saliency = rng.random((2, 16, 16, 1))
    img = ImgData(
        colormap="inferno",
        y=np.array([3, 5]),
        y_pred=["cat", "dog"],
        x=rng.random((2, 16, 16, 3)),
        saliency=saliency,
    )
    assert list(img) == ["y", "y_pred", "x", "saliency"]
    assert img.batch_sizes == [2]
    fig = img.paint_figure(dpi=30)
    labels = [ax.get_label() for ax in fig.axes]
    assert len(fig.axes) == 8
    assert labels[:2] == ["cell:y:0", "cell:y:1"]
    # titles only on the first row of each column
    assert [ax.get_title() for ax in fig.axes if ax.get_label().endswith(":0")] == [
        "y",
        "y_pred",
        "x",
        "saliency",
    ]
    assert all(ax.get_title() == "" for ax in fig.axes if ax.get_label().endswith(":1"))
    assert [t.get_text() for ax in _cells(fig, "y") for t in ax.texts] == ["3", "5"]
    assert [t.get_text() for ax in _cells(fig, "y_pred") for t in ax.texts] == ["cat", "dog"]
    sal = _cells(fig, "saliency")[0].get_images()[0]
    assert sal.get_cmap().name == "inferno"
    assert sal.get_clim() == (0.0, saliency[0].max())  # a single-channel float map: 0..its maximum
    assert all(len(ax.get_images()) == 1 for ax in _cells(fig, "x"))


def test_text_kinds_and_formatting() -> None:
    img = ImgData(
        a=np.array([1.23456789, 2.0], dtype=np.float32),
        b=np.array([b"bytes", b"x"]),
        c=np.array([[1], [2]]),
        d=np.array([[0.5, 0.25, 1.0], [1, 2, 3]]),
        e=[True, False],
    )
    fig = img.paint_figure(dpi=20)
    text = {col: [t.get_text() for ax in _cells(fig, col) for t in ax.texts] for col in img}
    assert text == {
        "a": ["1.235", "2"],
        "b": ["bytes", "x"],
        "c": ["1", "2"],
        "d": ["[0.5, 0.25, 1]", "[1, 2, 3]"],
        "e": ["True", "False"],
    }


def test_mixed_batch_sizes_make_sorted_row_groups() -> None:
    img = ImgData(big=np.zeros((3, 4, 4)), small=np.zeros((1, 4, 4)), label="one", two=np.array([1, 2]))
    assert img.batch_sizes == [1, 2, 3]
    fig = img.paint_figure(dpi=20)
    order = [ax.get_label() for ax in fig.axes]
    assert order == ["cell:small:0", "cell:label:0", "cell:two:0", "cell:two:1"] + [
        f"cell:big:{r}" for r in range(3)
    ]
    # groups stacked top to bottom: batch 1 above batch 3
    y_small = _cells(fig, "small")[0].get_position().y0
    y_big = _cells(fig, "big")[0].get_position().y0
    assert y_small > y_big


def test_reference_single_sample_call() -> None:
    img = ImgData(y=7, x=np.zeros((1, 8, 8, 3), dtype=np.uint8))
    assert img.batch_sizes == [1]
    fig = img.paint_figure(dpi=20)
    assert [t.get_text() for t in _cells(fig, "y")[0].texts] == ["7"]


def test_paint_numpy_shape_dtype_and_size_scale_with_dpi() -> None:
    img = ImgData(x=np.zeros((5, 32, 32, 3)), **{f"c{i}": np.zeros((5, 32, 32)) for i in range(7)})
    fig = img.paint_figure(dpi=96)
    w, h = fig.get_size_inches()
    # 5 rows x 8 columns of 32x32 images: a screen-sized figure, cells wider than the image pixels
    assert 8 < w < 20 and 6 < h < 12
    a = img.paint_numpy(dpi=20)
    b = img.paint_numpy(dpi=40)
    assert a.dtype == np.uint8 and a.ndim == 4 and a.shape[0] == 1 and a.shape[-1] == 3
    assert abs(b.shape[1] - 2 * a.shape[1]) <= 2 and abs(b.shape[2] - 2 * a.shape[2]) <= 2


def test_images_keep_their_aspect() -> None:
    img = ImgData(wide=np.zeros((1, 10, 40)), square=np.zeros((1, 10, 10)))
    fig = img.paint_figure(dpi=50)
    fig.canvas.draw()
    wide = _cells(fig, "wide")[0].get_window_extent()
    square = _cells(fig, "square")[0].get_window_extent()
    assert wide.width / wide.height == pytest.approx(4.0, rel=0.05)
    assert square.width / square.height == pytest.approx(1.0, rel=0.05)


# ------------------------------------------------------------------ value ranges
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (np.array([0.2, 0.7]), (0.0, 1.0)),
        (np.array([-0.5, 0.25]), (-1.0, 1.0)),
        (np.array([3.0, 5.0]), (3.0, 5.0)),
        (np.array([0, 17], dtype=np.uint8), (0.0, 255.0)),
        (np.array([0, 300], dtype=np.int64), (0.0, 300.0)),
        (np.array([True, False]), (0.0, 1.0)),
        (np.full(3, 7.0), (7.0, 8.0)),
        (np.array([np.nan, 2.0, 4.0]), (2.0, 4.0)),
        (np.array([np.nan, np.nan]), (0.0, 1.0)),
    ],
)
def test_display_range_rules(values: np.ndarray, expected: tuple[float, float]) -> None:
    assert display_range(values) == expected


def test_display_range_signed_vrange_and_batch() -> None:
    assert display_range(np.array([-0.1, 3.0]), signed=True) == (-3.0, 3.0)
    assert display_range(np.zeros(3), signed=True) == (-1.0, 1.0)
    assert display_range(np.array([5.0]), vrange=(-2.0, 1.0), signed=True) == (-2.0, 2.0)
    assert display_range(np.array([0.2, 0.4]), vrange="minmax") == pytest.approx((0.2, 0.4))
    assert display_range(np.array([0.2, 0.4]), vrange=(0.0, 10.0)) == (0.0, 10.0)
    # the batch decides the fixed range; an image inside [0, 1] from a wider batch is min-maxed
    batch = np.array([[0.2, 0.4], [3.0, 5.0]])
    assert fixed_range(batch) is None
    assert display_range(batch[0], batch_range=fixed_range(batch)) == pytest.approx((0.2, 0.4))


def test_to_unit_clips_and_kills_nan() -> None:
    out = to_unit(np.array([-1.0, 0.0, 5.0, 10.0, 20.0, np.nan]), (0.0, 10.0))
    assert out.dtype == np.float32
    assert out.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0, 0.0]


def test_known_pixels_after_painting() -> None:
    red = np.zeros((1, 8, 8, 3), dtype=np.float32)
    red[..., 0] = 1.0
    assert _pixel_at_center(ImgData(x=red), "x").tolist() == [255, 0, 0]
    # uint8 drawn as-is
    u8 = np.full((1, 8, 8, 3), (10, 200, 30), dtype=np.uint8)
    assert _pixel_at_center(ImgData(x=u8), "x").tolist() == [10, 200, 30]
    # [-1, 1] image: 0 maps to the middle grey
    mid = _pixel_at_center(ImgData(x=np.zeros((1, 8, 8, 3)) - 1e-3), "x")
    assert np.all(np.abs(mid.astype(int) - 127) <= 2)
    # arbitrary range: min-max per image, a constant image is drawable (lowest colour)
    big = np.full((1, 8, 8, 3), 500.0)
    big[0, :, :4] = 100.0
    assert _pixel_at_center(ImgData(x=big), "x", where=(0.25, 0.5)).tolist() == [0, 0, 0]
    assert _pixel_at_center(ImgData(x=big), "x", where=(0.75, 0.5)).tolist() == [255, 255, 255]
    # single channel with a colormap: the ends of "gray" (non-negative: from 0 to its maximum)
    grey = big[..., 0]
    assert _pixel_at_center(ImgData(colormap="gray", x=grey), "x", where=(0.75, 0.5)).tolist() == [255] * 3
    assert _pixel_at_center(ImgData(colormap="gray", x=grey), "x", where=(0.25, 0.5)).tolist() == [51] * 3
    # a constant non-zero single-channel image is its own maximum: the top colour, not black
    const = _pixel_at_center(ImgData(colormap="gray", x=np.full((1, 6, 6), 42.0)), "x")
    assert const.tolist() == [255, 255, 255]
    # a constant colour image keeps rule 6: drawable, the lowest colour
    const = _pixel_at_center(ImgData(x=np.full((1, 6, 6, 3), 42.0)), "x")
    assert const.tolist() == [0, 0, 0]


def test_colormap_applies_to_single_channel_only_and_per_column() -> None:
    rng = np.random.default_rng(1)
    img = ImgData(
        colormap="inferno",
        colormaps={"b": "viridis"},
        rgb=rng.random((1, 6, 6, 3)),
        a=rng.random((1, 6, 6, 1)),
        b=rng.random((1, 6, 6)),
    )
    fig = img.paint_figure(dpi=20)
    rgb_im = _cells(fig, "rgb")[0].get_images()[0]
    assert rgb_im.get_array().shape == (6, 6, 3)  # colour data, no colormap lookup
    assert _cells(fig, "a")[0].get_images()[0].get_cmap().name == "inferno"
    assert _cells(fig, "b")[0].get_images()[0].get_cmap().name == "viridis"
    # a pure green RGB image stays green under "inferno"
    green = np.zeros((1, 6, 6, 3))
    green[..., 1] = 1.0
    assert _pixel_at_center(ImgData(colormap="inferno", x=green), "x").tolist() == [0, 255, 0]


def test_signed_mode_symmetric_diverging() -> None:
    attr = np.zeros((2, 5, 5))
    attr[0, 0, 0], attr[0, 1, 1] = -0.5, 4.0
    attr[1, 0, 0] = -2.0
    img = ImgData(attr=attr, signed={"attr"}, colorbars=True)
    fig = img.paint_figure(dpi=20)
    ims = [ax.get_images()[0] for ax in _cells(fig, "attr")]
    assert ims[0].get_clim() == (-4.0, 4.0)
    assert ims[1].get_clim() == (-2.0, 2.0)
    assert ims[0].get_cmap().name == "RdBu_r"
    # zero is the centre of a diverging map: white-ish
    assert np.all(_pixel_at_center(ImgData(attr=attr[:1], signed="attr"), "attr") >= 240)
    assert [ax.get_label() for ax in fig.axes if ax.get_label().startswith("colorbar")] == [
        "colorbar:attr:0",
        "colorbar:attr:1",
    ]
    # a user colormap wins over the diverging default
    fig = ImgData(attr=attr, signed=True, colormaps={"attr": "bwr"}).paint_figure(dpi=20)
    assert _cells(fig, "attr")[0].get_images()[0].get_cmap().name == "bwr"


def test_vranges_fix_the_colour_scale() -> None:
    img = ImgData(m=np.full((1, 4, 4), 0.5), vranges={"m": (0.0, 2.0)}, colorbars={"m"})
    fig = img.paint_figure(dpi=20)
    assert _cells(fig, "m")[0].get_images()[0].get_clim() == (0.0, 2.0)
    cbar = next(ax for ax in fig.axes if ax.get_label() == "colorbar:m:0")
    assert cbar.get_ylim() == (0.0, 2.0)
    fig = ImgData(m=np.array([[[0.2, 0.4]]]), vranges={"m": "minmax"}).paint_figure(dpi=20)
    assert _cells(fig, "m")[0].get_images()[0].get_clim() == pytest.approx((0.2, 0.4))


# ------------------------------------------------------------------ layouts and frameworks
def test_channel_first_and_last_detection() -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    assert to_channels_last(x, "x").shape == (2, 4, 5, 3)
    assert to_channels_last(np.zeros((2, 4, 5, 3)), "x").shape == (2, 4, 5, 3)
    assert to_channels_last(np.zeros((2, 1, 4, 5)), "x").shape == (2, 4, 5)
    assert to_channels_last(np.zeros((2, 4, 5)), "x").shape == (2, 4, 5)
    amb = np.zeros((1, 3, 7, 3))
    assert to_channels_last(amb, "x").shape == (1, 3, 7, 3)  # numpy: channel-last
    assert to_channels_last(amb, "x", prefer_first=True).shape == (1, 7, 3, 3)
    assert to_channels_last(amb, "x", channel_axis=1).shape == (1, 7, 3, 3)
    img = ImgData(x=amb, channel_axis={"x": 1})
    assert img["x"][0].shape == (1, 7, 3, 3)
    img = ImgData(x=amb, y=np.array([1]), channel_axis=1)  # one int: only for 4-D image columns
    assert img["x"][0].shape == (1, 7, 3, 3)


def test_framework_channel_first_input(framework: str) -> None:
    from xaikit.backend import to_tensor

    chw = np.zeros((2, 3, 6, 6), dtype=np.float32)
    chw[:, 2] = 1.0  # blue
    x = to_tensor(chw if framework == "torch" else np.moveaxis(chw, 1, -1), framework)
    img = ImgData(x=x, mask=to_tensor(np.ones((2, 6, 6, 1), dtype=np.float32), framework))
    assert img["x"][0].shape == (2, 6, 6, 3)
    assert _pixel_at_center(img, "x", row=1).tolist() == [0, 0, 255]


def test_bfloat16_images_and_masks_are_images(framework: str) -> None:
    """A bfloat16 batch (Keras mixed precision, or a torch bf16 model's inputs) paints as images
    like float32: TensorFlow's bfloat16 reaches the host as an ml_dtypes array, which numpy
    files under "void" (it was drawn as rows of text)."""
    import ml_dtypes

    from xaikit.backend import to_tensor

    hwc = np.random.default_rng(0).random((2, 6, 6, 3)).astype(np.float32)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        value = to_tensor(np.moveaxis(hwc, -1, 1), framework).to(torch.bfloat16)
    else:
        tf = pytest.importorskip("tensorflow")
        value = tf.cast(to_tensor(hwc, framework), tf.bfloat16)
    host = hwc.astype(ml_dtypes.bfloat16)
    img = ImgData(x=value, y=host, m=host[..., 0])
    assert img.kinds("x") == ["image"] and img.kinds("y") == ["image"] and img.kinds("m") == ["image"]
    np.testing.assert_array_equal(img["y"][0], host.astype(np.float32))


def test_framework_ambiguous_torch_defaults_to_channel_first(framework: str) -> None:
    from xaikit.backend import to_tensor

    value = to_tensor(np.zeros((1, 3, 7, 3), dtype=np.float32), framework)
    expected = (1, 7, 3, 3) if framework == "torch" else (1, 3, 7, 3)
    assert ImgData(x=value)["x"][0].shape == expected


# ------------------------------------------------------------------ overlays and boxes
def test_list_overlay_layers() -> None:
    base = np.zeros((2, 8, 8, 3))
    mask = np.ones((2, 8, 8, 1))
    boxes = np.array([[[1, 1, 4, 4], [0, 0, 0, 0]], [[2, 2, 3, 3], [1, 1, -1, 2]]], dtype=float)
    img = ImgData(colormap="inferno", x=[base, mask, boxes])
    fig = img.paint_figure(dpi=20)
    for ax in _cells(fig, "x"):
        ims = ax.get_images()
        assert len(ims) == 2
        assert ims[0].get_alpha() is None and ims[1].get_alpha() == 0.5
        assert len(ax.patches) == 1  # zero and negative sized boxes are skipped
    rect = _cells(fig, "x")[0].patches[0]
    assert (rect.get_x(), rect.get_y(), rect.get_width(), rect.get_height()) == (1, 1, 4, 4)


def test_boxes_with_labels_alone() -> None:
    boxes = np.array([[[1, 2, 3, 4, 7]]], dtype=float)
    fig = ImgData(b=boxes).paint_figure(dpi=20)
    ax = _cells(fig, "b")[0]
    assert len(ax.patches) == 1
    assert [t.get_text() for t in ax.texts] == ["7"]


def test_overlay_list_of_scalars_is_text_not_layers() -> None:
    img = ImgData(y=["a", "b", "c"], n=[1, 2, 3])
    assert img.batch_sizes == [3]
    assert len(img["y"]) == 1 and img["y"][0] == ["a", "b", "c"]


def test_imgdata_pickles_and_compares_by_identity() -> None:
    import pickle

    img = ImgData(colormap="inferno", colormaps={"x": "gray"}, y=np.array([1, 2]), x=np.zeros((2, 4, 4, 1)))
    back = pickle.loads(pickle.dumps(img))
    assert back.columns == ["y", "x"] and back["y"] == [["1", "2"]]
    assert "x" in back and "z" not in back
    with pytest.raises(KeyError, match=r"ImgData has no column 'z'; the columns are \['y', 'x'\]"):
        back["z"]
    # not a Mapping: generic converters treat it as one value
    from collections.abc import Mapping

    assert not isinstance(img, Mapping)
    np.testing.assert_array_equal(back["x"][0], img["x"][0])
    assert back.paint_numpy(dpi=10).shape == img.paint_numpy(dpi=10).shape
    assert "ImgData(y: text, x: image; batch sizes [2])" == repr(img)


def test_titles_and_mapping_columns() -> None:
    x = np.zeros((1, 6, 6))
    img = ImgData({"x saliency": x}, colormap="gray", x=x, titles={"x": "image"})
    fig = img.paint_figure(dpi=20)
    assert [ax.get_title() for ax in fig.axes] == ["x saliency", "image"]
    assert list(img) == ["x saliency", "x"]
    # reference-style positional colormap
    fig = ImgData("viridis", m=x).paint_figure(dpi=20)
    assert fig.axes[0].get_images()[0].get_cmap().name == "viridis"


def test_long_titles_are_fitted() -> None:
    fig = ImgData({"a very long title for a narrow column": np.zeros((1, 4, 4))}).paint_figure(dpi=20)
    title = fig.axes[0].title
    assert "\n" in title.get_text()
    assert title.get_fontsize() <= 11


# ------------------------------------------------------------------ saving
@pytest.mark.parametrize("ext", ["png", "svg", "pdf", "PNG"])
def test_save_formats(tmp_path: Path, ext: str) -> None:
    path = tmp_path / "sub" / f"grid.{ext}"
    fig = ImgData(y=np.array([1]), x=np.zeros((1, 4, 4, 3))).paint_figure(save_path=path, dpi=20)
    assert isinstance(fig, Figure)
    data = path.read_bytes()
    magic = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[ext.lower()]
    assert data.startswith(magic)
    assert os.listdir(path.parent) == [path.name]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_save_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "grid.png"
    path.write_bytes(b"old")

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(FigureCanvasAgg, "print_png", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        ImgData(x=np.zeros((1, 4, 4))).paint_figure(save_path=path, dpi=20)
    assert sorted(os.listdir(tmp_path)) == ["grid.png"]
    assert path.read_bytes() == b"old"
    (tmp_path / "grid.png").unlink()
    with pytest.raises(RuntimeError):
        ImgData(x=np.zeros((1, 4, 4))).paint_figure(save_path=path, dpi=20)
    assert os.listdir(tmp_path) == []


def test_a_place_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    """A save path under a file, or in a folder nothing can be written to, is an XaikitWriteError
    (still an OSError) naming the destination, not the temporary file the write went to."""
    (tmp_path / "a_file").write_text("x")
    img = ImgData(x=np.zeros((1, 4, 4)))
    under_file = tmp_path / "a_file" / "g.png"
    with pytest.raises(
        xk.XaikitWriteError, match=rf"cannot write '{under_file}': '{tmp_path / 'a_file'}' is a file"
    ):
        img.paint_figure(save_path=under_file, dpi=20)
    with pytest.raises(OSError, match=r"cannot write '/proc/xaikit-grid.png': No such file or directory$"):
        img.paint_figure(save_path="/proc/xaikit-grid.png", dpi=20)
    assert os.listdir(tmp_path) == ["a_file"]


def test_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(
        XaikitValueError, match=r"save_path must end in one of \.png, \.svg, \.pdf; got .*grid\.jpg"
    ):
        ImgData(x=np.zeros((1, 4, 4))).paint_figure(save_path=tmp_path / "grid.jpg")
    with pytest.raises(XaikitValueError, match="save_path must end in"):
        ImgData(x=np.zeros((1, 4, 4))).paint_figure(save_path=tmp_path / "grid")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"x": [np.zeros((2, 4, 4)), np.zeros((3, 4, 4))]},
            XaikitValueError,
            r"column 'x': every overlay element must have the same batch size; got \[2, 3\]",
        ),
        ({"x": np.zeros((2, 4, 4, 7))}, XaikitValueError, r"column 'x'.* 1 or 3 channels.*\(2, 4, 4, 7\)"),
        ({"x": np.zeros((2, 1, 4, 4, 3))}, XaikitValueError, r"column 'x' must hold per-sample text"),
        ({"x": np.zeros((0, 4, 4))}, XaikitValueError, r"column 'x' is empty"),
        ({"x": np.zeros(0)}, XaikitValueError, r"column 'x' is empty"),
        ({"x": []}, XaikitValueError, r"column 'x': an overlay list must not be empty"),
        ({"x": np.zeros((1, 4, 4), dtype=complex)}, XaikitValueError, r"column 'x' cannot draw complex"),
        (
            {"x": np.zeros((1, 4, 4)), "colormap": "nope"},
            XaikitValueError,
            r"colormap must be a matplotlib colormap name .*'nope'",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "colormap": 3},
            XaikitTypeError,
            r"colormap must be a matplotlib colormap name or Colormap; got int 3",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "colormaps": {"y": "gray"}},
            XaikitValueError,
            r"colormaps names unknown column\(s\) \['y'\]; the columns are \['x'\]",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "colormaps": {"x": "nope"}},
            XaikitValueError,
            r"colormaps\['x'\] must be a matplotlib colormap",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"x": (1, 0)}},
            XaikitValueError,
            r"vranges\['x'\] must be finite with low < high; got \(1.0, 0.0\)",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"x": "auto"}},
            XaikitValueError,
            r"vranges\['x'\] must be \(low, high\) or 'minmax'; got 'auto'",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"x": "01"}},
            XaikitValueError,
            r"vranges\['x'\] must be \(low, high\) or 'minmax'; got '01'",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"x": (0, 1, 2)}},
            XaikitValueError,
            r"vranges\['x'\] must be \(low, high\) or 'minmax'; got tuple",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"x": np.array([0.0, 1.0])}},
            None,
            None,
        ),
        (
            {"x": np.zeros((1, 4, 4)), "vranges": {"z": (0, 1)}},
            XaikitValueError,
            r"vranges names unknown column\(s\) \['z'\]",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "signed": {"z"}},
            XaikitValueError,
            r"signed names unknown column\(s\) \['z'\]",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "signed": 3},
            XaikitTypeError,
            r"signed must be True, a column name or a set of them; got int 3",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "colorbars": ["q"]},
            XaikitValueError,
            r"colorbars names unknown column\(s\) \['q'\]",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "titles": {"q": "Q"}},
            XaikitValueError,
            r"titles names unknown column\(s\) \['q'\]",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "titles": {"x": 1}},
            XaikitTypeError,
            r"titles\['x'\] must be a string; got int 1",
        ),
        (
            {"x": np.zeros((1, 4, 4)), "channel_axis": {"x": 1}},
            XaikitValueError,
            r"channel_axis for column 'x' needs a \(B, H, W, C\)",
        ),
        (
            {"x": np.zeros((1, 3, 4, 4)), "channel_axis": {"x": 0}},
            XaikitValueError,
            r"channel_axis for column 'x' must be 1, 2, 3 or -1",
        ),
        (
            {"x": np.zeros((1, 3, 4, 4)), "channel_axis": {"x": 2}},
            XaikitValueError,
            r"column 'x' must hold images with 1 or 3 channels",
        ),
        (
            {"x": np.zeros((1, 3, 4, 4)), "channel_axis": "first"},
            XaikitTypeError,
            r"channel_axis for 'x' must be an int; got str 'first'",
        ),
    ],
)
def test_bad_inputs(kwargs: dict, error: type | None, match: str | None) -> None:
    if error is None:  # a good neighbour of the bad cases
        ImgData(**kwargs).paint_figure(dpi=10)
        return
    with pytest.raises(error, match=match):
        ImgData(**kwargs)


def test_bad_positional_and_duplicates() -> None:
    with pytest.raises(XaikitTypeError, match=r"columns must be a mapping \{title: value\}; got int 3"):
        ImgData(3)
    with pytest.raises(XaikitValueError, match="column 'x' is given twice"):
        ImgData({"x": np.zeros(1)}, x=np.zeros(1))
    with pytest.raises(XaikitTypeError, match="column titles must be strings; got int 1"):
        ImgData({1: np.zeros(1)})


def test_bad_paint_arguments(tmp_path: Path) -> None:
    with pytest.raises(XaikitValueError, match="ImgData has no columns to paint"):
        ImgData().paint_figure()
    img = ImgData(x=np.zeros((1, 4, 4)))
    with pytest.raises(XaikitValueError, match="cell_size must be a positive number of inches; got 0"):
        img.paint_figure(cell_size=0)
    with pytest.raises(XaikitValueError, match="dpi must be a positive number; got -1"):
        img.paint_numpy(dpi=-1)
    with pytest.raises(XaikitTypeError, match="save_path must be a str or path; got int"):
        img.paint_figure(save_path=3)  # type: ignore[arg-type]


def test_image_options_disambiguate_narrow_images_from_boxes() -> None:
    value = np.zeros((2, 5, 5))
    assert len(ImgData(b=value).paint_figure(dpi=20).axes[0].get_images()) == 0  # boxes
    for options in (
        {"signed": "m"},
        {"vranges": {"m": (0, 1)}},
        {"colormaps": {"m": "gray"}},
        {"colorbars": "m"},
    ):
        fig = ImgData(m=value, **options).paint_figure(dpi=20)
        assert len(_cells(fig, "m")[0].get_images()) == 1
    # "all columns" options do not turn box columns into images
    img = ImgData(b=value, x=np.zeros((2, 8, 8)), colorbars=True, signed=True)
    assert img.kinds("b") == ["boxes"] and img.kinds("x") == ["image"]


def test_long_text_cells_wrap_instead_of_shrinking() -> None:
    note = "columns with another batch size get their own row group"
    fig = ImgData(note=note).paint_figure(dpi=20)
    text = fig.axes[0].texts[0]
    assert "\n" in text.get_text()
    assert text.get_text().replace("\n", " ") == note
    assert text.get_fontsize() >= 8


@pytest.mark.slow
def test_gallery_script_writes_the_grid(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "gallery" / "imgdata_grid.py"
    spec = importlib.util.spec_from_file_location("imgdata_grid", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--out", str(tmp_path / "grid.png"), "--dpi", "30"])
    assert out.read_bytes().startswith(b"\x89PNG")
    grid = module.build_grid(module.make_samples())
    assert grid.batch_sizes == [1, 5]
    assert "x saliency" in grid


def test_paint_numpy_matches_figure_size_exactly() -> None:
    img = ImgData(y=np.array([1, 2, 3]), x=np.zeros((3, 10, 20, 3)))
    w, h = img.paint_figure(dpi=30).get_size_inches()
    assert img.paint_numpy(dpi=30).shape == (1, round(h * 30), round(w * 30), 3)


def test_text_overlay_and_colorbar_of_an_overlay_mask() -> None:
    rgb = np.zeros((2, 6, 6, 3))
    mask = np.linspace(0, 1, 72).reshape(2, 6, 6, 1)
    img = ImgData(x=[rgb, mask, np.array(["a", "b"])], colorbars={"x"}, colormaps={"x": "magma"})
    assert img.kinds("x") == ["image", "image", "text"]
    fig = img.paint_figure(dpi=20)
    for row, label in enumerate("ab"):
        ax = next(a for a in fig.axes if a.get_label() == f"cell:x:{row}")
        assert [t.get_text() for t in ax.texts] == [label]
        assert ax.get_images()[1].get_cmap().name == "magma"
    cbars = [a for a in fig.axes if a.get_label().startswith("colorbar:x:")]
    assert len(cbars) == 2
    # colorbars of RGB-only columns are not drawn (nothing to scale)
    fig = ImgData(x=rgb, colorbars=True).paint_figure(dpi=20)
    assert all(a.get_label().startswith("cell:") for a in fig.axes)


def _cell_images(fig: Figure, col: str) -> list[np.ndarray]:
    return [
        np.asarray(im.get_array())
        for a in fig.axes
        if a.get_label().startswith(f"cell:{col}:")
        for im in a.get_images()
    ]


def test_2d_float_array_is_one_greyscale_image() -> None:
    hw = np.linspace(0.0, 1.0, 32 * 28).reshape(32, 28)
    img = ImgData(x=hw)  # alone: one image, not 32 rows of numbers
    assert img.kinds("x") == ["image"] and img.batch_sizes == [1]
    (painted,) = _cell_images(img.paint_figure(dpi=20), "x")
    assert painted.shape == (32, 28)
    np.testing.assert_allclose(painted, hw, atol=1e-6)
    # where a batch of one is expected, even a small (H, W) is an image
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    img = ImgData(y=["cat"], x=small)
    assert img.kinds("x") == ["image"] and img.batch_sizes == [1]
    (painted,) = _cell_images(img.paint_figure(dpi=20), "x")
    np.testing.assert_array_equal(painted, small)
    # an (H, W) image with a mask over it
    fig = ImgData(y=["cat"], x=[hw, hw > 0.5]).paint_figure(dpi=20)
    assert [p.shape for p in _cell_images(fig, "x")] == [(32, 28), (32, 28)]
    # named by an image-only option: an image whatever its size
    assert ImgData(m=small, colorbars={"m"}).kinds("m") == ["image"]


def test_3d_float_array_is_a_batch_of_greyscale_images() -> None:
    bhw = np.random.default_rng(0).random((3, 6, 7))
    img = ImgData(y=np.array([1, 2, 3]), x=bhw)
    assert img.kinds("x") == ["image"] and img.batch_sizes == [3]
    painted = _cell_images(img.paint_figure(dpi=20), "x")
    assert [p.shape for p in painted] == [(6, 7)] * 3
    np.testing.assert_allclose(painted[2], bhw[2], atol=1e-6)


def test_2d_arrays_that_stay_text() -> None:
    scores = np.random.default_rng(0).random((10, 10))
    # B rows of N values beside columns of B samples: per-row text as before
    img = ImgData(y=np.arange(10), scores=scores)
    assert img.kinds("scores") == ["text"] and img.batch_sizes == [10]
    # a short lone vector table, integers, booleans: text
    assert ImgData(s=np.ones((4, 3))).kinds("s") == ["text"]
    assert ImgData(s=np.ones((12, 12), dtype=np.int64)).kinds("s") == ["text"]
    assert ImgData(s=np.ones((12, 12), dtype=bool)).kinds("s") == ["text"]


def test_figure_title_and_text_colors() -> None:
    img = ImgData(
        y=["a", "b"], x=np.zeros((2, 4, 4)), text_colors={"y": [None, "red"]}, figure_title="epoch 3"
    )
    fig = img.paint_figure(dpi=20)
    assert fig.get_suptitle() == "epoch 3" and img.figure_title == "epoch 3"
    colors = [
        t.get_color() for r in range(2) for a in fig.axes if a.get_label() == f"cell:y:{r}" for t in a.texts
    ]
    assert colors[1] == "red" and colors[0] != "red"
    assert img.text_color("y", 1) == "red" and img.text_color("y", 0) is None
    # the title makes room: the figure is taller than without it
    assert (
        fig.get_size_inches()[1]
        > ImgData(y=["a", "b"], x=np.zeros((2, 4, 4))).paint_figure(dpi=20).get_size_inches()[1]
    )
    with pytest.raises(XaikitValueError, match=r"text_colors\['y'\] holds 'nocolour'"):
        ImgData(y=["a"], text_colors={"y": ["nocolour"]})
    with pytest.raises(XaikitValueError, match=r"text_colors names unknown column\(s\) \['z'\]"):
        ImgData(y=["a"], text_colors={"z": ["red"]})
    with pytest.raises(XaikitTypeError, match="figure_title must be a string or None; got int"):
        ImgData(y=["a"], figure_title=3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ maps are never painted black
def _colour(cmap: str, value: float) -> np.ndarray:
    from matplotlib import colormaps

    return np.round(np.asarray(colormaps[cmap](value)[:3]) * 255)


def _cam_maps() -> np.ndarray:
    """Two raw Grad-CAM-like maps, max 0.036 (a square of 0.036 in the middle; the second map has
    a ring of 0.018 around it) and an all-zero third."""
    cam = np.zeros((3, 16, 16), np.float32)
    cam[0, 4:12, 4:12] = 0.036
    cam[1, 4:12, 4:12] = 0.018
    cam[1, 6:10, 6:10] = 0.036
    return cam


def test_a_small_map_is_scaled_by_its_own_maximum() -> None:
    """Issue 25: raw CAM maps of max 0.036 were painted on a fixed 0..1 scale: inferno(0.036),
    all but black. Each single-channel float image is now scaled 0..its maximum."""
    cam = _cam_maps()
    img = ImgData(colormap="inferno", cam=cam)
    for row in (0, 1):
        centre = _pixel_at_center(img, "cam", row=row).astype(int)
        np.testing.assert_allclose(centre, _colour("inferno", 1.0), atol=2)
    ring = _pixel_at_center(img, "cam", row=1, where=(0.3, 0.5)).astype(int)
    np.testing.assert_allclose(ring, _colour("inferno", 0.5), atol=2)
    corner = _pixel_at_center(img, "cam", row=0, where=(0.1, 0.1)).astype(int)
    np.testing.assert_allclose(corner, _colour("inferno", 0.0), atol=2)
    # the fixed 0..1 scale, asked for explicitly, still gives what it gave by default before
    fixed = ImgData(colormap="inferno", cam=cam, vranges={"cam": (0.0, 1.0)})
    old = _pixel_at_center(fixed, "cam").astype(int)
    np.testing.assert_allclose(old, _colour("inferno", 0.036), atol=2)
    assert old.max() <= 25  # what issue 25 saw: black
    # an explicit range is honoured: 0.036 is the middle of (0, 0.072)
    half = ImgData(colormap="inferno", cam=cam, vranges={"cam": (0.0, 0.072)})
    np.testing.assert_allclose(_pixel_at_center(half, "cam").astype(int), _colour("inferno", 0.5), atol=2)
    fig = img.paint_figure(dpi=20)
    assert [ax.get_images()[0].get_clim() for ax in _cells(fig, "cam")] == [
        pytest.approx((0.0, 0.036)),
        pytest.approx((0.0, 0.036)),
        (0.0, 1.0),
    ]


def test_an_all_zero_map_is_the_colormaps_zero_and_says_so() -> None:
    img = ImgData(colormap="inferno", cam=_cam_maps())
    np.testing.assert_allclose(
        _pixel_at_center(img, "cam", row=2).astype(int), _colour("inferno", 0.0), atol=2
    )
    fig = img.paint_figure(dpi=40)
    texts = [[t.get_text() for t in ax.texts] for ax in _cells(fig, "cam")]
    assert texts == [[], [], ["all 0"]]
    # colour images and overlays get no caption
    fig = ImgData(x=[np.zeros((1, 6, 6, 3)), np.zeros((1, 6, 6))]).paint_figure(dpi=20)
    assert [t.get_text() for t in _cells(fig, "x")[0].texts] == []


def test_nan_and_infinite_pixels_are_noted() -> None:
    """matplotlib paints non-finite pixels in the background colour: an all-inf map came out as
    a blank cell without a word, a NaN pixel as a white one."""
    maps = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    maps[0, 3, 3] = np.nan
    maps[1] = np.inf
    rgb = np.random.default_rng(1).random((1, 8, 8, 3)).astype(np.float32)
    rgb[0, 0, 0, 1] = np.nan
    fig = ImgData(colormap="inferno", cam=maps).paint_figure(dpi=40)
    assert [[t.get_text() for t in ax.texts] for ax in _cells(fig, "cam")] == [
        ["1 NaN/inf px"],
        ["all NaN/inf"],
        [],
    ]
    fig = ImgData(x=rgb).paint_figure(dpi=40)
    assert [t.get_text() for t in _cells(fig, "x")[0].texts] == ["1 NaN/inf px"]


def test_display_masks_paint_exactly_as_before() -> None:
    """A display mask (values in [0, 1] reaching 1) paints the same as on the fixed (0, 1) scale,
    bit for bit, and so does an all-zero one."""
    rng = np.random.default_rng(3)
    masks = rng.random((3, 9, 9)).astype(np.float32)
    masks /= masks.max(axis=(1, 2), keepdims=True)
    masks[2] = 0.0
    default = ImgData(colormap="inferno", m=masks).paint_numpy(dpi=30)
    fixed = ImgData(colormap="inferno", m=masks, vranges={"m": (0.0, 1.0)}).paint_numpy(dpi=30)
    # the caption of the all-zero mask is the one difference: compare the two other rows' cells
    fig = ImgData(colormap="inferno", m=masks).paint_figure(dpi=30)
    fig.canvas.draw()
    height = default.shape[1]
    for ax in _cells(fig, "m")[:2]:
        b = ax.get_window_extent()
        rows = slice(int(height - b.y1) + 1, int(height - b.y0) - 1)
        cols = slice(int(b.x0) + 1, int(b.x1) - 1)
        np.testing.assert_array_equal(default[0, rows, cols], fixed[0, rows, cols])


def test_signed_and_integer_single_channel_images() -> None:
    # signed floats: their own min..max (not the fixed -1..1 of colour images)
    assert display_range(np.array([-0.002, 0.006]), batch_range=PER_IMAGE) == (-0.002, 0.006)
    fig = ImgData(g=np.array([[[-0.002, 0.006], [0.0, 0.001]]])).paint_figure(dpi=20)
    assert _cells(fig, "g")[0].get_images()[0].get_clim() == pytest.approx((-0.002, 0.006))
    # signed= keeps the symmetric diverging range
    fig = ImgData(g=np.array([[[-0.002, 0.006], [0.0, 0.001]]]), signed="g").paint_figure(dpi=20)
    assert _cells(fig, "g")[0].get_images()[0].get_clim() == pytest.approx((-0.006, 0.006))
    # integers and booleans keep their fixed scales
    assert cell_range(np.array([[[0, 17]]], dtype=np.uint8)) == (0.0, 255.0)
    assert cell_range(np.array([[[True, False]]])) == (0.0, 1.0)
    assert cell_range(np.zeros((1, 2, 2, 3), np.float32)) == (0.0, 1.0)
    assert display_range(np.zeros(3), batch_range=PER_IMAGE) == (0.0, 1.0)
    assert display_range(np.array([np.nan, 0.5]), batch_range=PER_IMAGE) == (0.0, 0.5)
