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


def make_comparison(folder: Path, methods: int = 4, samples: int = 6, seed: int = 0) -> Path:
    """A comparison of ``methods`` methods on every default metric of ``compare`` (scores drawn at
    random, ranks, baseline and verdicts computed as compare computes them), saved into
    ``folder/evaluation`` as ``xaikit demo`` saves its own; fast (no model)."""
    import pandas as pd

    from xaikit.evaluate.compare import BASELINE_COLUMN, CompareResult, _ranks, verdicts
    from xaikit.evaluate.registry import METRICS

    rng = np.random.default_rng(seed)
    metrics = [m for m in METRICS.values() if m.cheap and not m.needs_mask]
    labels = ["vanilla", "smoothgrad", "integrated", "gradcam", "occlusion", "rise"][:methods]
    per = {(label, m.name): rng.random(samples) for label in labels for m in metrics}
    for label in labels:  # the demo's case: vanilla's rho 0.87 while two random models agree at 0.77
        per[(label, "randomization")] = np.full(samples, 0.87 if label == "vanilla" else 0.3)
        per[(label, BASELINE_COLUMN)] = np.full(samples, 0.77 if label == "vanilla" else 0.35)
    table = pd.DataFrame({"method": labels})
    for m in metrics:
        table[m.name] = [per[(label, m.name)].mean() for label in labels]
    table.insert(
        list(table.columns).index("randomization") + 1, BASELINE_COLUMN, [0.77] + [0.35] * (methods - 1)
    )
    for m in metrics:
        table[f"rank {m.name}"] = _ranks(table[m.name].to_numpy(dtype=np.float64), m.higher_is_better)
    table["mean rank"] = table[[f"rank {m.name}" for m in metrics]].mean(axis=1)
    table["seconds"] = rng.random(methods)
    per_sample = pd.DataFrame(
        [(label, name, i, float(v)) for (label, name), values in per.items() for i, v in enumerate(values)],
        columns=["method", "metric", "sample", "score"],
    )
    x = rng.random((samples, 3, 16, 16)).astype(np.float32)
    display = {label: rng.random((samples, 16, 16)) for label in labels}
    result = CompareResult(
        table, per_sample, verdicts(table, metrics, per_sample=per_sample), dict(display), np.arange(samples) % 3,
        metrics, x, 1, display, 3,
    )  # fmt: skip
    from xaikit.evaluate import save_evaluation

    return save_evaluation(result, folder, "compare", title="Which explanation can you trust?")


def make_store(folder: Path, n: int = 30, bad: dict[int, str] | None = None) -> Path:
    """A dataset store as ``xaikit explain --out STORE`` writes it: explain_dataset's store of a
    tiny model on ``n`` random 16 x 16 images (vanilla), the three grids in ``STORE/grids`` and a
    ``table.csv`` with a ``map_status`` column (``bad``: row -> status; default rows 4 and 9
    "zero", row 7 "non-finite")."""
    import torch

    import xaikit as xk
    from xaikit.xai.dataset._grids import save_grids
    from xaikit.xai.dataset._sources import as_source

    bad = {4: "zero", 7: "non-finite", 9: "zero"} if bad is None else bad
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 16 * 16, 3),
        torch.nn.Softmax(dim=1),
    )  # fmt: skip
    x = np.random.default_rng(0).random((n, 3, 16, 16), dtype=np.float32)
    source = as_source(x, labels=np.arange(n) % 3)
    result = xk.xai.explain_dataset(model, source, method="vanilla", out=folder, progress=False)
    save_grids(result, source, folder / "grids", 8)
    table = result.table
    table["map_status"] = [bad.get(i, "") for i in range(n)]
    table[["index", "file", "label", "prediction", "score", "delta", "map_status"]].to_csv(
        folder / "table.csv", index=False
    )
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


def test_an_evaluation_file_that_cannot_be_shown_gets_a_note(tmp_path):
    """A broken or foreign evaluation/*.json keeps its section, with a note that says why (it
    was dropped without a word), beside a good one."""
    run = make_run(tmp_path / "run", epochs=1, methods=1, samples=2)
    save_evaluation({"vanilla": [0.5, 0.25]}, run, "good")
    (run / "evaluation" / "broken.json").write_text("{bad json", encoding="utf-8")
    (run / "evaluation" / "other.json").write_text('{"format": "other/1"}', encoding="utf-8")
    (run / "evaluation" / "list.json").write_text("[1, 2]", encoding="utf-8")
    html = report(run).read_text(encoding="utf-8")
    assert "broken.json cannot be shown: it cannot be read as JSON" in html
    assert (
        "other.json cannot be shown: its format is &#39;other/1&#39;, not &#39;xaikit-evaluation/1&#39;"
        in html
    )
    assert "list.json cannot be shown: it holds a JSON list, not an evaluation object" in html
    assert 'href="evaluation/good.json"' in html


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
    assert 'class="filter"' in html and 'class="only-bad"' not in html  # no map_status column


def _tables_after(html: str, heading: str) -> list[list[list[str]]]:
    """The cell texts of the tables that follow ``heading`` up to the next heading."""
    part = html.split(heading, 1)[1]
    part = re.split(r"<h[234]", part, maxsplit=1)[0]
    tables = re.findall(r"<tbody>(.*?)</tbody>", part, re.S)
    return [
        [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", t, re.S)]
        for t in tables
    ]


def test_report_of_a_dataset_store_embeds_grids_and_flags_bad_maps(tmp_path):
    from base64 import b64decode
    from io import BytesIO

    import pandas as pd
    from PIL import Image

    from xaikit.xai.dataset._grids import pick_samples

    store = make_store(tmp_path / "x.zarr")
    html = report(store).read_text(encoding="utf-8")
    # the three grids, embedded (data: URIs) in explain's order, each beside the table of its samples
    pictures = re.findall(r'<img class="grid-image" src="(data:image/png;base64,[^"]+)" alt="([^"]+)">', html)
    assert [alt for _, alt in pictures] == [
        "first samples", "most confident (by score)", "least confident (by score)"
    ]  # fmt: skip
    for (uri, _), name in zip(pictures, ("first", "most_confident", "least_confident")):
        with Image.open(store / "grids" / f"{name}.png") as png:
            size = png.size
        shown = Image.open(BytesIO(b64decode(uri.split(",", 1)[1])))
        assert shown.size == size  # small grids are embedded at full size
    table = pd.read_csv(store / "table.csv", keep_default_na=False)
    for heading, name in (
        ("most confident (by score)</h4>", "most_confident"),
        ("least confident (by score)</h4>", "least_confident"),
        ("first samples</h4>", "first"),
    ):
        rows = _tables_after(html, heading)[0]
        assert [int(r[0]) for r in rows] == pick_samples(table, 8)[name].tolist(), name  # the grid's samples
    # the maps that are not usable: counted, listed, and marked in the full table
    assert "3 of 30 maps are not usable:</strong>" in html and "2 zero, 1 non-finite" in html
    problems = _tables_after(html, "Samples whose map is not usable</h4>")[0]
    assert [(int(r[0]), r[-1]) for r in problems] == [(4, "zero"), (7, "non-finite"), (9, "zero")]
    everything = html.split("All samples</h4>", 1)[1]
    flagged = re.findall(r'<tr class="bad"><td data-sort="([\d.]+)"', everything)
    assert [float(v) for v in flagged] == [4.0, 7.0, 9.0]
    assert 'class="only-bad"' in html and 'class="filter"' in html
    assert '<th scope="row">method</th><td>vanilla</td>' in html and "<td>30</td>" in html  # manifest facts
    # a run folder that holds the store shows the same section
    again = report(tmp_path, tmp_path / "r.html").read_text(encoding="utf-8")
    assert again.count('class="grid-image"') == 3 and "3 of 30 maps are not usable" in again


def test_store_without_problems_and_long_tables_collapse(tmp_path):
    store = make_store(tmp_path / "x.zarr", n=25, bad={})
    html = report(store).read_text(encoding="utf-8")
    assert "All 25 maps are usable" in html and "not usable:" not in html
    everything = html.split("All samples</h4>", 1)[1]
    assert 'class="sortable filterable collapsible collapsed"' in everything
    assert '<button type="button" class="show-all" data-rows="25">show all 25 rows</button>' in everything
    picks = html.split("All samples</h4>", 1)[0]
    assert "collapsible" not in picks  # 8 rows each: shown whole


def test_comparison_is_a_table_of_ranks_with_the_values_on_demand(tmp_path):
    make_comparison(tmp_path, methods=4)
    html = report(tmp_path).read_text(encoding="utf-8")
    verdicts = re.findall(r"<li><strong>(\w+)</strong>: (.*?)</li>", html)
    assert [m for m, _ in verdicts] == ["vanilla", "smoothgrad", "integrated", "gradcam"]
    assert (
        "fails the randomization check (rho 0.87 once the weights are destroyed, above the 0.77"
        in verdicts[0][1]
    )
    heat = html.split('<table class="heat">', 1)[1].split("</table>", 1)[0]
    families = re.findall(r'<th colspan="(\d+)" scope="colgroup" class="family">(\w+)</th>', heat)
    assert families == [("6", "faithfulness"), ("2", "complexity"), ("3", "randomization")]
    heads = re.findall(r'<th scope="col" title="[^"]*">(.*?) <span class="dir">', heat)
    assert heads[:2] == ["deletion AUC", "insertion AUC"] and len(heads) == 11
    assert heads.count("deletion AUC") == 1  # one deletion AUC per method
    doc = json.loads((tmp_path / "evaluation" / "compare.json").read_text())
    cols = doc["tables"][0]["columns"]
    body = re.findall(r'<tr><th scope="row">(\w+)</th>(.*?)</tr>', heat, re.S)
    for (method, cells), row in zip(body, doc["tables"][0]["rows"]):
        ranks = re.findall(r'<td class="rank"[^>]*>([^<]*)</td>', cells)[:11]
        expected = [row[cols.index(f"rank {m['name']}")] for m in doc["metrics"]]
        assert ranks == ["–" if r is None else str(int(r)) for r in expected], method
    # every value stays on the page, folded away: the full table and the per-sample table
    raw = re.findall(r'<details class="raw"><summary>(.*?)</summary>', html)
    assert raw == [
        "methods compared (mean score, rank: 1 = best): every value (4 rows)",
        "per sample: every value (288 rows)",  # 4 methods x (11 metrics + the baseline) x 6 samples
        # every pair of the 11 metrics: its rank correlation over the 4 methods
        "metric agreement (rank correlation over the methods, direction-adjusted): every value (55 rows)",
    ]
    assert html.count("<h4>Do the metrics agree?</h4>") == 1
    agreement = html.split("<h4>Do the metrics agree?</h4>", 1)[1].split("</ul>", 1)[0]
    assert agreement.count("<li>") == len(doc["agreement"]) >= 1
    assert "rank deletion_auc" in html.split('<details class="raw">', 1)[1]


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
    assert sorted(p.name for p in folder.iterdir()) == [
        "explorer.js",
        "report.css",
        "report.html.j2",
        "report.js",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "xaikit/viz/templates/report.js"], cwd=ROOT, check=False
    ).returncode
    assert ignored == 1  # not ignored, so the wheel carries it
