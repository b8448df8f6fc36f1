"""Detection targets (``xk.targets.Box``): analytic toy detectors (torch and Keras), the three
output readers (YOLO tensor, DETR-style fixed slots, torchvision list of dicts) and
pytorch-grad-cam's ``FasterRCNNBoxScoreTarget`` as the reference for the list-of-dicts score."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

torch = pytest.importorskip("torch")

H = W = 8
#: two anchors, (x0, y0, x1, y1) in pixels; their class scores read only the pixels inside them
ANCHORS = np.array([[0, 0, 4, 4], [3, 2, 8, 8]], dtype=np.float64)
#: per-class weight of a pixel (K = 3 classes); class 1 wins on positive images
CW = np.array([0.5, 2.0, -1.0])


def inside(box: np.ndarray) -> np.ndarray:
    m = np.zeros((H, W))
    x0, y0, x1, y1 = (int(v) for v in box)
    m[y0:y1, x0:x1] = 1.0
    return m


def weights() -> tuple[np.ndarray, np.ndarray]:
    """Kernel (H*W, N*K) of the class scores and bias (N*4,) of the constant boxes."""
    kernel = np.stack([np.outer(inside(a).reshape(-1), CW) for a in ANCHORS], axis=1).reshape(H * W, -1)
    return kernel, ANCHORS.reshape(-1)


class Yolo(torch.nn.Module):
    """(B, 1, H, W) -> (B, N, 4 + K): anchors' boxes then class scores = CW * sum of pixels inside."""

    def __init__(self) -> None:
        super().__init__()
        kernel, bias = weights()
        self.cls = torch.nn.Linear(H * W, kernel.shape[1], bias=False)
        self.cls.weight.data = torch.tensor(kernel.T, dtype=torch.float32)
        self.box = torch.nn.Parameter(torch.tensor(bias, dtype=torch.float32))

    def forward(self, x: Any) -> Any:
        n = x.shape[0]
        scores = self.cls(x.reshape(n, -1)).reshape(n, len(ANCHORS), len(CW))
        boxes = self.box.reshape(1, len(ANCHORS), 4).expand(n, -1, -1) + 0 * scores[..., :1]
        return torch.cat([boxes, scores], dim=-1)


class Detr(Yolo):
    """The same detector, HF DETR-style: logits (B, Q, K+1) and normalised (cx, cy, w, h) boxes."""

    def forward(self, x: Any) -> Any:
        out = super().forward(x)
        b = out[..., :4] / W
        cxcywh = torch.cat([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], dim=-1)
        logits = torch.cat([out[..., 4:], torch.zeros_like(out[..., :1])], dim=-1)
        return {"logits": logits, "pred_boxes": cxcywh}


class Listed(Yolo):
    """The same detector, torchvision-style: per image a dict of boxes, scores, labels; the
    boxes move with the pixels (so the IoU part of the score has a gradient)."""

    def forward(self, x: Any) -> Any:
        out = super().forward(x)
        shift = 0.01 * x.reshape(x.shape[0], -1).sum(dim=1)
        res = []
        for i in range(x.shape[0]):
            scores, labels = out[i, :, 4:].max(dim=-1)
            res.append({"boxes": out[i, :, :4] + shift[i], "scores": scores, "labels": labels})
        return res


def images(seed: int = 0, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.1, 1.0, (batch, 1, H, W)).astype(np.float32)


def keras_yolo() -> Any:
    keras = pytest.importorskip("keras")
    kernel, bias = weights()
    inp = keras.Input((H, W, 1))
    flat = keras.layers.Flatten()(inp)
    cls, box = keras.layers.Dense(kernel.shape[1], use_bias=False), keras.layers.Dense(bias.size)
    scores = keras.layers.Reshape((len(ANCHORS), len(CW)))(cls(flat))
    boxes = keras.layers.Reshape((len(ANCHORS), 4))(box(flat))
    model = keras.Model(inp, keras.layers.Concatenate(axis=-1)([boxes, scores]))
    cls.set_weights([kernel.astype(np.float32)])
    box.set_weights([np.zeros((H * W, bias.size), np.float32), bias.astype(np.float32)])
    return model


def vanilla(model: Any, x: np.ndarray, target: Any) -> np.ndarray:
    return np.asarray(xk.xai.explain(model, x, target=target, method="vanilla", magnitude=False))


@pytest.mark.parametrize("slot", [0, 1])
def test_yolo_box_gradient_is_the_class_weight_inside_the_box(slot: int) -> None:
    model, x = Yolo(), images()
    before = [p.detach().clone() for p in model.parameters()]
    a = vanilla(model, x, xk.targets.Box(ANCHORS[slot] + [0, 0, 0, 0.5], 1))
    expected = np.broadcast_to(CW[1] * inside(ANCHORS[slot]), (2, 1, H, W))
    np.testing.assert_allclose(a.reshape(2, 1, H, W), expected, atol=1e-6)
    assert np.all(a.reshape(2, 1, H, W)[:, :, inside(ANCHORS[slot]) == 0] == 0)
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))


def test_keras_matches_torch_on_the_same_weights() -> None:
    x = images()
    t = vanilla(Yolo(), x, xk.targets.Box(ANCHORS[1], 1)).reshape(2, H, W)
    k = vanilla(keras_yolo(), x.transpose(0, 2, 3, 1), xk.targets.Box(ANCHORS[1], 1)).reshape(2, H, W)
    np.testing.assert_allclose(k, t, atol=1e-6)
    np.testing.assert_allclose(t[0], CW[1] * inside(ANCHORS[1]), atol=1e-6)


def test_detr_fixed_slots_read_normalised_cxcywh() -> None:
    x = images()
    a = vanilla(Detr(), x, xk.targets.Box(ANCHORS[1] / W, 1))
    np.testing.assert_allclose(a.reshape(2, H, W)[1], CW[1] * inside(ANCHORS[1]), atol=1e-6)
    # SmoothGrad of a linear score is the same map (the slot is pinned on the clean pass)
    s = np.asarray(
        xk.xai.explain(
            Detr(), x, target=xk.targets.Box(ANCHORS[1] / W, 1), method="smoothgrad", magnitude=False, seed=1
        )
    )
    np.testing.assert_allclose(s, a, atol=1e-5)


def test_top_n_sums_the_models_own_best_detections() -> None:
    x = images()
    a = vanilla(Yolo(), x, xk.targets.Box(None, 1, top=2))
    expected = CW[1] * (inside(ANCHORS[0]) + inside(ANCHORS[1]))
    np.testing.assert_allclose(a.reshape(2, H, W)[0], expected, atol=1e-6)


def fake_torchvision() -> types.ModuleType:
    """pytorch-grad-cam imports torchvision only for ``ops.box_iou`` (torchvision's CUDA wheel
    does not import here): a plain-torch box_iou in its place."""

    def box_iou(a: Any, b: Any) -> Any:
        lt = torch.maximum(a[:, None, :2], b[None, :, :2])
        rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
        inter = (rb - lt).clamp(min=0).prod(dim=-1)
        area = lambda t: (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])  # noqa: E731
        return inter / (area(a)[:, None] + area(b)[None, :] - inter)

    mod = types.ModuleType("torchvision")
    mod.ops = types.SimpleNamespace(box_iou=box_iou)  # type: ignore[attr-defined]
    return mod


def grad_cam_box_target(monkeypatch: pytest.MonkeyPatch) -> Any:
    """pytorch-grad-cam's ``FasterRCNNBoxScoreTarget``, its module loaded alone (the package's
    ``__init__`` imports torchvision's transforms)."""
    spec = importlib.util.find_spec("pytorch_grad_cam")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("grad-cam is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "utils", "model_targets.py")
    monkeypatch.setitem(sys.modules, "torchvision", fake_torchvision())
    loader = importlib.util.spec_from_file_location("_grad_cam_model_targets", path)
    module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
    loader.loader.exec_module(module)  # type: ignore[union-attr]
    return module.FasterRCNNBoxScoreTarget


def test_list_of_dicts_matches_pytorch_grad_cam(monkeypatch: pytest.MonkeyPatch) -> None:
    FasterRCNNBoxScoreTarget = grad_cam_box_target(monkeypatch)

    from xaikit.backend import get_backend
    from xaikit.targets import Bound, row_scores

    model, x = Listed(), images()
    box = ANCHORS[1] + [0.5, 0, 0.5, 0]
    target = xk.targets.Box(box, 1)
    xt = torch.tensor(x, requires_grad=True)
    outs = model(xt)
    bk = get_backend(model)
    resolved = target.resolve_raw(bk, outs, 0, 2)
    tensors = {k: torch.tensor(v) for k, v in resolved.arrays.items()}
    ours = row_scores(bk, outs, torch.arange(2), resolved, tensors)
    ref = torch.cat([FasterRCNNBoxScoreTarget([1], box[None, :].astype(np.float32))(o) for o in outs])
    np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
    assert Bound(resolved, tensors).static[0] == "box_list"
    # the same vanilla-gradient map as the reference used as a callable target
    ref_fn = FasterRCNNBoxScoreTarget([1], box[None, :].astype(np.float32))
    by_ref = vanilla(model, x, lambda outs: torch.cat([ref_fn(o) for o in outs]))
    np.testing.assert_allclose(vanilla(model, x, target), by_ref, atol=1e-6)
    # a box no prediction overlaps enough scores 0 (as the reference)
    far = xk.targets.Box([6.0, 6.0, 8.0, 8.0], 1)
    with pytest.warns(xk.errors.DegenerateMapWarning, match="exactly 0"):
        np.testing.assert_array_equal(vanilla(model, x, far), 0.0)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (lambda: xk.targets.Box([0.0, 0.0, 1.0, 1.0], 1), r"target=Box.*best IoU found is 0\.062"),
        (lambda: xk.targets.Box(ANCHORS[0], 2), r"target=Box.*no detection of class 2"),
        (lambda: xk.targets.Box(ANCHORS[0], 7), r"target=Box.*label must lie in \[0, 2\]"),
        (lambda: xk.targets.Box([0, 0, 1], 1), r"target=Box\(box, \.\.\.\): box must be \(4,\) or \(2, 4\)"),
        (lambda: xk.targets.Box(ANCHORS[0], [1, 1, 1]), r"target=Box.*one per sample \(2\)"),
        (lambda: xk.targets.Box(None, 1, top=3), r"target=Box.*fewer than top=3"),
    ],
)
def test_refusals_name_target(target: Any, match: str) -> None:
    with pytest.raises(XaikitValueError, match=match):
        vanilla(Yolo(), images(), target())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"box": None, "k": 1}, r"target=Box.*either box"),
        ({"box": [0, 0, 1, 1], "k": 1, "top": 2}, r"target=Box.*not both"),
        ({"box": [0, 0, 1, 1], "k": 1, "iou": 1.5}, r"target=Box\(\.\.\., iou=\.\.\.\)"),
        ({"box": [0, 0, 1, 1], "k": 1.5}, r"target=Box\(\.\.\.\): its class"),
    ],
)
def test_bad_arguments_name_target(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises((XaikitValueError, xk.errors.XaikitTypeError), match=match):
        xk.targets.Box(**kwargs)


def test_a_classifier_output_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(H * W, 3))
    with pytest.raises(XaikitValueError, match=r"target=Box.*explains a detector"):
        vanilla(model, images(), xk.targets.Box([0, 0, 1, 1], 1))


def stacked_boxes() -> tuple[np.ndarray, np.ndarray]:
    """(B=2, T=3, 4) boxes matching anchors 0, 1, 1 of image 0 and 1, 0, 1 of image 1, labels (T,)."""
    boxes = np.stack([ANCHORS[[0, 1, 1]], ANCHORS[[1, 0, 1]]]) + [0, 0, 0, 0.25]
    return boxes, np.array([1, 1, 1])


@pytest.mark.parametrize(
    ("method", "opts"),
    [
        ("vanilla", {}),
        ("smoothgrad", {"seed": 3}),
        ("integrated", {"baseline": "zeros", "return_delta": True}),
        (
            "smint",
            {"seed": 3, "stdev_spread": 0.0, "baseline": "zeros"},
        ),  # noise draws differ per logical sample: none here
        ("input_x_gradient", {}),
    ],
)
def test_stacked_boxes_equal_the_looped_calls(method: str, opts: dict[str, Any]) -> None:
    model, x = Yolo(), images()
    boxes, k = stacked_boxes()
    stacked = xk.xai.explain(
        model, x, target=xk.targets.Box(boxes, k), method=method, magnitude=False, **opts
    )
    maps, delta = stacked if opts.get("return_delta") else (stacked, None)
    assert np.shape(maps) == (2, 3, 1, H, W)
    for t in range(3):
        one = xk.xai.explain(
            model, x, target=xk.targets.Box(boxes[:, t], int(k[t])), method=method, magnitude=False, **opts
        )
        if delta is not None:
            one, one_delta = one
            np.testing.assert_allclose(delta[:, t], one_delta, atol=1e-6)
        if method == "smoothgrad":  # other noise draws per row: the linear score's map is the same
            np.testing.assert_allclose(maps[:, t], one, atol=1e-5)
        else:
            np.testing.assert_allclose(maps[:, t], one, rtol=0, atol=1e-6)  # other chunk sums
    times_x = method in ("integrated", "smint", "input_x_gradient")
    expected = CW[1] * inside(ANCHORS[0]) * (x[0, 0] if times_x else 1.0)
    np.testing.assert_allclose(maps[0, 0, 0], expected, atol=1e-5)


def test_stacked_keras_equals_torch() -> None:
    x = images()
    boxes, k = stacked_boxes()
    t = vanilla(Yolo(), x, xk.targets.Box(boxes, k))
    kk = vanilla(
        keras_yolo(), x.transpose(0, 2, 3, 1), xk.targets.Box(boxes, np.ones((2, 3), np.int64))
    )  # (B, T)
    assert kk.shape == (2, 3, H, W, 1)
    np.testing.assert_allclose(kk[..., 0], t[:, :, 0], atol=1e-6)


def test_one_stacked_box_keeps_its_box_axis() -> None:
    """boxes (B, 1, 4) are a stack of one: maps (B, 1, ...) equal to the single-box call's (B, ...),
    so code written for T boxes does not break when T happens to be 1."""
    model, x = Yolo(), images()
    boxes, k = stacked_boxes()
    maps = vanilla(model, x, xk.targets.Box(boxes[:, :1], k[:1]))
    assert maps.shape == (2, 1, 1, H, W)
    np.testing.assert_array_equal(maps[:, 0], vanilla(model, x, xk.targets.Box(boxes[:, 0], int(k[0]))))


@pytest.mark.parametrize(
    ("boxes", "k", "match"),
    [
        (np.zeros((3, 2, 4)), 1, r"target=Box\(boxes \(B, T, 4\), k\): stacked boxes must be \(2, T, 4\)"),
        (np.zeros((2, 2, 4)), [1, 1, 1], r"target=Box\(boxes \(B, T, 4\), k\): k must be one label, \(2,\)"),
    ],
)
def test_stacked_refusals_name_target(boxes: np.ndarray, k: Any, match: str) -> None:
    with pytest.raises(XaikitValueError, match=match):
        vanilla(Yolo(), images(), xk.targets.Box(boxes, k))
