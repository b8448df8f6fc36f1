"""``explain_dataset`` with per-sample target fields: ``ClassRegion(k (N,), mask (N, H, W))``,
``Box(box (N, 4), k (N,))`` and fields read from dataset keys (``Box(box="box", k="label")``).
Each batch's maps are ``explain()``'s with the same objects; the store keeps the values
(``target_<field>`` arrays under the shards' checksums, the manifest's description), gives them
back (``targets_of``, ``target``), resumes only with the same values (others refused naming the
field) and the Ray engine gives the local bits."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from target_models import layout, linear_segmenter

import xaikit as xk
from xaikit.dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError

torch = pytest.importorskip("torch")

C, K, H, W, N = 3, 4, 4, 4, 7
BS = 3  # batches of 3, 3, 1 samples


def segmenter() -> Any:
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)
    return linear_segmenter("torch", w, b, (H, W))


def seg_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, C, H, W) images, (N,) classes and (N, H, W) bool masks (none empty, all different)."""
    rng = np.random.default_rng(1)
    x = layout("torch", rng.normal(size=(N, H, W, C)).astype(np.float32))
    k = np.array([0, 3, 1, 2, 2, 1, 0])
    masks = rng.random((N, H, W)) < 0.5
    masks[:, 0, 0] = True
    return x, k, masks


# ---- a YOLO-style detector (as tests/test_targets_box.py): class scores read inside anchors ----
DH = DW = 8
ANCHORS = np.array([[0, 0, 4, 4], [3, 2, 8, 8], [1, 1, 7, 5]], dtype=np.float64)
CW = np.array([0.5, 2.0, -1.0])


class Yolo(torch.nn.Module):
    """(B, 1, 8, 8) -> (B, 3, 4 + 3): the anchors' boxes, then class scores CW * sum inside."""

    def __init__(self) -> None:
        super().__init__()
        inside = np.zeros((len(ANCHORS), DH, DW))
        for a, (x0, y0, x1, y1) in enumerate(ANCHORS.astype(int)):
            inside[a, y0:y1, x0:x1] = 1.0
        kernel = np.einsum("ap,k->pak", inside.reshape(len(ANCHORS), -1), CW).reshape(DH * DW, -1)
        self.cls = torch.nn.Linear(DH * DW, kernel.shape[1], bias=False)
        self.cls.weight.data = torch.tensor(kernel.T, dtype=torch.float32)
        self.box = torch.nn.Parameter(torch.tensor(ANCHORS.reshape(-1), dtype=torch.float32))

    def forward(self, x: Any) -> Any:
        n = x.shape[0]
        scores = self.cls(x.reshape(n, -1)).reshape(n, len(ANCHORS), len(CW))
        boxes = self.box.reshape(1, len(ANCHORS), 4).expand(n, -1, -1) + 0 * scores[..., :1]
        return torch.cat([boxes, scores], dim=-1)


def det_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, 1, 8, 8) positive images (class 1 wins everywhere), each sample's box (an anchor,
    jittered) and label 1."""
    rng = np.random.default_rng(2)
    x = rng.uniform(0.1, 1.0, (N, 1, DH, DW)).astype(np.float32)
    which = np.array([0, 1, 2, 1, 0, 2, 1])
    boxes = ANCHORS[which] + rng.uniform(-0.2, 0.2, (N, 4))
    return x, boxes, np.ones(N, np.int64)


def per_batch(model: Any, x: np.ndarray, target_of: Any, **kw: Any) -> np.ndarray:
    """explain() batch by batch (the dataset's batches) with each batch's target object."""
    parts = [
        np.asarray(
            xk.xai.explain(model, x[s : s + BS], target=target_of(slice(s, s + BS)), method="vanilla", **kw)
        )
        for s in range(0, len(x), BS)
    ]
    return np.concatenate(parts)


def run(model: Any, data: Any, out: Path, target: Any, **kw: Any) -> Any:
    return xk.xai.explain_dataset(
        model,
        data,
        method="vanilla",
        out=out,
        batch_size=BS,
        shard_size=2 * BS,
        target=target,
        progress=False,
        **kw,
    )


def test_class_region_per_sample_k_and_mask_equal_explain_per_batch(tmp_path: Path) -> None:
    model, (x, k, masks) = segmenter(), seg_data()
    target = xk.targets.ClassRegion(k, mask=masks, reduce="mean")
    res = run(model, x, tmp_path / "s.zarr", target)
    want = per_batch(model, x, lambda s: xk.targets.ClassRegion(k[s], mask=masks[s], reduce="mean"))
    np.testing.assert_array_equal(res.attributions[:], want)
    # the maps are the samples' own: sample i's map is w[k_i] on its mask / mask size (vanilla,
    # magnitude on by default), so two samples with other masks or classes differ
    assert not np.allclose(want[1], want[2])
    # the manifest describes the per-sample fields, the store holds their values
    described = res.manifest["target"]
    assert described["k"]["per_sample"] == "array" and described["k"]["shape"] == []
    assert described["mask"] == {
        "per_sample": "array", "key": None, "shape": [H, W], "dtype": "|b1",
        "sha256": described["mask"]["sha256"],
    }  # fmt: skip
    assert (described["reduce"], described["axis"]) == ("mean", None)
    root = res.store.group(writable=False)
    np.testing.assert_array_equal(root["target_mask"][:], masks)
    np.testing.assert_array_equal(root["target_k"][:], k)
    # targets_of gives each sample's target: explain() with it gives the stored maps
    back = res.targets_of([6, 0, 3])
    assert isinstance(back, xk.targets.ClassRegion) and back.reduce == "mean"
    np.testing.assert_array_equal(back.k, k[[6, 0, 3]])
    np.testing.assert_array_equal(back.mask, masks[[6, 0, 3]])
    again = xk.xai.explain(model, x[[6, 0, 3]], target=back, method="vanilla")
    np.testing.assert_allclose(again, res.attributions[:][[6, 0, 3]], rtol=1e-6, atol=1e-7)
    whole = xk.xai.DatasetExplanation.open(tmp_path / "s.zarr").target
    np.testing.assert_array_equal(whole.mask, masks)
    assert res.per_sample_target
    # the table's score is each sample's region mean of its class's logits
    logits = np.einsum("nchw,kc->nhwk", x, np.asarray(model.weight.detach()).reshape(K, C)) + np.asarray(
        model.bias.detach()
    )
    region = [logits[i][masks[i], k[i]].mean() for i in range(N)]
    np.testing.assert_allclose(res.table["score"], region, rtol=1e-5)
    assert list(res.table["prediction"]) == [-1] * N


def test_box_per_sample_arrays_and_dataset_keys_equal_explain_per_batch(tmp_path: Path) -> None:
    model, (x, boxes, labels) = Yolo(), det_data()
    want = per_batch(model, x, lambda s: xk.targets.Box(boxes[s], labels[s]))
    # class 1's gradient is CW[1] inside the matched anchor: each sample's map shows its box
    which = np.array([0, 1, 2, 1, 0, 2, 1])
    for i, a in enumerate(which):
        x0, y0, x1, y1 = ANCHORS[a].astype(int)
        inside = np.zeros((DH, DW))
        inside[y0:y1, x0:x1] = CW[1]
        np.testing.assert_allclose(want[i, 0], inside, atol=1e-6)
    given = run(model, x, tmp_path / "a.zarr", xk.targets.Box(boxes, labels))
    np.testing.assert_array_equal(given.attributions[:], want)
    # the same values read from dataset keys: a NumpyDataset's columns, and dict samples
    table = NumpyDataset({"x": x, "box": boxes, "label": labels})
    keyed = run(model, table, tmp_path / "k.zarr", xk.targets.Box(box="box", k="label"))
    np.testing.assert_array_equal(keyed.attributions[:], want)
    assert keyed.manifest["target"]["box"] == {
        "per_sample": "key", "key": "box", "shape": [4], "dtype": "<f8", "sha256": None,
    }  # fmt: skip
    dicts = [{"image": x[i], "box": boxes[i], "y": int(labels[i])} for i in range(N)]
    listed = run(
        model, dicts_dataset(dicts), tmp_path / "d.zarr", xk.targets.Box(box="box", k=1), x_key="image"
    )
    np.testing.assert_array_equal(listed.attributions[:], want)
    for res in (given, keyed, listed):
        back = res.targets_of(np.arange(N))
        np.testing.assert_array_equal(back.box, boxes)
        assert isinstance(back, xk.targets.Box) and back.iou == 0.5
    assert listed.targets_of([2]).k == 1  # the fixed label stays one value
    np.testing.assert_allclose(
        keyed.table["score"], [x[i, 0][inside_of(boxes[i])].sum() * CW[1] for i in range(N)], rtol=1e-5
    )


def inside_of(box: np.ndarray) -> np.ndarray:
    x0, y0, x1, y1 = np.round(box).astype(int)
    m = np.zeros((DH, DW), bool)
    m[y0:y1, x0:x1] = True
    return m


class dicts_dataset:  # a map-style dataset of dict samples, as torch's Dataset
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def test_resume_keeps_the_same_values_and_refuses_others_naming_the_field(tmp_path: Path) -> None:
    model, (x, k, masks) = segmenter(), seg_data()
    out = tmp_path / "s.zarr"
    first = run(model, x, out, xk.targets.ClassRegion(k, mask=masks))
    again = run(model, x, out, xk.targets.ClassRegion(k.copy(), mask=masks.copy()))
    assert again.resumed == [0, 1] and again.explained == []
    other = masks.copy()
    other[3, 1, 1] = ~other[3, 1, 1]
    with pytest.raises(XaikitValueError, match=r"target field 'mask' \(per sample\): stored .*sha256"):
        run(model, x, out, xk.targets.ClassRegion(k, mask=other))
    with pytest.raises(XaikitValueError, match=r"target field 'k' \(per sample\): stored .*, now 2"):
        run(model, x, out, xk.targets.ClassRegion(2, mask=masks))
    np.testing.assert_array_equal(xk.xai.DatasetExplanation.open(out).attributions[:], first.attributions[:])
    # a key of another name is another target too
    model_d, (xd, boxes, labels) = Yolo(), det_data()
    table = NumpyDataset({"x": xd, "box": boxes, "other": boxes + 0.1, "label": labels})
    run(model_d, table, tmp_path / "k.zarr", xk.targets.Box(box="box", k="label"))
    with pytest.raises(
        XaikitValueError, match=r"target field 'box' \(per sample\): stored .*\"key\": \"box\""
    ):
        run(model_d, table, tmp_path / "k.zarr", xk.targets.Box(box="other", k="label"))


def test_the_checksum_covers_the_stored_target_values(tmp_path: Path) -> None:
    """A shard whose stored target values changed after its commit fails its checksum on resume
    and is redone (the values come back)."""
    model, (x, boxes, labels) = Yolo(), det_data()
    out = tmp_path / "a.zarr"
    res = run(model, x, out, xk.targets.Box(boxes, labels))
    root = res.store.group()
    root["target_box"][1] = boxes[1] + 5.0  # shard 0 (samples 0..5)
    again = run(model, x, out, xk.targets.Box(boxes, labels))
    assert again.resumed == [1] and again.explained == [0]
    np.testing.assert_array_equal(again.store.group(writable=False)["target_box"][:], boxes)
    record = json.loads((out / "shards" / "0.json").read_text())
    assert record["start"] == 0 and record["stop"] == 2 * BS


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda x, b, k: xk.targets.Box(b[:-1], k),
            XaikitValueError,
            r"target=Box\(box, k\): explain_dataset takes box as one value for every sample .* one per "
            r"dataset sample \(7, \.\.\.\)",
        ),
        (
            lambda x, b, k: xk.targets.Box(b, np.ones(N + 1, np.int64)),
            XaikitValueError,
            r"takes k as one value",
        ),
        (
            lambda x, b, k: xk.targets.Box(np.stack([b, b], axis=1), 1),
            XaikitValueError,
            r"target=Box\(box, k\): stacked boxes \(7, 2, 4\) .* explain_dataset stores one map per sample",
        ),
        (
            lambda x, b, k: xk.targets.Box(b, k.astype(np.float32)),
            XaikitTypeError,
            r"target=Box\(\.\.\.\): its class/index must be an int",
        ),
        (
            lambda x, b, k: xk.targets.Box(box="box", k=1),
            XaikitValueError,
            r"target=Box\(box=\.\.\.\) names the dataset key 'box', and array data has no named fields",
        ),
    ],
)
def test_refusals_name_target_and_the_field(tmp_path: Path, make: Any, error: type, message: str) -> None:
    model, (x, boxes, labels) = Yolo(), det_data()
    with pytest.raises(error, match=message):
        run(model, x, tmp_path / "r.zarr", make(x, boxes, labels))
    assert not (tmp_path / "r.zarr").exists()  # refused before the store is made


def test_key_refusals(tmp_path: Path) -> None:
    model, (x, boxes, labels) = Yolo(), det_data()
    with pytest.raises(
        XaikitValueError, match=r"names the key 'bbox', which is not a column of the NumpyDataset"
    ):
        run(model, NumpyDataset({"x": x, "box": boxes}), tmp_path / "a.zarr", xk.targets.Box(box="bbox", k=1))
    stacked = NumpyDataset({"x": x, "box": np.stack([boxes, boxes], axis=1)})
    with pytest.raises(XaikitValueError, match=r"stacked boxes"):
        run(model, stacked, tmp_path / "b.zarr", xk.targets.Box(box="box", k=1))
    items = [{"x": x[i], "box": boxes[i] if i < 5 else boxes[i][:2]} for i in range(N)]
    with pytest.raises(
        XaikitValueError,
        match=r"box='box': the dataset's values have different shapes .* in dataset samples 3\.\.5 \(shard 0\)",
    ):
        run(model, dicts_dataset(items), tmp_path / "c.zarr", xk.targets.Box(box="box", k=1))
    items = [{"x": x[i], "box": boxes[i] if i < 6 else boxes[i][:2]} for i in range(N)]
    with pytest.raises(
        XaikitValueError,
        match=r"box='box': samples 6\.\.6 give values of shape \(2,\), the first samples \(4,\)",
    ):
        run(model, dicts_dataset(items), tmp_path / "c2.zarr", xk.targets.Box(box="box", k=1))
    missing = [{"x": x[i], **({"box": boxes[i]} if i != 4 else {})} for i in range(N)]
    with pytest.raises(XaikitValueError, match=r"the dataset key 'box' .* is not in the .* samples"):
        run(model, dicts_dataset(missing), tmp_path / "d.zarr", xk.targets.Box(box="box", k=1))
    # explain() itself takes values, not keys
    with pytest.raises(
        XaikitTypeError, match=r"'label' names a dataset key, which only explain_dataset reads"
    ):
        xk.xai.explain(model, x[:2], target=xk.targets.Box(boxes[:2], k="label"), method="vanilla")
    # targets_of takes sample indices
    res = run(model, x, tmp_path / "e.zarr", xk.targets.Box(boxes, labels))
    with pytest.raises(
        XaikitValueError, match=r"indices must be a 1-D sequence of sample indices in \[0, 6\]"
    ):
        res.targets_of([7])


@pytest.mark.ray
def test_ray_gives_the_local_bits(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    here = str(Path(__file__).parent)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(here).parent), here, *([saved] if saved else [])])
    sys.path.insert(0, here)
    model, (x, boxes, labels) = Yolo(), det_data()
    table = NumpyDataset({"x": x, "box": boxes, "label": labels})
    local = run(model, table, tmp_path / "l.zarr", xk.targets.Box(box="box", k="label"))
    seg, (xs, k, masks) = segmenter(), seg_data()
    region = xk.targets.ClassRegion(k, mask=masks, reduce="mean")  # per-sample arrays, shipped
    seg_local = run(seg, xs, tmp_path / "sl.zarr", region)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run(
            model, table, tmp_path / "r.zarr", xk.targets.Box(box="box", k="label"), engine="ray", workers=2
        )
        seg_remote = run(seg, xs, tmp_path / "sr.zarr", region, engine="ray", workers=2)
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    np.testing.assert_array_equal(remote.attributions[:], local.attributions[:])
    root_l, root_r = local.store.group(writable=False), remote.store.group(writable=False)
    np.testing.assert_array_equal(root_r["target_box"][:], root_l["target_box"][:])
    np.testing.assert_array_equal(root_r["target_k"][:], labels)
    assert remote.complete and {r["worker"].split(":")[0] for r in remote.store.records().values()} == {"ray"}
    np.testing.assert_array_equal(seg_remote.attributions[:], seg_local.attributions[:])
    np.testing.assert_array_equal(seg_remote.targets_of(np.arange(N)).mask, masks)


def test_a_per_sample_mask_of_another_size_names_what_was_given(tmp_path: Path) -> None:
    """The first sample's mask is checked against the model's output: the message shows that
    sample's slice and also what the caller gave (the (N, H, W) array, one mask per sample)."""
    model, (x, k, _) = segmenter(), seg_data()
    wrong = np.zeros((N, H + 2, W), bool)
    with pytest.raises(
        XaikitValueError,
        match=r"mask must be \(4, 4\) .* first sample read; the target's per-sample values: "
        r"k=.*\(one per sample\), mask=.*shape \(7, 6, 4\).*\(one per sample\)",
    ):
        run(model, x, tmp_path / "m.zarr", xk.targets.ClassRegion(k, mask=wrong))
    assert not (tmp_path / "m.zarr").exists()
