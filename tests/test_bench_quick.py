"""The benchmark script runs end to end in its quick mode and writes its report (timings are
never asserted: only that the script runs, writes the table and the raw numbers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_quick_writes_report(tmp_path: Path) -> None:
    out, raw = tmp_path / "bench.md", tmp_path / "bench.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "saliency_bench.py"),
            "--quick",
            "--out",
            str(out),
            "--json",
            str(raw),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    for heading in ("# Saliency benchmarks", "## Machine and versions", "## Targets", "## Results", "## GPU"):
        assert heading in text
    for fw in ("torch", "tf"):
        assert f"### {fw} / lenet" in text
    assert "| B | case | rows | median s | rows/s |" in text
    assert "xaikit SmInt" in text and "sequential loop" in text and "captum NoiseTunnel(IG) chunked" in text
    assert "TF chunk-step traces:" in text
    data = json.loads(raw.read_text())
    names = {c["name"] for c in data["cases"]}
    assert any(n.startswith("bound chunk=") for n in names)
    assert all(len(c["times_s"]) >= 1 and c["median_s"] > 0 for c in data["cases"])
    assert (
        data["facts"]["tf/lenet"]["traces_after_warmup"] == data["facts"]["tf/lenet"]["traces_after_memory"]
    )
