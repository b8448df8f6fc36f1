"""The report's "Dataset explorer": what ``xaikit analyze STORE`` wrote into ``<store>/analysis/``
(format 1: ``arrays.npz`` and ``analysis.json``; docs/report.md), read with numpy and json only
(``xaikit.viz`` never imports ``xaikit.analyze``) and made into

* the page data of the scatter (:func:`explorer`'s ``"page"``): the displayed samples (those with
  a finite ``embedding``) as typed arrays (base64 of little-endian int32 / float32, one block),
  and their thumbnails as sprite sheets of :data:`SHEET_COLUMNS` x :data:`SHEET_COLUMNS` tiles,
  one ``data:`` URI per sheet, PNG or JPEG, whichever is smaller (measured per sheet); the maps
  travel as greyscale sheets that the page colours itself;
* the per-class blocks (its ``"view"``): the class mean map, the clusters (mean map, size,
  accuracy, the region-ablation accuracy before -> after), the most typical members, the
  atypical samples, the concepts (their heatmaps over their top images, their importance), the
  eigenvalues behind the choice of k.

An analysis that cannot be shown (unreadable json, another format, ``arrays.npz`` missing, or
not matching the sha256 that ``analysis.json`` recorded, or arrays of the wrong shape) gives a
note instead of the explorer, never an exception; one whose store changed since (other
committed shards, a shard committed after the analysis, another model) is shown with a "stale"
note.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.files import records_digest, sha256_of_file
from xaikit.viz.report_targets import marked_thumbnails
from xaikit.viz.run_data import read_json

__all__ = ["ANALYSIS_FORMAT", "RELIANCE_DROP", "explorer"]

#: the ``format`` of ``analysis.json`` this page reads
ANALYSIS_FORMAT = 1
#: tiles per row (and rows per sheet) of a sprite sheet
SHEET_COLUMNS = 32
#: an ablation accuracy drop (the random-region control's accuracy, or before when there is none,
#: minus after) from which a cluster gets the "relies on" sentence
RELIANCE_DROP = 0.2
#: a sprite format smaller by more than this fraction on one sheet is used for the next ones
CLEAR_WIN = 0.25
#: side (pixels) of the mean maps and concept tiles drawn into the page
MAP_SIDE = 96
#: the arrays the explorer needs, with their number of dimensions
_NEEDED = {"index": 1, "klass": 1, "label": 1, "prediction": 1, "cluster": 1, "embedding": 2,
           "atypicality": 1, "class_ids": 1, "class_mean": 3, "cluster_mean": 3,
           "thumb_index": 1, "thumb_map": 3}  # fmt: skip
_RELIES = "the model relies on this region for these samples"


class _Unusable(Exception):
    """The analysis folder cannot be shown; the message says why (shown in the page)."""


def _load(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``analysis.json`` and the arrays of ``arrays.npz``, checked; :class:`_Unusable` if not."""
    try:
        doc = json.loads((folder / "analysis.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _Unusable(f"analysis/analysis.json cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(doc, Mapping) or doc.get("format") != ANALYSIS_FORMAT:
        got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
        raise _Unusable(
            f"analysis/analysis.json is of format {got!r}; this report reads format {ANALYSIS_FORMAT}"
        )
    meta = doc.get("arrays")
    name = str(meta.get("file", "arrays.npz")) if isinstance(meta, Mapping) else "arrays.npz"
    path = folder / Path(name).name
    if not path.is_file():
        raise _Unusable(f"analysis/{path.name} is missing: the analysis did not finish")
    want = meta.get("sha256") if isinstance(meta, Mapping) else None
    if not isinstance(want, str) or sha256_of_file(path) != want:
        raise _Unusable(
            f"analysis/{path.name} does not match the sha256 recorded in analysis/analysis.json: "
            "the arrays were changed or only partly written"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: np.asarray(npz[k]) for k in npz.files}
    except (OSError, ValueError) as e:
        raise _Unusable(f"analysis/{path.name} cannot be read ({e})") from None
    for key, ndim in _NEEDED.items():
        if key not in arrays or arrays[key].ndim != ndim:
            got = "missing" if key not in arrays else f"{arrays[key].ndim} dimensions"
            raise _Unusable(f"analysis/{path.name}: array {key!r} must have {ndim} dimensions; got {got}")
    n = len(arrays["index"])
    for key in ("klass", "label", "prediction", "cluster", "embedding", "atypicality"):
        if len(arrays[key]) != n:
            raise _Unusable(f"analysis/{path.name}: {key!r} has {len(arrays[key])} rows, 'index' {n}")
    if len(arrays["thumb_map"]) != len(arrays["thumb_index"]):
        raise _Unusable(f"analysis/{path.name}: 'thumb_map' and 'thumb_index' differ in length")
    img = arrays.get("thumb_image")
    if img is not None and (img.ndim != 4 or img.shape[:3] != arrays["thumb_map"].shape or img.shape[3] != 3):
        arrays.pop("thumb_image")
    return dict(doc), arrays


def _timestamp(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _stale(store: Path, doc: Mapping[str, Any]) -> str | None:
    """Why the analysis no longer describes the store (None: it does): another model, method or
    length, other committed shards, or shards redone with other values (``store.records``;
    without it, a shard committed after the analysis was made)."""
    manifest = read_json(store / "manifest.json")
    found = doc.get("store")
    was: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    if isinstance(manifest, Mapping):
        for key in ("fingerprint", "method", "length"):
            if key in was and key in manifest and was[key] != manifest[key]:
                return f"the store's {key} changed since the analysis"
    records: dict[int, Mapping[str, Any]] = {}
    for p in (store / "shards").glob("*.json") if (store / "shards").is_dir() else []:
        rec = read_json(p)
        if isinstance(rec, Mapping) and isinstance(rec.get("shard"), int):
            records[int(rec["shard"])] = rec
    committed = was.get("committed")
    if isinstance(committed, list) and sorted(records) != sorted(
        int(k) for k in committed if isinstance(k, int)
    ):
        return f"the store's committed shards changed since the analysis ({len(committed)} then, {len(records)} now)"
    if isinstance(was.get("records"), str):
        if was["records"] != records_digest(records):
            return "shards of the store were redone with other values since the analysis"
        return None
    created = _timestamp(doc.get("created"))
    times = [_timestamp(r.get("committed")) for r in records.values()]
    if created is not None and any(t is not None and t > created for t in times):
        return "shards of the store were committed again after the analysis"
    return None


# ------------------------------------------------------------------------------------ pictures
def _encode(rgb: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    image = Image.fromarray(rgb)
    if fmt == "PNG":
        image.save(buf, format="PNG", compress_level=6)
    else:
        image.save(buf, format="JPEG", quality=88, subsampling=0 if rgb.ndim == 2 else 2)
    return buf.getvalue()


def _uri(raw: bytes, fmt: str) -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(raw).decode("ascii")


def _sheets(tiles: np.ndarray) -> tuple[list[str], list[str]]:
    """Tiles (n, t, t[, 3]) uint8 as sprite sheets of SHEET_COLUMNS x SHEET_COLUMNS tiles, each
    a PNG or JPEG ``data:`` URI, whichever is smaller. Both are measured on every sheet while
    their sizes are within :data:`CLEAR_WIN` of each other; once one format wins a sheet by
    more, the following sheets (the same kind of picture) are encoded in it alone."""
    per = SHEET_COLUMNS * SHEET_COLUMNS
    t = tiles.shape[1]
    uris: list[str] = []
    formats: list[str] = []
    decided: str | None = None
    for start in range(0, len(tiles), per):
        part = tiles[start : start + per]
        rows = math.ceil(len(part) / SHEET_COLUMNS)
        pad = np.zeros((rows * SHEET_COLUMNS - len(part), *part.shape[1:]), np.uint8)
        grid = np.concatenate([part, pad]).reshape(rows, SHEET_COLUMNS, t, t, *part.shape[3:])
        sheet = np.ascontiguousarray(
            np.swapaxes(grid, 1, 2).reshape(rows * t, SHEET_COLUMNS * t, *part.shape[3:])
        )
        if decided is not None:
            raw, fmt = _encode(sheet, decided), decided
        else:
            png, jpeg = _encode(sheet, "PNG"), _encode(sheet, "JPEG")
            raw, fmt = (png, "PNG") if len(png) <= len(jpeg) else (jpeg, "JPEG")
            if max(len(png), len(jpeg)) > (1 + CLEAR_WIN) * min(len(png), len(jpeg)):
                decided = fmt
        uris.append(_uri(raw, fmt))
        formats.append(fmt.lower())
    return uris, formats


def _heat_uri(value: np.ndarray, side: int = MAP_SIDE) -> str:
    """A map (s, s) coloured (inferno, 0 .. its maximum) and enlarged to ``side`` as a PNG URI."""
    from matplotlib import colormaps

    v = np.nan_to_num(np.asarray(value, np.float64), nan=0.0)
    top = float(v.max()) if v.size else 0.0
    rgb = (colormaps["inferno"](v / top if top > 0 else v)[..., :3] * 255).round().astype(np.uint8)
    rep = max(1, side // max(rgb.shape[:2]))
    return _png(np.repeat(np.repeat(rgb, rep, axis=0), rep, axis=1))


def _png(rgb: np.ndarray) -> str:
    return _uri(_encode(rgb, "PNG"), "PNG")


def _concept_tile(heat: np.ndarray, image: np.ndarray | None) -> str:
    """A concept's heatmap (h, w) over its image (t, t, 3 uint8; None: the heatmap alone)."""
    from PIL import Image

    h = np.nan_to_num(np.asarray(heat, np.float32), nan=0.0)
    h = h - h.min() if h.size else h
    top = float(h.max()) if h.size else 0.0
    h = h / top if top > 0 else h
    if image is None:
        return _heat_uri(h)
    from xaikit.viz.overlay import overlay

    t = image.shape[0]
    up = np.asarray(Image.fromarray(h.astype(np.float32), mode="F").resize((t, t), Image.Resampling.BILINEAR))
    out = overlay(image[None].astype(np.float32) / 255.0, np.clip(up, 0, 1)[None])[0]
    rgb = np.round(np.clip(out, 0, 1) * 255).astype(np.uint8)
    rep = max(1, MAP_SIDE // t)
    return _png(np.repeat(np.repeat(rgb, rep, axis=0), rep, axis=1))


# ----------------------------------------------------------------------------------- the view
def _pack(values: np.ndarray, dtype: str) -> str:
    return base64.b64encode(
        np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    ).decode("ascii")


def _pct(value: Any) -> str:
    return f"{100 * float(value):.0f}%" if isinstance(value, (int, float)) and math.isfinite(value) else "–"


def _ablation(abl: Any) -> dict[str, Any] | None:
    if not isinstance(abl, Mapping):
        return None
    before, after = abl.get("accuracy_before"), abl.get("accuracy_after")
    sb, sa = abl.get("score_before"), abl.get("score_after")
    num = (int, float)
    ar, sr = abl.get("accuracy_random"), abl.get("score_random")
    if isinstance(before, num) and isinstance(after, num):
        text = f"accuracy {_pct(before)} → {_pct(after)}"
        # against the control (as many random pixels filled) when the analysis has it
        base = float(ar) if isinstance(ar, num) else float(before)
        relies = base - float(after) >= RELIANCE_DROP
        if isinstance(ar, num):
            text += f" ({_pct(ar)} with as many random pixels hidden)"
    elif isinstance(sb, num) and isinstance(sa, num):
        text = f"score {float(sb):.3g} → {float(sa):.3g}"
        base = float(sr) if isinstance(sr, num) else float(sb)
        relies = base > 0 and (base - float(sa)) / base >= 0.5
        if isinstance(sr, num):
            text += f" ({float(sr):.3g} with as many random pixels hidden)"
    else:
        return None
    if isinstance(sb, num) and isinstance(sa, num) and isinstance(before, num):
        text += f" (score {float(sb):.3g} → {float(sa):.3g})"
    if isinstance(abl.get("n"), int):
        text += f" over {abl['n']} members"
    fraction = abl.get("fraction")
    region = (
        f"the top {_pct(fraction)} of the cluster's mean map" if isinstance(fraction, num) else "its region"
    )
    return {"text": text, "region": region, "relies": relies, "sentence": _RELIES if relies else None}


def explorer(store: Path, eid: str, classes: list[str] | None) -> dict[str, Any] | None:
    """The explorer of the store at ``store`` (None when it has no ``analysis/analysis.json``):
    ``{"id", "view": what the template shows, "page": what the page's script reads}``; a
    ``view["error"]`` note (and no ``page``) when the analysis cannot be shown."""
    folder = store / "analysis"
    if not (folder / "analysis.json").is_file():
        return None
    try:
        doc, arrays = _load(folder)
        return _build(store, eid, classes, doc, arrays)
    except _Unusable as e:
        return {"id": eid, "view": {"error": str(e)}, "page": None}
    except (KeyError, ValueError, TypeError, IndexError) as e:  # a shape or value the format forbids
        note = f"analysis/ cannot be shown: {type(e).__name__}: {e}"
        return {"id": eid, "view": {"error": note}, "page": None}


def _names(classes: list[str] | None, doc: Mapping[str, Any]) -> dict[int, str]:
    names = {i: str(n) for i, n in enumerate(classes or [])}
    for c in doc.get("classes") or []:
        if isinstance(c, Mapping) and isinstance(c.get("klass"), int) and c.get("name") not in (None, ""):
            names.setdefault(int(c["klass"]), str(c["name"]))
    return names


def _build(
    store: Path, eid: str, classes: list[str] | None, doc: Mapping[str, Any], a: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    emb = a["embedding"].astype(np.float32)
    shown = np.flatnonzero(np.isfinite(emb).all(axis=1))
    thumb_at = {int(i): k for k, i in enumerate(a["thumb_index"])}
    index = a["index"].astype(np.int64)
    tile = np.array([thumb_at.get(int(index[r]), -1) for r in shown], np.int64)
    pos_of = {int(index[r]): p for p, r in enumerate(shown)}
    names = _names(classes, doc)
    has_img = "thumb_image" in a
    marked = marked_thumbnails(store, a["thumb_index"], a["thumb_image"]) if has_img else None
    if marked is not None:  # the explained box or region drawn on every thumbnail
        a = {**a, "thumb_image": marked}
    # sprites hold the tiles of the shown points, in their order (a point without a thumbnail
    # gets a blank tile, flagged by tile = -1)
    safe = np.where(tile >= 0, tile, 0)
    maps = a["thumb_map"][safe] if len(a["thumb_map"]) else np.zeros((len(shown), 1, 1), np.uint8)
    maps[tile < 0] = 0
    map_uris, map_fmt = _sheets(maps.astype(np.uint8))
    img_uris: list[str] = []
    img_fmt: list[str] = []
    if has_img:
        imgs = a["thumb_image"][safe]
        imgs[tile < 0] = 0
        img_uris, img_fmt = _sheets(imgs.astype(np.uint8))
    label, pred = a["label"], a["prediction"]
    correct = np.where(label[shown] < 0, -1, (label[shown] == pred[shown]).astype(np.int64))
    cluster_klass = {}
    for c in doc.get("classes") or []:
        for cl in c.get("clusters") or [] if isinstance(c, Mapping) else []:
            if isinstance(cl, Mapping) and isinstance(cl.get("id"), int):
                cluster_klass[int(cl["id"])] = int(c.get("klass", -1))
    from matplotlib import colormaps

    lut = np.round(colormaps["inferno"](np.arange(256))[:, :3] * 255).astype(np.uint8)
    page = {
        "id": eid,
        "lut": base64.b64encode(lut.tobytes()).decode("ascii"),
        "n": len(shown),
        "side": int(maps.shape[1]),
        "cols": SHEET_COLUMNS,
        "images": img_uris,
        "maps": map_uris,
        "names": {str(k): v for k, v in names.items()},
        "clusters": {str(k): v for k, v in cluster_klass.items()},
        "arrays": {
            "index": _pack(index[shown], "i4"),
            "klass": _pack(a["klass"][shown], "i4"),
            "label": _pack(label[shown], "i4"),
            "prediction": _pack(pred[shown], "i4"),
            "cluster": _pack(a["cluster"][shown], "i4"),
            "correct": _pack(correct, "i4"),
            "tile": _pack(tile, "i4"),
            "x": _pack(emb[shown, 0], "f4"),
            "y": _pack(emb[shown, 1], "f4"),
            "atypicality": _pack(a["atypicality"][shown], "f4"),
        },
    }
    view = _classes_view(doc, a, names, pos_of, thumb_at)
    sizes = {"images": sum(len(u) for u in img_uris), "maps": sum(len(u) for u in map_uris)}
    found, dropped = doc.get("settings"), doc.get("skipped")
    settings: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    skipped: Mapping[str, Any] = dropped if isinstance(dropped, Mapping) else {}
    view.update(
        {
            "error": None,
            "stale": _stale(store, doc),
            "n": len(index),
            "shown": len(shown),
            "has_images": has_img,
            "marked": marked is not None,
            "layer": doc.get("layer"),
            "settings": [(str(k), json.dumps(v)) for k, v in settings.items()] if settings else [],
            "skipped": [(str(k), int(v)) for k, v in skipped.items() if isinstance(v, int) and v],
            "formats": sorted(set(img_fmt + map_fmt)),
            "sprite_bytes": sizes,
            "created": doc.get("created"),
        }
    )
    return {"id": eid, "view": view, "page": page}


def _chips(indices: Any, pos_of: Mapping[int, int]) -> list[dict[str, int]]:
    return [{"index": int(i), "pos": pos_of.get(int(i), -1)} for i in indices or [] if isinstance(i, int)]


def _eigen(values: Any, k: Any) -> dict[str, Any] | None:
    vals = [float(v) for v in values or [] if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(vals) < 2:
        return None
    top = max(max(vals), 1e-12)
    w, h = 14, 60
    bars = [
        {"x": i * w, "h": round(v / top * h, 1), "y": round(h - v / top * h, 1), "v": f"{v:.3g}"}
        for i, v in enumerate(vals)
    ]
    return {"bars": bars, "width": len(vals) * w, "height": h, "k": k if isinstance(k, int) else None}


def _classes_view(
    doc: Mapping[str, Any],
    a: Mapping[str, np.ndarray],
    names: Mapping[int, str],
    pos_of: Mapping[int, int],
    thumb_at: Mapping[int, int],
) -> dict[str, Any]:
    class_row = {int(k): r for r, k in enumerate(a["class_ids"])}
    cmeans = a["cluster_mean"]
    concept_class = a.get("concept_class", np.zeros(0, np.int64))
    heatmaps = a.get("concept_heatmaps")
    tops = a.get("concept_top")
    images = a.get("thumb_image")
    out = []
    for c in doc.get("classes") or []:
        if not isinstance(c, Mapping) or not isinstance(c.get("klass"), int):
            continue
        k = int(c["klass"])
        row = class_row.get(k)
        clusters = []
        for cl in c.get("clusters") or []:
            if not isinstance(cl, Mapping) or not isinstance(cl.get("id"), int):
                continue
            gid = int(cl["id"])
            clusters.append(
                {
                    "id": gid,
                    "size": cl.get("size"),
                    "accuracy": _pct(cl.get("accuracy")) if cl.get("accuracy") is not None else "–",
                    "mean": _heat_uri(cmeans[gid]) if 0 <= gid < len(cmeans) else None,
                    "ablation": _ablation(cl.get("ablation")),
                    "members": _chips(cl.get("members"), pos_of)[:12],
                }
            )
        concepts = []
        for cc in c.get("concepts") or []:
            if not isinstance(cc, Mapping) or not isinstance(cc.get("id"), int):
                continue
            rid = int(cc["id"])
            tiles = []
            if (
                heatmaps is not None
                and tops is not None
                and 0 <= rid < len(heatmaps)
                and rid < len(concept_class)
            ):
                for j, idx in enumerate(tops[rid]):
                    if idx < 0 or j >= heatmaps.shape[1]:
                        continue
                    at = thumb_at.get(int(idx))
                    image = images[at] if images is not None and at is not None else None
                    tiles.append({"index": int(idx), "uri": _concept_tile(heatmaps[rid, j], image)})
            imp = cc.get("importance")
            concepts.append(
                {
                    "id": rid,
                    "importance": f"{float(imp):.3g}" if isinstance(imp, (int, float)) else "–",
                    "tiles": tiles,
                }
            )
        out.append(
            {
                "klass": k,
                "name": names.get(k, str(k)),
                "n": c.get("n"),
                "accuracy": _pct(c.get("accuracy")) if c.get("accuracy") is not None else "–",
                "k": c["k"] if isinstance(c.get("k"), int) else len(clusters),
                "mean": _heat_uri(a["class_mean"][row]) if row is not None else None,
                "clusters": clusters,
                "atypical": _chips(c.get("atypical"), pos_of)[:12],
                "concepts": concepts,
                "eigen": _eigen(c.get("eigenvalues"), c.get("k")),
            }
        )
    return {"classes": out}
