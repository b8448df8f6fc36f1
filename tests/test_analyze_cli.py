"""``xaikit analyze STORE``: the summary it prints and the files it writes (a subprocess, as a user
runs it), with --model and --data (the ablation check), and bad options (one line, status 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from analyze_stores import corner_data, planted, write_store

import xaikit as xk

TESTS = Path(__file__).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    return subprocess.run(
        [sys.executable, "-m", "xaikit", "analyze", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_analyze_prints_the_clusters_and_writes_the_analysis(tmp_path: Path) -> None:
    maps, _ = planted(40, [0, 1], side=8)
    store = write_store(tmp_path / "s", maps, np.zeros(40), label=np.zeros(40), classes=["cat", "dog"])
    res = _run(str(store), "--size", "4", "--max-display", "0", "--max-clusters", "4")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == "xaikit analyze: 40 maps in 1 class"
    assert (
        lines[2]
        == "  class cat: 40 samples, accuracy 1.000, k=2: #0: 20 (accuracy 1.000), #1: 20 (accuracy 1.000)"
    )
    assert lines[-2] == f"xaikit analyze: wrote {store / 'analysis'}"
    analysis = xk.analyze.open(store)
    assert analysis.settings["max_clusters"] == 4 and analysis.classes[0].k == 2


def test_analyze_with_model_and_data_runs_the_ablation(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    x, y, maps = corner_data(24)
    store = write_store(tmp_path / "s", maps, y, y, model="analyze_stores:corner_model")
    np.savez(tmp_path / "d.npz", x=x, y=y)
    res = _run(
        str(store), "--model", "analyze_stores:corner_model", "--data", str(tmp_path / "d.npz"),
        "--concepts", "0", "--max-display", "6", "--size", "4",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "  class 1: 12 samples, accuracy 1.000, k=1: #1: 12 (accuracy 1.000) ablated 1.000->" in res.stdout
    analysis = xk.analyze.open(store)
    assert analysis.has_images and analysis.arrays["thumb_image"].shape == (6, 8, 8, 3)
    ab = analysis.cluster(1).ablation
    assert ab is not None
    assert (
        f"#1: 12 (accuracy 1.000) ablated {ab['accuracy_before']:.3f}->{ab['accuracy_after']:.3f} "
        f"(random region: {ab['accuracy_random']:.3f})" in res.stdout
    )


def test_bad_options_are_one_line_with_status_2(tmp_path: Path) -> None:
    store = write_store(tmp_path / "s", np.ones((4, 2, 2), np.float32), np.zeros(4))
    cases = {
        (str(tmp_path / "none"),): "argument STORE: expected a store folder that 'xaikit explain' wrote",
        (
            str(store),
            "--model",
            "m:f",
        ): "argument --model: the concepts and the ablation check need the images too",
        (str(store), "--size", "1"): "argument --size: expected an int >= 2; got 1",
        (str(store), "--max-clusters", "0"): "argument --max-clusters: expected an int >= 1; got 0",
    }
    for args, message in cases.items():
        res = _run(*args)
        assert res.returncode == 2 and res.stderr.startswith(f"xaikit: error: {message}"), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    np.save(tmp_path / "x.npy", np.zeros((5, 2, 2), np.float32))
    res = _run(str(store), "--data", str(tmp_path / "x.npy"))
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "xaikit: error: argument --data: expected the dataset the store explains, of 4 samples (the store's "
        "length); got 5 samples"
    )
    assert not (store / "analysis").exists()


@pytest.mark.slow
def test_analyze_bench_quick_writes_its_section(tmp_path: Path) -> None:
    out, raw = tmp_path / "bench.md", tmp_path / "bench.json"
    out.write_text("# Benchmarks\n\nkept text\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    proc = subprocess.run(
        [sys.executable, str(TESTS.parent / "benchmarks" / "analyze_bench.py"), "--quick", "--out", str(out), "--json", str(raw)],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    assert "kept text" in text and "<!-- analyze-bench:start -->" in text and "| 600 × 32² |" in text
    row = json.loads(raw.read_text())["rows"][0]
    assert row["n"] == 600 and set(row["k"]) == {3} and row["rss_peak_kib"] >= row["rss_base_kib"] > 0
