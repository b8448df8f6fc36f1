"""Target objects (``xk.targets``) through the class-activation maps, torch and Keras on the same
weights: a segmenter ``conv1x1 -> ReLU -> conv1x1`` whose CAM layer is the ReLU, so the gradient
of any target with respect to the layer is known exactly (``dA[f, p] = sum_k T[k, p] W2[k, f]``,
T the target's weight on logit (k, p)); every gradient CAM is its formula of (A, dA), Score-CAM is
recomputed in numpy, Guided Grad-CAM is the analytic guided gradient times Grad-CAM. HiResCAM,
LayerCAM and Guided Grad-CAM of a region are exactly 0 outside it. ``Class(k)`` and a callable
picking class k are bit-equal to ``target=k`` on a classifier; Eigen-CAM (class-agnostic) refuses
an object by name; the Keras step is traced once across masks; pytorch-grad-cam's
``SemanticSegmentationTarget`` gives the same maps."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from target_models import batch, channel_last

import xaikit as xk
from xaikit.errors import XaikitValueError
from xaikit.xai.cam.formulas import gradcampp, xgradcam

# one pixel's evidence (Output) can be negative everywhere for a sample: its Grad-CAM is exactly 0
# (the health check warns); the maps are compared with their analytic values, zeros included
pytestmark = pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")

FRAMEWORKS = ("torch", "tf")
KINDS = ("region", "region_none", "output", "similarity", "callable")
GRAD_CAMS = ("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam")
C, F, K, H, W, B = 3, 5, 4, 6, 7, 2
KCLS = 2
MASK = np.zeros((H, W), dtype=bool)
MASK[1:4, 2:5] = True
PIXEL = (2, 3)  # Output's unit: class KCLS at this pixel


@pytest.fixture(scope="module")
def params() -> dict[str, np.ndarray]:
    return make_params()


def make_params() -> dict[str, np.ndarray]:
    """The weights of :func:`build`, the images and a similarity reference (seeded)."""
    rng = np.random.default_rng(0)
    return {
        "w1": rng.normal(size=(F, C)).astype(np.float32),
        "b1": rng.normal(size=F).astype(np.float32),
        "w2": rng.normal(size=(K, F)).astype(np.float32),
        "b2": rng.normal(size=K).astype(np.float32),
        "x": rng.normal(size=(B, H, W, C)).astype(np.float32),  # channel-last images
        "ref": rng.normal(size=(K, H, W)).astype(np.float32),  # a similarity reference, (K, H, W)
    }


def build(framework: str, p: dict[str, np.ndarray], pool: bool = False) -> Any:
    """conv1x1 (C -> F) -> ReLU (the CAM layer: "1" in torch, "relu" in Keras) -> conv1x1 (F -> K),
    and with ``pool`` a global average pooling to (B, K) (a classifier)."""
    if framework == "torch":
        import torch

        c1, c2 = torch.nn.Conv2d(C, F, 1), torch.nn.Conv2d(F, K, 1)
        with torch.no_grad():
            c1.weight.copy_(torch.as_tensor(p["w1"][:, :, None, None]))
            c1.bias.copy_(torch.as_tensor(p["b1"]))
            c2.weight.copy_(torch.as_tensor(p["w2"][:, :, None, None]))
            c2.bias.copy_(torch.as_tensor(p["b2"]))
        tail = [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()] if pool else []
        return torch.nn.Sequential(c1, torch.nn.ReLU(), c2, *tail)
    import keras

    inp = keras.Input((H, W, C))
    c1, c2 = keras.layers.Conv2D(F, 1), keras.layers.Conv2D(K, 1)
    out = c2(keras.layers.ReLU(name="relu")(c1(inp)))
    if pool:
        out = keras.layers.GlobalAveragePooling2D()(out)
    model = keras.Model(inp, out)
    c1.set_weights([p["w1"].T[None, None], p["b1"]])
    c2.set_weights([p["w2"].T[None, None], p["b2"]])
    return model


def layer_of(framework: str) -> str:
    return "1" if framework == "torch" else "relu"


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, A, logits) channel-first, float64: pre-activation, the ReLU's output, the logits."""
    z = np.einsum("fc,bhwc->bfhw", p["w1"], x.astype(np.float64)) + p["b1"][None, :, None, None]
    a = np.maximum(z, 0.0)
    logits = np.einsum("kf,bfhw->bkhw", p["w2"], a) + p["b2"][None, :, None, None]
    return z, a, logits


def majority(p: dict[str, np.ndarray]) -> list[int]:
    """Each sample's most predicted class (its predicted region is not empty)."""
    labels = forward(p, p["x"])[2].argmax(axis=1).reshape(B, -1)
    return [int(np.bincount(row, minlength=K).argmax()) for row in labels]


def target_of(kind: str, framework: str, p: dict[str, np.ndarray]) -> Any:
    """The target object of ``kind`` for the framework (the same scalar in both layouts)."""
    if kind == "region":
        return xk.targets.ClassRegion(KCLS, mask=MASK)
    if kind == "region_none":
        return xk.targets.ClassRegion(majority(p))
    if kind == "output":
        h, w = PIXEL
        flat = KCLS * H * W + h * W + w if framework == "torch" else h * W * K + w * K + KCLS
        return xk.targets.Output(flat)
    if kind == "similarity":
        ref = p["ref"] if framework == "torch" else p["ref"].transpose(1, 2, 0)
        return xk.targets.Similarity(ref.reshape(-1), normalize=False)
    if framework == "torch":
        import torch

        m = torch.as_tensor(MASK.astype(np.float32))

        def region(out: Any) -> Any:
            return (out[:, KCLS] * m).sum(dim=(1, 2))

        return region
    import keras

    mk = keras.ops.convert_to_tensor(MASK.astype(np.float32))

    def region_k(out: Any) -> Any:
        return keras.ops.sum(out[..., KCLS] * mk, axis=(1, 2))

    return region_k


def weights_of(kind: str, logits: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """T (B, K, H, W): each logit's weight in the target's score (linear in the logits)."""
    t = np.zeros(logits.shape)
    if kind in ("region", "callable"):
        t[:, KCLS] = MASK
    elif kind == "region_none":
        for i, k in enumerate(majority(p)):
            t[i, k] = logits[i].argmax(axis=0) == k
    elif kind == "output":
        t[:, KCLS, PIXEL[0], PIXEL[1]] = 1.0
    else:
        t[:] = p["ref"][None]
    return t


def score_of(kind: str, logits: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (logits * t).sum(axis=(1, 2, 3))


def expected_cam(method: str, a: np.ndarray, da: np.ndarray) -> np.ndarray:
    if method == "gradcam":
        return np.maximum((da.mean(axis=(2, 3), keepdims=True) * a).sum(axis=1), 0)
    if method == "hirescam":
        return np.maximum((da * a).sum(axis=1), 0)
    if method == "layercam":
        return np.maximum((np.maximum(da, 0) * a).sum(axis=1), 0)
    return {"gradcam++": gradcampp, "xgradcam": xgradcam}[method](a, da)


def explain(framework: str, model: Any, p: dict[str, np.ndarray], target: Any, method: str, **kw: Any) -> Any:
    return xk.xai.explain(
        model, batch(framework, p["x"]), target=target, method=method, layer=layer_of(framework), **kw
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradient_cams_are_their_formula_of_the_analytic_layer_gradient(
    framework: str, kind: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    _, a, logits = forward(params, params["x"])
    t = weights_of(kind, logits, params)
    da = np.einsum("bkhw,kf->bfhw", t, params["w2"].astype(np.float64))
    target = target_of(kind, framework, params)
    for method in GRAD_CAMS:
        got = explain(framework, model, params, target, method, raw=True).maps
        want = expected_cam(method, a, da)
        assert np.abs(want).max() > 0, method
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max(), err_msg=method)
        if method in ("hirescam", "layercam") and kind != "similarity":  # pixelwise: 0 off the region
            off = t.sum(axis=1) == 0
            assert np.all(got[off] == 0), method


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["region", "output", "similarity"])
def test_scorecam_scores_the_target_of_each_masked_image(
    framework: str, kind: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    _, a, logits = forward(params, params["x"])
    t = weights_of(kind, logits, params)
    lo, hi = a.min(axis=(2, 3), keepdims=True), a.max(axis=(2, 3), keepdims=True)
    masks = (a - lo) / (hi - lo + 1e-8)  # (B, F, H, W): the layer is at the image's resolution
    scores = np.zeros((B, F))
    for c in range(F):
        _, _, lg = forward(params, params["x"] * masks[:, c, :, :, None])
        scores[:, c] = score_of(kind, lg, t)
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    want = np.maximum(np.einsum("bc,bchw->bhw", w, a), 0)
    got = explain(framework, model, params, target_of(kind, framework, params), "scorecam", raw=True).maps
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", KINDS)
def test_guided_gradcam_is_the_analytic_guided_gradient_times_gradcam(
    framework: str, kind: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    z, a, logits = forward(params, params["x"])
    t = weights_of(kind, logits, params)
    da = np.einsum("bkhw,kf->bfhw", t, params["w2"].astype(np.float64))
    guided = np.einsum("bfhw,fc->bhwc", da * (da > 0) * (z > 0), params["w1"].astype(np.float64))
    want = guided * expected_cam("gradcam", a, da)[..., None]
    got = channel_last(
        framework, explain(framework, model, params, target_of(kind, framework, params), "guided_gradcam")
    )
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    if kind != "similarity":
        assert np.all(got[t.sum(axis=1) == 0] == 0)


@pytest.mark.parametrize("kind", KINDS)
def test_torch_and_keras_cams_agree_on_the_same_weights(kind: str, params: dict[str, np.ndarray]) -> None:
    models = {fw: build(fw, params) for fw in FRAMEWORKS}
    for method in (*GRAD_CAMS, "scorecam"):
        maps = [
            explain(fw, models[fw], params, target_of(kind, fw, params), method, raw=True).maps
            for fw in FRAMEWORKS
        ]
        np.testing.assert_allclose(
            maps[0], maps[1], rtol=1e-4, atol=1e-5 * np.abs(maps[0]).max(), err_msg=method
        )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_similarity_normalized_cam_matches_the_cosine_gradient(
    framework: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    _, a, logits = forward(params, params["x"])
    emb = logits.reshape(B, -1)
    r = params["ref"].reshape(-1).astype(np.float64)
    r = r / np.linalg.norm(r)
    norm = np.linalg.norm(emb, axis=1, keepdims=True)
    grad_emb = r[None] / norm - (emb @ r)[:, None] * emb / norm**3  # d cos / d emb
    da = np.einsum("bkhw,kf->bfhw", grad_emb.reshape(logits.shape), params["w2"].astype(np.float64))
    ref = params["ref"] if framework == "torch" else params["ref"].transpose(1, 2, 0)
    got = explain(framework, model, params, xk.targets.Similarity(ref.reshape(-1)), "hirescam", raw=True).maps
    want = expected_cam("hirescam", a, da)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_class_object_and_callable_are_bit_equal_to_an_int_target(
    framework: str, params: dict[str, np.ndarray]
) -> None:
    """On a classifier: Class(k) and a callable picking class k give target=k's maps bit for bit,
    for every CAM that takes a target; the model's weights are unchanged."""
    model = build(framework, params, pool=True)
    if framework == "torch":
        before = [t.detach().clone() for t in model.state_dict().values()]

        def pick(out: Any) -> Any:
            return out[:, 1]
    else:
        before = [np.array(v) for v in model.get_weights()]

        def pick(out: Any) -> Any:
            return out[:, 1]

    for method in (*GRAD_CAMS, "scorecam", "guided_gradcam"):
        raw = {"raw": True} if method != "guided_gradcam" else {}
        ref = explain(framework, model, params, 1, method, **raw)
        ref = ref.maps if raw else np.asarray(ref)
        for target in (xk.targets.Class(1), pick):
            got = explain(framework, model, params, target, method, **raw)
            np.testing.assert_array_equal(got.maps if raw else np.asarray(got), ref, err_msg=method)
    after = [t.detach() for t in model.state_dict().values()] if framework == "torch" else model.get_weights()
    for u, v in zip(before, after):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_eigencam_refuses_a_target_object_and_keeps_ignoring_classes(
    framework: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    with pytest.raises(
        XaikitValueError,
        match=r"target=ClassRegion\(\.\.\.\) \(a target object\) is not taken by this method.*: vanilla, ",
    ):
        explain(framework, model, params, xk.targets.ClassRegion(KCLS, mask=MASK), "eigencam")
    classifier = build(framework, params, pool=True)
    none = explain(framework, classifier, params, None, "eigencam", raw=True).maps
    np.testing.assert_array_equal(explain(framework, classifier, params, 3, "eigencam", raw=True).maps, none)


def test_eigencam_of_a_segmenter_is_the_same_in_torch_and_keras(params: dict[str, np.ndarray]) -> None:
    """The torch CAM facet finds and reads the layer whatever the model returns (it read a
    (B, classes) output before, and a segmenter's (B, K, H, W) was refused while probing)."""
    maps = [explain(fw, build(fw, params), params, None, "eigencam", raw=True).maps for fw in FRAMEWORKS]
    assert np.abs(maps[0]).max() > 0
    np.testing.assert_allclose(maps[0], maps[1], rtol=1e-4, atol=1e-5 * np.abs(maps[0]).max())


def test_cam_bad_targets_are_refused_naming_target(params: dict[str, np.ndarray]) -> None:
    model = build("torch", params)
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*mask must be"):
        explain("torch", model, params, xk.targets.ClassRegion(KCLS, mask=np.ones((3, 3))), "gradcam")
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*class"):
        explain("torch", model, params, xk.targets.ClassRegion(K), "scorecam")
    with pytest.raises(XaikitValueError, match=r"target=.*one score per row"):
        explain("torch", model, params, lambda out: out.sum(), "hirescam")


def test_keras_cam_step_traced_once_for_new_masks(params: dict[str, np.ndarray]) -> None:
    model = build("tf", params)
    bk = xk.backend.get_backend(model)
    for i in range(3):
        mask = np.zeros((H, W), dtype=bool)
        mask[i : i + 2, :] = True
        explain("tf", model, params, xk.targets.ClassRegion(i, mask=mask), "gradcam", raw=True)
        explain("tf", model, params, xk.targets.ClassRegion(i, mask=mask), "guided_gradcam")
    assert bk.traces(model, "cam_grad") == 1
    assert bk.traces(model, "guided") == 1


def _gradcam_peer(name: str) -> Callable[..., Any]:
    from benchmarks._gradcam import CLASSES, load_modules

    module, cls = CLASSES[name]
    return getattr(load_modules([module])[module], cls)  # type: ignore[no-any-return]


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "pytorch_grad_cam", "ttach", "cv2")),
    reason="pytorch-grad-cam is not installed (pip install --no-deps grad-cam ttach)",
)
@pytest.mark.parametrize("method", ["gradcam", "hirescam", "layercam"])
def test_matches_pytorch_grad_cam_semantic_segmentation_target(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small segmentation CNN (conv encoder with a stride, a 1x1 segmentation head, bilinear
    upsampling to the input: (B, K, H, W)): pytorch-grad-cam's SemanticSegmentationTarget(k, mask)
    on the encoder's last layer gives our maps for ClassRegion(k, mask=mask), raw, per sample."""
    import torch

    from benchmarks._gradcam import load_modules

    torch.manual_seed(0)

    class Seg(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
            )  # fmt: skip
            self.head = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x: Any) -> Any:
            y = self.head(self.encoder(x))
            return torch.nn.functional.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=False)

    model = Seg().eval()
    x = torch.randn(2, 3, 16, 16)
    mask = np.zeros((16, 16), dtype=np.float32)
    mask[3:11, 5:14] = 1.0
    k = 1
    ours = xk.xai.explain(
        model, x, target=xk.targets.ClassRegion(k, mask=mask), method=method, layer="encoder.3", raw=True
    ).maps
    mods = load_modules(["base_cam", "utils.model_targets"])
    monkeypatch.setattr(mods["base_cam"], "scale_cam_image", lambda cam, target_size=None: cam)
    seg_target = mods["utils.model_targets"].SemanticSegmentationTarget
    with _gradcam_peer(method)(model=model, target_layers=[model.encoder[3]]) as cam:
        theirs = cam(input_tensor=x, targets=[seg_target(k, mask) for _ in range(2)])
    assert np.abs(theirs).max() > 0
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
