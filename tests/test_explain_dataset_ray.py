"""explain_dataset(engine="ray"): 2 local CPU workers give engine="local"'s bits; a worker
killed mid-run is replaced and every shard is committed once; a factory that builds other
weights in a worker is refused. One Ray session is shared by the module (start-up is slow)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

import xaikit as xk  # noqa: E402
from xaikit.errors import XaikitValueError  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dataset_models import SlowData, tiny_cnn  # noqa: E402

pytestmark = pytest.mark.ray
KW: dict[str, Any] = {"method": "smoothgrad", "batch_size": 4, "nsamples": 3, "progress": False}


@pytest.fixture(scope="module")
def cluster() -> Any:
    # workers import the tests' helper module by name (dataset_models:tiny_cnn, SlowData)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE), *([saved] if saved else [])])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _local(tmp_path: Path, n: int, every: int) -> np.ndarray:
    res = xk.xai.explain_dataset(
        tiny_cnn(), SlowData(n, every, 0.0), out=tmp_path / "local.zarr", shard_size=every, **KW
    )
    return np.asarray(res.attributions[:])


def test_two_workers_equal_local(cluster: Any, tmp_path: Path) -> None:
    n, every = 20, 4
    res = xk.xai.explain_dataset(
        "dataset_models:tiny_cnn", SlowData(n, every, 0.0), out=tmp_path / "ray.zarr", shard_size=every,
        engine="ray", workers=2, **KW,
    )  # fmt: skip
    records = res.store.records()
    assert sorted(records) == [0, 1, 2, 3, 4] and res.complete
    assert all(
        r["worker"].startswith("ray:") and not r["worker"].endswith(f":{os.getpid()}")
        for r in records.values()
    )
    np.testing.assert_array_equal(res.attributions[:], _local(tmp_path, n, every))
    assert (res.table["label"].to_numpy() == np.arange(n) % 5).all()


def test_killed_worker_is_replaced(cluster: Any, tmp_path: Path) -> None:
    n, every = 24, 4
    out = tmp_path / "kill.zarr"
    box: dict[str, Any] = {}

    def drive() -> None:
        try:
            box["res"] = xk.xai.explain_dataset(
                tiny_cnn(), SlowData(n, every, 0.8), out=out, shard_size=every, engine="ray", workers=2, **KW
            )
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=drive)
    thread.start()
    store = xk.xai.DatasetExplanation(out).store
    deadline = time.monotonic() + 90
    while not (out / "shards").is_dir() or len(store.records()) < 2:
        assert thread.is_alive(), box.get("error")
        assert time.monotonic() < deadline, "no 2 shards committed by the Ray workers in 90 s"
        time.sleep(0.05)
    before = store.records()
    victim = int(next(iter(before.values()))["worker"].rsplit(":", 1)[1])
    os.kill(victim, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    after = box["res"].store.records()
    assert sorted(after) == list(range(6))
    for k, rec in before.items():  # shards committed before the kill were not redone
        assert after[k] == rec
    assert any(r["worker"].endswith(f":{victim}") for r in after.values())
    assert {r["worker"] for r in after.values()} - {r["worker"] for r in before.values()}  # a new worker
    np.testing.assert_array_equal(box["res"].attributions[:], _local(tmp_path, n, every))


def test_factory_with_other_weights_refused(cluster: Any, tmp_path: Path) -> None:
    with pytest.raises(XaikitValueError, match="a Ray worker built a model with other weights"):
        xk.xai.explain_dataset(
            "dataset_models:unseeded_cnn",
            SlowData(8, 4, 0.0),
            out=tmp_path / "u.zarr",
            engine="ray",
            workers=1,
            **KW,
        )


def test_relative_paths_reach_the_workers(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative image folder and a relative out: Ray workers run in another working directory."""
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    Path("imgs").mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(f"imgs/{i}.png")
    kw = {"method": "vanilla", "progress": False}
    res = xk.xai.explain_dataset(tiny_cnn(), "imgs", out="r.zarr", engine="ray", workers=1, **kw)
    ref = xk.xai.explain_dataset(tiny_cnn(), "imgs/*.png", out="l.zarr", **kw)
    np.testing.assert_array_equal(res.attributions[:], ref.attributions[:])
    assert list(res.table["file"]) == ["0.png", "1.png", "2.png"]
    assert list(ref.table["file"]) == ["imgs/0.png", "imgs/1.png", "imgs/2.png"]


def test_skipped_files_and_a_first_shard_without_maps(cluster: Any, tmp_path: Path) -> None:
    """skip_bad=True on workers: the first shard's files are all unreadable, so it gives the
    store no map shape and the next shard must run alone to create it; the result equals the
    local engine's, skipped files included."""
    from PIL import Image

    pixels = np.random.default_rng(1).integers(0, 256, (8, 8, 8, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(tmp_path / f"{i}.png")
    for i in (0, 1, 5):
        data = (tmp_path / f"{i}.png").read_bytes()
        (tmp_path / f"{i}.png").write_bytes(data[: len(data) // 2])
    kw = {"method": "vanilla", "batch_size": 2, "shard_size": 2, "skip_bad": True, "progress": False}
    data = str(tmp_path / "*.png")
    res = xk.xai.explain_dataset(tiny_cnn(), data, out=tmp_path / "r.zarr", engine="ray", workers=2, **kw)
    ref = xk.xai.explain_dataset(tiny_cnn(), data, out=tmp_path / "l.zarr", **kw)
    assert res.complete and [s["index"] for s in res.skipped] == [0, 1, 5]
    assert res.skipped == ref.skipped and res.table.equals(ref.table)
    np.testing.assert_array_equal(res.attributions[:], ref.attributions[:])


def test_analysis_of_a_ray_store_reads_it_on_ray(cluster: Any, tmp_path: Path) -> None:
    """xk.analyze.dataset on a store Ray wrote reduces its shards in Ray tasks (engine="auto")
    and finds exactly what the local reading finds."""
    n, every = 24, 4
    out = tmp_path / "ray.zarr"
    xk.xai.explain_dataset(
        "dataset_models:tiny_cnn", SlowData(n, every, 0.0), out=out, shard_size=every, engine="ray",
        workers=2, **KW,
    )  # fmt: skip
    on_ray = xk.analyze.dataset(out, size=4, max_display=0, min_samples=2, progress=False)
    assert on_ray.settings["engine"] == "ray"
    ray_arrays = {k: np.array(v) for k, v in on_ray.arrays.items()}
    local = xk.analyze.dataset(out, size=4, max_display=0, min_samples=2, engine="local", progress=False)
    assert local.settings["engine"] == "local"
    assert sorted(ray_arrays) == sorted(local.arrays)
    for key, value in ray_arrays.items():
        np.testing.assert_array_equal(value, local.arrays[key], err_msg=key)
    with pytest.raises(XaikitValueError, match="engine must be 'auto', 'local' or 'ray'"):
        xk.analyze.dataset(out, engine="spark", progress=False)
