"""``xaikit explain``: a folder of PNGs with a factory, a .npy with a TorchScript file, resume, grids,
and bad options (one line, status 2)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from xaikit.cli import main  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from dataset_models import images, tiny_cnn  # noqa: E402


def test_explain_folder_and_npy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(folder / f"{i:02d}.png")
    out = tmp_path / "f.zarr"
    args = [
        "explain",
        "--model",
        "dataset_models:tiny_cnn",
        "--data",
        str(folder),
        "--out",
        str(out),
        "--shard-size",
        "2",
    ]
    assert (
        main([*args, "--method", "smoothgrad", "-o", "nsamples=2", "--batch-size", "2", "--grid-size", "3"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 samples in 3 shards, all explained now; attributions (6, 8, 8, 3)" in printed
    for name in ("first", "most_confident", "least_confident"):
        assert (out / "grids" / f"{name}.png").stat().st_size > 1000
    res = xk.xai.DatasetExplanation.open(out)
    assert list(res.table["file"]) == [f"{i:02d}.png" for i in range(6)]
    assert res.manifest["options"] == {"max_batch": 128, "nsamples": 2}
    # the same images, channel-first in memory: the same bits (HWC files are moved for the CNN)
    direct = xk.xai.explain_dataset(
        tiny_cnn(), pixels.astype(np.float32) / 255, method="smoothgrad", out=tmp_path / "d.zarr", batch_size=2, shard_size=2,
        progress=False, nsamples=2,
    )  # fmt: skip
    np.testing.assert_array_equal(res.attributions[:], direct.attributions[:])
    # a second run resumes: nothing left to do, and it says so; another method is refused with status 2
    assert (
        main([*args, "--method", "smoothgrad", "-o", "nsamples=2", "--batch-size", "2", "--grid-size", "0"])
        == 0
    )
    printed = capsys.readouterr()
    assert "6 samples in 3 shards: 3 kept from an earlier run, 0 explained now" in printed.out
    assert "3 of 3 shards (6 of 6 rows) already committed, kept; nothing to do" in printed.err
    assert main([*args, "--method", "vanilla", "--batch-size", "2"]) == 2
    assert 'method: stored "smoothgrad", now "vanilla"' in capsys.readouterr().err
    assert main([*args, "--method", "vanilla", "--batch-size", "2", "--no-resume", "--grid-size", "0"]) == 0

    x = images(5)
    np.save(tmp_path / "x.npy", x)
    path = tmp_path / "net.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(tiny_cnn(), torch.zeros(1, 3, 8, 8)).save(str(path))
    out2 = tmp_path / "n.zarr"
    cmd = ["explain", "--model", str(path), "--data", str(tmp_path / "x.npy"), "--out", str(out2)]
    assert main([*cmd, "--method", "vanilla", "--grid-size", "2"]) == 0
    ref = xk.xai.explain(tiny_cnn(), x, method="vanilla", seed=0, max_batch=128)
    np.testing.assert_array_equal(xk.xai.DatasetExplanation.open(out2).attributions[:], ref)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--data", "x.npy"], "argument --data: expected an existing .npy file"),
        (["--data", "/nowhere", "-o", "nsamples"], "argument --option: expected KEY=VALUE"),
        (["--data", "/nowhere"], "no such folder"),
        (["--data", "/nowhere", "--workers", "0"], "argument --workers: expected an int >= 1"),
        (["--data", "/nowhere", "-o", "seed=3"], "seed is an option of its own here (--seed)"),
    ],
)
def test_explain_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["explain", "--model", "dataset_models:tiny_cnn", "--out", str(tmp_path / "o.zarr"), *extra]
    try:
        status = main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("xaikit: error:")


# ---- as a newcomer meets it ---------------------------------------------------------------------
def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``'s status (a SystemExit's code too), stdout and stderr."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    printed = capsys.readouterr()
    return status, printed.out, printed.err


def _folder(root: Path, n: int = 6, seed: int = 0, gray: bool = False) -> list[Path]:
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    shape = (n, 8, 8) if gray else (n, 8, 8, 3)
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    paths = [root / f"{i:02d}.png" for i in range(n)]
    for path, p in zip(paths, pixels):
        Image.fromarray(p).save(path)
    return paths


def _explain(data: Path, out: Path, *extra: str) -> list[str]:
    return ["explain", "--model", "dataset_models:tiny_cnn", "--data", str(data), "--out", str(out), *extra]


def test_a_failed_run_does_not_block_the_corrected_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _folder(tmp_path / "imgs")
    out = tmp_path / "c.zarr"
    status, _, err = _run(_explain(tmp_path / "imgs", out, "--method", "gradcam", "-o", "layer=nope"), capsys)
    assert status == 2
    assert err.startswith("xaikit: error: argument -o layer=nope: layer 'nope' is not a module of the model")
    status, printed, err = _run(
        _explain(tmp_path / "imgs", out, "--method", "gradcam", "--grid-size", "0"), capsys
    )
    assert status == 0, err
    assert "6 samples in 1 shard, all explained now" in printed
    # and a model that cannot take the data (grayscale files for an RGB CNN) writes nothing
    _folder(tmp_path / "gray", gray=True)
    status, _, err = _run(_explain(tmp_path / "gray", tmp_path / "g.zarr", "--method", "vanilla"), capsys)
    assert status == 2 and err == (
        "xaikit: error: argument --data: the images have 1 channel, the model expects 3: pass --channels 3 to "
        f"read every image as RGB; in dataset sample 0, file {str(tmp_path / 'gray' / '00.png')!r}, the first "
        "sample read\n"
    )
    assert not (tmp_path / "g.zarr").exists()  # not even the folder the --out check made
    # nor does a class the model does not have (checked on the first sample)
    status, _, err = _run(_explain(tmp_path / "imgs", tmp_path / "k.zarr", "--target", "class:99"), capsys)
    assert status == 2 and "target classes must lie in [0, " in err and "the first sample read" in err
    assert not (tmp_path / "k.zarr").exists()
    status, printed, err = _run(
        _explain(tmp_path / "gray", tmp_path / "g.zarr", "--method", "vanilla", "--channels", "3"), capsys
    )
    assert status == 0, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "smoothgrad", "-o", "nsamples=x"], "argument --option: nsamples must be an int >= 1; got str 'x'"),
        (["--method", "smoothgrad", "-o", "nsampels=3"], "argument --option: --method smoothgrad got unknown option(s) ['nsampels']; its options are nsamples,"),
        (["--method", "gradcam", "-o", "raw=true"], "argument --option: raw=True (a method's full result: a CAM at its layer's resolution, XRAI's regions, LIME's fit) is not stored"),
        (["--method", "nope"], "argument --method: method must be one of 'vanilla',"),
        (["--classes", "{tmp}/none.txt"], "argument --classes: cannot read the class names file '{tmp}/none.txt'"),
        (["--data", "{tmp}/x.npy", "--resize", "8", "8"], "argument --data: --resize is for a folder or glob of image files; got memmap"),
        (["--resize", "8", "0"], "argument --resize: expected an int >= 1; got 0"),
        (["--channels", "2"], "argument --channels: invalid choice: 2"),
        (["--out", "/proc/xaikit-explain.zarr"], "argument --out: '/proc/xaikit-explain.zarr' is not writable (No such file or directory)"),
        (["--out", "{tmp}/a_file"], "argument --out: '{tmp}/a_file' is not writable (an existing file, not a folder)"),
        (["--out", "{tmp}/a_file/o.zarr"], "argument --out: '{tmp}/a_file/o.zarr' is not writable (Not a directory)"),
    ],
)  # fmt: skip
def test_options_checked_before_any_framework_loads(tmp_path: Path, extra: list[str], message: str) -> None:
    """One line, status 2, and no framework imported: torch, tensorflow and keras are made
    unimportable, so a check made after the model loads would fail otherwise."""
    import subprocess

    _folder(tmp_path / "imgs", 2)
    np.save(tmp_path / "x.npy", images(2))
    (tmp_path / "a_file").write_text("not a folder")
    extra = [e.format(tmp=tmp_path) for e in extra]
    argv = _explain(tmp_path / "imgs", tmp_path / "o.zarr", "--method", "vanilla")
    for flag in ("--data", "--out", "--method"):
        if flag in extra:
            i = argv.index(flag)
            del argv[i : i + 2]
    guard = "import sys; sys.modules.update(torch=None, tensorflow=None, keras=None); "
    code = guard + "from xaikit.cli import main; raise SystemExit(main(sys.argv[1:]))"
    env = {
        **__import__("os").environ,
        "PYTHONPATH": f"{Path(xk.__file__).parent.parent}:{Path(__file__).parent}",
    }
    res = subprocess.run(
        [sys.executable, "-c", code, *argv, *extra], capture_output=True, text=True, check=False, timeout=120, env=env
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("xaikit: error: " + message.format(tmp=tmp_path)), res.stderr
    assert res.stderr.rstrip().endswith("(see 'xaikit explain --help')")
    assert not (tmp_path / "o.zarr").exists() or "--out" in extra


def test_messages_name_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    _folder(tmp_path / "imgs")
    out = tmp_path / "s.zarr"
    assert _run(_explain(tmp_path / "imgs", out, "--method", "vanilla", "--grid-size", "0"), capsys)[0] == 0
    status, _, err = _run(
        _explain(tmp_path / "imgs", out, "--method", "smoothgrad", "-o", "nsamples=2"), capsys
    )
    assert status == 2
    assert err == (
        f"xaikit: error: argument --out: the store {str(out)!r} was written with other settings (method: stored "
        '"vanilla", now "smoothgrad"; options: stored {"max_batch": 128}, now {"max_batch": 128, "nsamples": 2}); '
        "pass another --out, or --no-resume to overwrite it\n"
    )
    Image.fromarray(np.zeros((10, 8, 3), np.uint8)).save(tmp_path / "imgs" / "06.png")
    status, _, err = _run(_explain(tmp_path / "imgs", tmp_path / "r.zarr", "--method", "vanilla"), capsys)
    assert status == 2 and err == (
        f"xaikit: error: argument --data: the images have different sizes: {str(tmp_path / 'imgs' / '00.png')!r} "
        f"is 8x8 and {str(tmp_path / 'imgs' / '06.png')!r} is 10x8 (height x width); pass --resize H W to resize "
        "every image as it is read\n"
    )
    status, _, err = _run(
        _explain(tmp_path / "imgs", tmp_path / "r.zarr", "--method", "vanilla", "--resize", "8", "8"), capsys
    )
    assert status == 0, err
    for python_name in ("resume=False", "out=", "skip_bad", "resize=", "channels=", "model_or_factory"):
        assert python_name not in err


def test_unreadable_files_stop_or_are_skipped_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import pandas as pd

    paths = _folder(tmp_path / "imgs")
    data = paths[3].read_bytes()
    paths[3].write_bytes(data[: len(data) // 2])  # a truncated PNG
    out = tmp_path / "t.zarr"
    argv = _explain(tmp_path / "imgs", out, "--method", "vanilla", "--grid-size", "2", "--shard-size", "4")
    status, _, err = _run(argv, capsys)
    assert status == 2 and err == (
        f"xaikit: error: argument --data: cannot read the image file {str(paths[3])!r} (OSError: image file is "
        "truncated); fix or remove it, or pass --skip-bad to skip unreadable files (the store lists them in "
        "skipped.json)\n"
    )
    status, printed, err = _run([*argv, "--skip-bad"], capsys)
    assert status == 0, err
    assert printed.splitlines()[1:] == [
        f"xaikit explain: 6 samples (1 skipped) in 2 shards, all explained now; attributions (6, 8, 8, 3) in {out}/attributions",
        f"xaikit explain: skipped 1 unreadable file (listed in {out}/skipped.json):",
        "  #3 03.png: OSError: image file is truncated",
        "xaikit explain: no degenerate maps (map_status empty for all 5)",
        f"xaikit explain: table of 5 samples: {out}/table.csv",
        f"xaikit explain: grids: {out}/grids",
        f"  {out}/grids/first.png",
        f"  {out}/grids/most_confident.png",
        f"  {out}/grids/least_confident.png",
        f"next: xaikit analyze {out} (strategy clusters; add --model and --data for concepts)",
        f"      xaikit report {out}",
    ]
    assert json.loads((out / "skipped.json").read_text())["skipped"] == [
        {"index": 3, "file": "03.png", "error": "OSError: image file is truncated"}
    ]
    table = pd.read_csv(out / "table.csv", keep_default_na=False)
    assert list(table.columns) == ["index", "file", "label", "prediction", "score", "delta", "map_status"]
    assert table["index"].tolist() == [0, 1, 2, 4, 5] and table["file"].tolist() == [
        f"0{i}.png" for i in (0, 1, 2, 4, 5)
    ]
    res = xk.xai.DatasetExplanation.open(out)
    np.testing.assert_array_equal(table["prediction"], res.table["prediction"])
    assert np.isnan(res.attributions[3]).all()


def test_classes_in_the_table_and_report_of_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    import pandas as pd

    _folder(tmp_path / "imgs")
    names = ["circle", "square", "triangle", "star", "cross"]
    (tmp_path / "classes.txt").write_text("\n".join(names) + "\n")
    (tmp_path / "three.json").write_text('["a", "b", "c"]')
    out = tmp_path / "n.zarr"
    argv = _explain(tmp_path / "imgs", out, "--method", "gradcam", "--grid-size", "2")
    status, _, err = _run([*argv, "--classes", str(tmp_path / "three.json")], capsys)
    assert status == 2 and err == (
        "xaikit: error: argument --classes: 3 class names for a model with 5 outputs; give one name per output\n"
    )
    status, _, err = _run([*argv, "--classes", str(tmp_path / "classes.txt")], capsys)
    assert status == 0, err
    table = pd.read_csv(out / "table.csv", keep_default_na=False)
    assert list(table.columns) == [
        "index", "file", "label", "label_name", "prediction", "prediction_name", "score", "delta",
        "map_status",
    ]  # fmt: skip
    assert table["prediction_name"].tolist() == [names[p] for p in table["prediction"]]
    assert set(table["label_name"]) == {""}  # files have no labels
    # `xaikit report STORE` works on the store folder itself: the page is written in it and
    # links its grids
    res = subprocess.run(
        [sys.executable, "-m", "xaikit", "report", str(out)], capture_output=True, text=True, check=False,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(xk.__file__).parent.parent)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"xaikit report: wrote {out / 'report.html'}"
    page = (out / "report.html").read_text()
    for name in ("first", "most_confident", "least_confident"):
        assert f"grids/{name}.png" in page


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--out", "/proc/xaikit-demo"], "argument --out: '/proc/xaikit-demo' is not writable (No such file or directory)"),
        (["report", "{tmp}", "--out", "/proc/xaikit/r.html"], "argument --out: '/proc/xaikit/r.html' is not writable ('/proc/xaikit': No such file or directory)"),
        (["report", "{tmp}", "--out", "{tmp}/a_file/r.html"], "argument --out: '{tmp}/a_file/r.html' is not writable ('{tmp}/a_file': an existing file, not a folder)"),
        (["report", "/proc/self"], "argument --out: '/proc/self/report.html' is not writable ('/proc/self': "),
    ],
)  # fmt: skip
def test_read_only_out_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Tests run as root, which ignores permission bits: /proc (where even root cannot create a
    file) and a file in place of a folder stand for a read-only place."""
    (tmp_path / "a_file").write_text("not a folder")
    status, printed, err = _run([a.format(tmp=tmp_path) for a in argv], capsys)
    assert status == 2 and printed == "" and len(err.splitlines()) == 1, err
    assert err.startswith("xaikit: error: " + message.format(tmp=tmp_path)), err
    assert "Traceback" not in err


def test_summary_counts_degenerate_maps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table with a ``map_status`` column (""=ok): the summary counts the degenerate maps."""
    from xaikit.cli import _explain_summary

    res = xk.xai.explain_dataset(
        tiny_cnn(), images(4), method="vanilla", out=tmp_path / "d.zarr", progress=False
    )
    table = res.table.assign(map_status=["", "zero", "constant", "zero"])
    _explain_summary(str(tmp_path / "d.zarr"), res, table, tmp_path / "d.zarr" / "table.csv", [])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "xaikit explain: 3 of 4 maps are degenerate (map_status: 1 constant, 2 zero)"
    assert lines[-1] == f"      xaikit report {tmp_path / 'd.zarr'}"
    _explain_summary(str(tmp_path / "d.zarr"), res, table.assign(map_status=""), "t.csv", [])
    assert "no degenerate maps (map_status empty for all 4)" in capsys.readouterr().out
