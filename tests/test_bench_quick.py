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
            # one torch / TF thread and one timed round: a test shares the CPU with other workers,
            # where intra-op threads oversubscribe it (10x slower); a round checks what two do
            "--threads",
            "1",
            "--reps",
            "1",
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


@pytest.mark.slow
def test_methods_bench_quick_writes_section(tmp_path: Path) -> None:
    out, raw = tmp_path / "bench.md", tmp_path / "methods.json"
    out.write_text("# Saliency benchmarks\n\nkept text\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    # one torch thread: a test shares the CPU with other workers, where torch's intra-op threads
    # oversubscribe it (a ResNet-18 call measured 20x slower with two)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "methods_bench.py"), "--quick", "--threads", "1"]
    cmd += ["--out", str(out)]

    def run(*extra: str) -> str:
        proc = subprocess.run([*cmd, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
        text = out.read_text()
        assert text.startswith("# Saliency benchmarks\n\nkept text\n")
        assert text.count("<!-- methods:start -->") == 1 and text.count("<!-- methods:end -->") == 1
        assert "## Explanation methods: CAM, occlusion, RISE (issues 14 and 26)" in text
        return text

    text = run("--json", str(raw))
    for heading in ("### Grad-CAM family", "### Score-CAM", "### RISE", "### Occlusion", "### Targets"):
        assert heading in text
    assert "bound: forward + backward to layer4" in text and "reference RISE N=" in text
    data = json.loads(raw.read_text())
    assert data["quick"] is True
    assert {ln["case"] for ln in data["lines"]} == {"cam", "scorecam", "rise", "rise-memory", "occlusion"}
    assert all(len(ln["times_s"]) >= 1 and ln["median_s"] > 0 for ln in data["lines"])
    assert (
        data["facts"]["rise_same_masks"]["max_abs_diff"] < 1e-3 * data["facts"]["rise_same_masks"]["max_abs"]
    )
    assert max(data["facts"]["occlusion_max_abs_diff"].values()) < 1e-3
    text = run("--cases", "occlusion")  # a second run replaces the section
    assert "### Occlusion" in text and "### RISE" not in text


@pytest.mark.slow
def test_agnostic_bench_quick_same_evaluations(tmp_path: Path) -> None:
    """The model-agnostic benchmark (issue 29) runs, writes its section, and gives xaikit and captum
    the same number of model rows (counted by a hook on the model), with agreeing ablations."""
    out, raw = tmp_path / "bench.md", tmp_path / "agnostic.json"
    out.write_text("# Saliency benchmarks\n\nkept text\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "agnostic_bench.py"), "--quick", "--threads", "1"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--json", str(raw)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    assert text.startswith("# Saliency benchmarks\n\nkept text\n")
    assert text.count("<!-- agnostic:start -->") == 1 and "## Model-agnostic methods (issue 29)" in text
    assert "Ratios are on the **CPU time of the calling thread**" in text
    data = json.loads(raw.read_text())
    lines, B = data["lines"], data["settings"]["batch"]
    for m in ("feature_ablation", "shapley_sampling", "kernel_shap", "lime"):
        ours = next(ln for ln in lines if ln["group"] == "xaikit" and ln["method"] == m)
        theirs = next(ln for ln in lines if ln["group"] == "peer" and ln["method"] == m and ln.get("best"))
        extra = B if m in ("kernel_shap", "lime") else 0  # captum's one pass of the batch first
        assert set(ours["model_rows"]) == {ours["rows"] + 1}, m  # + the target check's single row
        assert set(theirs["model_rows"]) == {theirs["rows"]} == {ours["rows"] + extra}, m
        assert len(ours["cpu_s"]) == len(ours["times_s"]) == data["settings"]["reps"]
    assert {ln["method"] for ln in lines if ln["group"] == "memory"} == {"kernel_shap", "lime"}
    facts = data["meta"]["facts"]
    assert facts["ablation_max_abs_diff"] < 1e-4 * max(1.0, facts["ablation_max_abs"])
