"""Attention rollout and transformer attribution (gradient-weighted attention relevance) on
Hugging Face ViT / DeiT built from configs (random weights; nothing downloads): equal to a
direct computation from the attentions the model returns and their torch autograd gradients;
the model is left as it was (weights and attention implementation); refusals name the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import xaikit as xk  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402

B, SIZE, PATCH = 2, 32, 8
GRID = SIZE // PATCH


def vit(deit: bool = False) -> Any:
    torch.manual_seed(0)
    kw: dict[str, Any] = {
        "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 64,
        "image_size": SIZE, "patch_size": PATCH, "num_labels": 3, "initializer_range": 0.3,
    }  # fmt: skip
    if deit:
        return transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(**kw)).eval()
    return transformers.ViTForImageClassification(transformers.ViTConfig(**kw)).eval()


def images() -> Any:
    return torch.rand(B, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def direct(model: Any, x: Any, gradient: bool, cls: Any = None, **kw: Any) -> np.ndarray:
    """The map computed here from the model's own attentions, with numpy and torch only; the
    patch grid is the image's (H / PATCH, W / PATCH); ``kw`` go to the model's call."""
    impl = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = model(x, output_attentions=True, **kw)
        atts = out.attentions
        n = atts[0].shape[-1]
        if gradient:
            logits = out.logits
            k = logits.argmax(1) if cls is None else torch.full((B,), cls)
            grads = torch.autograd.grad(logits.gather(1, k[:, None]).sum(), atts)
            r = np.broadcast_to(np.eye(n), (B, n, n)).copy()
            for a, g in zip(atts, grads, strict=True):
                r = r + np.maximum((a * g).detach().double().numpy(), 0).mean(axis=1) @ r
        else:
            r = np.eye(n)
            for a in atts:
                hat = 0.5 * a.detach().double().numpy().mean(axis=1) + 0.5 * np.eye(n)
                r = (hat / hat.sum(axis=-1, keepdims=True)) @ r
    finally:
        model.set_attn_implementation(impl)
    h, w = x.shape[2] // PATCH, x.shape[3] // PATCH
    grid = torch.tensor(r[:, 0, n - h * w :].reshape(B, 1, h, w))
    return torch.nn.functional.interpolate(grid, size=tuple(x.shape[2:]), mode="bilinear")[:, 0].numpy()


@pytest.mark.parametrize("deit", [False, True], ids=["vit", "deit"])
@pytest.mark.parametrize("method", ["attention_rollout", "transformer_attribution"])
def test_maps_equal_the_direct_computation(method: str, deit: bool) -> None:
    model, x = vit(deit), images()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    impl = model.config._attn_implementation
    got = np.asarray(xk.xai.explain(model, x, method=method))
    assert got.shape == (B, SIZE, SIZE)
    want = direct(model, x, method == "transformer_attribution")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(got).max() > 0 and not np.allclose(got[0], got[0].mean())  # a map, not a constant
    assert model.config._attn_implementation == impl  # switched back
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_rollout_is_class_agnostic_and_attribution_is_not() -> None:
    model, x = vit(), images()
    r = [np.asarray(xk.xai.explain(model, x, method="attention_rollout", target=k)) for k in (0, 2)]
    np.testing.assert_array_equal(r[0], r[1])
    t = [np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=k)) for k in (0, 2)]
    assert np.abs(t[0] - t[1]).max() > 1e-3
    np.testing.assert_allclose(t[1], direct(model, x, True, cls=2), rtol=1e-5, atol=1e-6)


def test_attribution_takes_target_objects() -> None:
    model, x = vit(), images()
    plain = np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=1))
    for target in (xk.targets.Class(1), lambda out: out.logits[:, 1]):
        got = np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=target))
        np.testing.assert_array_equal(got, plain)


def test_head_fusion_max() -> None:
    model, x = vit(), images()
    mean = np.asarray(xk.xai.explain(model, x, method="attention_rollout"))
    most = np.asarray(xk.xai.explain(model, x, method="attention_rollout", head_fusion="max"))
    assert most.shape == mean.shape and np.abs(most - mean).max() > 0


def test_refusals_name_the_argument() -> None:
    x = images()
    flat = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * SIZE * SIZE, 3))
    with pytest.raises(XaikitTypeError, match=r"model: the attention methods .* Hugging Face transformers"):
        xk.xai.explain(flat, x, method="attention_rollout")
    with pytest.raises(XaikitValueError, match=r"head_fusion must be one of 'mean', 'max', 'min'; got 'sum'"):
        xk.xai.explain(vit(), x, method="attention_rollout", head_fusion="sum")
    with pytest.raises(XaikitValueError, match=r"target=.* not taken by this method"):
        xk.xai.explain(vit(), x, method="attention_rollout", target=xk.targets.Output(0))


#: the refusal of attention that is not global self-attention over one token sequence
NOT_GLOBAL = (
    r"the attention methods read ViT-style global self-attention .* windowed attention such as Swin's"
)


@pytest.mark.parametrize("method", ["attention_rollout", "transformer_attribution"])
@pytest.mark.parametrize("depths", [[2], [1, 1]], ids=["one-stage", "two-stages"])
def test_swin_windowed_attention_is_refused(method: str, depths: list[int]) -> None:
    """Swin's windowed attention (B * windows, heads, w*w, w*w): before, one stage gave 8 maps for
    2 images, silently, and two stages a raw numpy broadcast error."""
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(
        image_size=24, patch_size=4, embed_dim=16, depths=depths, num_heads=[2] * len(depths), window_size=3,
        num_labels=3,
    )  # fmt: skip
    model = transformers.SwinForImageClassification(cfg).eval()
    impl = model.config._attn_implementation
    x = torch.rand(B, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    with pytest.raises(
        XaikitValueError,
        match=rf"model: {method}: block 0 gave attention probabilities \(8, 2, 9, 9\), expected "
        rf"\(2, 2, 9, 9\): 8 rows for a batch of 2 \(windowed attention .*; {NOT_GLOBAL}",
    ):
        xk.xai.explain(model, x, method=method)
    assert model.config._attn_implementation == impl  # switched back


def test_check_blocks_names_the_block_and_the_reason() -> None:
    from xaikit.xai.transformer.attention import check_blocks

    square, merged, cross = np.zeros((2, 2, 9, 9)), np.zeros((2, 2, 5, 5)), np.zeros((2, 2, 3, 9))
    check_blocks("attention_rollout", [square, square], 2)
    with pytest.raises(
        XaikitValueError,
        match=r"block 1 \('s1'\) gave .* \(2, 2, 5, 5\), expected "
        r"\(2, 2, 9, 9\): 5 tokens where an earlier block has 9 \(blocks that merge",
    ):
        check_blocks("attention_rollout", [square, merged], 2, ["s0", "s1"])
    with pytest.raises(
        XaikitValueError,
        match=r"transformer_attribution: block 0 gave .* \(2, 2, 3, 9\), "
        r"expected \(2, 2, N, N\): 3 queries attend to 9 keys \(cross-attention\)",
    ):
        check_blocks("transformer_attribution", [cross], 2)
    with pytest.raises(XaikitValueError, match=r"not 4-D; " + NOT_GLOBAL):
        check_blocks("attention_rollout", [np.zeros((2, 9, 9))], 2)


def test_a_failing_call_switches_the_attention_back() -> None:
    """The model raises inside the attention pass (after the clean pass pinned the class): the
    error comes through and the attention implementation is switched back all the same."""
    model, x = vit(), images()
    impl, forward = model.config._attn_implementation, model.forward

    def failing(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("output_attentions"):
            raise RuntimeError("boom in the attention pass")
        return forward(*args, **kwargs)

    model.forward = failing
    with pytest.raises(RuntimeError, match="boom in the attention pass"):
        xk.xai.explain(model, x, method="transformer_attribution")
    assert model.config._attn_implementation == impl


def test_keras_models_without_attention_layers_are_refused_by_name() -> None:
    keras = pytest.importorskip("keras")
    inp = keras.Input((8, 8, 3))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(inp)))
    with pytest.raises(
        XaikitTypeError, match=r"model: the attention methods .*MultiHeadAttention layers; .* has none"
    ):
        xk.xai.explain(model, np.zeros((1, 8, 8, 3), np.float32), method="attention_rollout")


@pytest.mark.parametrize("method", ["attention_rollout", "transformer_attribution"])
def test_non_square_images_lay_the_class_row_on_their_grid(method: str) -> None:
    """A ViT fed 32x48 images (positions interpolated) has 1 + 4*6 tokens: the class row is laid
    on the 4x6 grid, equal to the direct computation; before, 25 tokens were refused as having
    no square grid."""
    model = vit()
    x = torch.rand(B, 3, 32, 48, generator=torch.Generator().manual_seed(2))
    kw = {"interpolate_pos_encoding": True}
    got = np.asarray(xk.xai.explain(model, x, method=method, model_kwargs=kw))
    assert got.shape == (B, 32, 48)
    with torch.no_grad():
        assert model.vit.embeddings(x, interpolate_pos_encoding=True).shape[1] == 25  # 1 + 4 * 6 tokens
    want = direct(model, x, method == "transformer_attribution", **kw)  # laid on 4 x 6
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["attention_rollout", "transformer_attribution"])
@pytest.mark.parametrize("max_batch", [1, 3])
def test_chunks_equal_one_pass(method: str, max_batch: int) -> None:
    """The maps of 5 images in chunks of 1 or 3 rows (the engine's chunk loop) equal one pass,
    with per-sample classes and with a target object whose fields differ per sample."""
    model = vit()
    x = torch.rand(5, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    for target in ([0, 2, 1, 1, 0], xk.targets.Class(np.array([2, 0, 1, 2, 1]))):
        whole = np.asarray(xk.xai.explain(model, x, target=target, method=method, max_batch=5))
        seen: list[int] = []
        hook = model.vit.embeddings.register_forward_hook(
            lambda _m, a, _o, seen=seen: seen.append(int(a[0].shape[0]))
        )
        try:
            parts = np.asarray(xk.xai.explain(model, x, target=target, method=method, max_batch=max_batch))
        finally:
            hook.remove()
        assert max(seen) == max_batch  # really in chunks (a first one-row pass may check the input)
        assert seen[-(5 // max_batch + (5 % max_batch > 0)) :] == ([1] * 5 if max_batch == 1 else [3, 2])
        np.testing.assert_allclose(parts, whole, rtol=1e-6, atol=1e-7)
    if method == "transformer_attribution":  # the classes reach their own rows
        one = np.asarray(xk.xai.explain(model, x[3:4], target=2, method=method))
        np.testing.assert_allclose(parts[3:4], one, rtol=1e-6, atol=1e-7)
