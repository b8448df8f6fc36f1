"""Vision transformers: Grad-CAM and its family on token layers (B, N, C) without a hand-written
reshape (class, distillation tokens dropped by xaikit.xai.cam.tokens), checked against
Grad-CAM as pytorch-grad-cam computes it with a hand-written ``reshape_transform`` on HF transformers models built from a config
with random weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError
from xaikit.xai.cam.tokens import grid_candidates, grid_or_error, token_grid

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


class Logits(torch.nn.Module):  # type: ignore[misc]
    """An HF image classifier returning its logits tensor (what pytorch-grad-cam needs too)."""

    def __init__(self, hf: Any) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, x: Any) -> Any:
        return self.hf(pixel_values=x).logits


def _vit(distilled: bool = False) -> Any:
    torch.manual_seed(0)
    kw = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "image_size": 32,
        "patch_size": 8,
        "num_labels": 3,
        "initializer_range": 0.3,
    }
    if distilled:
        hf = transformers.DeiTForImageClassification(transformers.DeiTConfig(**kw))
    else:
        hf = transformers.ViTForImageClassification(transformers.ViTConfig(**kw))
    return Logits(hf.eval())


def _hand_gradcam(model: Any, layer: Any, x: np.ndarray, target: list[int], extra: int) -> np.ndarray:
    """Grad-CAM as pytorch-grad-cam computes it with the hand-written ``reshape_transform`` of its
    ViT tutorial (its GradCAM needs torchvision, not installed here): the layer's output and its
    gradient, hooked, reshaped to (B, C, 4, 4), channels weighted by their mean gradient, ReLU."""

    def reshape_transform(t: Any, h: int = 4, w: int = 4) -> Any:
        return t[:, extra:, :].reshape(t.size(0), h, w, t.size(2)).permute(0, 3, 1, 2)

    box: dict[str, Any] = {}

    def hook(_m: Any, _i: Any, out: Any) -> None:
        box["a"] = out
        out.register_hook(lambda g: box.__setitem__("g", g))

    handle = layer.register_forward_hook(hook)
    try:
        logits = model(torch.as_tensor(x))
        logits[torch.arange(len(x)), torch.as_tensor(target)].sum().backward()
    finally:
        handle.remove()
    model.zero_grad(set_to_none=True)
    a = reshape_transform(box["a"].detach()).double()
    g = reshape_transform(box["g"]).double()
    return torch.relu((g.mean(dim=(2, 3), keepdim=True) * a).sum(dim=1)).numpy()


def _state(model: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("distilled", "extra"), [(False, 1), (True, 2)])
def test_gradcam_on_hf_tokens_equals_pytorch_grad_cam_with_reshape(distilled: bool, extra: int) -> None:
    model = _vit(distilled)
    body = model.hf.deit if distilled else model.hf.vit
    name = ("hf.deit" if distilled else "hf.vit") + ".layers.1.layernorm_before"
    x = np.random.default_rng(0).random((2, 3, 32, 32)).astype(np.float32)
    target = [1, 2]
    before = _state(model)
    ours = xk.xai.explain(model, x, target=np.array(target), method="gradcam", layer=name, raw=True)
    after = _state(model)
    assert ours.maps.shape == (2, 4, 4)  # 16 patches, the class (and distillation) tokens dropped
    theirs = _hand_gradcam(model, body.layers[1].layernorm_before, x, target, extra)
    assert theirs.max(axis=(1, 2)).min() > 1e-3  # no map all zero
    np.testing.assert_allclose(ours.maps, theirs, rtol=1e-4, atol=1e-6)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    # the reshape given by hand gives the same maps
    hand = xk.xai.explain(
        model, x, target=np.array(target), method="gradcam", layer=name, raw=True, reshape=(4, 4)
    )
    np.testing.assert_array_equal(hand.maps, ours.maps)


@pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")
@pytest.mark.parametrize("method", ["gradcam++", "xgradcam", "layercam", "hirescam", "scorecam"])
def test_cam_family_on_deit_tokens_matches_the_hand_reshape(method: str) -> None:
    model = _vit(distilled=True)
    x = np.random.default_rng(1).random((2, 3, 32, 32)).astype(np.float32)
    name = "hf.deit.layers.0.layernorm_after"
    kw: dict[str, Any] = {"target": np.array([1, 1]), "method": method, "layer": name}
    auto = xk.xai.explain(model, x, **kw)
    hand = xk.xai.explain(model, x, reshape=(4, 4), **kw)
    assert auto.shape == (2, 32, 32)
    np.testing.assert_array_equal(auto, hand)


@pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")  # random weights
@pytest.mark.parametrize("method", ["gradcam", "vanilla", "occlusion"])
def test_hf_model_as_it_is_explains_its_logits(method: str) -> None:
    """The HF model itself (a ModelOutput comes back) gives the wrapper's maps, bit for bit:
    its ``logits`` entry is the explained output, as docs/transformers.md says."""
    wrapped = _vit(distilled=True)
    x = np.random.default_rng(2).random((2, 3, 32, 32)).astype(np.float32)
    kw: dict[str, Any] = {"target": np.array([0, 2]), "method": method}
    layer = "deit.layers.1.layernorm_before"
    own = xk.xai.explain(wrapped.hf, x, **kw, **({"layer": layer} if method == "gradcam" else {}))
    via = xk.xai.explain(wrapped, x, **kw, **({"layer": "hf." + layer} if method == "gradcam" else {}))
    assert float(np.abs(own).max()) > 0
    np.testing.assert_array_equal(own, via)


def test_token_grid_drops_leading_tokens_and_refuses_ambiguity() -> None:
    assert token_grid(197) == (14, 14)  # ViT-B/16: class token
    assert token_grid(198) == (14, 14)  # DeiT: class + distillation tokens
    assert token_grid(201) == (14, 14)  # class + 4 register tokens
    assert token_grid(196) == (14, 14) and token_grid(49) == (7, 7)  # Swin's last stage: no extra token
    assert token_grid(203) is None and token_grid(31) is None
    assert grid_candidates(9) == [(3, 3), (2, 2)]
    with pytest.raises(
        XaikitValueError, match=r"layer 'blk'.*more than one square.*3x3 \(0 leading.*reshape=\(h, w\)"
    ):
        grid_or_error(9, 8, "blk")
    with pytest.raises(
        XaikitValueError, match=r"layer 'blk'.*\(B, 31, 8\).*not a square patch grid.*reshape="
    ):
        grid_or_error(31, 8, "blk")


def test_bad_token_layer_refused_naming_the_layer() -> None:
    """Tokens (B, 31, 4) fit no square grid: refused naming the layer and the reshape to pass."""

    class Tok(torch.nn.Module):  # type: ignore[misc]
        def forward(self, t: Any) -> Any:
            return t.reshape(len(t), 31, 4)

    class Seq(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Sequential(torch.nn.Linear(12, 31 * 4), Tok())
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x: Any) -> Any:
            return self.head(self.embed(x.flatten(1)).mean(dim=1))

    torch.manual_seed(0)
    x = np.random.default_rng(0).random((2, 3, 2, 2)).astype(np.float32)
    with pytest.raises(
        XaikitValueError, match=r"layer 'embed'.*\(B, 31, 4\).*not a square patch grid.*reshape=\(h, w\)"
    ):
        xk.xai.explain(Seq(), x, target=np.array([0, 1]), method="gradcam", layer="embed")
