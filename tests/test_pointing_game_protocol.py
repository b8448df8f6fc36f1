"""``gallery/pointing_game_protocol.py`` at tiny sizes: the table's structure, and its center-baseline
row and "Difficult" counts against a direct computation from the generated data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.ndimage import distance_transform_edt

from gallery.make_all import ROOT, environment
from xaikit.dataset.data import shape_scenes, shapes

METHODS = ["Gradient", "Guided backprop", "Grad-CAM", "RISE", "Center (baseline)"]
N_TRAIN, N_EVAL, SEED = 48, 10, 0


def _center_hits(mask: np.ndarray, tolerance: float) -> np.ndarray:
    """Whether the centre pixel (size // 2, size // 2) lies within ``tolerance`` px of each mask."""
    c = mask.shape[-1] // 2
    return np.array([distance_transform_edt(~m)[c, c] <= tolerance for m in mask])


def _class_mean(hits: np.ndarray, target: np.ndarray) -> float:
    """The published accuracy: hits / (hits + misses) per class, averaged over the classes."""
    return float(np.mean([hits[target == c].mean() for c in np.unique(target)]))


def _direct() -> dict[str, dict[str, np.ndarray]]:
    """Per data set, the protocol's pairs and the center baseline's hits, from the data alone."""
    _, test = shapes.load_data(n_train=N_TRAIN, n_eval=N_EVAL, seed=SEED)
    out = {
        "shapes (32x32)": {
            "target": test["y"],
            "difficult": np.zeros(N_EVAL, dtype=bool),
            "center": _center_hits(test["mask"], 15 * 32 / 224),
        }
    }
    _, scenes = shape_scenes.load_data(n_train=N_TRAIN, n_eval=N_EVAL, seed=SEED)
    target, hard, center = [], [], []
    for y, seg in zip(scenes["y"], scenes["segmentation"]):
        for label in np.flatnonzero(y):
            m = seg == label
            r, c = np.nonzero(m)
            target.append(label)
            hard.append((np.ptp(r) + 1) * (np.ptp(c) + 1) < 64 * 64 / 4 and y.sum() == 2)
            center.append(_center_hits(m[None], 15 * 64 / 224)[0])
    out["shape_scenes (64x64)"] = {
        "target": np.array(target),
        "difficult": np.array(hard),
        "center": np.array(center),
    }
    return out


@pytest.mark.slow
def test_quick_run_writes_the_published_table(tmp_path: Path) -> None:
    picture, record = tmp_path / "pg.png", tmp_path / "results.json"
    argv = [
        sys.executable, "-m", "gallery.pointing_game_protocol", "--out", str(picture),
        "--json", str(record), "--n-train", str(N_TRAIN), "--epochs", "1", "--n-eval", str(N_EVAL),
        "--masks", "8", "--boot", "40", "--rows", "2", "--seed", str(SEED),
    ]  # fmt: skip
    subprocess.run(argv, cwd=ROOT, env=environment(), check=True, timeout=600, capture_output=True)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads(record.read_text())["results"]
    assert [r["name"] for r in results] == ["shapes (32x32)", "shape_scenes (64x64)"]
    assert [r["tolerance_px"] for r in results] == pytest.approx([15 * 32 / 224, 15 * 64 / 224])
    direct = _direct()
    for r in results:
        d, pairs = direct[r["name"]], r["pairs"]
        np.testing.assert_array_equal(pairs["target"], d["target"])
        np.testing.assert_array_equal(pairs["difficult"], d["difficult"])
        np.testing.assert_array_equal(pairs["hits"]["Center (baseline)"], d["center"])
        assert list(r["subsets"]) == ["All", "Difficult"]
        for subset, entry in r["subsets"].items():
            keep = np.ones(len(d["target"]), dtype=bool) if subset == "All" else d["difficult"]
            assert entry["n"] == keep.sum()
            if not keep.any():  # shapes: no image holds a second class, so no "Difficult" column
                assert "rates" not in entry and "claims" not in entry
                continue
            assert list(entry["rates"]) == METHODS
            for label, (point, low, high) in entry["rates"].items():
                assert 0.0 <= low <= high <= 1.0
                hits = np.array(pairs["hits"][label])[keep]
                assert point == pytest.approx(_class_mean(hits, d["target"][keep]), abs=1e-12)
            center = _class_mean(d["center"][keep], d["target"][keep])
            assert entry["rates"]["Center (baseline)"][0] == pytest.approx(center, abs=1e-12)
            claims = [(c["better"], c["worse"]) for c in entry["claims"]]
            assert claims == [
                ("Grad-CAM", "Gradient"),
                ("RISE", "Gradient"),
                ("Gradient", "Center (baseline)"),
            ]
            for c in entry["claims"]:
                rates = entry["rates"]
                assert c["diff"] == pytest.approx(rates[c["better"]][0] - rates[c["worse"]][0])
                low, high = c["ci"]
                expected = "holds" if low > 0 else "reversed" if high < 0 else "tie (interval holds 0)"
                assert c["verdict"] == expected
    # the markdown: one row per method, All / Difficult per data set, the shapes' Difficult n/a
    table = (tmp_path / "pointing_game_table.md").read_text().splitlines()
    assert table[0] == (
        "| method | shapes (32x32): All | shapes (32x32): Difficult | shape_scenes (64x64): All | "
        "shape_scenes (64x64): Difficult |"
    )
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table[2:7]}
    assert list(rows) == METHODS
    d = direct["shapes (32x32)"]
    assert rows["Center (baseline)"][0].startswith(f"{100 * _class_mean(d['center'], d['target']):.1f} (")
    assert all(cells[1] == "n/a" for cells in rows.values())
