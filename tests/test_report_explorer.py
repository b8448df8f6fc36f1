"""The report's Dataset explorer without a browser: what the page holds for a store with an
``analysis/`` folder (tests/analysis_fixtures.py writes it in the issue 30 format), the notes
of a stale or damaged analysis, and a store without one (no explorer). In Chromium:
tests/test_report_explorer_browser.py."""

from __future__ import annotations

import ast
import base64
import hashlib
import html as html_lib
import io
import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.analysis_fixtures import CLASSES, make_explained_store, sha256_file, write_analysis
from xaikit.viz import report
from xaikit.viz.report_explorer import RELIANCE_DROP, SHEET_COLUMNS

N = 120
RELIES = "the model relies on this region for these samples"


@pytest.fixture(scope="module")
def plain_store(tmp_path_factory):
    """A store of N samples and its images, without analysis (copied by each test)."""
    return make_explained_store(tmp_path_factory.mktemp("explorer") / "store", N)


def _copy(plain_store, tmp_path: Path, analysed: bool = True, **options) -> Path:
    store, x = plain_store
    out = Path(shutil.copytree(store, tmp_path / "store"))
    if analysed:
        write_analysis(out, x, **options)
    return out


def _page_data(html: str) -> dict:
    """The page's JSON blocks: ``{"explorers": the #xk-explorer block (or []), "page": #xk-data}``."""
    found = re.search(r'<script id="xk-explorer" type="application/json">(.*?)</script>', html, re.S)
    data = re.search(r'<script id="xk-data" type="application/json">(.*?)</script>', html, re.S)
    assert data is not None
    return {"explorers": json.loads(found.group(1)) if found else [], "page": json.loads(data.group(1))}


def _decode(b64: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=np.dtype(dtype).newbyteorder("<"))


def _picture(uri: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def test_explorer_holds_the_points_sprites_and_class_blocks(plain_store, tmp_path):
    store = _copy(plain_store, tmp_path)
    arrays = dict(np.load(store / "analysis" / "arrays.npz"))
    doc = json.loads((store / "analysis" / "analysis.json").read_text())
    html = report(store).read_text(encoding="utf-8")
    assert "default-src 'none'" in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    (page,) = _page_data(html)["explorers"]
    assert page["id"] == "e0" and page["n"] == N and page["side"] == 32 and page["cols"] == SHEET_COLUMNS
    # the points: every sample is displayed here, in the arrays' order
    index = _decode(page["arrays"]["index"], "i4")
    np.testing.assert_array_equal(index, arrays["index"])
    np.testing.assert_array_equal(_decode(page["arrays"]["cluster"], "i4"), arrays["cluster"])
    np.testing.assert_array_equal(_decode(page["arrays"]["x"], "f4"), arrays["embedding"][:, 0])
    correct = _decode(page["arrays"]["correct"], "i4")
    np.testing.assert_array_equal(correct, (arrays["label"] == arrays["prediction"]).astype(int))
    assert page["names"] == {str(i): n for i, n in enumerate(CLASSES)}
    # sprites: 120 tiles fit one sheet of 32 columns (4 rows); tile p is sample p's thumbnail
    assert len(page["images"]) == len(page["maps"]) == 1
    sheet = _picture(page["images"][0])
    assert sheet.shape == (4 * 32, SHEET_COLUMNS * 32, 3)
    tile = sheet[32:64, 3 * 32 : 4 * 32].astype(int)  # point 35: row 1, column 3
    assert np.abs(tile - arrays["thumb_image"][35]).mean() < 4  # exact for PNG, close for JPEG
    maps = _picture(page["maps"][0])
    assert maps.ndim == 2 and np.abs(maps[:32, :32].astype(int) - arrays["thumb_map"][0]).mean() < 4
    # the class blocks: one per class of the analysis, its clusters, ablation sentence once
    # (cluster 0: 0.9 -> 0.2; the others drop 0.05 < RELIANCE_DROP)
    blocks = re.findall(r'<details class="class-block"', html)
    assert len(blocks) == len(doc["classes"])
    cards = re.findall(r'<div class="cluster-card" data-cluster="(\d+)"', html)
    assert sorted(map(int, cards)) == sorted(c["id"] for k in doc["classes"] for c in k["clusters"])
    assert html.count(RELIES) == 1 and RELIANCE_DROP > 0.05
    size0 = doc["classes"][0]["clusters"][0]["size"]
    assert f"accuracy 90% → 20% (score 0.8 → 0.3) over {size0} members: <strong>{RELIES}" in html
    first = doc["classes"][0]
    assert f"class {CLASSES[first['klass']]}" in html
    assert f"{first['n']} samples · accuracy" in html
    # chips: the typical members and atypical samples point at their scatter position
    for member in first["clusters"][0]["members"][:12]:
        assert f'data-pos="{int(np.flatnonzero(index == member)[0])}"' in html
    # concept galleries: a tile per top image (-1: padding; a class of < 8 samples has fewer)
    assert len(re.findall(r'alt="concept \d+ on sample \d+"', html)) == int(
        (arrays["concept_top"] >= 0).sum()
    )
    assert "importance 0.5" in html
    # mean maps: one per class and per cluster, as PNGs
    assert len(re.findall(r'alt="mean map of cluster \d+"', html)) == len(cards)
    assert len(re.findall(r'alt="mean map of [a-z]+"', html)) == len(doc["classes"])
    assert "Stale analysis" not in html and "cannot be shown" not in html


def test_only_displayed_samples_are_placed_and_maps_only(plain_store, tmp_path):
    store = _copy(plain_store, tmp_path, max_display=50)
    html = report(store).read_text(encoding="utf-8")
    arrays = dict(np.load(store / "analysis" / "arrays.npz"))
    (page,) = _page_data(html)["explorers"]
    assert page["n"] == 50
    np.testing.assert_array_equal(_decode(page["arrays"]["index"], "i4"), arrays["thumb_index"])
    assert "120 samples analysed, 50 placed by the embedding" in html
    # a member not displayed is named by its index, not drawn
    shown = set(arrays["thumb_index"].tolist())
    doc = json.loads((store / "analysis" / "analysis.json").read_text())
    hidden = [m for c in doc["classes"] for cl in c["clusters"] for m in cl["members"][:12] if m not in shown]
    assert hidden and all(f">#{m}</span>" in html for m in hidden)
    # without images (an analysis without data): map thumbnails only
    store2 = _copy(plain_store, tmp_path / "maps", analysed=False)
    write_analysis(store2, None)
    page2 = _page_data(report(store2).read_text(encoding="utf-8"))["explorers"][0]
    assert page2["images"] == [] and len(page2["maps"]) == 1


def test_store_without_analysis_has_no_explorer(plain_store, tmp_path):
    store = _copy(plain_store, tmp_path, analysed=False)
    html = report(store).read_text(encoding="utf-8")
    assert ">Dataset explorer<" not in html and "data-explorer" not in html
    assert "xkExplorer" not in html and "xk-explorer" not in html  # neither its script nor data
    assert _page_data(html)["explorers"] == [] and "explorers" not in _page_data(html)["page"]
    assert "Explained samples" in html and "vanilla" in html


def _note(html: str) -> str:
    found = re.search(r'<div class="alert[^"]*" role="alert">(.*?)</div>', html, re.S)
    assert found is not None
    return html_lib.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_stale_analysis_is_shown_with_a_note(plain_store, tmp_path):
    store = _copy(plain_store, tmp_path)
    record = store / "shards" / "0.json"
    rec = json.loads(record.read_text())
    # committed again with the same values (a resume that redid it): still the same store
    record.write_text(json.dumps({**rec, "committed": time.time() + 60}))
    assert "Stale" not in report(store).read_text()
    # redone with other values
    record.write_text(json.dumps({**rec, "sha256": "0" * 64}))
    html = report(store).read_text(encoding="utf-8")
    assert "Stale analysis:" in html and "shards of the store were redone with other values" in _note(html)
    assert len(_page_data(html)["explorers"]) == 1  # still shown
    # another committed shard
    record.write_text(json.dumps(rec))
    assert "Stale" not in report(store).read_text()
    (store / "shards" / "1.json").write_text(json.dumps({**rec, "shard": 1}))
    assert "committed shards changed since the analysis (1 then, 2 now)" in _note(report(store).read_text())
    (store / "shards" / "1.json").unlink()
    # another model
    doc = json.loads((store / "analysis" / "analysis.json").read_text())
    (store / "analysis" / "analysis.json").write_text(
        json.dumps({**doc, "store": {**doc["store"], "fingerprint": "sha256:another"}})
    )
    assert "the store's fingerprint changed since the analysis" in _note(report(store).read_text())
    # an analysis.json without store.records: a shard committed after the analysis is stale
    del doc["store"]["records"]
    (store / "analysis" / "analysis.json").write_text(json.dumps(doc))
    assert "Stale" not in report(store).read_text()
    record.write_text(json.dumps({**rec, "committed": time.time() + 60}))
    assert "committed again after the analysis" in _note(report(store).read_text())


def test_records_digest_is_the_one_of_analysis_json(plain_store, tmp_path):
    """The digest of the shard records (xaikit.files, which the analysis writes and the page
    checks) is the fixture's (the format's) digest."""
    from tests.analysis_fixtures import records_digest as fixture_digest
    from xaikit.files import records_digest

    store = _copy(plain_store, tmp_path, analysed=False)
    recs = {
        int(json.loads(p.read_text())["shard"]): json.loads(p.read_text())
        for p in (store / "shards").glob("*.json")
    }
    assert records_digest(recs) == fixture_digest(store)[1]
    assert (
        records_digest({0: {"sha256": "ab"}, 1: {"sha256": "cd"}})
        == hashlib.sha256(b"0:ab\n1:cd\n").hexdigest()
    )


@pytest.mark.parametrize("damage", ["sha", "missing", "json", "format", "shape"])
def test_a_bad_analysis_gives_a_note_not_a_crash(plain_store, tmp_path, damage):
    store = _copy(plain_store, tmp_path)
    folder = store / "analysis"
    doc = json.loads((folder / "analysis.json").read_text())
    if damage == "sha":  # the arrays changed after the analysis recorded their sha256
        arrays = dict(np.load(folder / "arrays.npz"))
        arrays["cluster"][:] = 0
        np.savez(folder / "arrays.npz", **arrays)
        want = "does not match the sha256 recorded in analysis/analysis.json"
    elif damage == "missing":
        (folder / "arrays.npz").unlink()
        want = "analysis/arrays.npz is missing"
    elif damage == "json":
        (folder / "analysis.json").write_text('{"format": 1, "arr')
        want = "analysis/analysis.json cannot be read"
    elif damage == "format":
        (folder / "analysis.json").write_text(json.dumps({**doc, "format": 2}))
        want = "analysis/analysis.json is of format 2; this report reads format 1"
    else:  # a well-formed file with a 1-D embedding (sha updated to match)
        arrays = dict(np.load(folder / "arrays.npz"))
        arrays["embedding"] = arrays["embedding"][:, 0]
        np.savez(folder / "arrays.npz", **arrays)
        doc["arrays"]["sha256"] = sha256_file(folder / "arrays.npz")
        (folder / "analysis.json").write_text(json.dumps(doc))
        want = "array 'embedding' must have 2 dimensions; got 1 dimensions"
    html = report(store).read_text(encoding="utf-8")
    note = _note(html)
    assert note.startswith("The dataset analysis cannot be shown:") and want in note, note
    assert _page_data(html)["explorers"] == [] and '<canvas class="scatter"' not in html
    assert "Explained samples" in html  # the rest of the store's section is there


def test_viz_reads_the_files_and_never_imports_analyze():
    """The report reads ``analysis/`` with numpy (allow_pickle=False) and json only."""
    root = Path(__file__).resolve().parents[1] / "xaikit" / "viz"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not any(n.startswith("xaikit.analyze") for n in names), path
    source = (root / "report_explorer.py").read_text(encoding="utf-8")
    assert "allow_pickle=False" in source and "allow_pickle=True" not in source


def test_sprite_format_is_the_smaller_one():
    """Flat tiles compress best as PNG (and stay exact), noise as JPEG; 1,100 tiles make two
    sheets of 32 x 32 tiles, the second of 3 rows."""
    from xaikit.viz.report_explorer import _encode, _sheets

    flat = np.repeat(np.arange(1100, dtype=np.uint8)[:, None, None], 32 * 32, axis=1).reshape(1100, 32, 32)
    uris, formats = _sheets(flat)
    assert formats == ["png", "png"] and [u.split(";")[0] for u in uris] == ["data:image/png"] * 2
    second = _picture(uris[1])
    assert second.shape == (3 * 32, SHEET_COLUMNS * 32)
    np.testing.assert_array_equal(second[32:64, 32 * 7 : 32 * 8], flat[1024 + 32 + 7])  # exact
    noise = np.random.default_rng(0).integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    uris, formats = _sheets(noise)
    assert formats == ["jpeg"]
    sheet = _picture(uris[0])[:64]
    png = _encode(np.ascontiguousarray(sheet), "PNG")
    assert len(base64.b64decode(uris[0].split(",", 1)[1])) < len(png)


def test_an_analysis_with_nothing_displayed(plain_store, tmp_path):
    """Every embedding NaN (nothing placed): the class blocks, an empty scatter, no crash."""
    store = _copy(plain_store, tmp_path)
    folder = store / "analysis"
    arrays = dict(np.load(folder / "arrays.npz"))
    arrays["embedding"][:] = np.nan
    np.savez(folder / "arrays.npz", **arrays)
    doc = json.loads((folder / "analysis.json").read_text())
    doc["arrays"]["sha256"] = sha256_file(folder / "arrays.npz")
    (folder / "analysis.json").write_text(json.dumps(doc))
    html = report(store).read_text(encoding="utf-8")
    (page,) = _page_data(html)["explorers"]
    assert page["n"] == 0 and page["images"] == [] and page["maps"] == []
    assert "120 samples analysed, 0 placed" in html and html.count('class="cluster-card"') == 6
    assert 'class="xk-idx"' in html and 'class="xk-thumb"' not in html


def test_class_names_are_escaped(plain_store, tmp_path):
    """Names come from the manifest: shown as text, never as markup (HTML or the JSON block)."""
    store = _copy(plain_store, tmp_path)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["classes"] = ["</script><b>x</b>", "<img src=x>", "c"]
    (store / "manifest.json").write_text(json.dumps(manifest))
    doc = json.loads((store / "analysis" / "analysis.json").read_text())
    for c in doc["classes"]:
        c["name"] = manifest["classes"][c["klass"]]
    (store / "analysis" / "analysis.json").write_text(json.dumps(doc))
    html = report(store).read_text(encoding="utf-8")
    assert "<b>x</b>" not in html and "<img src=x>" not in html
    assert "&lt;img src=x&gt;" in html or "&lt;/script&gt;" in html
    assert _page_data(html)["explorers"][0]["names"]["1"] == "<img src=x>"  # intact once parsed


def test_reliance_is_judged_against_the_random_region_control():
    """With the analysis' control (as many random pixels hidden), the "relies on" sentence needs a
    drop beyond the control's, not beyond the untouched accuracy; without it, before counts."""
    from xaikit.viz.report_explorer import _ablation

    both = {"fraction": 0.1, "n": 50, "accuracy_before": 0.9, "accuracy_after": 0.5, "score_before": 4.0,
            "score_after": 2.0}  # fmt: skip
    assert _ablation(both)["relies"]  # 0.9 -> 0.5, no control: a drop of 0.4
    shown = _ablation({**both, "accuracy_random": 0.6, "score_random": 2.2})
    assert not shown["relies"] and shown["sentence"] is None  # the control loses nearly as much
    assert "(60% with as many random pixels hidden)" in shown["text"]
    kept = _ablation({**both, "accuracy_random": 0.88, "score_random": 3.9})
    assert kept["relies"] and kept["sentence"]
    scores_only = {"fraction": 0.1, "accuracy_before": None, "accuracy_after": None, "score_before": 4.0,
                   "score_after": 1.0, "score_random": 1.5}  # fmt: skip
    assert not _ablation(scores_only)["relies"]  # (1.5 - 1.0) / 1.5 < 0.5
    assert _ablation({**scores_only, "score_random": 3.9})["relies"]
