"""explain_dataset: values (== explain per batch, exact on a linear model), data adapters, and
durability: SIGKILL mid-run + resume is bit-equal to one uninterrupted run, a corrupted chunk is
redone, a store of other settings and a second writer are refused (a store whose run committed
nothing is started over); image files: unreadable ones named or skipped, sizes and channel
counts named per file, resize= and channels=; the method's options checked before the model is
built; class names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from tests.agnostic.fast_options import FAST  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.files import TEMP_PREFIX  # noqa: E402
from xaikit.xai import StoreLockedError  # noqa: E402
from xaikit.xai._engine.seeds import stream_seed  # noqa: E402
from xaikit.xai.registry import family, method_names  # noqa: E402

ALL_METHODS = method_names()

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dataset_models import SlowData, images, tiny_cnn  # noqa: E402

OPTS = {"nsamples": 3}


def _records(out: Path) -> dict[int, dict]:
    """The committed shard records (not the temporary file of one being written)."""
    return {int(p.stem): json.loads(p.read_text()) for p in (out / "shards").glob("[0-9]*.json")}


def _reference(tmp_path: Path, n: int = 24, every: int = 8, method: str = "smoothgrad") -> np.ndarray:
    res = xk.xai.explain_dataset(
        tiny_cnn(), SlowData(n, every, 0.0), method=method, out=tmp_path / "ref.zarr", batch_size=4,
        shard_size=every, progress=False, **OPTS,
    )  # fmt: skip
    return np.asarray(res.attributions[:])


def test_values_equal_explain_per_batch(tmp_path: Path) -> None:
    model = tiny_cnn()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = images(10), np.arange(10) % 3
    res = xk.xai.explain_dataset(
        model, x, method="smoothgrad", out=tmp_path / "a.zarr", batch_size=3, shard_size=6, labels=y,
        progress=False, seed=7, **OPTS,
    )  # fmt: skip
    assert res.complete and res.committed == [0, 1]
    attr = res.attributions[:]
    # shard k, batch j: explain of those rows with the seed derived from (seed, k, j)
    for k, (s0, s1) in enumerate([(0, 6), (6, 10)]):
        for j, b0 in enumerate(range(s0, s1, 3)):
            b1 = min(b0 + 3, s1)
            ref = xk.xai.explain(
                model, x[b0:b1], method="smoothgrad", seed=stream_seed(7, k, j), max_batch=128, **OPTS
            )
            np.testing.assert_array_equal(attr[b0:b1], ref)
    table = res.table
    logits = model(torch.from_numpy(x)).detach().numpy()
    prob = np.exp(logits - logits.max(1, keepdims=True))
    prob /= prob.sum(1, keepdims=True)
    np.testing.assert_array_equal(table["index"], np.arange(10))
    np.testing.assert_array_equal(table["label"], y)
    np.testing.assert_array_equal(table["prediction"], logits.argmax(1))
    np.testing.assert_allclose(table["score"], prob.max(1), rtol=1e-5)
    assert table["delta"].isna().all() and (table["file"] == "").all()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # model unchanged
    m = res.manifest
    assert (m["length"], m["shard_size"], m["batch_size"], m["map_shape"]) == (10, 6, 3, [3, 8, 8])


def test_score_of_a_model_that_ends_in_a_softmax(tmp_path: Path) -> None:
    """A model that gives probabilities has them stored as they are (not put through a second
    softmax, which squeezes every score towards 1/classes); logits go through one softmax."""
    logits_model = tiny_cnn()
    prob_model = torch.nn.Sequential(tiny_cnn(), torch.nn.Softmax(dim=1))
    x = images(8)
    with torch.no_grad():  # the batches explain_dataset runs (another batch size may round otherwise)
        prob = np.concatenate([prob_model(torch.from_numpy(x[i : i + 4])).numpy() for i in (0, 4)])
    kw = {"method": "vanilla", "batch_size": 4, "progress": False}
    a = xk.xai.explain_dataset(prob_model, x, out=tmp_path / "p.zarr", **kw).table
    b = xk.xai.explain_dataset(logits_model, x, out=tmp_path / "l.zarr", **kw).table
    np.testing.assert_array_equal(a["prediction"], prob.argmax(1))
    # the model's own numbers: a second softmax would move them by ~0.1 (towards 1/classes);
    # float32 rounding of the same batches, if any, by a few units of 2^-24
    np.testing.assert_allclose(a["score"], prob.max(1), rtol=8 * 2.0**-24)
    np.testing.assert_allclose(b["score"], prob.max(1), rtol=1e-5)  # the softmax of the logits
    assert a["score"].min() > 0.3 and b["prediction"].tolist() == a["prediction"].tolist()


def test_linear_model_exact_and_delta(tmp_path: Path) -> None:
    """IG of a linear model from a zero baseline: exactly W[c] * x, completeness delta ~ 0."""
    model = torch.nn.Linear(6, 4)
    x = np.random.default_rng(1).random((9, 6), dtype=np.float32)
    res = xk.xai.explain_dataset(
        model, x, method="integrated", out=tmp_path / "ig.zarr", batch_size=4, progress=False,
        baseline="zeros", nsamples=8,
    )  # fmt: skip
    pred = res.table["prediction"].to_numpy()
    w = model.weight.detach().numpy()
    np.testing.assert_allclose(res.attributions[:], w[pred] * x, rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(res.table["delta"]) < 1e-4)
    # target="label": the labels' rows of W, not the predictions'
    y = (pred + 1) % 4
    lab = xk.xai.explain_dataset(
        model, x, method="vanilla", out=tmp_path / "lab.zarr", labels=y, target="label", progress=False
    )
    np.testing.assert_allclose(lab.attributions[:], w[y], rtol=1e-6)
    # one class number for every sample, as explain takes it: stored as Class(k)
    two = xk.xai.explain_dataset(
        model, x, method="vanilla", out=tmp_path / "two.zarr", target=2, progress=False
    )
    np.testing.assert_allclose(two.attributions[:], np.broadcast_to(w[2], x.shape), rtol=1e-6)
    assert isinstance(two.target, xk.targets.Class) and int(two.target.k) == 2
    # a class the model does not have is refused at the first sample, before the store is made
    for bad in (7, xk.targets.Class(-1)):
        with pytest.raises(XaikitValueError, match=r"must lie in \[0, 3\] .* in dataset sample 0, the first"):
            xk.xai.explain_dataset(
                model, x, method="vanilla", out=tmp_path / "bad.zarr", target=bad, progress=False
            )
        assert not (tmp_path / "bad.zarr").exists()


def test_adapters_agree(tmp_path: Path) -> None:
    """numpy, NumpyDataset, torch Dataset and DataLoader of the same samples: the same bits."""
    x, y = images(7), np.arange(7) % 5
    kw = {"method": "vanilla", "batch_size": 3, "progress": False}
    ref = xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "np.zarr", labels=y, **kw)
    ds = xk.dataset.NumpyDataset({"x": x, "y": y, "file": np.array([f"s{i}.png" for i in range(7)])})
    tds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(tds, batch_size=2, shuffle=False)
    for name, data in [("nds", ds), ("tds", tds), ("loader", loader)]:
        res = xk.xai.explain_dataset(tiny_cnn(), data, out=tmp_path / f"{name}.zarr", **kw)
        np.testing.assert_array_equal(res.attributions[:], ref.attributions[:])
        np.testing.assert_array_equal(res.table["label"], y)
    assert list(xk.xai.DatasetExplanation.open(tmp_path / "nds.zarr").table["file"]) == [
        f"s{i}.png" for i in range(7)
    ]


def test_image_folder(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    names = ["b.png", "a.png", "sub/c.png"]
    for name, p in zip(names, pixels):
        Image.fromarray(p).save(folder / name)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 3, 2))
    res = xk.xai.explain_dataset(
        model, str(folder), method="input_x_gradient", out=tmp_path / "f.zarr", progress=False
    )
    assert list(res.table["file"]) == ["a.png", "b.png", "sub/c.png"]
    x = pixels[[1, 0, 2]].astype(np.float32) / 255  # sorted: a, b, sub/c; read as (H, W, 3) in [0, 1]
    w = model[1].weight.detach().numpy().reshape(2, 8, 8, 3)
    np.testing.assert_allclose(res.attributions[:], w[res.table["prediction"]] * x, rtol=1e-5, atol=1e-7)
    Image.fromarray(pixels[0][:4]).save(folder / "d.png")  # 8 wide, 4 high
    with pytest.raises(
        XaikitValueError,
        match=r"different sizes: '.*a\.png' is 8x8 and '.*d\.png' is 4x8 \(height x width\); pass resize=\(H, W\)",
    ):
        xk.xai.explain_dataset(
            model, str(folder / "*.png"), method="vanilla", out=tmp_path / "g.zarr", progress=False
        )


def test_sigkill_resume_is_bit_equal(tmp_path: Path) -> None:
    """The driver killed with SIGKILL after 2 of 4 shards: a second writer is refused while it
    runs; the resumed run keeps the 2 committed shards, does the other 2, and matches one
    uninterrupted run bit for bit."""
    n, every = 24, 6
    out = tmp_path / "k.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    log = tmp_path / "driver.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "dataset_models.py"), str(out), str(n), str(every), "1.5"],
            env=env, stdout=sink, stderr=sink,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_records(out)) < 2 if (out / "shards").is_dir() else True:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the subprocess committed no 2 shards in 60 s"
            time.sleep(0.05)
        with pytest.raises(StoreLockedError, match=rf"pid {proc.pid}"):
            xk.xai.explain_dataset(tiny_cnn(), SlowData(n, every, 0.0), method="smoothgrad", out=out,
                                   batch_size=4, shard_size=every, progress=False, **OPTS)  # fmt: skip
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = _records(out)
    assert 2 <= len(before) < 4 and (out / ".lock").exists()  # a stale lock of a dead pid
    res = xk.xai.explain_dataset(tiny_cnn(), SlowData(n, every, 0.0), method="smoothgrad", out=out,
                                 batch_size=4, shard_size=every, progress=False, **OPTS)  # fmt: skip
    after = _records(out)
    assert sorted(after) == [0, 1, 2, 3] and res.complete
    for k, rec in before.items():  # committed shards were not redone
        assert after[k] == rec and rec["worker"].endswith(f":{proc.pid}")
    redone = [k for k in after if k not in before]
    assert res.resumed == sorted(before) and res.explained == sorted(redone)
    assert all(after[k]["worker"].endswith(f":{os.getpid()}") for k in redone)
    np.testing.assert_array_equal(res.attributions[:], _reference(tmp_path, n, every))
    assert not (out / ".lock").exists()


def test_corrupted_and_partial_chunks_are_redone(tmp_path: Path) -> None:
    n, every = 16, 4
    ref = _reference(tmp_path, n, every)
    out = tmp_path / "ref.zarr"
    before = _records(out)
    chunk1 = out / "attributions" / "c" / "1" / "0" / "0" / "0"
    data = bytearray(chunk1.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in shard 1's compressed maps
    chunk1.write_bytes(bytes(data))
    chunk2 = out / "attributions" / "c" / "2" / "0" / "0" / "0"
    chunk2.write_bytes(chunk2.read_bytes()[:10])  # shard 2: a partial chunk file
    (out / "score" / "c" / "3").unlink()  # shard 3: its scores missing
    res = xk.xai.explain_dataset(tiny_cnn(), SlowData(n, every, 0.0), method="smoothgrad", out=out,
                                 batch_size=4, shard_size=every, progress=False, **OPTS)  # fmt: skip
    after = _records(out)
    assert after[0] == before[0]
    assert all(after[k]["committed"] > before[k]["committed"] for k in (1, 2, 3))
    np.testing.assert_array_equal(res.attributions[:], ref)


def test_bad_sample_named_by_its_dataset_index_and_resumable(tmp_path: Path) -> None:
    """A NaN in sample 6 stops the run with an error that names the dataset's indices (not the
    batch's), keeps the shards committed before it, and a fixed run resumes from there."""
    x = images(8)
    bad = x.copy()
    bad[6, 0, 0, 0] = np.nan
    out = tmp_path / "nan.zarr"
    kw = {"method": "vanilla", "out": out, "batch_size": 2, "shard_size": 2, "progress": False}
    with pytest.raises(XaikitValueError, match=r"NaN.*dataset samples 6\.\.7 \(shard 3\)"):
        xk.xai.explain_dataset(tiny_cnn(), bad, **kw)
    assert sorted(_records(out)) == [0, 1, 2]
    res = xk.xai.explain_dataset(tiny_cnn(), x, **kw)
    assert res.resumed == [0, 1, 2] and res.explained == [3] and res.complete


def test_a_record_left_half_committed_is_not_a_commit(tmp_path: Path) -> None:
    """A writer killed between writing a shard's record and renaming it into place leaves the
    record under its temporary name: a rerun does that shard again (the temporary file is not
    read as a commit, nor does it trip the reading of the others)."""
    x = images(8)
    out = tmp_path / "tmp.zarr"
    kw = {"method": "vanilla", "out": out, "batch_size": 2, "shard_size": 4, "progress": False}
    first = xk.xai.explain_dataset(tiny_cnn(), x, **kw)
    record = out / "shards" / "1.json"
    record.rename(out / "shards" / f"{TEMP_PREFIX}0123456789ab.{record.name}")
    assert sorted(_records(out)) == [0]
    res = xk.xai.explain_dataset(tiny_cnn(), x, **kw)
    assert res.resumed == [0] and res.explained == [1] and res.complete
    np.testing.assert_array_equal(res.attributions[:], first.attributions[:])


def test_write_errors_name_the_store_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while a shard is written (here: the zarr write of shard 2 raising ENOSPC)
    stops the run with a XaikitWriteError (an OSError too) that names the store and says that a
    rerun goes on; the rerun keeps shards 0 and 1. A store under a file is refused likewise."""
    import errno

    import zarr

    x = images(8)
    out = tmp_path / "full.zarr"
    kw = {"method": "vanilla", "out": out, "batch_size": 2, "shard_size": 2, "progress": False}
    real = zarr.Array.__setitem__
    calls = {"n": 0}

    def full(self: object, key: object, value: object) -> None:
        if getattr(self, "basename", "") == "attributions":
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        real(self, key, value)  # type: ignore[arg-type]

    monkeypatch.setattr(zarr.Array, "__setitem__", full)
    with pytest.raises(
        xk.XaikitWriteError, match=r"cannot write '.*full\.zarr': No space left.*run again"
    ) as info:
        xk.xai.explain_dataset(tiny_cnn(), x, **kw)
    assert isinstance(info.value, OSError)
    assert sorted(_records(out)) == [0, 1]
    monkeypatch.undo()
    res = xk.xai.explain_dataset(tiny_cnn(), x, **kw)
    assert res.resumed == [0, 1] and res.explained == [2, 3] and res.complete
    (tmp_path / "a_file").write_text("")
    with pytest.raises(xk.XaikitWriteError, match=r"'.*a_file' is a file, not a folder"):
        xk.xai.explain_dataset(tiny_cnn(), x, **{**kw, "out": tmp_path / "a_file" / "x.zarr"})


def test_other_settings_refused(tmp_path: Path) -> None:
    x = images(8)
    out = tmp_path / "s.zarr"
    kw = {"out": out, "batch_size": 4, "progress": False}
    xk.xai.explain_dataset(tiny_cnn(), x, method="smoothgrad", nsamples=2, **kw)
    other = tiny_cnn()
    with torch.no_grad():
        other[0].bias[0] += 1e-3
    cases = [
        ({"method": "vanilla"}, x, tiny_cnn(), 'method: stored "smoothgrad", now "vanilla"'),
        ({"method": "smoothgrad", "nsamples": 3}, x, tiny_cnn(), "options: stored"),
        ({"method": "smoothgrad", "nsamples": 2}, x, other, "fingerprint: stored"),
        ({"method": "smoothgrad", "nsamples": 2}, x[:6], tiny_cnn(), "length: stored 8, now 6"),
        ({"method": "smoothgrad", "nsamples": 2, "seed": 1}, x, tiny_cnn(), "seed: stored 0, now 1"),
    ]
    for opts, data, model, message in cases:
        with pytest.raises(XaikitValueError, match=message):
            xk.xai.explain_dataset(model, data, **kw, **opts)
    res = xk.xai.explain_dataset(tiny_cnn(), x[:6], method="vanilla", resume=False, **kw)  # starts over
    assert res.manifest["length"] == 6 and res.attributions.shape == (6, 3, 8, 8) and res.complete
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(XaikitValueError, match="not an explain_dataset store"):
        xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "other", progress=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_stale_lock_taken_over_live_lock_refused(tmp_path: Path) -> None:
    import socket

    out = tmp_path / "l.zarr"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    res = xk.xai.explain_dataset(tiny_cnn(), images(4), method="vanilla", out=out, progress=False)
    assert res.complete and not (out / ".lock").exists()
    (out / ".lock").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(StoreLockedError, match=f"pid {os.getppid()}"):
        xk.xai.explain_dataset(tiny_cnn(), images(4), method="vanilla", out=out, progress=False)


def test_torchscript_file_and_factories(tmp_path: Path) -> None:
    x = images(5)
    ref = xk.xai.explain_dataset(tiny_cnn(), x, method="vanilla", out=tmp_path / "r.zarr", progress=False)
    path = tmp_path / "net.pt"
    with warnings.catch_warnings():  # torch 2.9+ calls TorchScript deprecated; users still have such files
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(tiny_cnn(), torch.zeros(1, 3, 8, 8)).save(str(path))
    kw = {"method": "vanilla", "progress": False}
    for i, spec in enumerate([str(path), tiny_cnn, "dataset_models:tiny_cnn"]):
        res = xk.xai.explain_dataset(spec, x, out=tmp_path / f"{i}.zarr", **kw)
        np.testing.assert_array_equal(res.attributions[:], ref.attributions[:])
    assert xk.xai.DatasetExplanation.open(tmp_path / "0.zarr").manifest["fingerprint"].startswith("sha256:")
    assert (
        xk.xai.DatasetExplanation.open(tmp_path / "1.zarr").manifest["fingerprint"]
        == ref.manifest["fingerprint"]
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"data": [np.zeros((3, 8, 8))]}, XaikitTypeError, "data: a list is not a dataset"),
        ({"data": {"x": 1}}, XaikitTypeError, "data must be a numpy array"),
        ({"data": np.zeros((0, 3, 8, 8))}, XaikitValueError, "non-empty batch"),
        ({"engine": "dask"}, XaikitValueError, "engine must be one of"),
        ({"method": "nope"}, XaikitValueError, "method must be one of"),
        ({"target": "truth"}, XaikitValueError, "target must be None"),
        ({"out": "s3://bucket/x.zarr"}, XaikitValueError, "out must be a folder"),
        ({"max_batch": "auto"}, XaikitValueError, "max_batch='auto'"),
        ({"batch_size": 0}, XaikitValueError, "batch_size"),
        ({"seed": None}, XaikitTypeError, "seed"),
        ({"model_or_factory": "nets.py"}, XaikitValueError, "model_or_factory: a str"),
        ({"model_or_factory": "missing_mod:f"}, XaikitValueError, "cannot import 'missing_mod:f'"),
        ({"model_or_factory": lambda: 3}, XaikitTypeError, "must return a torch or Keras model"),
        ({"model_or_factory": 3}, XaikitTypeError, "model_or_factory must be"),
        ({"data": "/no/such/dir"}, XaikitValueError, "no such folder"),
        ({"target": "label"}, XaikitValueError, "needs labels"),
    ],
)
def test_bad_inputs(tmp_path: Path, kwargs: dict, error: type, message: str) -> None:
    call = {
        "model_or_factory": tiny_cnn(),
        "data": images(2),
        "method": "vanilla",
        "out": tmp_path / "b.zarr",
    }
    call.update(kwargs)
    with pytest.raises(error, match=message):
        xk.xai.explain_dataset(**call, progress=False)
    with pytest.raises(XaikitValueError, match="not an explain_dataset store"):
        xk.xai.DatasetExplanation.open(tmp_path / "nothing")


def test_progress_lines_when_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.zarr"
    kw = {"method": "vanilla", "out": out, "batch_size": 2, "shard_size": 2}
    res = xk.xai.explain_dataset(tiny_cnn(), images(6), **kw)
    err = capsys.readouterr().err
    assert "explain_dataset: 6/6 rows (100%)" in err and "rows/s" in err and "resuming" not in err
    assert (res.resumed, res.explained) == ([], [0, 1, 2])
    # a resumed run says what it keeps and what it does; the handle says so too
    for k in (1, 2):
        (out / "shards" / f"{k}.json").unlink()
    res = xk.xai.explain_dataset(tiny_cnn(), images(6), **kw)
    err = capsys.readouterr().err
    assert f"resuming {str(out)!r}: 1 of 3 shards (2 of 6 rows) already committed, kept; 2 to do" in err
    assert (res.resumed, res.explained) == ([0], [1, 2]) and "6/6 rows" in err
    res = xk.xai.explain_dataset(tiny_cnn(), images(6), **kw)
    assert "3 of 3 shards (6 of 6 rows) already committed, kept; nothing to do" in capsys.readouterr().err
    assert (res.resumed, res.explained) == ([0, 1, 2], [])
    xk.xai.explain_dataset(tiny_cnn(), images(6), progress=False, **kw)
    assert capsys.readouterr().err == ""  # progress=False: silent
    assert (xk.xai.DatasetExplanation.open(out).resumed, xk.xai.DatasetExplanation.open(out).explained) == (
        [],
        [],
    )


def test_tf_data(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    x, y = images(6), np.arange(6) % 5
    kw = {"method": "vanilla", "batch_size": 4, "progress": False}
    ref = xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "np.zarr", labels=y, **kw)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    res = xk.xai.explain_dataset(tiny_cnn(), ds, out=tmp_path / "tf.zarr", **kw)
    np.testing.assert_array_equal(res.attributions[:], ref.attributions[:])
    np.testing.assert_array_equal(res.table["label"], y)
    with pytest.raises(XaikitValueError, match=r"gives batches.*unbatch\(\)"):
        xk.xai.explain_dataset(tiny_cnn(), ds.batch(2), out=tmp_path / "b.zarr", **kw)
    with pytest.raises(XaikitValueError, match="infinite cardinality"):
        xk.xai.explain_dataset(tiny_cnn(), ds.repeat(), out=tmp_path / "r.zarr", **kw)


#: small options per method (XRAI left out: ~10 s even at 8x8; it runs through the same path)
_SMALL = {
    "smoothgrad": {"nsamples": 2},
    "integrated": {"nsamples": 3},
    "smint": {"nsamples": 2, "nintegration": 3},
    "vargrad": {"nsamples": 2},
    "expected_gradients": {"nsamples": 2},
    "blur_ig": {"steps": 4},
    "guided_ig": {"steps": 4},
    "rise": {"nsamples": 8},
    **FAST,
}


@pytest.mark.parametrize("method", [m for m in ALL_METHODS if m != "xrai" and family(m) != "transformer"])
def test_every_method_equals_explain(tmp_path: Path, method: str) -> None:
    """Every method by name: the store holds explain's bits for the predicted classes (one shard,
    one batch: seed stream_seed(0, 0, 0)); a completeness delta exactly for the path methods."""
    model, x = tiny_cnn(), images(3)
    opts = _SMALL.get(method, {})
    res = xk.xai.explain_dataset(model, x, method=method, out=tmp_path / "m.zarr", progress=False, **opts)
    pred = model(torch.from_numpy(x)).argmax(1).numpy()
    ref = xk.xai.explain(
        model, x, target=pred, method=method, seed=stream_seed(0, 0, 0), max_batch=128, **opts
    )
    np.testing.assert_array_equal(res.attributions[:], ref)
    # the path methods and DeepLIFT/DeepLiftShap (SmInt has one only with magnitude=False)
    has_delta = method in (
        "integrated",
        "expected_gradients",
        "blur_ig",
        "guided_ig",
        "deeplift",
        "deepliftshap",
    )
    assert res.table["delta"].notna().all() == has_delta


def test_keras_model_and_file(tmp_path: Path) -> None:
    """A Keras model and its .keras file: the same bits, IG of a linear model exact; the file's
    fingerprint is its hash, the model's the hash of its weights."""
    keras = pytest.importorskip("keras")
    from xaikit.backend.serialized import fingerprint_of_file

    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    w, b = model.layers[0].get_weights()
    x = np.random.default_rng(2).random((7, 6), dtype=np.float32)
    kw = {"method": "integrated", "baseline": "zeros", "nsamples": 8, "batch_size": 3, "progress": False}
    res = xk.xai.explain_dataset(model, x, out=tmp_path / "k.zarr", **kw)
    pred = (x @ w + b).argmax(1)
    np.testing.assert_array_equal(res.table["prediction"], pred)
    np.testing.assert_allclose(res.attributions[:], w.T[pred] * x, rtol=1e-5, atol=1e-6)
    path = tmp_path / "m.keras"
    model.save(path)
    again = xk.xai.explain_dataset(str(path), x, out=tmp_path / "f.zarr", **kw)
    np.testing.assert_array_equal(again.attributions[:], res.attributions[:])
    assert again.manifest["fingerprint"] == fingerprint_of_file(path) != res.manifest["fingerprint"]


# ---- a run that failed, image files, options checked early, class names ------------------------------
def _pngs(folder: Path, pixels: np.ndarray, names: list[str] | None = None) -> list[Path]:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, p in enumerate(pixels):
        path = folder / (names[i] if names else f"{i:02d}.png")
        Image.fromarray(p).save(path)
        paths.append(path)
    return paths


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_store_without_a_committed_shard_is_started_over(tmp_path: Path) -> None:
    """A run that stopped before its first commit (here: a CAM layer the model lacks, found when
    the method runs) does not block the corrected run with other settings."""
    out = tmp_path / "c.zarr"
    with pytest.raises(XaikitValueError, match="layer 'nope' is not a module"):
        xk.xai.explain_dataset(tiny_cnn(), images(4), method="gradcam", out=out, progress=False, layer="nope")
    assert json.loads((out / "manifest.json").read_text())["options"]["layer"] == "nope"
    assert _records(out) == {}
    res = xk.xai.explain_dataset(tiny_cnn(), images(4), method="gradcam", out=out, progress=False)
    assert res.complete and res.manifest["options"] == {"max_batch": 128}
    ref = xk.xai.explain(tiny_cnn(), images(4), method="gradcam", seed=stream_seed(0, 0, 0), max_batch=128)
    np.testing.assert_array_equal(res.attributions[:], ref)
    # once a shard is committed, other settings are refused again
    with pytest.raises(XaikitValueError, match='method: stored "gradcam", now "vanilla"'):
        xk.xai.explain_dataset(tiny_cnn(), images(4), method="vanilla", out=out, progress=False)


def test_model_not_callable_on_the_data_writes_nothing(tmp_path: Path) -> None:
    """The model is called on the first sample before the store is created: a model that cannot
    take the data leaves no store, and the error names the sample."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(7, 2))
    out = tmp_path / "n.zarr"
    with pytest.raises(
        XaikitValueError, match=r"could not be called.*; in dataset sample 0, the first sample read"
    ):
        xk.xai.explain_dataset(model, images(3), method="vanilla", out=out, progress=False)
    assert not out.exists()


def test_unreadable_file_named_or_skipped(tmp_path: Path) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (7, 8, 8, 3), dtype=np.uint8)
    paths = _pngs(tmp_path / "imgs", pixels)
    _truncate(paths[3])
    (tmp_path / "imgs" / "07.png").write_bytes(b"not a png at all")  # not an image
    kw = {"method": "vanilla", "batch_size": 2, "shard_size": 4, "progress": False}
    with pytest.raises(XaikitValueError) as info:
        xk.xai.explain_dataset(tiny_cnn(), tmp_path / "imgs", out=tmp_path / "a.zarr", **kw)
    assert str(info.value).startswith(
        f"data: cannot read the image file {str(paths[3])!r} (OSError: image file is truncated"
    )
    assert "pass skip_bad=True to skip unreadable files" in str(info.value)
    res = xk.xai.explain_dataset(tiny_cnn(), tmp_path / "imgs", out=tmp_path / "a.zarr", skip_bad=True, **kw)
    assert [(s["index"], s["file"]) for s in res.skipped] == [(3, "03.png"), (7, "07.png")]
    assert "truncated" in res.skipped[0]["error"] and "cannot identify image file" in res.skipped[1]["error"]
    assert json.loads((tmp_path / "a.zarr" / "skipped.json").read_text()) == {"skipped": res.skipped}
    assert [
        r["skipped"] for r in sorted(_records(tmp_path / "a.zarr").values(), key=lambda r: r["shard"])
    ] == [
        [res.skipped[0]],
        [res.skipped[1]],
    ]
    assert res.table["index"].tolist() == [0, 1, 2, 4, 5, 6] and res.complete
    maps = res.attributions[:]
    assert np.isnan(maps[[3, 7]]).all() and not np.isnan(maps[[0, 1, 2, 4, 5, 6]]).any()
    # the samples read have the maps of the same batches without the skipped file
    x = pixels.astype(np.float32) / 255
    for k, j, idx in [(0, 1, [2]), (1, 0, [4, 5]), (1, 1, [6])]:
        ref = xk.xai.explain(tiny_cnn(), x[idx], method="vanilla", seed=stream_seed(0, k, j), max_batch=128)
        np.testing.assert_array_equal(maps[idx], ref)
    # resumed: the skipped files are still listed, nothing redone
    again = xk.xai.explain_dataset(
        tiny_cnn(), tmp_path / "imgs", out=tmp_path / "a.zarr", skip_bad=True, **kw
    )
    assert again.resumed == [0, 1] and again.skipped == res.skipped


def test_a_first_shard_of_unreadable_files_only(tmp_path: Path) -> None:
    """A shard with no readable file has no maps to give the store its map shape: it commits
    without maps (NaN once a later shard creates the array), verifies on resume, and is kept."""
    pixels = np.random.default_rng(1).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    paths = _pngs(tmp_path / "imgs", pixels)
    _truncate(paths[0])
    _truncate(paths[1])
    kw = {"method": "vanilla", "batch_size": 2, "shard_size": 2, "skip_bad": True, "progress": False}
    res = xk.xai.explain_dataset(tiny_cnn(), tmp_path / "imgs", out=tmp_path / "s.zarr", **kw)
    records = _records(tmp_path / "s.zarr")
    assert records[0]["maps"] is False and "maps" not in records[1]
    assert np.isnan(res.attributions[:2]).all() and res.table["index"].tolist() == [2, 3]
    again = xk.xai.explain_dataset(tiny_cnn(), tmp_path / "imgs", out=tmp_path / "s.zarr", **kw)
    assert again.resumed == [0, 1] and again.explained == []


def test_image_sizes_and_channels_named_and_fixed_by_resize_and_channels(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    _pngs(tmp_path / "mixed", rgb)
    Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(tmp_path / "mixed" / "03.png")
    Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(tmp_path / "mixed" / "04.png")
    kw = {"method": "vanilla", "progress": False}
    gray, big = str(tmp_path / "mixed" / "03.png"), str(tmp_path / "mixed" / "04.png")
    first = str(tmp_path / "mixed" / "00.png")
    with pytest.raises(XaikitValueError) as info:
        xk.xai.explain_dataset(tiny_cnn(), tmp_path / "mixed", out=tmp_path / "a.zarr", **kw)
    assert str(info.value) == (
        f"data: {gray!r} has 1 channel (grayscale) and the first image {first!r} has 3 channels (RGB); "
        "pass channels=3 to read every image as RGB (or channels=1: as grayscale)"
    )
    with pytest.raises(XaikitValueError, match=rf"{first!r} is 8x8 and {big!r} is 12x10 \(height x width\)"):
        xk.xai.explain_dataset(tiny_cnn(), tmp_path / "mixed", out=tmp_path / "b.zarr", channels=3, **kw)
    res = xk.xai.explain_dataset(
        tiny_cnn(), tmp_path / "mixed", out=tmp_path / "c.zarr", channels=3, resize=(8, 8), **kw
    )
    assert res.manifest["data"] == {"resize": [8, 8], "channels": 3} and res.attributions.shape == (
        5,
        8,
        8,
        3,
    )

    def read(path: str) -> np.ndarray:  # what resize=(8, 8), channels=3 reads
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB").resize((8, 8), Image.Resampling.BILINEAR), np.float32) / 255

    x = np.stack([read(str(tmp_path / "mixed" / f"{i:02d}.png")) for i in range(5)])
    np.testing.assert_array_equal(x[3], np.repeat(x[3][..., :1], 3, axis=-1))  # gray repeated
    ref = xk.xai.explain(tiny_cnn(), x, method="vanilla", seed=stream_seed(0, 0, 0), max_batch=128)
    np.testing.assert_array_equal(res.attributions[:], ref)
    # other reading settings are other settings: not resumed
    _pngs(tmp_path / "same", rgb)
    xk.xai.explain_dataset(tiny_cnn(), tmp_path / "same", out=tmp_path / "d.zarr", resize=(8, 8), **kw)
    with pytest.raises(XaikitValueError, match=r'data: stored \{"resize": \[8, 8\]\}, now null'):
        xk.xai.explain_dataset(tiny_cnn(), tmp_path / "same", out=tmp_path / "d.zarr", **kw)


def test_grayscale_files_for_an_rgb_model(tmp_path: Path) -> None:
    pixels = np.random.default_rng(3).integers(0, 256, (3, 8, 8), dtype=np.uint8)
    _pngs(tmp_path / "gray", pixels)
    kw = {"method": "vanilla", "progress": False}
    with pytest.raises(XaikitValueError) as info:
        xk.xai.explain_dataset(tiny_cnn(), tmp_path / "gray", out=tmp_path / "g.zarr", **kw)
    assert str(info.value) == (
        "data: the images have 1 channel, the model expects 3: pass channels=3 to read every image as RGB; "
        f"in dataset sample 0, file {str(tmp_path / 'gray' / '00.png')!r}, the first sample read"
    )
    assert not (tmp_path / "g.zarr").exists()
    res = xk.xai.explain_dataset(tiny_cnn(), tmp_path / "gray", out=tmp_path / "g.zarr", channels=3, **kw)
    x = np.repeat(pixels[..., None].astype(np.float32) / 255, 3, axis=-1)
    ref = xk.xai.explain(tiny_cnn(), x, method="vanilla", seed=stream_seed(0, 0, 0), max_batch=128)
    np.testing.assert_array_equal(res.attributions[:], ref)


def test_transform_example_of_the_docs(tmp_path: Path) -> None:
    """docs/dataset.md's transform= example: images of mixed sizes read into one shape."""
    from PIL import Image

    rng = np.random.default_rng(4)
    for i, (h, w) in enumerate([(8, 8), (12, 10), (5, 9)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{i}.jpg")

    def load(path):  # the docs' function, at 8 x 8
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB").resize((8, 8)), dtype=np.float32) / 255

    res = xk.xai.explain_dataset(
        tiny_cnn(),
        str(tmp_path / "*.jpg"),
        transform=load,
        method="vanilla",
        out=tmp_path / "t.zarr",
        progress=False,
    )
    x = np.stack([load(str(tmp_path / f"{i}.jpg")) for i in range(3)])
    ref = xk.xai.explain(tiny_cnn(), x, method="vanilla", seed=stream_seed(0, 0, 0), max_batch=128)
    np.testing.assert_array_equal(res.attributions[:], ref)
    assert res.table["file"].tolist() == [str(tmp_path / f"{i}.jpg") for i in range(3)]
    with pytest.raises(
        XaikitValueError, match="resize= and channels= apply to the image files as xaikit reads"
    ):
        xk.xai.explain_dataset(
            tiny_cnn(), str(tmp_path), transform=load, resize=(8, 8), out=tmp_path / "u.zarr"
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"method": "smoothgrad", "nsamples": "x"},
            XaikitTypeError,
            "nsamples must be an int >= 1; got str 'x'",
        ),
        ({"method": "smoothgrad", "nsampels": 3}, XaikitTypeError, r"got unknown option\(s\) \['nsampels'\]"),
        ({"method": "gradcam", "nsamples": 3}, XaikitTypeError, r"its options are layer, reshape, raw"),
        ({"method": "integrated", "quadrature": "simpson"}, XaikitValueError, "quadrature must be one of"),
        ({"method": "guided_ig", "fraction": 2.0}, XaikitValueError, "fraction must be"),
        ({"method": "xrai", "algorithm": "slow"}, XaikitValueError, "algorithm must be one of"),
        ({"method": "rise", "nsamples": 0}, XaikitValueError, "nsamples must be an int >= 1"),
        ({"method": "gradcam", "raw": True}, XaikitValueError, "raw=True"),
        ({"method": "vanilla", "magnitude": "yes"}, XaikitTypeError, "magnitude must be True or False"),
        ({"method": "vanilla", "max_batch": 0}, XaikitValueError, "max_batch"),
        ({"classes": "no-such-file.txt"}, XaikitValueError, "classes: cannot read the class names file"),
        ({"classes": []}, XaikitTypeError, "classes: classes must be a non-empty list"),
        ({"resize": (8,)}, XaikitTypeError, r"resize must be None or a pair \(H, W\)"),
        ({"channels": 2}, XaikitValueError, "channels must be None"),
        ({"skip_bad": True}, XaikitValueError, "skip_bad= is for a folder or glob of image files"),
    ],
)
def test_checked_before_the_model_is_built(tmp_path: Path, kwargs: dict, error: type, message: str) -> None:
    built = []

    def factory() -> object:
        built.append(1)
        return tiny_cnn()

    call = {"method": "vanilla", "out": tmp_path / "b.zarr", "progress": False, **kwargs}
    with pytest.raises(error, match=message):
        xk.xai.explain_dataset(factory, images(2), **call)
    assert built == [] and not (tmp_path / "b.zarr").exists()


@pytest.mark.parametrize("method", ALL_METHODS)
def test_option_names_agree_with_explain(method: str) -> None:
    """The options checked before the model is built are those explain accepts: both read the
    method's record, and refuse an unknown one with the same message."""
    from xaikit.xai.dataset import check_method_options

    record = xk.xai.get_method(method)
    with pytest.raises(XaikitTypeError) as by_explain:
        xk.xai.explain(tiny_cnn(), images(1), method=method, bogus=1)
    with pytest.raises(XaikitTypeError) as by_dataset:
        check_method_options(method, {"bogus": 1})
    assert str(by_explain.value) == str(by_dataset.value)
    assert all(name in str(by_explain.value) for name in record.options)
    assert check_method_options(method, {"output": 0}) == {"output": 0, "max_batch": 128}


def test_class_names(tmp_path: Path) -> None:
    x, y = images(6), np.array([0, 1, 2, 3, 4, -1])
    names = ["circle", "square", "triangle", "star", "cross"]
    (tmp_path / "c.txt").write_text("\n".join(names) + "\n\n")
    (tmp_path / "c.json").write_text(json.dumps(names))
    (tmp_path / "d.json").write_text(json.dumps({str(i): n for i, n in enumerate(names)}))
    kw = {"method": "vanilla", "labels": y, "progress": False}
    tables = []
    for i, classes in enumerate([names, tmp_path / "c.txt", str(tmp_path / "c.json"), tmp_path / "d.json"]):
        res = xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / f"{i}.zarr", classes=classes, **kw)
        assert res.classes == names
        tables.append(res.table)
    table = tables[0]
    assert table["label_name"].tolist() == [*names, ""]
    assert table["prediction_name"].tolist() == [names[p] for p in table["prediction"]]
    for other in tables[1:]:
        assert other.equals(table)
    plain = xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "p.zarr", **kw)
    assert plain.classes is None and "label_name" not in plain.table.columns
    # names on resume are updated (they change no value)
    again = xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "p.zarr", classes=names, **kw)
    assert (
        again.resumed == [0] and again.table["prediction_name"].tolist() == table["prediction_name"].tolist()
    )
    # a wrong count, and bad files, are refused
    with pytest.raises(XaikitValueError, match="classes: 3 class names for a model with 5 outputs"):
        xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "w.zarr", classes=names[:3], **kw)
    (tmp_path / "e.txt").write_text("a\n\nb\n")
    (tmp_path / "f.json").write_text('{"1": "a"}')
    for bad, message in [("e.txt", "line 2 is empty"), ("f.json", "must map every class index from 0")]:
        with pytest.raises(XaikitValueError, match=message):
            xk.xai.explain_dataset(tiny_cnn(), x, out=tmp_path / "w.zarr", classes=tmp_path / bad, **kw)


def test_class_names_of_a_hugging_face_style_model(tmp_path: Path) -> None:
    """A model with ``config.id2label`` (as Hugging Face models have) names its classes."""
    from types import SimpleNamespace

    model = tiny_cnn()
    model.config = SimpleNamespace(id2label={i: f"c{i}" for i in range(5)})
    res = xk.xai.explain_dataset(model, images(3), method="vanilla", out=tmp_path / "h.zarr", progress=False)
    assert res.classes == [f"c{i}" for i in range(5)]
    model.config = SimpleNamespace(id2label={0: "a", 1: "b"})  # not one name per output: ignored
    res = xk.xai.explain_dataset(model, images(3), method="vanilla", out=tmp_path / "i.zarr", progress=False)
    assert res.classes is None


def test_write_table_carries_every_column(tmp_path: Path) -> None:
    import pandas as pd

    res = xk.xai.explain_dataset(
        tiny_cnn(),
        images(3),
        method="vanilla",
        out=tmp_path / "t.zarr",
        classes=list("abcde"),
        progress=False,
    )
    path = res.write_table()
    assert path == tmp_path / "t.zarr" / "table.csv"
    back = pd.read_csv(path, keep_default_na=False)
    assert list(back.columns) == [
        "index", "file", "label", "label_name", "prediction", "prediction_name", "score", "delta",
        "map_status",
    ]  # fmt: skip
    table = res.table
    np.testing.assert_array_equal(back["prediction"], table["prediction"])
    np.testing.assert_allclose(back["score"].astype(float), table["score"], rtol=1e-6)
    extra = table.assign(map_status=["", "zero", ""], note=["a", "b", "c"])  # extra columns are carried
    res.write_table(tmp_path / "x.csv", table=extra)
    back = pd.read_csv(tmp_path / "x.csv", keep_default_na=False)
    assert back["map_status"].tolist() == ["", "zero", ""] and list(back.columns)[-1] == "note"
    assert sorted(p.name for p in (tmp_path / "t.zarr").iterdir() if p.name.startswith(".tmp")) == []
