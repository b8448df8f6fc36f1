"""The main job: ``xaikit demo`` (cli parsing, no framework at import, end-to-end runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xaikit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_cli_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--framework", "--epochs", "--seed", "--out"):
        assert option in out
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--framework", "jax"])
    assert exc.value.code == 2
    assert "invalid choice: 'jax'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


def test_demo_rejects_bad_settings(tmp_path, capsys):
    assert main(["demo", "--epochs", "0", "--out", str(tmp_path)]) == 2
    assert "epochs must be an int >= 1; got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_end_to_end(framework, tmp_path):
    from xaikit.demo import run_demo

    out = tmp_path / "demo"
    result = run_demo(
        framework=framework,
        epochs=2,
        seed=1,
        out=out,
        n_train=256,
        n_eval=64,
        log_steps=None,
        saliency_every=1,
    )
    assert result["files"] == [
        "ce_by_index_train_epoch_2.png",
        "ce_by_label_train_epoch_2.png",
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_2.png",
        "summary.json",
    ]
    for name in result["files"]:
        assert (out / name).stat().st_size > 300
    summary = json.loads((out / "summary.json").read_text())
    assert summary["framework"] == framework and summary["seed"] == 1
    assert summary["settings"]["saliency_epochs"] == [1, 2]
    assert 0.0 <= summary["final_metrics"]["eval"]["accuracy"] <= 1.0
    assert summary["final_metrics"]["eval"]["ce"] > 0
    assert summary["time_sec"] > 0


@pytest.mark.slow
def test_python_m_xaikit_demo(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "xaikit", "demo", "--epochs", "1", "--n-train", "128", "--n-eval", "32"]
    res = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "xaikit-Eval: step: 4; epoch: 1;" in res.stdout  # 128 images in batches of 32
    assert "eval accuracy" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["epochs"] == 1 and summary["settings"]["n_train"] == 128
