"""``xk.analyze``: exact class statistics on hand-made stores, channel reduction and downsampling,
SpRAy on planted strategies, the shard-by-shard reading, the files (round trip, checksum, stale,
nothing half-written), bad input, thumbnails, the region-ablation check and the call of the
concept extraction."""

from __future__ import annotations

import json
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analyze_stores import commit_shard, corner_data, corner_model, corner_model_keras, planted, write_store
from sklearn.metrics import adjusted_rand_score

import xaikit as xk
from xaikit.analyze import clusters as clusters_mod
from xaikit.analyze import maps as maps_mod
from xaikit.analyze.ablation import random_mask
from xaikit.analyze.clusters import cluster_class, eigengap, laplacian_spectrum, stratified_sample
from xaikit.analyze.images import to_uint8
from xaikit.analyze.maps import area_resample, reduce_maps, spatial_layout
from xaikit.errors import XaikitTypeError, XaikitValueError


def _expected(maps: np.ndarray, axis: int | None, size: int) -> np.ndarray:
    """The contract's reduction, written out plainly: |.| summed over channels, block means, / sum."""
    a = np.abs(maps.astype(np.float64))
    if axis is not None:
        a = a.sum(axis=1 + axis)
    n, h, w = a.shape
    blocks = a.reshape(n, size, h // size, size, w // size).mean(axis=(2, 4))
    return blocks / blocks.sum(axis=(1, 2), keepdims=True)


# ---- maps: reduction, downsampling, class statistics ---------------------------------------------
def test_class_means_and_stds_are_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    maps = rng.normal(size=(21, 3, 8, 8)).astype(np.float32)
    pred = rng.integers(0, 3, 21)
    label = np.where(np.arange(21) % 4 == 0, (pred + 1) % 3, pred)
    write_store(tmp_path / "s", maps, pred, label, shard_size=5, classes=["a", "b", "c"])
    res = xk.analyze.dataset(tmp_path / "s", size=4, max_display=0, min_samples=100, progress=False)
    small = _expected(maps, 0, 4)
    assert [c.klass for c in res.classes] == [0, 1, 2] and [c.name for c in res.classes] == ["a", "b", "c"]
    for c in res.classes:
        mine = pred == c.klass
        np.testing.assert_allclose(c.mean, small[mine].mean(axis=0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(c.std, small[mine].std(axis=0), rtol=1e-4, atol=1e-7)
        assert c.n == mine.sum() and c.k == 0 and c.clusters == []
        assert c.accuracy == pytest.approx((label[mine] == pred[mine]).mean())
        d = np.linalg.norm((small[mine] - small[mine].mean(axis=0)).reshape(mine.sum(), -1), axis=1)
        table = res.samples.set_index("index")
        np.testing.assert_allclose(
            table.loc[np.flatnonzero(mine), "atypicality"], d / np.median(d), rtol=1e-4
        )
        assert c.atypical[0] == int(np.flatnonzero(mine)[np.argmax(d)])
    assert res.samples["cluster"].eq(-1).all() and res.samples["x"].isna().all()
    assert res.arrays["thumb_map"].shape == (0, 8, 8) and res.arrays["cluster_mean"].shape == (0, 4, 4)
    assert res.arrays["concept_heatmaps"].shape == (0, 0, 8, 8) and res.concepts == []
    assert res.samples["correct"].tolist() == list(label == pred)


def test_label_target_analyses_under_the_label(tmp_path: Path) -> None:
    maps = np.random.default_rng(0).random((6, 4, 4)).astype(np.float32) + 0.1
    write_store(tmp_path / "s", maps, np.zeros(6), label=np.array([0, 1, 1, 2, 2, 2]), target="label")
    res = xk.analyze.dataset(tmp_path / "s", size=2, max_display=0, progress=False)
    assert [(c.klass, c.n) for c in res.classes] == [(0, 1), (1, 2), (2, 3)]


def test_chw_hwc_and_hw_maps_reduce_alike(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    chw = rng.normal(size=(12, 3, 8, 8)).astype(np.float32)
    pred = np.arange(12) % 2
    hw = np.abs(chw).sum(axis=1)
    means = []
    for name, maps in (("chw", chw), ("hwc", np.moveaxis(chw, 1, -1)), ("hw", -hw)):
        write_store(tmp_path / name, maps, pred)
        res = xk.analyze.dataset(tmp_path / name, size=4, max_display=0, progress=False)
        means.append(np.stack([c.mean for c in res.classes]))
    np.testing.assert_allclose(means[0], means[1], rtol=1e-6)
    np.testing.assert_allclose(means[0], means[2], rtol=1e-6)
    np.testing.assert_allclose(means[0][1], _expected(chw[pred == 1], 0, 4).mean(axis=0), rtol=1e-5)


def test_spatial_layout_and_reduction() -> None:
    assert spatial_layout((3, 5, 4), spatial=(5, 4)) == (0, (5, 4))
    assert spatial_layout((3, 5, 4), spatial=(3, 5)) == (2, (3, 5))
    assert spatial_layout((1, 7, 7)) == (0, (7, 7)) and spatial_layout((7, 7, 4)) == (2, (7, 7))
    with pytest.raises(
        XaikitValueError, match=r"maps must be images.*got maps of one sample of shape \(10,\)"
    ):
        spatial_layout((10,))
    with pytest.raises(XaikitValueError, match=r"shape \(5, 6, 7\)"):
        spatial_layout((5, 6, 7))
    m = np.array([[[[1.0, -2.0], [0.0, 3.0]], [[-1.0, 1.0], [2.0, -2.0]]]])  # (1, 2, 2, 2) CHW
    assert reduce_maps(m, 0).tolist() == [[[2.0, 3.0], [2.0, 5.0]]]


def test_area_downsampling_is_exact() -> None:
    rng = np.random.default_rng(3)
    m = rng.random((2, 12, 8))
    np.testing.assert_allclose(area_resample(m, 4), m.reshape(2, 4, 3, 4, 2).mean(axis=(2, 4)), rtol=1e-6)
    # 6 -> 4: output cell i covers input [1.5 i, 1.5 (i + 1)); cell 1 = (0.5 m[1] + m[2]) / 1.5
    v = rng.random((1, 6, 6))
    w = (
        np.array([[1, 0.5, 0, 0, 0, 0], [0, 0.5, 1, 0, 0, 0], [0, 0, 0, 1, 0.5, 0], [0, 0, 0, 0, 0.5, 1]])
        / 1.5
    )
    np.testing.assert_allclose(area_resample(v, 4)[0], w @ v[0] @ w.T, rtol=1e-6)
    # the mean is kept, also when upsampling (pixels repeated)
    assert area_resample(v, 4).mean() == pytest.approx(v.mean(), rel=1e-6)
    np.testing.assert_array_equal(area_resample(np.array([[[1.0, 2.0]]]), 2)[0], [[1.0, 2.0], [1.0, 2.0]])


def test_zero_and_non_finite_maps_are_skipped_and_counted(tmp_path: Path) -> None:
    maps = np.random.default_rng(0).random((10, 4, 4)).astype(np.float32)
    maps[1] = 0.0
    maps[4, 0, 0] = np.nan
    maps[7, 2, 1] = np.inf
    write_store(tmp_path / "s", maps, np.zeros(10), shard_size=3)
    res = xk.analyze.dataset(tmp_path / "s", size=2, max_display=0, progress=False)
    assert res.skipped == {"zero": 1, "non-finite": 2}
    assert res.samples["index"].tolist() == [0, 2, 3, 5, 6, 8, 9]
    np.testing.assert_allclose(
        res.classes[0].mean, _expected(maps[[0, 2, 3, 5, 6, 8, 9]], None, 2).mean(axis=0), rtol=1e-5
    )


def test_the_store_is_read_one_shard_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maps, _ = planted(40, [0, 1], side=8)
    write_store(tmp_path / "s", maps, np.zeros(40), shard_size=6)
    reads: list[tuple[int, int]] = []
    real = maps_mod._read_rows

    def counting(array: Any, start: int, stop: int) -> np.ndarray:
        if array.ndim > 1:
            reads.append((start, stop))
        return real(array, start, stop)

    monkeypatch.setattr(maps_mod, "_read_rows", counting)
    xk.analyze.dataset(tmp_path / "s", size=4, max_display=0, progress=False)
    assert reads == [(k, min(k + 6, 40)) for k in range(0, 40, 6)]  # each shard once, none whole


# ---- SpRAy -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kinds", "k"), [([0, 1], 2), ([0], 1), ([0, 1, 2], 3)])
def test_spray_finds_planted_strategies(tmp_path: Path, kinds: list[int], k: int) -> None:
    maps, kind = planted(60, kinds)
    write_store(tmp_path / "s", maps, np.zeros(60), shard_size=16)
    res = xk.analyze.dataset(tmp_path / "s", size=8, max_display=0, progress=False)
    c = res.classes[0]
    assert c.k == k and len(c.clusters) == k
    assert adjusted_rand_score(kind, res.samples["cluster"]) == 1.0
    assert sorted(cl.size for cl in c.clusters) == sorted(np.bincount(kind).tolist())
    for cl in c.clusters:  # the members listed are the cluster's, most typical first
        members = np.asarray(cl.members)
        assert len(set(kind[members])) == 1 and len(members) == min(20, cl.size)
        d = np.linalg.norm((_expected(maps[members], None, 8) - cl.mean).reshape(len(members), -1), axis=1)
        assert np.all(np.diff(d) >= -1e-7)


def test_spray_on_a_class_too_large_for_the_dense_eigensolver() -> None:
    maps, kind = planted(clusters_mod._DENSE + 200, [0, 1, 2], side=8)  # scipy's eigsh path
    found = cluster_class(maps, 8, 10, seed=0)
    assert found.k == 3 and adjusted_rand_score(kind, found.labels) == 1.0


def test_eigsh_that_does_not_converge_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.sparse.linalg as sla

    real, calls = sla.eigsh, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        if len(calls) == 1:
            raise sla.ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((0, 0)))
        return real(*args, **kwargs)

    monkeypatch.setattr(sla, "eigsh", flaky)
    maps, kind = planted(clusters_mod._DENSE + 50, [0, 1], side=8)
    found = cluster_class(maps, 4, 10, seed=0)
    assert found.k == 2 and adjusted_rand_score(kind, found.labels) == 1.0
    assert len(calls) == 2 and calls[1]["ncv"] == 64 and "ncv" not in calls[0]


def test_eigengap_on_block_diagonal_affinities() -> None:
    sp = clusters_mod.scipy_sparse()
    w = np.kron(np.eye(3), np.ones((5, 5))) - np.eye(15)
    values, _ = laplacian_spectrum(sp.csr_matrix(w), 8)
    np.testing.assert_allclose(values[:3], 0.0, atol=1e-9)
    assert eigengap(values, 8) == 3
    assert eigengap(values, 2) == 1  # the gap after 3 is out of reach; the one after 2 is zero
    assert eigengap(np.array([0.0, 0.5, 0.52, 0.55]), 3) == 1  # the first gap is the largest
    assert eigengap(np.array([0.0, 0.0, 0.03, 0.05]), 3) == 1  # no clear gap (< MIN_GAP)


def test_cluster_class_is_seeded_and_numbers_clusters_by_size() -> None:
    maps, _ = planted(50, [0, 0, 1])
    a, b = cluster_class(maps, 6, 10, seed=3), cluster_class(maps, 6, 10, seed=3)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.k == 2 and np.bincount(a.labels).tolist() == [34, 16]


def test_stratified_sample_keeps_class_shares() -> None:
    klass = np.array([0] * 70 + [1] * 25 + [2] * 5)
    picked = stratified_sample(klass, 20, seed=0)
    assert np.bincount(klass[picked]).tolist() == [14, 5, 1]
    np.testing.assert_array_equal(picked, stratified_sample(klass, 20, seed=0))
    assert np.bincount(klass[stratified_sample(klass, 3, seed=1)]).tolist() == [1, 1, 1]


def test_embedding_places_only_the_displayed_samples(tmp_path: Path) -> None:
    maps, _ = planted(30, [0, 1], side=8)
    write_store(tmp_path / "s", maps, np.arange(30) % 3)
    res = xk.analyze.dataset(tmp_path / "s", size=4, max_display=12, progress=False)
    shown = res.samples.dropna(subset=["x"])
    assert len(shown) == 12 and np.bincount(shown["klass"]).tolist() == [4, 4, 4]
    np.testing.assert_array_equal(res.arrays["thumb_index"], shown["index"])
    assert res.arrays["thumb_map"].shape == (12, 8, 8) and res.arrays["thumb_map"].dtype == np.uint8
    assert (res.arrays["thumb_map"].reshape(12, -1).max(axis=1) == 255).all()
    assert not res.has_images and "thumb_image" not in res.arrays


# ---- the files ---------------------------------------------------------------------------------------
def test_round_trip_checksum_and_stale(tmp_path: Path) -> None:
    maps, _ = planted(24, [0, 1], side=8)
    store = write_store(tmp_path / "s", maps, np.zeros(24), shard_size=8, shards=[0, 1])
    res = xk.analyze.dataset(store, size=4, max_display=5, min_samples=4, progress=False)
    again = xk.analyze.open(store)
    assert repr(again) == repr(res) and not again.stale
    handle = xk.xai.DatasetExplanation.open(store)  # a handle works as well as the path
    assert repr(xk.analyze.open(handle)) == repr(res)
    assert repr(xk.analyze.dataset(handle, size=4, max_display=5, min_samples=4, progress=False)) == repr(res)
    for key, value in res.arrays.items():
        np.testing.assert_array_equal(again.arrays[key], value)
    info = json.loads((store / "analysis" / "analysis.json").read_text())
    assert info["format"] == 1 and info["store"]["committed"] == [0, 1] and info["store"]["length"] == 24
    assert info["arrays"]["file"] == "arrays.npz" and set(info["skipped"]) == {"zero", "non-finite"}
    assert res.cluster(res.classes[0].clusters[0].id) == res.classes[0].clusters[0]
    with pytest.raises(XaikitValueError, match=r"id: no cluster 99"):
        res.cluster(99)
    commit_shard(store, maps, np.zeros(24), 2, 8)  # a shard committed since: stale
    assert xk.analyze.open(store).stale
    npz = store / "analysis" / "arrays.npz"
    npz.write_bytes(npz.read_bytes()[:-10])
    with pytest.raises(XaikitValueError, match=r"arrays\.npz' does not match the SHA-256"):
        xk.analyze.open(store)


def test_a_failing_run_leaves_the_previous_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maps, _ = planted(20, [0, 1], side=8)
    store = write_store(tmp_path / "s", maps, np.zeros(20))
    before = xk.analyze.dataset(store, size=4, max_display=0, progress=False)
    files = {p.name: p.read_bytes() for p in (store / "analysis").iterdir()}

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("stop here")

    monkeypatch.setattr("xaikit.analyze.run.embed", broken)
    with pytest.raises(RuntimeError, match="stop here"):
        xk.analyze.dataset(store, size=8, max_display=5, progress=False)
    assert {p.name: p.read_bytes() for p in (store / "analysis").iterdir()} == files
    assert repr(xk.analyze.open(store)) == repr(before)


def test_open_without_an_analysis(tmp_path: Path) -> None:
    store = write_store(tmp_path / "s", np.ones((3, 2, 2), np.float32), np.zeros(3))
    with pytest.raises(XaikitValueError, match=r"has no analysis .*analysis\.json' is missing"):
        xk.analyze.open(store)


# ---- bad input -----------------------------------------------------------------------------------------
def test_bad_input_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(
        XaikitValueError, match=r"^store: .*is not an explain_dataset store \(no manifest\.json\)"
    ):
        xk.analyze.dataset(tmp_path)
    with pytest.raises(XaikitTypeError, match=r"store must be the path of an explain_dataset store.*got int"):
        xk.analyze.dataset(3)
    empty = write_store(tmp_path / "e", np.ones((4, 2, 2), np.float32), np.zeros(4), shards=[])
    with pytest.raises(XaikitValueError, match=r"store: .* has no committed shard with maps yet"):
        xk.analyze.dataset(empty)
    store = write_store(tmp_path / "s", np.ones((4, 2, 2), np.float32), np.zeros(4))
    with pytest.raises(XaikitValueError, match=r"size must be an int >= 2; got int 1"):
        xk.analyze.dataset(store, size=1)
    with pytest.raises(XaikitValueError, match=r"max_clusters must be an int >= 1; got int 0"):
        xk.analyze.dataset(store, max_clusters=0)
    with pytest.raises(XaikitValueError, match=r"fraction must be a number in \(0, 1\]"):
        xk.analyze.dataset(store, fraction=0)
    with pytest.raises(XaikitValueError, match=r"^model: .*need the images too; pass data="):
        xk.analyze.dataset(store, model="pkg.mod:f")
    with pytest.raises(
        XaikitValueError, match=r"^data: expected the dataset the store explains, of 4 samples .*got 5"
    ):
        xk.analyze.dataset(store, data=np.zeros((5, 2, 2), np.float32))
    zero = write_store(tmp_path / "z", np.zeros((3, 2, 2), np.float32), np.zeros(3))
    with pytest.raises(XaikitValueError, match=r"every committed map .* is zero or non-finite"):
        xk.analyze.dataset(zero)
    assert not (store / "analysis").exists() and not (zero / "analysis").exists()
    flat = write_store(tmp_path / "f", np.ones((3, 10), np.float32), np.zeros(3))
    with pytest.raises(XaikitValueError, match=r"maps must be images"):
        xk.analyze.dataset(flat)


# ---- with data and a model -------------------------------------------------------------------------------
def test_thumbnails_of_the_images(tmp_path: Path) -> None:
    x, y, maps = corner_data(12)
    store = write_store(tmp_path / "s", maps, y, y)
    res = xk.analyze.dataset(store, data=x, size=4, max_display=6, progress=False)
    idx = res.arrays["thumb_index"]
    assert res.has_images and res.arrays["thumb_image"].shape == (6, 8, 8, 3)
    expected = np.repeat(np.round(x[idx, 0] * 255).astype(np.uint8)[..., None], 3, axis=-1)
    np.testing.assert_array_equal(res.arrays["thumb_image"], expected)
    assert to_uint8(np.array([[[-2.0, 0.0, 2.0]]])).tolist() == [[[0, 128, 255]]]


def test_ablation_of_the_corner_the_model_reads(tmp_path: Path, framework: str) -> None:
    x, y, maps = corner_data(32)
    if framework == "tf":  # the same images and maps, channel-last, for a Keras model
        x, maps = np.moveaxis(x, 1, -1), np.moveaxis(maps, 1, -1)
    model = corner_model() if framework == "torch" else corner_model_keras()
    store = write_store(tmp_path / "s", maps, y, y, shard_size=10, model=model)
    res = xk.analyze.dataset(
        store,
        model=model,
        data=x,
        size=4,
        concepts=0,
        max_display=0,
        min_samples=4,
        fraction=4 / 64,
        progress=False,
    )
    tagged, plain = res.classes[1].clusters[0], res.classes[0].clusters[0]
    assert res.classes[1].k == 1 and tagged.accuracy == 1.0
    # the region of the corner class is its 2x2 corner: filled with the image's mean, the model says 0
    ab = tagged.ablation
    assert (ab["fraction"], ab["n"], ab["accuracy_before"], ab["accuracy_after"]) == (0.0625, 16, 1.0, 0.0)
    assert ab["score_before"] == pytest.approx(5.0, abs=1e-5)
    filled = x[y == 1].reshape(16, -1).mean(axis=1)  # the corner becomes each image's mean
    assert ab["score_after"] == pytest.approx(float(np.mean(10 * (filled - 0.5))), rel=1e-5)
    # the plain class's region (the centre) is not read by the model: nothing changes
    assert plain.ablation["accuracy_before"] == plain.ablation["accuracy_after"] == 1.0
    assert plain.ablation["score_before"] == pytest.approx(plain.ablation["score_after"])
    # the control: as many random pixels (replayed: one draw per cluster, class 0's first), filled alike
    rng = np.random.default_rng(0)
    controls = [random_mask((8, 8), 4, rng) for _ in range(2)]
    imgs = x[y == 1] if framework == "torch" else np.moveaxis(x[y == 1], -1, 1)
    filled_r = np.where(controls[1][None, None], imgs.mean(axis=(2, 3), keepdims=True), imgs)
    corner = filled_r[:, 0, :2, :2].mean(axis=(1, 2))
    assert ab["score_random"] == pytest.approx(float(np.mean(10 * (corner - 0.5))), rel=1e-5)
    assert ab["accuracy_random"] == float(np.mean(corner > 0.5))
    assert ab["accuracy_random"] - ab["accuracy_after"] >= 0.5  # the corner, not any 4 pixels


def test_concepts_are_called_per_class_with_its_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FAKE stand-in for xaikit.analyze.craft (the concepts module): checks the call and the storage
    of what it returns, not the concepts themselves."""
    pytest.importorskip("torch")
    x, y, maps = corner_data(24)
    store = write_store(tmp_path / "s", maps, y, y, model="analyze_stores:corner_model")
    calls: list[dict[str, Any]] = []

    def fake_extract(model: Any, x_rows: np.ndarray, klass: int, **kw: Any) -> Any:
        calls.append({"x": x_rows, "klass": klass, **kw})
        idx = kw["indices"]
        rank, top = kw["rank"], idx[:3]
        return types.SimpleNamespace(
            layer="fake.layer", directions=np.ones((rank, 4), np.float32) * (klass + 1),
            importance=np.arange(rank, dtype=np.float32) + klass, coefficients=np.zeros((len(idx), 2, 2, rank), np.float32),
            top=np.tile(top, (rank, 1)), heatmaps=np.ones((rank, len(top), 8, 8), np.float32) * 0.5,
        )  # fmt: skip

    fake = types.ModuleType("xaikit.analyze.craft")
    fake.extract_concepts = fake_extract  # type: ignore[attr-defined]
    fake.resolve_layer = lambda *a, **kw: ("fake.layer", 4)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xaikit.analyze.craft", fake)
    res = xk.analyze.dataset(
        store,
        model="analyze_stores:corner_model",
        data=x,
        size=4,
        concepts=2,
        max_display=0,
        min_samples=4,
        layer="L",
        progress=False,
    )
    assert [c["klass"] for c in calls] == [0, 1] and all(c["rank"] == 2 and c["layer"] == "L" for c in calls)
    for c in calls:
        np.testing.assert_array_equal(c["x"], x[c["indices"]])
        assert (y[c["indices"]] == c["klass"]).all() and len(c["indices"]) == 12
    assert res.layer == "fake.layer" and [(c.id, c.klass, c.importance) for c in res.concepts] == [
        (0, 0, 0.0),
        (1, 0, 1.0),
        (2, 1, 1.0),
        (3, 1, 2.0),
    ]
    assert res.concepts[2].top == calls[1]["indices"][:3].tolist()
    np.testing.assert_array_equal(res.concepts[3].direction, np.full(4, 2.0))
    np.testing.assert_allclose(res.concepts[0].heatmaps, 0.5)
    assert res.arrays["concept_image"].shape == (4, 3, 8, 8, 3)


def test_a_store_that_explain_dataset_wrote(tmp_path: Path) -> None:
    """The whole path on a real store: a CNN's SmoothGrad maps of channel-first images, analysed
    with the model (a factory by name) and the data; no labels: accuracies are None."""
    pytest.importorskip("torch")
    from dataset_models import images

    x = images(30)
    out = tmp_path / "x.zarr"
    xk.xai.explain_dataset(
        "dataset_models:tiny_cnn", x, method="smoothgrad", out=out, batch_size=8, progress=False, nsamples=2
    )
    res = xk.analyze.dataset(
        out,
        model="dataset_models:tiny_cnn",
        data=x,
        size=4,
        concepts=0,
        max_display=10,
        min_samples=3,
        progress=False,
    )
    table = xk.xai.DatasetExplanation.open(out).table
    assert res.samples["index"].tolist() == list(range(30))
    np.testing.assert_array_equal(res.samples["prediction"], table["prediction"])
    assert sum(c.n for c in res.classes) == 30 and all(c.accuracy is None for c in res.classes)
    clustered = [cl for c in res.classes for cl in c.clusters]
    assert clustered and all(
        cl.ablation is not None and cl.ablation["accuracy_before"] is None for cl in clustered
    )
    assert all(cl.ablation["n"] == cl.size for cl in clustered)
    thumbs = res.arrays["thumb_image"]
    assert thumbs.shape == (10, 8, 8, 3)
    expected = np.round(np.moveaxis(x[res.arrays["thumb_index"]], 1, -1) * 255).astype(np.uint8)
    np.testing.assert_array_equal(thumbs, expected)


def test_image_files_are_read_as_the_store_read_them(tmp_path: Path) -> None:
    """A folder of 12 x 12 PNGs explained with resize=(8, 8): the analysis reads them resized too
    (the model takes 8 x 8 only), and a file that cannot be read is left out, not an error."""
    pytest.importorskip("torch")
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (12, 12, 12, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(folder / f"{i:02d}.png")
    (folder / "05.png").write_bytes(b"not a png")
    out = tmp_path / "x.zarr"
    xk.xai.explain_dataset(
        "dataset_models:tiny_cnn",
        str(folder),
        method="vanilla",
        out=out,
        resize=(8, 8),
        skip_bad=True,
        progress=False,
    )
    res = xk.analyze.dataset(
        out, model="dataset_models:tiny_cnn", data=str(folder), size=4, concepts=0, max_display=20, min_samples=2, progress=False
    )  # fmt: skip
    assert 5 not in res.samples["index"].tolist() and len(res.samples) == 11
    assert res.arrays["thumb_image"].shape == (11, 8, 8, 3)
    assert all(cl.ablation is not None for c in res.classes for cl in c.clusters)


def test_another_model_than_the_stores_is_warned_about(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    x, y, maps = corner_data(8)
    store = write_store(tmp_path / "s", maps, y, y)  # a made-up fingerprint
    with pytest.warns(
        xk.XaikitWarning, match=r"model: its fingerprint sha256:.* is not the store's \(ffffffff"
    ):
        xk.analyze.dataset(store, model=corner_model(), data=x, concepts=0, max_display=0, progress=False)


def test_data_of_other_images_is_refused_before_any_work(tmp_path: Path) -> None:
    """Images of another size than the store's maps, or a non-finite first sample, are named
    as ``data`` problems up front (not as a model failure in the ablation check)."""
    pytest.importorskip("torch")
    x, y, maps = corner_data(16)
    store = write_store(tmp_path / "s", maps, y, y, model="analyze_stores:corner_model")
    with pytest.raises(
        XaikitValueError, match=r"data: expected the images the store explains, of 8 x 8 pixels .*\(1, 4, 4\)"
    ):
        xk.analyze.dataset(store, model="analyze_stores:corner_model", data=x[:, :, :4, :4], progress=False)
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(XaikitValueError, match="data: sample 0 holds NaN or infinite values"):
        xk.analyze.dataset(store, model="analyze_stores:corner_model", data=bad, progress=False)
    assert not (store / "analysis").exists()


def test_a_torchscript_model_gets_clusters_and_ablation_and_a_warning_for_concepts(tmp_path: Path) -> None:
    """A TorchScript file cannot be hooked, so no layer's activations can be read: with
    ``layer=None`` the concepts are skipped with a warning (recorded in the analysis) and the
    clusters and the ablation check still run on the loaded model; a named layer is refused."""
    torch = pytest.importorskip("torch")
    x, y, maps = corner_data(32)
    path = tmp_path / "corner.pt"
    with warnings.catch_warnings():  # torch 2.13 deprecates torch.jit.trace; users still have such files
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(corner_model(), torch.from_numpy(x[:2])).save(str(path))
    store = write_store(tmp_path / "s", maps, y, y, shard_size=10, model=str(path))
    kw: dict[str, Any] = {"data": x, "size": 4, "max_display": 0, "min_samples": 4, "fraction": 4 / 64}
    with pytest.warns(
        xk.XaikitWarning, match=r"concepts skipped \(the concepts need one layer's activations"
    ):
        res = xk.analyze.dataset(store, model=str(path), concepts=2, progress=False, **kw)
    assert res.concepts == [] and "TorchScript" in res.info["concepts_skipped"]
    ab = res.classes[1].clusters[0].ablation
    assert (ab["accuracy_before"], ab["accuracy_after"]) == (1.0, 0.0)  # the corner, as the module reads it
    with pytest.raises(XaikitValueError, match="layer: the concepts cannot read layer 'conv'"):
        xk.analyze.dataset(store, model=str(path), concepts=2, layer="conv", progress=False, **kw)


def test_a_saved_keras_model_and_a_layer_of_fewer_channels_than_concepts(tmp_path: Path) -> None:
    """A .keras file loaded again: the ablation check reads the corner as the in-memory model
    does, and concepts=2 on a one-channel layer gives one concept per class with a warning
    (before: a rank error after the clustering had run)."""
    pytest.importorskip("tensorflow")
    x, y, maps = corner_data(32)
    x, maps = np.moveaxis(x, 1, -1), np.moveaxis(maps, 1, -1)
    path = tmp_path / "corner.keras"
    corner_model_keras().save(str(path))
    store = write_store(tmp_path / "s", maps, y, y, shard_size=10, model=str(path))
    with pytest.warns(
        xk.XaikitWarning, match=r"has 1 channel\(s\): 1 concept\(s\) per class instead of concepts=2"
    ):
        res = xk.analyze.dataset(
            store, model=str(path), data=x, size=4, max_display=0, min_samples=4, fraction=4 / 64, concepts=2,
            progress=False,
        )  # fmt: skip
    assert sorted(c.klass for c in res.concepts) == [0, 1]
    ab = res.classes[1].clusters[0].ablation
    assert (ab["accuracy_before"], ab["accuracy_after"], ab["score_before"]) == (
        1.0,
        0.0,
        pytest.approx(5.0, abs=1e-5),
    )
