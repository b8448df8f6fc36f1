"""The report draws the explained target on its sample thumbnails: a Box store's per-sample boxes
(exact frame pixels in the page's embedded sprite sheet, and in ``xaikit report``'s page), a
ClassRegion store's mask outline; a store of a classifier's classes is left unmarked."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import xaikit as xk
from tests.analysis_fixtures import write_analysis
from xaikit.viz.contour import MARK_RGB, outline
from xaikit.viz.report_explorer import SHEET_COLUMNS, explorer
from xaikit.viz.report_targets import marked_thumbnails

torch = pytest.importorskip("torch")

N, S = 6, 32
ANCHORS = np.array([[2, 3, 14, 20], [10, 8, 30, 28]], dtype=np.float64)
CW = np.array([0.5, 2.0, -1.0])


class Yolo3(torch.nn.Module):
    """(B, 3, 32, 32) -> (B, 2, 4 + 3): the anchors' boxes, then class scores CW * sum inside."""

    def __init__(self) -> None:
        super().__init__()
        inside = np.zeros((len(ANCHORS), S, S), np.float32)
        for a, (x0, y0, x1, y1) in enumerate(ANCHORS.astype(int)):
            inside[a, y0:y1, x0:x1] = 1.0
        self.register_buffer("inside", torch.tensor(inside))
        self.register_buffer("cw", torch.tensor(CW, dtype=torch.float32))
        self.box = torch.nn.Parameter(torch.tensor(ANCHORS.reshape(-1), dtype=torch.float32))

    def forward(self, x: Any) -> Any:
        per = torch.einsum("bchw,ahw->ba", x, self.inside)
        scores = per[..., None] * self.cw
        boxes = self.box.reshape(1, len(ANCHORS), 4).expand(x.shape[0], -1, -1) + 0 * scores[..., :1]
        return torch.cat([boxes, scores], dim=-1)


def frame(box: np.ndarray) -> np.ndarray:
    x0, y0 = (int(np.floor(v)) for v in box[:2])
    x1, y1 = (int(np.floor(v - 1e-9)) for v in box[2:])
    m = np.zeros((S, S), bool)
    m[y0, x0 : x1 + 1] = m[y1, x0 : x1 + 1] = m[y0 : y1 + 1, x0] = m[y0 : y1 + 1, x1] = True
    return m


def box_store(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    x = np.full((N, 3, S, S), 0.5, np.float32)
    which = np.arange(N) % 2
    boxes = ANCHORS[which] + np.random.default_rng(0).uniform(0.1, 0.3, (N, 4))
    out = tmp_path / "box.zarr"
    xk.xai.explain_dataset(
        Yolo3(), x, method="vanilla", out=out, target=xk.targets.Box(boxes, 1), progress=False, batch_size=4
    )
    write_analysis(out, x)
    return out, x, boxes


def sheet_tiles(page: dict[str, Any]) -> np.ndarray:
    """The page's image sprite sheets cut back into (n, t, t, 3) tiles, in point order."""
    from PIL import Image

    tiles = []
    t = page["side"]
    for uri in page["images"]:
        assert uri.startswith("data:image/png;base64,")  # lossless: exact pixels
        sheet = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB"))
        for r in range(sheet.shape[0] // t):
            for c in range(SHEET_COLUMNS):
                tiles.append(sheet[r * t : (r + 1) * t, c * t : (c + 1) * t])
    return np.stack(tiles)[: page["n"]]


def test_the_page_draws_each_samples_box(tmp_path: Path) -> None:
    store, _, boxes = box_store(tmp_path)
    built = explorer(store, "e0", None)
    assert built is not None and built["view"]["marked"] is True
    page = built["page"]
    index = np.frombuffer(base64.b64decode(page["arrays"]["index"]), "<i4")
    tiles = sheet_tiles(page)
    assert len(tiles) == N
    for tile, i in zip(tiles, index):
        edge = frame(boxes[i])
        np.testing.assert_array_equal(tile[edge], np.tile(MARK_RGB, (int(edge.sum()), 1)))
        np.testing.assert_array_equal(tile[~edge], np.full((int((~edge).sum()), 3), 128))  # the image
    # the report page carries the same sheets (offline: data: URIs only)
    html = xk.viz.report(store, out=tmp_path / "report.html").read_text(encoding="utf-8")
    assert page["images"][0] in html
    assert not re.search(r"""(src|href)=["']https?://""", html)


def test_region_outline_and_unmarked_stores(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    thumbs = rng.integers(0, 200, (3, 8, 8, 3)).astype(np.uint8)
    masks = np.zeros((3, 16, 16), bool)
    masks[0, 2:10, 4:12] = masks[1, 0:8, 0:16] = masks[2, 6:16, 6:16] = True
    store = tmp_path / "seg.zarr"

    target = {"kind": "ClassRegion", "k": 1, "reduce": "sum", "axis": None,
              "mask": {"per_sample": "array", "key": None, "shape": [16, 16], "dtype": "|b1", "sha256": "x"}}  # fmt: skip
    root = zarr.open_group(str(store), mode="w")
    root.create_array("target_mask", shape=(3, 16, 16), dtype=bool)
    root["target_mask"][:] = masks
    (store / "manifest.json").write_text(json.dumps({"target": target, "map_shape": [3, 16, 16]}))
    marked = marked_thumbnails(store, np.array([2, 0]), thumbs[:2])
    assert marked is not None
    for got, thumb, i in zip(marked, thumbs[:2], [2, 0]):
        edge = outline(masks[i][::2, ::2])  # 16 -> 8 by nearest pixel: every other one
        np.testing.assert_array_equal(got[edge], np.tile(MARK_RGB, (int(edge.sum()), 1)))
        np.testing.assert_array_equal(got[~edge], thumb[~edge])
    # a fixed box in fractions of the image (a DETR-style target), and stores with nothing to draw
    target = {"kind": "Box", "box": [0.25, 0.25, 0.75, 0.75], "k": 1, "iou": 0.5, "top": None}
    (store / "manifest.json").write_text(json.dumps({"target": target, "map_shape": [3, 16, 16]}))
    boxed = marked_thumbnails(store, np.array([0]), thumbs[:1])
    assert (
        boxed is not None
        and boxed[0][2, 2:6].tolist() == [list(MARK_RGB)] * 4
        and boxed[0][5, 5].tolist() == list(MARK_RGB)
    )
    for other in (None, "label", {"kind": "Class", "k": 1}, {"kind": "ClassRegion", "k": 1, "mask": None}):
        (store / "manifest.json").write_text(json.dumps({"target": other, "map_shape": [3, 16, 16]}))
        assert marked_thumbnails(store, np.array([0]), thumbs[:1]) is None


def test_the_store_grids_draw_the_box_and_the_region_outline(tmp_path: Path) -> None:
    """``xaikit explain``'s grids (embedded by the report) draw each sample's box on the image
    and on the overlay; a ClassRegion store's mask outline likewise; a class store nothing."""
    from target_models import layout, linear_segmenter

    from xaikit.xai.dataset._grids import dataset_grid, save_grids
    from xaikit.xai.dataset._sources import as_source

    store, x, boxes = box_store(tmp_path)
    res = xk.xai.DatasetExplanation.open(store)
    idx = np.array([4, 1])
    grid = dataset_grid(res, as_source(x), idx, "t")
    assert grid is not None and grid.kinds("image") == ["image", "contour"]
    assert grid.kinds("overlay") == ["image", "image", "contour"]
    np.testing.assert_array_equal(grid["image"][1], np.stack([frame(boxes[i]) for i in idx]))
    np.testing.assert_array_equal(grid["overlay"][2], grid["image"][1])
    # the captions say what was explained: the box's class and the object's score, not "pred -1"
    assert [t.split(" (")[0] for t in grid["sample"][0]] == ["#4 box 1", "#1 box 1"]
    assert len(save_grids(res, as_source(x), tmp_path / "grids", n=2)) == 3
    # a segmentation store with per-sample masks: their outlines
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    xs = layout("torch", rng.normal(size=(3, 8, 8, 3)).astype(np.float32))
    masks = np.zeros((3, 8, 8), bool)
    masks[:, 2:6, 1:5] = True
    masks[1, 0, 0] = True
    seg = xk.xai.explain_dataset(
        linear_segmenter("torch", w, b, (8, 8)), xs, method="vanilla", out=tmp_path / "seg.zarr",
        target=xk.targets.ClassRegion(np.array([0, 1, 2]), mask=masks), progress=False,
    )  # fmt: skip
    grid = dataset_grid(seg, as_source(xs), np.array([1, 2]), "t")
    assert grid is not None and grid.kinds("image") == ["image", "contour"]
    assert [t.split(" (")[0] for t in grid["sample"][0]] == ["#1 region 1", "#2 region 2"]
    np.testing.assert_array_equal(grid["image"][1], outline(masks[[1, 2]]))
    plain = xk.xai.explain_dataset(
        linear_segmenter("torch", w, b, (8, 8)), xs, method="vanilla", out=tmp_path / "c.zarr",
        target=xk.targets.Output(3), progress=False,
    )  # fmt: skip
    grid = dataset_grid(plain, as_source(xs), np.array([0]), "t")
    assert grid is not None and grid.kinds("image") == ["image"]
    assert grid["sample"][0][0].startswith("#0 output 3 (")
