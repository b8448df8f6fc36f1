"""The grids of a dataset explanation (``xaikit explain``'s PNGs and the docs' picture): which
samples each grid shows, what each row says (class names where the run has them), the masks
drawn alone with a colorbar and over the image, the method's display name as the titles, and no
grid for non-images."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from xaikit.xai._engine.display import to_display  # noqa: E402
from xaikit.xai.dataset import _grids  # noqa: E402
from xaikit.xai.dataset._grids import GRIDS, dataset_grid, display_images, pick_samples, save_grids  # noqa: E402
from xaikit.xai.dataset._sources import as_source  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from dataset_models import images, tiny_cnn  # noqa: E402


def test_pick_samples_orders_by_score_ties_in_table_order() -> None:
    table = pd.DataFrame({"index": [10, 11, 12, 13, 14], "score": [0.3, 0.9, 0.1, 0.9, 0.3]})
    picks = pick_samples(table, 3)
    assert list(picks) == list(GRIDS)
    assert picks["first"].tolist() == [10, 11, 12]
    assert picks["most_confident"].tolist() == [11, 13, 10]
    assert picks["least_confident"].tolist() == [12, 10, 14]
    assert pick_samples(table, 9)["least_confident"].tolist() == [12, 10, 14, 11, 13]  # n > rows: all


@pytest.fixture(scope="module")
def explained(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[xk.xai.DatasetExplanation, np.ndarray, np.ndarray]:
    x = images(7)
    with torch.no_grad():
        pred = tiny_cnn()(torch.from_numpy(x)).argmax(1).numpy()
    labels = pred.copy()
    labels[[1, 4]] = (pred[[1, 4]] + 1) % 5  # two wrong predictions
    out = tmp_path_factory.mktemp("grids") / "g.zarr"
    res = xk.xai.explain_dataset(
        tiny_cnn(), x, method="vanilla", out=out, batch_size=3, labels=labels, progress=False
    )
    return res, x, labels


def test_grid_rows_text_and_masks(
    explained: tuple[xk.xai.DatasetExplanation, np.ndarray, np.ndarray],
) -> None:
    res, x, labels = explained
    table = res.table
    idx = np.array([4, 0, 1])
    grid = dataset_grid(res, as_source(x, labels=labels), idx, "a title")
    # the map's column is titled with the method's display name; the overlay is image + map
    assert grid is not None and grid.columns == ["sample", "image", "Vanilla", "overlay"]
    assert grid.figure_title == "a title" and grid.kinds("overlay") == ["image", "image"]
    pred, score = table["prediction"].to_numpy(), table["score"].to_numpy()
    expected = [f"#{i} pred {pred[i]} ({score[i]:.2f})" for i in idx]
    expected[0] += f"\nlabel {labels[4]}"
    expected[2] += f"\nlabel {labels[1]}"
    assert grid["sample"][0] == expected
    assert [grid.text_color("sample", r) for r in range(3)] == ["red", None, "red"]
    # the images as given (channel-first here, shown channel-last) and the display masks of the
    # stored maps, channels summed, alone and over the image
    np.testing.assert_allclose(grid["image"][0], x[idx].transpose(0, 2, 3, 1))
    mask = to_display(res.attributions[:][idx], 1)[:, 0]
    np.testing.assert_allclose(grid["Vanilla"][0], mask)
    np.testing.assert_allclose(grid["overlay"][0], x[idx].transpose(0, 2, 3, 1))
    np.testing.assert_allclose(grid["overlay"][1], mask)
    # a colorbar beside each map (one per row), none beside the overlay or the image
    labels = [ax.get_label() for ax in grid.paint_figure(dpi=20).axes]
    assert [lab for lab in labels if lab.startswith("colorbar:")] == [
        f"colorbar:Vanilla:{r}" for r in range(3)
    ]


def test_grid_rows_name_the_classes(
    explained: tuple[xk.xai.DatasetExplanation, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    _, x, labels = explained
    names = ["circle", "square", "triangle", "a-name-longer-than-twenty", "cross"]
    named = xk.xai.explain_dataset(
        tiny_cnn(), x, method="vanilla", out=tmp_path / "n.zarr", batch_size=3, labels=labels,
        classes=names, progress=False,
    )  # fmt: skip
    table = named.table
    grid = dataset_grid(named, as_source(x, labels=labels), np.array([4, 0]), "t")
    assert grid is not None
    short = "a-name-longer-than-…"
    pred, score = table["prediction"].to_numpy(), table["score"].to_numpy()
    show = lambda c: short if c == 3 else names[c]  # noqa: E731
    assert grid["sample"][0] == [
        f"#4 pred {show(pred[4])} ({score[4]:.2f})\nlabel {show(labels[4])}",
        f"#0 pred {show(pred[0])} ({score[0]:.2f})",
    ]


def test_display_images_grayscale_and_normalized() -> None:
    gray = np.array([[[[0.0], [0.5]], [[1.0], [0.25]]]], np.float32)  # (1, 2, 2, 1) in [0, 1]
    np.testing.assert_array_equal(display_images(gray), np.repeat(gray, 3, axis=-1))
    chw = np.stack([np.full((2, 2), v, np.float32) for v in (-1.0, 0.0, 3.0)])[None]  # (1, 3, 2, 2)
    shown = display_images(chw)
    assert shown.shape == (1, 2, 2, 3)
    np.testing.assert_allclose(shown[0, 0, 0], [0.0, 0.25, 1.0])  # min-max over the image
    np.testing.assert_array_equal(display_images(np.zeros((2, 4, 4))), np.zeros((2, 4, 4, 3)))


def test_save_grids_writes_three_pngs_and_none_for_non_images(
    explained: tuple[xk.xai.DatasetExplanation, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    res, x, labels = explained
    titles = []
    real = _grids.dataset_grid

    def spy(*args: object, **kwargs: object) -> object:
        titles.append(args[3])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_grids, "dataset_grid", spy)
        paths = save_grids(res, as_source(x, labels=labels), tmp_path / "grids", n=2)
    assert [p.name for p in paths] == [f"{g}.png" for g in GRIDS]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert titles == ["Vanilla: first", "Vanilla: most confident", "Vanilla: least confident"]
    flat = np.random.default_rng(0).random((4, 6), dtype=np.float32)
    vectors = xk.xai.explain_dataset(
        torch.nn.Linear(6, 3), flat, method="vanilla", out=tmp_path / "v.zarr", progress=False
    )
    assert save_grids(vectors, as_source(flat), tmp_path / "none") == []
    assert not (tmp_path / "none").exists()


def test_grid_names_the_files(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    pixels = (images(2).transpose(0, 2, 3, 1) * 255).astype(np.uint8)
    names = ["a.png", "sub/" + "long" * 8 + ".png"]
    for name, p in zip(names, pixels):
        Image.fromarray(p).save(folder / name)
    res = xk.xai.explain_dataset(
        tiny_cnn(), folder, method="vanilla", out=tmp_path / "f.zarr", progress=False
    )
    assert list(res.table["file"]) == names
    grid = dataset_grid(res, as_source(folder), np.array([1, 0]), "t")
    assert grid is not None
    text = grid["sample"][0]
    assert text[0].split("\n")[1] == "…" + ("long" * 8 + ".png")[-23:] and text[1].endswith("\na.png")
