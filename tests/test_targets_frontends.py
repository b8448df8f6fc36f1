"""Target objects (``xk.targets``) through the front ends: ``SaliencyNet(...).get_*_masks(target=)``
and the ``Saliency`` trace (``target=``) explain a region of a 1x1-convolution segmenter exactly
as ``explain`` does, torch and Keras; ``explain_dataset`` stores them, and refuses what it cannot
store (a callable, per-sample fields of another length), naming ``target``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from target_models import channel_last, layout, linear_segmenter

import xaikit as xk
from xaikit.errors import XaikitValueError
from xaikit.trace.xai.saliency import Saliency, _mask_axis, _method_display

FRAMEWORKS = ("torch", "tf")
C, K, H, W, B = 3, 4, 4, 4, 2
MASK = np.zeros((H, W), dtype=bool)
MASK[1:3, 0:3] = True


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """(B, H, W, C) channel-last images."""
    return np.random.default_rng(1).normal(size=(B, H, W, C)).astype(np.float32)


def segmenter(framework: str, w: np.ndarray, b: np.ndarray, pool: bool = False) -> Any:
    return linear_segmenter(framework, w, b, (H, W), pool)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["get_masks", "get_integrated_masks", "get_smoothed_masks"])
def test_saliency_net_explains_a_region(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    """Raw masks of a region: the class weight inside the mask (times x for IG from a zero
    baseline), exactly 0 outside; the prediction key holds the region's clean score."""
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter(framework, w, b), "x", "score", outputs="sal", seed=0)
    x = layout(framework, images)
    opts: dict[str, Any] = {"baseline": "zeros"} if method == "get_integrated_masks" else {}
    if method == "get_smoothed_masks":
        opts = {"nsamples": 3, "magnitude": False}
    out = getattr(net, method)({"x": x}, target=xk.targets.ClassRegion(2, mask=MASK), raw=True, **opts)
    grad = np.broadcast_to(MASK[None, :, :, None] * w[2], images.shape)
    expected = grad * images if method == "get_integrated_masks" else grad
    np.testing.assert_allclose(channel_last(framework, out["sal"]), expected, rtol=1e-4, atol=1e-5)
    logits = images @ w.T + b  # (B, H, W, K)
    np.testing.assert_allclose(out["score"], logits[:, MASK, 2].sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(out["x"], x)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saliency_net_class_k_is_the_int(framework: str, weights: Any, images: np.ndarray) -> None:
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter(framework, w, b, pool=True), "x", "pred", outputs="sal", seed=0)
    x = {"x": layout(framework, images)}
    plain, wrapped = net.get_masks(x, target=1), net.get_masks(x, target=xk.targets.Class(1))
    np.testing.assert_array_equal(plain["sal"], wrapped["sal"])
    np.testing.assert_array_equal(plain["pred"], wrapped["pred"])
    assert plain["pred"].dtype.kind == "i"  # still the predicted class


def test_saliency_net_refuses_a_bad_target(weights: Any, images: np.ndarray) -> None:
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter("torch", w, b, pool=True), "x", "pred")
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*segmentation output"):
        net.get_masks({"x": layout("torch", images)}, target=xk.targets.ClassRegion(1))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saliency_trace_explains_a_region_like_explain(
    framework: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    x = layout(framework, images)
    target = xk.targets.ClassRegion(2, mask=MASK)
    trace = Saliency(
        model, "x", "score", samples={"x": x}, target=target, smoothing=0, integrating=0,
        methods={"occlusion": {"window": 2, "stride": 2}},
    )  # fmt: skip
    predictions, columns = trace.masks({"x": x})
    logits = images @ w.T + b
    np.testing.assert_allclose(predictions["score"], logits[:, MASK, 2].sum(axis=1), rtol=1e-5)
    occl = xk.xai.explain(model, x, target=target, method="occlusion", window=2, stride=2)
    shown = columns["Occlusion"][0]
    axis = _mask_axis(columns[""][0].shape, x.shape)
    direct = _method_display(xk.xai.get_method("occlusion"), occl, axis)
    np.testing.assert_allclose(shown, direct.astype(np.float32), rtol=1e-5, atol=1e-6)
    vanilla = columns[""][0]  # |gradient| display mask: zero outside the region
    assert np.all(channel_last(framework, vanilla)[:, ~MASK] == 0)
    assert np.all(channel_last(framework, vanilla)[:, MASK] > 0)
    image = trace.explain({"x": x}, title="t")
    assert image is not None


def test_saliency_trace_refuses_an_object_a_column_cannot_take(weights: Any) -> None:
    w, b = weights
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*\['eigencam'\]"):
        Saliency(segmenter("torch", w, b), "x", "y", target=xk.targets.ClassRegion(1), methods=["eigencam"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["region_mask", "region_predicted", "output", "similarity"])
def test_explain_dataset_stores_the_target_and_says_so_when_read_back(
    framework: str, kind: str, tmp_path: Any, weights: Any, images: np.ndarray
) -> None:
    """The store's maps are explain()'s with the same object, batch by batch; its manifest and
    DatasetExplanation.target say which target; score is the target's clean score."""
    w, b = weights
    model = segmenter(framework, w, b)
    x = layout(framework, np.concatenate([images, images[::-1] * 0.5, images[:1]]))  # 5 samples
    n_out = H * W * K
    target = {
        "region_mask": xk.targets.ClassRegion(2, mask=MASK, reduce="mean"),
        "region_predicted": xk.targets.ClassRegion(2),
        "output": xk.targets.Output(7),
        "similarity": xk.targets.Similarity(np.linspace(-1.0, 1.0, n_out)),
    }[kind]
    res = xk.xai.explain_dataset(
        model, x, method="vanilla", out=str(tmp_path / "s.zarr"), batch_size=2, target=target, progress=False,
        framework=None,
    )  # fmt: skip
    direct = xk.xai.explain(model, x, target=target, method="vanilla")
    np.testing.assert_allclose(res.attributions[:], direct, rtol=1e-6, atol=1e-7)
    back = xk.xai.DatasetExplanation.open(tmp_path / "s.zarr").target
    assert type(back) is type(target)
    assert res.manifest["target"]["kind"] == type(target).__name__
    if kind == "region_mask":
        assert (back.k, back.reduce, back.axis) == (2, "mean", None)
        np.testing.assert_array_equal(back.mask, MASK.astype(np.float64))
    if kind == "region_predicted":
        assert back.mask is None
    if kind == "output":
        assert back.index == 7
    if kind == "similarity":
        np.testing.assert_array_equal(back.reference, np.linspace(-1.0, 1.0, n_out))
    table = res.table
    assert list(table["prediction"]) == [-1] * 5  # a target object is not a class
    if kind == "region_mask":
        logits = channel_last(framework, np.asarray(x)) @ w.T + b
        np.testing.assert_allclose(table["score"], logits[:, MASK, 2].mean(axis=1), rtol=1e-5)
    # the same store with another target is not resumed silently
    with pytest.raises(XaikitValueError, match=r"target(: stored .*ClassRegion| field 'k': stored 2, now 1)"):
        xk.xai.explain_dataset(
            model, x, method="vanilla", out=str(tmp_path / "s.zarr"), batch_size=2,
            target=xk.targets.ClassRegion(1), progress=False,
        )  # fmt: skip


def test_explain_dataset_class_k_is_the_class(tmp_path: Any, weights: Any, images: np.ndarray) -> None:
    w, b = weights
    model = segmenter("torch", w, b, pool=True)
    x = layout("torch", images)
    res = xk.xai.explain_dataset(
        model, x, method="vanilla", out=str(tmp_path / "c.zarr"), target=xk.targets.Class(3), progress=False
    )
    np.testing.assert_array_equal(res.attributions[:], xk.xai.explain(model, x, target=3, method="vanilla"))
    assert res.manifest["target"] == {"kind": "Class", "k": 3}
    assert list(res.table["prediction"]) == list((images @ w.T + b).mean(axis=(1, 2)).argmax(-1))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (lambda out: out.sum(dim=(1, 2, 3)), "target=<lambda>: explain_dataset cannot store a callable"),
        # per-sample fields must have one value per dataset sample (B here), not B + 1
        (
            xk.targets.ClassRegion([1, 2, 3]),
            r"target=ClassRegion\(k, mask\): explain_dataset takes k as one value for every sample",
        ),
        (
            xk.targets.ClassRegion(1, mask=np.ones((B + 1, H, W))),
            r"target=ClassRegion\(k, mask\): .*takes mask as .*\(\(H, W\)\), one per dataset sample \(2, \.\.\.\)",
        ),
        (
            xk.targets.Similarity(np.ones((B + 1, H * W * K))),
            r"target=Similarity\(reference\): .*takes reference as .*\(\(D,\)\), one per dataset sample",
        ),
        (xk.targets.Output(H * W * K), r"target=Output.*index must lie"),
    ],
)
def test_explain_dataset_refuses_what_it_cannot_store_naming_target(
    target: Any, message: str, tmp_path: Any, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    with pytest.raises(XaikitValueError, match=message):
        xk.xai.explain_dataset(
            segmenter("torch", w, b), layout("torch", images), method="vanilla", out=str(tmp_path / "s.zarr"),
            target=target, progress=False,
        )  # fmt: skip
    assert not (tmp_path / "s.zarr").exists()  # refused before the store is made


def test_cli_explain_target_region(tmp_path: Any, weights: Any, images: np.ndarray, capsys: Any) -> None:
    """``--target region:K`` is ClassRegion(K) (the predicted region), ``class:K`` Class(K); a
    bad spelling is an argparse error naming --target."""
    import warnings

    import torch

    from xaikit.cli import main

    w, b = weights
    model = segmenter("torch", w, b)
    x = layout("torch", images)
    np.save(tmp_path / "x.npy", x)
    path = tmp_path / "seg.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(model, torch.zeros(1, C, H, W)).save(str(path))
    cmd = ["explain", "--model", str(path), "--data", str(tmp_path / "x.npy"), "--method", "vanilla"]
    assert main([*cmd, "--out", str(tmp_path / "r.zarr"), "--target", "region:2", "--grid-size", "0"]) == 0
    res = xk.xai.DatasetExplanation.open(tmp_path / "r.zarr")
    assert isinstance(res.target, xk.targets.ClassRegion) and res.target.k == 2 and res.target.mask is None
    expected = xk.xai.explain(model, x, target=xk.targets.ClassRegion(2), method="vanilla")
    np.testing.assert_allclose(res.attributions[:], expected, rtol=1e-6, atol=1e-7)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([*cmd, "--out", str(tmp_path / "q.zarr"), "--target", "region:two"])
    assert (
        "argument --target: expected predicted, label, class:K, region:K or output:I"
        in capsys.readouterr().err
    )
    # a region of a class the model does not have: the message names the flag
    assert main([*cmd, "--out", str(tmp_path / "k.zarr"), "--target", f"region:{K}", "--grid-size", "0"]) == 2
    assert "--target region:4" in capsys.readouterr().err
