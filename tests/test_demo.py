"""The main job: ``xaikit demo`` (cli parsing, no framework at import, end-to-end runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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


# chance on the 5 shape classes is 0.2 and ln 5 = 1.609 nats. Measured with these settings (seed 1,
# 3 epochs of 3000 images, 128 evaluation images): torch accuracy 0.406 / ce 1.35, Keras 0.656 / 0.77
# (2 epochs of 256 images stay at chance: the loss plateaus for the first ~100 steps).
DEMO_FLOOR = {"accuracy": 0.3, "ce": 1.5}


@pytest.mark.slow
def test_demo_end_to_end(framework, tmp_path):
    from matplotlib.image import imread

    from xaikit.demo import run_demo

    out = tmp_path / "demo"
    result = run_demo(
        framework=framework,
        epochs=3,
        seed=1,
        out=out,
        n_train=3000,
        n_eval=128,
        log_steps=None,
        saliency_every=2,
    )
    assert result["files"] == [
        "ce_by_index_train_epoch_3.png",
        "ce_by_label_train_epoch_3.png",
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_3.png",
        "summary.json",
    ]
    for name in result["files"][:-1]:
        pixels = imread(out / name)  # a PNG that decodes, with a drawing on it
        assert pixels.ndim == 3 and min(pixels.shape[:2]) > 100, (name, pixels.shape)
        rgb = pixels[..., :3].reshape(-1, 3)
        assert len(np.unique(rgb, axis=0)) > 50 and rgb.std() > 0.05, f"{name} looks blank"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["framework"] == framework and summary["seed"] == 1
    assert summary["settings"]["saliency_epochs"] == [1, 3]
    final = summary["final_metrics"]["eval"]
    assert final == result["final_metrics"]["eval"]
    # a demo that does not learn stays at chance (0.2, ce 1.609)
    assert final["accuracy"] >= DEMO_FLOOR["accuracy"], final
    assert 0 < final["ce"] <= DEMO_FLOOR["ce"], final
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
