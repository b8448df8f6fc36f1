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
