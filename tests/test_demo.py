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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "xaikit", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threads", "0"], "argument --threads: expected an int >= 1; got 0"),
        (["--framework", "tf", "--threads", "-1"], "argument --threads: expected an int >= 1; got -1"),
        (["--threads", "two"], "argument --threads: expected an int >= 1; got 'two'"),
        (["--epochs", "0"], "argument --epochs: expected an int >= 1; got 0"),
        (["--seed", "-1"], "argument --seed: expected an int >= 0; got -1"),
        (["--out", "/proc/xaikit-demo"], "argument --out: '/proc/xaikit-demo' is not writable ("),
        (["--out", "{file}/sub"], "argument --out: '{file}/sub' is not writable (Not a directory)"),
        (["--out", "{file}"], "argument --out: '{file}' is not writable (an existing file, not a folder)"),
    ],
)  # fmt: skip
def test_cli_bad_option_is_one_line_and_status_2(args, message, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    args = [a.format(file=a_file) for a in args]
    # imports of torch / tensorflow are refused: the options are checked before any framework loads
    guard = "import sys; sys.modules.update(torch=None, tensorflow=None, keras=None); "
    code = guard + "from xaikit.cli import main; raise SystemExit(main(sys.argv[1:]))"
    res = subprocess.run(
        [sys.executable, "-c", code, "demo", *args],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("xaikit: error: " + message.format(file=a_file)), lines[0]
    assert lines[0].endswith("(see 'xaikit demo --help')")


def test_cli_errors_in_process(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--epochs", "0", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        "xaikit: error: argument --epochs: expected an int >= 1; got 0 (see 'xaikit demo --help')\n"
    )


def test_cli_version():
    import xaikit

    res = _cli("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"xaikit {xaikit.__version__}\n"


def test_run_demo_rejects_bad_settings(tmp_path):
    from xaikit.demo import run_demo
    from xaikit.errors import XaikitValueError

    with pytest.raises(XaikitValueError, match="epochs must be an int >= 1; got int 0"):
        run_demo(epochs=0, out=tmp_path)
    with pytest.raises(XaikitValueError, match="threads must be None or an int >= 1; got int 0"):
        run_demo(threads=0, out=tmp_path)
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(XaikitValueError, match="out must be a folder that can be created and written to"):
        run_demo(out=a_file / "sub")


def test_native_notices_filtered_keeps_python_output(monkeypatch):
    import os

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    script = (
        "import os, sys\n"
        "from xaikit.cli import _native_notices_filtered\n"
        "with _native_notices_filtered():\n"
        "    os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n')\n"
        "    os.write(2, b'I0000 00:00:1795439478.035501    6675 port.cc:153] oneDNN custom operations are on\\n')\n"
        "    os.write(2, b'E0000 00:00:1795439482.814993    6675 cuda_platform.cc:52] failed call to cuInit\\n')\n"
        "    os.write(2, b'F0000 00:00:1795439482.814993    6675 x.cc:1] fatal stays\\n')\n"
        "    print('python stays', file=sys.stderr)\n"
        "    raise RuntimeError('traceback stays')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False, env=os.environ
    )
    assert res.returncode == 1
    assert "absl" not in res.stderr and "oneDNN" not in res.stderr and "cuInit" not in res.stderr
    for kept in ("fatal stays", "python stays", "RuntimeError: traceback stays"):
        assert kept in res.stderr


def documented_files() -> tuple[list[str], list[str]]:
    """docs/getting_started.md's list of what the default ``xaikit demo`` writes: the file names of
    its table ("What `runs/demo/` holds afterwards") and those of the sample output's "wrote N
    files" block."""
    import re

    text = (ROOT / "docs" / "getting_started.md").read_text(encoding="utf-8")
    table = text.split("What `runs/demo/` holds afterwards", 1)[1].split("\n\n", 2)[1]
    names = [m for line in table.splitlines() for m in re.findall(r"^\| `([^`]+)` \|", line)]
    block = re.search(r"wrote (\d+) files to runs/demo:\n((?:  \S+\n)+)", text)
    assert block is not None, "the sample output's file list"
    written = block.group(2).split()
    assert int(block.group(1)) == len(written)
    return names, written


def assert_documented_files(files: list[str], saliency_epochs: list[int], last: int) -> None:
    """The files of a demo run, mapped to the default settings (Saliency at epochs 1, 4 and 7 of
    7), are exactly the files the getting-started page lists, in its table and in its sample
    output, in the demo's order."""
    import re

    from xaikit.demo import DEFAULTS

    epochs = DEFAULTS["epochs"]
    default_saliency = list(range(1, epochs + 1, DEFAULTS["saliency_every"]))
    expected: list[str] = []
    for name in files:
        found = re.search(r"_epoch_(\d+)\.", name)
        if found is None:
            expected.append(name)
        elif name.startswith("saliency_") and int(found.group(1)) in saliency_epochs:
            if int(found.group(1)) == saliency_epochs[0]:  # one per Saliency epoch of the default run
                expected += [
                    name.replace(f"_epoch_{found.group(1)}.", f"_epoch_{e}.") for e in default_saliency
                ]
        else:
            assert int(found.group(1)) == last, name  # the trackers draw once, at the end
            expected.append(name.replace(f"_epoch_{last}.", f"_epoch_{epochs}."))
    expected = sorted(set(expected) - {"report.html"}) + ["report.html"]  # the demo's order
    names, written = documented_files()
    assert written == expected
    assert sorted(names) == sorted(expected), (
        sorted(set(expected) - set(names)),
        sorted(set(names) - set(expected)),
    )


def test_documented_files_are_read_from_the_page():
    names, written = documented_files()
    assert len(names) == len(written) > 10 and "report.html" in names and "evaluation/compare.png" in names


# chance on the 5 shape classes is 0.2 and ln 5 = 1.609 nats. Measured with these settings (seed 1,
# 3 epochs of 3000 images, 128 evaluation images): torch accuracy 0.406 / ce 1.35, Keras 0.656 / 0.77
# (2 epochs of 256 images stay at chance: the loss plateaus for the first ~100 steps).
DEMO_FLOOR = {"accuracy": 0.3, "ce": 1.5}


# A Grad-CAM map with no positive evidence for its class at the layer is exactly zero; the
# demo's young LeNet has a few, and says so once (DegenerateMapWarning): shown, not an error.
@pytest.mark.slow
@pytest.mark.filterwarnings("default::xaikit.errors.DegenerateMapWarning")
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
        "ce_by_index_train_epoch_3.json",
        "ce_by_index_train_epoch_3.png",
        "ce_by_label_train_epoch_3.json",
        "ce_by_label_train_epoch_3.png",
        "evaluation/compare.json",
        "evaluation/compare.png",
        "evaluation/compare_agreement.png",
        "evaluation/deletion.json",
        "evaluation/randomization.json",
        "evaluation/randomization.png",
        "saliency_eval_epoch_1.npz",
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_3.npz",
        "saliency_eval_epoch_3.png",
        "summary.json",
        "report.html",
    ]
    assert result["report"] == str(out / "report.html") and (out / "report.html").stat().st_size > 10_000
    assert_documented_files(result["files"], saliency_epochs=[1, 3], last=3)
    for name in (n for n in result["files"] if n.endswith(".png")):
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


@pytest.mark.slow
def test_cli_tf_demo_output_has_no_native_notices(tmp_path, monkeypatch):
    import os

    if "tf" not in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf"):
        pytest.skip("this run does not test tf (XAIKIT_TEST_BACKENDS)")

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    cmd = [sys.executable, "-m", "xaikit", "demo", "--framework", "tf", "--epochs", "1"]
    cmd += ["--n-train", "64", "--n-eval", "32", "--out", str(tmp_path)]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=os.environ)
    assert res.returncode == 0, res.stderr[-2000:]
    for noise in ("absl::InitializeLog", "oneDNN", "cuInit", "cuda drivers", "Unable to register"):
        assert noise not in res.stdout + res.stderr
    assert "eval accuracy" in res.stdout
