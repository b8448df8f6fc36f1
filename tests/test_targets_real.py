"""Target objects on real architectures built from tiny configs with random weights (nothing is
downloaded): Hugging Face Segformer (``ClassRegion``), DETR with a ResNet backbone from a config
and YOLOS (``Box``, single and stacked), CLIP (``Similarity`` of the image embedding to a text
embedding), Swin and ViT on non-square inputs (Grad-CAM on token layers without ``reshape=``), and
a Keras U-Net saved to ``.keras`` and loaded.

Each check is against an independent computation: the region / box / similarity score computed
by hand from the model's outputs and differentiated with ``torch.autograd``, Grad-CAM from a
hooked layer reshaped by hand, the deletion curve's end points as the region's score on the
image and on the baseline. Models are left exactly as they were.

Budget (2 CPU cores): the whole file 29 s in one process at load ~1.5, 50 s at load ~3.4;
at load ~1.5: Segformer 8 s for both regions (most of it the first explain call's imports),
DETR 0.3 s, YOLOS 0.1 s, CLIP 0.1 s, Swin / ViT grids 0.3 s, the Keras U-Net 17 s of which
8 s import TensorFlow (marked slow); the rest is importing transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
T = xk.targets

#: classes of the segmenters and detectors
K = 3


def _state(model: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _unchanged(model: Any, before: dict[str, np.ndarray]) -> None:
    after = _state(model)
    assert after.keys() == before.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert not model.training and all(p.grad is None for p in model.parameters())


def _images(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def _autograd(model: Any, x: np.ndarray, score: Any) -> np.ndarray:
    """d sum_b score(model(x))_b / dx: the reference vanilla gradient of a score by hand."""
    xt = torch.tensor(x, requires_grad=True)
    score(model(xt)).sum().backward()
    model.zero_grad(set_to_none=True)
    return xt.grad.numpy().astype(np.float64)


def _close(ours: Any, theirs: np.ndarray, rtol: float = 1e-4) -> None:
    """Equal up to ``rtol`` of the largest magnitude of the reference, which is not all zero."""
    ours = np.asarray(ours, dtype=np.float64)
    scale = float(np.abs(theirs).max())
    assert scale > 0
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=rtol * scale)


# --------------------------------------------------------------------------------------------
# Segformer: ClassRegion


def _segformer() -> Any:
    torch.manual_seed(0)
    config = transformers.SegformerConfig(
        num_channels=3,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=16,
        num_labels=K,
    )
    return transformers.SegformerForSemanticSegmentation(config).eval()


SEG_MASK = np.zeros((8, 8), dtype=bool)  # logits are (B, K, H/4, W/4) = (2, 3, 8, 8)
SEG_MASK[2:6, 1:5] = True


def _region_score(k: int, mask: np.ndarray | None, x: np.ndarray, model: Any) -> Any:
    """ClassRegion(k, mask)'s score by hand: class k's logits summed over the mask (None: the
    pixels whose argmax on the clean input is k)."""
    if mask is None:
        with torch.no_grad():
            mask = (model(torch.as_tensor(x)).logits.argmax(dim=1) == k).numpy()
    m = torch.as_tensor(np.broadcast_to(mask, (len(x), 8, 8)).astype(np.float32))
    return lambda out: (out.logits[:, k] * m).sum(dim=(1, 2))


@pytest.mark.parametrize("masked", [True, False])
def test_segformer_class_region_through_the_method_families(masked: bool) -> None:
    """vanilla equals autograd of the region score; IG's completeness delta is small; Grad-CAM
    (default layer), occlusion, LRP and feature ablation give finite, nonzero maps; the model is
    unchanged. ~3 s each."""
    model, x = _segformer(), _images((2, 3, 32, 32))
    with torch.no_grad():
        pred = model(torch.as_tensor(x)).logits.argmax(dim=1).numpy()
    k = int(np.bincount(pred.reshape(-1), minlength=K).argmax())  # the class predicted most
    mask = SEG_MASK if masked else None
    target = T.ClassRegion(k, mask=mask)
    before = _state(model)
    ours = xk.xai.explain(model, x, target=target, method="vanilla", magnitude=False)
    _close(ours, _autograd(model, x, _region_score(k, mask, x, model)))
    # a zeros baseline is no use here: the patch embedding's LayerNorm makes f(a x) nearly
    # constant in a > 0 and the path's change happens at a ~ 0 (IG sums to ~0, delta ~ -gap);
    # from another image the path is smooth: |delta| < 1% of |gap| at 64 steps (measured)
    base = _images(x.shape, seed=9)
    ig, delta = xk.xai.explain(
        model, x, target=target, method="integrated", baseline=base, nsamples=128, return_delta=True
    )
    with torch.no_grad():
        score = _region_score(k, mask, x, model)
        gap = (score(model(torch.as_tensor(x))) - score(model(torch.as_tensor(base)))).numpy()
    assert np.all(np.abs(delta) < 0.03 * np.abs(gap)), (delta, gap)
    maps = {"integrated": np.asarray(ig)}
    for method, kw in [
        ("gradcam", {}),
        ("occlusion", {"window": 8, "stride": 8}),
        ("lrp", {}),
        ("feature_ablation", {"segments": 16}),
    ]:
        maps[method] = np.asarray(xk.xai.explain(model, x, target=target, method=method, **kw))
    for method, a in maps.items():
        assert a.shape[0] == 2 and np.all(np.isfinite(a)), method
        assert np.all(np.abs(a).reshape(2, -1).max(axis=1) > 0), method
    _unchanged(model, before)


def test_segformer_deletion_scores_the_same_region() -> None:
    """The deletion curve of a region starts at the region's score on the image and ends at its
    score on the baseline (all pixels deleted), both computed by hand."""
    model, x = _segformer(), _images((2, 3, 32, 32), seed=1)
    k = 1
    saliency = np.random.default_rng(2).random((2, 32, 32)).astype(np.float32)
    r = xk.evaluate.deletion(
        model, x, saliency, target=T.ClassRegion(k, mask=SEG_MASK), steps=4, baseline="zeros"
    )
    score = _region_score(k, SEG_MASK, x, model)
    with torch.no_grad():
        clean = score(model(torch.as_tensor(x))).numpy()
        empty = score(model(torch.zeros(2, 3, 32, 32))).numpy()
    np.testing.assert_allclose(r.scores[:, 0], clean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r.scores[:, -1], empty, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# DETR (ResNet backbone from a config, no timm) and YOLOS: Box


def _detr() -> Any:
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", out_features=["stage2"]
    )
    config = transformers.DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_queries=5,
        num_labels=K,
    )
    return transformers.DetrForObjectDetection(config).eval()


def _yolos() -> Any:
    torch.manual_seed(0)
    config = transformers.YolosConfig(
        image_size=[32, 32],
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_detection_tokens=5,
        num_labels=K,
    )
    return transformers.YolosForObjectDetection(config).eval()


def _picks(model: Any, x: np.ndarray, queries: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each image's query ``queries[b]``: its box as (x0, y0, x1, y1) fractions and its label
    (argmax over the real classes): a detection the model makes, to explain."""
    with torch.no_grad():
        out = model(torch.as_tensor(x))
    logits, boxes = out.logits.numpy(), out.pred_boxes.numpy().astype(np.float64)
    picked = np.stack([boxes[b, q] for b, q in enumerate(queries)])
    xyxy = np.concatenate([picked[:, :2] - picked[:, 2:] / 2, picked[:, :2] + picked[:, 2:] / 2], axis=1)
    labels = np.array([int(logits[b, q, :-1].argmax()) for b, q in enumerate(queries)])
    return xyxy, labels


@pytest.mark.parametrize("name", ["detr", "yolos"])
def test_box_reads_the_matched_querys_logit(name: str) -> None:
    """DETR builds from a ResNetConfig backbone without timm; Box's score is the class logit of
    the query whose box it names (the deletion curve's first point equals that logit picked by
    hand, the vanilla gradient equals its autograd); stacked (B, T, 4) boxes equal the T single
    calls. ~2 s each."""
    model = _detr() if name == "detr" else _yolos()
    assert name == "yolos" or not model.config.use_timm_backbone
    x = _images((2, 3, 32, 32), seed=3)
    before = _state(model)
    singles = []
    for queries in ([0, 3], [2, 4]):
        boxes, labels = _picks(model, x, queries)
        target = T.Box(boxes, labels)
        ours = xk.xai.explain(model, x, target=target, method="vanilla", magnitude=False)

        def logit(out: Any, q: list[int] = queries, lab: np.ndarray = labels) -> Any:
            return out.logits[torch.arange(2), torch.as_tensor(q), torch.as_tensor(lab)]

        _close(ours, _autograd(model, x, logit), rtol=1e-3 if name == "detr" else 1e-4)
        # the score itself: a deletion curve's first point is the box's score on the image
        r = xk.evaluate.deletion(model, x, np.asarray(ours)[:, 0], target=target, steps=1)
        with torch.no_grad():
            hand = logit(model(torch.as_tensor(x))).numpy()
        np.testing.assert_allclose(r.scores[:, 0], hand, rtol=1e-4, atol=1e-6)  # float32 batching
        singles.append((boxes, labels, np.asarray(ours)))
    stacked_box = np.stack([s[0] for s in singles], axis=1)  # (B, T=2, 4)
    stacked_k = np.stack([s[1] for s in singles], axis=1)  # (B, T)
    stacked = np.asarray(
        xk.xai.explain(model, x, target=T.Box(stacked_box, stacked_k), method="vanilla", magnitude=False)
    )
    assert stacked.shape == (2, 2) + singles[0][2].shape[1:]
    for t, (_, _, one) in enumerate(singles):
        np.testing.assert_allclose(stacked[:, t], one, rtol=1e-5, atol=1e-7)
    _unchanged(model, before)


# --------------------------------------------------------------------------------------------
# CLIP: Similarity of the image embedding to a text embedding


class ImageEmbedding(torch.nn.Module):  # type: ignore[misc]
    """CLIP's image tower and projection: pixels (B, 3, H, W) -> image embeddings (B, D), what
    ``Similarity`` reads (the recipe of docs/tasks.md)."""

    def __init__(self, clip: Any) -> None:
        super().__init__()
        self.clip = clip

    def forward(self, pixel_values: Any) -> Any:
        pooled = self.clip.vision_model(pixel_values=pixel_values).pooler_output
        return self.clip.visual_projection(pooled)


def _clip() -> Any:
    torch.manual_seed(0)
    text = {
        "vocab_size": 64,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "max_position_embeddings": 8,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
    }
    vision = {
        "image_size": 32,
        "patch_size": 8,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)
    return transformers.CLIPModel(config).eval()


def test_clip_image_text_similarity_is_autograd_of_the_cosine() -> None:
    """The text embedding of a token sequence is the reference; the vanilla gradient of
    Similarity equals autograd of the cosine computed by hand; the wrapper's embeddings are
    CLIPModel's own ``image_embeds`` (up to their normalisation)."""
    clip = _clip()
    model = ImageEmbedding(clip).eval()
    x = _images((2, 3, 32, 32), seed=4)
    ids = torch.tensor([[0, 5, 9, 17, 1]])
    with torch.no_grad():
        text = clip.text_projection(clip.text_model(input_ids=ids).pooler_output)[0].numpy()
        full = clip(input_ids=ids, pixel_values=torch.as_tensor(x))
        emb = model(torch.as_tensor(x))
    np.testing.assert_allclose(
        full.image_embeds.numpy(), (emb / emb.norm(dim=-1, keepdim=True)).numpy(), rtol=1e-5, atol=1e-6
    )
    before = _state(model)
    ours = xk.xai.explain(model, x, target=T.Similarity(text), method="vanilla", magnitude=False)
    ref = torch.as_tensor(text)

    def cosine(e: Any) -> Any:
        return torch.nn.functional.cosine_similarity(e, ref[None], dim=-1)

    _close(ours, _autograd(model, x, cosine))
    _unchanged(model, before)


# --------------------------------------------------------------------------------------------
# Swin and ViT: Grad-CAM on token layers, square and non-square inputs


def _swin() -> Any:
    torch.manual_seed(0)
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=2, num_labels=K
    )
    return transformers.SwinForImageClassification(config).eval()


def _vit() -> Any:
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=K,
        initializer_range=0.3,
    )
    return transformers.ViTForImageClassification(config).eval()


def _hand_gradcam(
    model: Any, layer: Any, x: np.ndarray, k: list[int], grid: tuple[int, int], kwargs: dict[str, Any]
) -> np.ndarray:
    """Grad-CAM with a hand-written reshape: the layer's (B, N, C) output hooked, its last h*w
    tokens laid on the (h, w) grid in row-major order, channels weighted by their mean gradient."""
    box: dict[str, Any] = {}

    def hook(_m: Any, _i: Any, out: Any) -> None:
        box["a"] = out
        out.register_hook(lambda g: box.__setitem__("g", g))

    h, w = grid

    def grid_of(t: Any) -> Any:
        return t[:, t.shape[1] - h * w :].reshape(t.shape[0], h, w, t.shape[2]).permute(0, 3, 1, 2).double()

    handle = layer.register_forward_hook(hook)
    try:
        logits = model(torch.as_tensor(x), **kwargs).logits
        logits[torch.arange(len(x)), torch.as_tensor(k)].sum().backward()
    finally:
        handle.remove()
    model.zero_grad(set_to_none=True)
    a, g = grid_of(box["a"].detach()), grid_of(box["g"])
    return torch.relu((g.mean(dim=(2, 3), keepdim=True) * a).sum(dim=1)).numpy()


@pytest.mark.parametrize(
    ("name", "layer", "size", "grid"),
    [
        ("swin", "swin.layernorm", (32, 32), (4, 4)),  # the last stage, (B, 16, C)
        ("swin", "swin.layernorm", (32, 48), (4, 6)),
        ("swin", "swin.encoder.layers.0.blocks.0.layernorm_after", (32, 48), (8, 12)),  # un-windowed
        ("vit", "vit.layers.0.layernorm_before", (32, 48), (4, 6)),  # class token + 4x6
        ("vit", "vit.layers.0.layernorm_before", (48, 32), (6, 4)),
    ],
)
def test_gradcam_on_tokens_follows_the_images_aspect_ratio(
    name: str, layer: str, size: tuple[int, int], grid: tuple[int, int]
) -> None:
    """Swin's stages (no class token; HF un-windows its hidden states) and a ViT fed a
    non-square image (``interpolate_pos_encoding=True``): Grad-CAM without ``reshape=`` equals
    Grad-CAM with the reshape written by hand on the grid of the image's aspect ratio (before,
    only square grids were found: the ViT's 1 + 4x6 = 25 tokens were read as a 5x5 grid)."""
    model = _swin() if name == "swin" else _vit()
    kwargs = {"interpolate_pos_encoding": True} if name == "vit" else {}
    x = _images((2, 3) + size, seed=5)
    k = [0, 2]
    before = _state(model)
    ours = xk.xai.explain(
        model, x, target=np.array(k), method="gradcam", layer=layer, raw=True, model_kwargs=kwargs or None
    )
    assert ours.maps.shape == (2,) + grid
    theirs = _hand_gradcam(model, model.get_submodule(layer), x, k, grid, kwargs)
    assert theirs.max(axis=(1, 2)).min() > 0
    np.testing.assert_allclose(ours.maps, theirs, rtol=1e-4, atol=1e-7)
    hand = xk.xai.explain(
        model,
        x,
        target=np.array(k),
        method="gradcam",
        layer=layer,
        raw=True,
        reshape=grid,
        model_kwargs=kwargs or None,
    )
    np.testing.assert_array_equal(hand.maps, ours.maps)
    _unchanged(model, before)


def test_non_square_token_count_that_fits_no_grid_is_refused_by_name() -> None:
    """A 32 x 40 image cut by 8-pixel patches is 4x5 tokens (ratio 4:5 = the image's): found. A
    32 x 44 one is 4x5 too (44 is no multiple of 8), whose ratio is not the image's: refused,
    naming the layer, the image's ratio and reshape=, which then works."""
    model = _vit()
    kw = {"interpolate_pos_encoding": True}
    layer = "vit.layers.0.layernorm_before"
    ok = xk.xai.explain(
        model,
        _images((1, 3, 32, 40)),
        target=np.array([1]),
        method="gradcam",
        layer=layer,
        raw=True,
        model_kwargs=kw,
    )
    assert ok.maps.shape == (1, 4, 5)
    x = _images((1, 3, 32, 44))
    with pytest.raises(
        xk.errors.XaikitValueError, match=r"'vit\.layers.*\(B, 21, 16\).*not a 32:44.*reshape="
    ):
        xk.xai.explain(model, x, target=np.array([1]), method="gradcam", layer=layer, model_kwargs=kw)
    hand = xk.xai.explain(
        model,
        x,
        target=np.array([1]),
        method="gradcam",
        layer=layer,
        raw=True,
        reshape=(4, 5),
        model_kwargs=kw,
    )
    assert hand.maps.shape == (1, 4, 5)


def test_concepts_on_a_non_square_swin_stage() -> None:
    """CRAFT's layer reader lays a Swin stage of a 32 x 48 image on its 4 x 6 grid too."""
    model = _swin()
    x = np.abs(_images((4, 3, 32, 48), seed=8))
    before = _state(model)
    found = xk.analyze.extract_concepts(model, x, 1, layer="swin.layernorm", rank=2, batch_size=2)
    assert found.coefficients.shape == (4, 4, 6, 2) and found.heatmaps.shape[2:] == (32, 48)
    assert np.all(np.isfinite(found.coefficients)) and found.coefficients.max() > 0
    _unchanged(model, before)


def test_token_input_without_an_image_keeps_the_square_grid() -> None:
    """A model fed tokens (B, 17, 4) directly has no 4-D image whose ratio a grid could follow:
    its token layer is read as before, 1 leading token + a 4x4 grid (not a 17:4 one)."""

    class Tokens(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.mix = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, K)

        def forward(self, t: Any) -> Any:
            return self.head(torch.tanh(self.mix(t)).mean(dim=1))

    torch.manual_seed(0)
    model, x = Tokens().eval(), _images((2, 17, 4), seed=7)
    kw: dict[str, Any] = {"target": np.array([0, 1]), "method": "gradcam", "layer": "mix", "raw": True}
    r = xk.xai.explain(model, x, **kw)
    hand = xk.xai.explain(model, x, reshape=(4, 4), **kw)
    assert r.maps.shape == (2, 4, 4)
    np.testing.assert_array_equal(r.maps, hand.maps)


# --------------------------------------------------------------------------------------------
# Keras U-Net: save / load


def _unet() -> Any:
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((16, 16, 3))
    d1 = L.Conv2D(8, 3, padding="same", activation="relu", name="down1")(inp)
    p1 = L.MaxPooling2D(2)(d1)
    d2 = L.Conv2D(16, 3, padding="same", activation="relu", name="down2")(p1)
    p2 = L.MaxPooling2D(2)(d2)
    mid = L.Conv2D(16, 3, padding="same", activation="relu", name="mid")(p2)
    u2 = L.UpSampling2D(2)(mid)
    c2 = L.Conv2D(16, 3, padding="same", activation="relu", name="up2")(L.Concatenate()([u2, d2]))
    u1 = L.Conv2DTranspose(8, 2, strides=2, name="up1")(c2)
    c1 = L.Conv2D(8, 3, padding="same", activation="relu", name="dec1")(L.Concatenate()([u1, d1]))
    out = L.Conv2D(K, 1, name="classes")(c1)
    return keras.Model(inp, out)


@pytest.mark.slow
def test_keras_unet_maps_survive_save_and_load(tmp_path: Path) -> None:
    """Grad-CAM (a named decoder layer and the default layer) and Integrated Gradients of a
    ClassRegion give identical maps on the model and on its ``.keras`` copy loaded back; the
    default-layer Grad-CAM is nonzero. ~20 s (8 of them TensorFlow's import), hence slow."""
    keras = pytest.importorskip("keras")
    model = _unet()
    x = np.random.default_rng(6).uniform(0, 1, (2, 16, 16, 3)).astype(np.float32)
    pred = np.asarray(model(x)).argmax(axis=-1)
    k = int(np.bincount(pred.reshape(-1), minlength=K).argmax())
    mask = np.zeros((16, 16), dtype=bool)
    mask[4:12, 2:10] = True
    path = tmp_path / "unet.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    runs = [
        ("gradcam", {"layer": "up2"}, T.ClassRegion(k, mask=mask)),
        ("gradcam", {}, T.ClassRegion(k)),
        ("integrated", {"nsamples": 8, "baseline": "zeros"}, T.ClassRegion(k, mask=mask)),
    ]
    for method, kw, target in runs:
        a = np.asarray(xk.xai.explain(model, x, target=target, method=method, **kw))
        b = np.asarray(xk.xai.explain(loaded, x, target=target, method=method, **kw))
        assert np.all(np.isfinite(a)), method
        np.testing.assert_array_equal(a, b)
        assert np.all(np.abs(a).reshape(2, -1).max(axis=1) > 0), (method, kw)
    default = xk.xai.explain(model, x, target=T.ClassRegion(k), method="gradcam", raw=True)
    assert default.layer == "classes"
