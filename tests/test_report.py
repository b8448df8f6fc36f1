"""xaikit report without a browser: the data files the run folder gains (cells, history,
evaluation), the page's content and escaping, and the CLI. The page in Chromium:
tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colormaps

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate import save_evaluation
from xaikit.summary import Summary, ValWithError
from xaikit.viz import ImgData, overlay, report
from xaikit.viz.run_data import MAX_CELL_SIDE, load_cells, save_cells, save_history

ROOT = Path(__file__).resolve().parents[1]


def _grid(epoch: int, methods: int, samples: int, side: int = 32, seed: int = 0) -> ImgData:
    """A Saliency-like grid: labels, predictions (one wrong), RGB images, one overlay and
    ``methods`` masks whose content depends on the epoch."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / (side - 1)
    x = np.stack([np.stack([yy, xx, np.full_like(xx, (i % 5) / 4)], -1) for i in range(samples)]).astype(
        np.float32
    )
    masks = {}
    for m in range(methods):
        centre = ((m + epoch) % 7) / 6
        blob = np.exp(-((yy - centre) ** 2 + (xx - 0.5) ** 2) * 20)
        noise = rng.random((samples, side, side)) * 0.2
        masks[f"method{m} saliency"] = np.clip(blob[None] * (0.8 + 0.2 * (epoch % 3)) + noise, 0, 1)[
            ..., None
        ]
    labels = [f"class{i % 3}" for i in range(samples)]
    preds = [lab if i % 4 else lab + " ✗" for i, lab in enumerate(labels)]
    cols = {"y": labels, "y_pred": preds, "x": x, "x saliency": overlay(x, masks["method0 saliency"])}
    cols.update(masks)
    names = list(masks)
    return ImgData(
        cols,
        colormap="inferno",
        colormaps=dict.fromkeys(names, "inferno"),
        vranges=dict.fromkeys(names, (0.0, 1.0)),
        colorbars=names,
        text_colors={"y_pred": ["red" if i % 4 == 0 else None for i in range(samples)]},
        figure_title=f"saliency: eval epoch {epoch}",
    )


def make_run(folder: Path, epochs: int = 3, methods: int = 4, samples: int = 6, side: int = 32) -> Path:
    """A run folder as ``xaikit demo`` writes it, from synthetic data: summary.json, per epoch a
    cells file and a (small) PNG, two tracker histories and two evaluation results."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for e in range(1, epochs + 1):
        save_cells(_grid(e, methods, samples, side), folder / f"saliency_eval_epoch_{e}.npz")
        png = np.full((40, 60, 3), (e * 4) % 256, dtype=np.uint8)
        Image.fromarray(png).save(folder / f"saliency_eval_epoch_{e}.png")
    by_index = []
    for idx in (167, 3, 42):
        s = Summary(idx)
        for e in range(1, epochs + 1):
            s.write("eval", "sample_ce", e * 10, float(idx % 7 + e) / 10)
        by_index.append(s)
    save_history(by_index, folder / f"ce_by_index_train_epoch_{epochs}.json", title="ce_by_index")
    by_label = []
    for name in ("circle", "square"):
        s = Summary(name)
        for e in range(1, epochs + 1):
            s.write("eval", "sample_ce (mean ± std)", e * 10, ValWithError(0.1 * e, 0.2 * e, 0.3 * e))
        by_label.append(s)
    save_history(by_label, folder / f"ce_by_label_train_epoch_{epochs}.json", title="ce_by_label")
    save_evaluation(
        {"layer": ["original", "fc2", "fc1", "conv1"], "spearman_abs": [1.0, 0.83, 0.51, 0.79]},
        folder,
        "steps",
        title="Randomization steps",
    )
    summary = {
        "model": "LeNet",
        "data": "shapes",
        "framework": "torch",
        "settings": {"epochs": epochs, "classes": ["circle", "square"]},
        "final_metrics": {"eval": {"accuracy": 0.972, "ce": 0.0927}},
        "history": {"eval": {"accuracy": {str(10 * e): 0.5 + 0.1 * e for e in range(1, epochs + 1)}}},
        "time_sec": 12.5,
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


# --------------------------------------------------------------------------------- run data files
def test_cells_round_trip_paints_like_the_grid(tmp_path):
    mask = np.linspace(0, 1, 16).reshape(1, 4, 4, 1).repeat(2, axis=0)
    img = ImgData(
        {"label": ["a", "b"], "x": np.zeros((2, 4, 4, 3)) + 0.5, "m": mask},
        colormaps={"m": "inferno"},
        vranges={"m": (0.0, 1.0)},
        colorbars={"m"},
        text_colors={"label": ["red", None]},
        figure_title="t",
    )
    cells = load_cells(save_cells(img, tmp_path / "g_eval_epoch_1.npz"))
    assert cells["title"] == "t" and cells["rows"] == 2
    assert [(c["name"], c["kind"], c["mask"]) for c in cells["columns"]] == [
        ("label", "text", False),
        ("x", "image", False),
        ("m", "image", True),
    ]
    assert cells["text"][0] == ["a", "b"] and cells["columns"][0]["colors"] == ["red", None]
    assert np.all(cells["rgb"][1] == 128)  # 0.5 * 255 rounded
    expected_value = np.round(np.linspace(0, 1, 16) * 255).astype(np.uint8).reshape(4, 4)
    np.testing.assert_array_equal(cells["value"][2][1], expected_value)
    inferno = np.round(colormaps["inferno"](np.linspace(0, 1, 16))[:, :3] * 255).astype(np.uint8)
    np.testing.assert_array_equal(cells["rgb"][2][0].reshape(16, 3), inferno)


def test_cells_downscale_large_images_and_refuse_bad_input(tmp_path):
    big = np.zeros((1, 300, 150, 3), dtype=np.float32)
    big[:, :150] = 1.0  # top half white
    cells = load_cells(save_cells(ImgData(x=big), tmp_path / "b.npz"))
    rgb = cells["rgb"][0]
    assert rgb.shape == (1, MAX_CELL_SIDE, 64, 3)
    assert rgb[0, : MAX_CELL_SIDE // 2 - 1].min() == 255 and rgb[0, MAX_CELL_SIDE // 2 + 1 :].max() == 0
    with pytest.raises(XaikitTypeError, match="img must be an ImgData"):
        save_cells(np.zeros((2, 4, 4)), tmp_path / "c.npz")
    with pytest.raises(XaikitValueError, match=r"must end in \.npz"):
        save_cells(ImgData(x=big), tmp_path / "c.png")
    (tmp_path / "other.npz").write_bytes(b"")
    np.savez(tmp_path / "other.npz", meta=np.array(json.dumps({"format": "else"})))
    with pytest.raises(XaikitValueError, match="is not a xaikit-cells/1 file"):
        load_cells(tmp_path / "other.npz")


def test_history_file_keeps_values_bands_and_names(tmp_path):
    a, b = Summary(167), Summary("circle")
    a.write("eval", "ce", 20, 2.0)
    a.write("eval", "ce", 10, 1.0)
    b.write("eval", "ce (mean ± std)", 10, ValWithError(0.5, 1.0, 1.5))
    b.write("train", "ce (mean ± std)", 10, ValWithError(0.0, float("nan"), 1.0))
    doc = json.loads(save_history([a, b], tmp_path / "h.json", title="ce").read_text())
    assert doc["format"] == "xaikit-history/1" and doc["title"] == "ce"
    first, second = doc["series"][0], doc["series"][1]
    assert first == {"name": "167", "mode": "eval", "metric": "ce", "steps": [10, 20], "values": [1.0, 2.0],
                     "low": None, "high": None}  # fmt: skip
    assert second["low"] == [0.5] and second["values"] == [1.0] and second["high"] == [1.5]
    assert doc["series"][2]["values"] == [None]  # NaN is null in JSON (the page skips the point)
    with pytest.raises(XaikitTypeError, match="summaries must be a Summary"):
        save_history([1, 2], tmp_path / "x.json")


def test_evaluation_files_of_curves_and_tables(tmp_path):
    from xaikit.evaluate import CurveResult

    def curve(auc):
        return CurveResult("deletion", np.array([0.0, 0.5, 1.0]), np.array([[1.0, 0.5, 0.0]] * 2), np.array(auc),
                           np.array([0, 1]), rank="signed")  # fmt: skip

    path = save_evaluation({"vanilla": curve([0.5, 0.25]), "ig": curve([0.1, 0.3])}, tmp_path, "deletion")
    doc = json.loads(path.read_text())
    assert path == tmp_path / "evaluation" / "deletion.json" and doc["kind"] == "deletion"
    by_method = doc["tables"][0]
    assert by_method["columns"][:2] == ["method", "auc_mean"]
    assert [r[:2] for r in by_method["rows"]] == [["vanilla", 0.375], ["ig", pytest.approx(0.2)]]
    assert doc["tables"][1]["rows"] == [[0, 0.5, 0.1], [1, 0.25, 0.3]]
    assert doc["curves"][0]["series"][0] == {"name": "vanilla", "x": [0.0, 0.5, 1.0], "y": [1.0, 0.5, 0.0]}
    loc = save_evaluation(
        {"energy": np.array([0.5, np.nan]), "pointing": np.array([True, False])}, tmp_path, "loc"
    )
    doc = json.loads(loc.read_text())
    assert doc["tables"][1]["rows"] == [[0, 0.5, True], [1, None, False]]  # NaN is null in JSON
    with pytest.raises(XaikitValueError, match="name must be a file name"):
        save_evaluation({"a": [1]}, tmp_path, "../x")
    with pytest.raises(XaikitTypeError, match="result must be a RandomizationResult"):
        save_evaluation(3.0, tmp_path, "x")
    with pytest.raises(XaikitValueError, match="equal lengths"):
        save_evaluation({"a": [1, 2], "b": [1]}, tmp_path, "x")


def test_image_saver_writes_data_beside_the_pictures(tmp_path):
    from xaikit.trace.base import Data
    from xaikit.trace.io import ImageSaver

    class _System:
        mode, epoch_idx = "eval", 2

    saver = ImageSaver(["grid", "hist"], save_dir=tmp_path, dpi=30, save_data=True)
    saver.system = _System()
    s = Summary(5)
    s.write("eval", "ce", 1, 0.5)
    saver.on_epoch_end(Data({"grid": _grid(2, 2, 3), "hist": [s]}))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "grid_eval_epoch_2.npz",
        "grid_eval_epoch_2.png",
        "hist_eval_epoch_2.json",
        "hist_eval_epoch_2.png",
    ]
    assert sorted(Path(p).name for p in saver.saved) == names
    assert load_cells(tmp_path / "grid_eval_epoch_2.npz")["rows"] == 3
    with pytest.raises(XaikitTypeError, match="save_data must be True or False"):
        ImageSaver("a", save_data="yes")


# ------------------------------------------------------------------------------------------ page
def _page_data(html: str) -> dict:
    found = re.search(r'<script id="xk-data" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_page_holds_every_section_and_nothing_remote(tmp_path):
    run = make_run(tmp_path / "run")
    html = report(run).read_text(encoding="utf-8")
    for text in ("LeNet", "0.972", "Grid", "method by method", "Curves", "Randomization steps", "Files"):
        assert text in html, text
    assert "default-src 'none'" in html  # the CSP: no request can leave the page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no remote resource or link
    assert not re.search(r"url\(\s*['\"]?https?:", html)
    data = _page_data(html)
    g = data["groups"][0]
    assert g["epochs"] == [1, 2, 3] and g["rows"] == 6 and len(g["sprites"]) == 3
    assert [m["title"] for m in g["methods"]] == [f"method{m} saliency" for m in range(4)]
    # cells: x, x saliency, 4 masks, then 4 overlays; the base image is x
    assert g["ncells"] == 10 and g["base"] == 0 and g["cells"][1]["title"] == "x saliency"
    assert g["text"][0][1][0] == "class0 ✗" and g["colors"][0][1][0] == "red"
    assert g["pngs"] == [f"saliency_eval_epoch_{e}.png" for e in (1, 2, 3)]
    # a sprite decodes to rows x cells tiles of the thumbnail size
    from base64 import b64decode
    from io import BytesIO

    from PIL import Image

    sprite = Image.open(BytesIO(b64decode(g["sprites"][0].split(",", 1)[1])))
    assert sprite.size == (g["ncells"] * g["tw"], g["rows"] * g["th"]) and (g["th"], g["tw"]) == (32, 32)
    titles = [c["title"] for c in data["charts"]]
    assert titles == ["accuracy by step", "ce_by_index", "ce_by_label"]
    band = data["charts"][2]["series"][0]
    assert band["low"] == pytest.approx([0.1, 0.2, 0.3]) and band["high"] == pytest.approx([0.3, 0.6, 0.9])


def test_page_escapes_what_it_shows(tmp_path):
    run = make_run(tmp_path / "run", epochs=1, methods=1, samples=2)
    summary = json.loads((run / "summary.json").read_text())
    summary["model"] = "<script>alert(1)</script>"
    summary["settings"]["note"] = "</script><b>x</b>"
    (run / "summary.json").write_text(json.dumps(summary))
    save_evaluation({"<img src=x>": ["</script>"]}, run, "evil", title="<i>t</i>")
    html = report(run).read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>x</b>" not in html and "<img src=x>" not in html and "<i>t</i>" not in html
    assert html.count("</script>") == 2  # the JSON block and the page's own script only


def test_page_links_are_relative_to_where_it_is_written(tmp_path):
    run = make_run(tmp_path / "run", epochs=2, methods=1, samples=2)
    page = report(run, tmp_path / "pages" / "r.html")
    html = page.read_text(encoding="utf-8")
    assert 'href="../run/saliency_eval_epoch_1.png"' in html
    assert _page_data(html)["prefix"] == "../run/"


def test_report_of_pictures_alone_and_of_an_explained_table(tmp_path):
    from PIL import Image

    run = tmp_path / "run"
    run.mkdir()
    for e in (1, 2):
        Image.fromarray(np.full((30, 50, 3), 40 * e, dtype=np.uint8)).save(run / f"grid_eval_epoch_{e}.png")
    (run / "explain").mkdir()
    rows = ["index,label,prediction,confidence"] + [
        f"{i},c{i % 2},c{i % 3},{(i * 37 % 100) / 100}" for i in range(30)
    ]
    (run / "explain" / "table.csv").write_text("\n".join(rows) + "\n")
    html = report(run).read_text(encoding="utf-8")
    data = _page_data(html)
    assert [g["epochs"] for g in data["pictures"]] == [[1, 2]] and data["groups"] == []
    assert "most confident (by confidence)" in html and "least confident (by confidence)" in html
    most = html.split("most confident (by confidence)")[1].split("</table>")[0]
    assert re.findall(r'data-sort="([\d.]+)" class="num">0\.\d+<', most)[:1] == ["0.99"]  # index 27
    assert 'class="filter"' in html


def test_report_refuses_bad_arguments(tmp_path):
    with pytest.raises(XaikitValueError, match="run must be an existing run folder"):
        report(tmp_path / "missing")
    with pytest.raises(XaikitValueError, match=r"out must be a file name ending in \.html"):
        report(tmp_path, tmp_path / "r.txt")
    with pytest.raises(XaikitTypeError, match="run must be a folder path"):
        report(3)  # type: ignore[arg-type]


def test_cli_report(tmp_path):
    run = make_run(tmp_path / "run", epochs=1, methods=1, samples=2)
    cmd = [sys.executable, "-m", "xaikit", "report", str(run), "--out", str(tmp_path / "x.html")]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"xaikit report: wrote {tmp_path / 'x.html'}"
    bad = subprocess.run(
        [*cmd[:4], str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "argument RUN: expected an existing run folder" in bad.stderr


def test_templates_ship_in_the_wheel():
    """hatchling packs every file under xaikit/ (not ignored by git): the templates are there."""
    from importlib import resources

    folder = resources.files("xaikit.viz").joinpath("templates")
    assert sorted(p.name for p in folder.iterdir()) == ["report.css", "report.html.j2", "report.js"]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "xaikit/viz/templates/report.js"], cwd=ROOT, check=False
    ).returncode
    assert ignored == 1  # not ignored, so the wheel carries it
