"""Attention rollout, transformer attribution and Grad-CAM on a Keras ViT
(``xaikit.architecture.tensorflow.vit``, random weights): equal to a direct computation from the
attention probabilities its own ``MultiHeadAttention`` layers return (``return_attention_scores``)
in a hand-written forward pass; the model is left as it was (weights and layer methods), also
when the pass raises; a ``.keras`` round trip gives the same maps; and a Hugging Face ViT whose
weights are copied into the Keras ViT gives the same logits and maps in both frameworks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import xaikit as xk  # noqa: E402
from xaikit.architecture.tensorflow import TokenEmbedding, vit  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402

B, SIZE, PATCH, DEPTH = 2, 32, 8, 3
GRID = SIZE // PATCH
METHODS = ["attention_rollout", "transformer_attribution"]


def model_() -> Any:
    keras.utils.set_random_seed(0)
    return vit(image_size=SIZE, patch=PATCH, dim=32, depth=DEPTH, heads=2, classes=3, mlp_dim=64)


def images() -> np.ndarray:
    return np.random.default_rng(1).random((B, SIZE, SIZE, 3)).astype(np.float32)


def hand_forward(model: Any, x: Any) -> tuple[Any, list[Any]]:
    """The ViT's forward pass written out with its own layers, the attention probabilities
    returned by each MultiHeadAttention call (``return_attention_scores=True``)."""
    get = model.get_layer
    t = get("embeddings")(get("patch_tokens")(get("patch_embed")(x)))
    atts = []
    for i in range(DEPTH):
        h = get(f"block{i}_norm1")(t)
        h, a = get(f"block{i}_attn")(h, h, return_attention_scores=True)
        atts.append(a)
        t = t + h
        t = t + get(f"block{i}_fc2")(get(f"block{i}_fc1")(get(f"block{i}_norm2")(t)))
    return get("head")(get("norm")(t)[:, 0]), atts


def upsampled(r: np.ndarray) -> np.ndarray:
    """The class token's row over the patches, on the grid, bilinear to the image (TF resize)."""
    grid = r[:, 0, 1:].reshape(B, GRID, GRID, 1)
    return tf.image.resize(grid, (SIZE, SIZE), method="bilinear").numpy()[..., 0]


def direct(model: Any, x: np.ndarray, gradient: bool, cls: int | None = None) -> np.ndarray:
    """Rollout / Chefer relevance computed here from the hand forward's attentions."""
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        logits, atts = hand_forward(model, xt)
        k = tf.argmax(logits, 1) if cls is None else tf.fill((B,), cls)
        score = tf.reduce_sum(tf.gather(logits, k, axis=1, batch_dims=1))
    n = atts[0].shape[-1]
    if gradient:
        grads = tape.gradient(score, atts)
        r = np.broadcast_to(np.eye(n), (B, n, n)).copy()
        for a, g in zip(atts, grads, strict=True):
            r = r + np.maximum(a.numpy().astype(np.float64) * g.numpy(), 0).mean(axis=1) @ r
    else:
        r = np.eye(n)
        for a in atts:
            hat = 0.5 * a.numpy().astype(np.float64).mean(axis=1) + 0.5 * np.eye(n)
            r = (hat / hat.sum(axis=-1, keepdims=True)) @ r
    return upsampled(r)


def mha(model: Any) -> list[Any]:
    return [model.get_layer(f"block{i}_attn") for i in range(DEPTH)]


def untouched(model: Any, weights: list[np.ndarray]) -> None:
    for before, after in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)
    for layer in mha(model):
        assert "_compute_attention" not in layer.__dict__  # the class's method again


@pytest.mark.parametrize("method", METHODS)
def test_maps_equal_the_direct_computation(method: str) -> None:
    model, x = model_(), images()
    weights = model.get_weights()
    got = np.asarray(xk.xai.explain(model, x, method=method))
    assert got.shape == (B, SIZE, SIZE)
    want = direct(model, x, method == "transformer_attribution")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got).max() > 0 and not np.allclose(got[0], got[0].mean())  # a map, not a constant
    untouched(model, weights)


def test_rollout_is_class_agnostic_and_attribution_is_not() -> None:
    model, x = model_(), images()
    r = [np.asarray(xk.xai.explain(model, x, method="attention_rollout", target=k)) for k in (0, 2)]
    np.testing.assert_array_equal(r[0], r[1])
    t = [np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=k)) for k in (0, 2)]
    assert np.abs(t[0] - t[1]).max() > 1e-4 * np.abs(t[0]).max()
    np.testing.assert_allclose(t[1], direct(model, x, True, cls=2), rtol=1e-5, atol=1e-5)


def test_attribution_takes_target_objects() -> None:
    model, x = model_(), images()
    plain = np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=1))
    for target in (xk.targets.Class(1), lambda out: out[:, 1]):
        got = np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=target))
        np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-7)


def test_nested_and_subclassed_models_are_read() -> None:
    """MHA layers inside a nested functional model, called from a subclassed model."""
    inner, x = model_(), images()

    class Wrapper(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.body = inner

        def call(self, t: Any) -> Any:
            return self.body(t)

    outer = Wrapper()
    for method in METHODS:
        got = np.asarray(xk.xai.explain(outer, x, method=method, target=1))
        want = direct(inner, x, method == "transformer_attribution", cls=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    untouched(inner, inner.get_weights())


class Block(keras.layers.Layer):  # type: ignore[misc]
    """A pre-norm attention block holding its MultiHeadAttention as an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = keras.layers.LayerNormalization()
        self.attn = keras.layers.MultiHeadAttention(2, 8)

    def call(self, t: Any, scores: bool = False) -> Any:
        h = self.norm(t)
        if scores:
            h, a = self.attn(h, h, return_attention_scores=True)
            return t + h, a
        return t + self.attn(h, h)


class Tiny(keras.Model):  # type: ignore[misc]
    """A subclassed ViT: the MHA layers live inside custom layers, not in ``model.layers``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = keras.layers.Conv2D(16, PATCH, strides=PATCH)
        self.tokens = TokenEmbedding()
        self.blocks = [Block(), Block()]
        self.head = keras.layers.Dense(3)

    def call(self, x: Any, scores: bool = False) -> Any:
        t = self.tokens(tf.reshape(self.embed(x), (-1, GRID * GRID, 16)))
        atts = []
        for block in self.blocks:
            if scores:
                t, a = block(t, scores=True)
                atts.append(a)
            else:
                t = block(t)
        out = self.head(t[:, 0])
        return (out, atts) if scores else out


def test_mha_inside_custom_layers_of_a_subclassed_model_is_read() -> None:
    keras.utils.set_random_seed(0)
    model, x = Tiny(), images()
    model(x)
    got = np.asarray(xk.xai.explain(model, x, method="attention_rollout"))
    _, atts = model(tf.constant(x), scores=True)
    n = atts[0].shape[-1]
    r = np.eye(n)
    for a in atts:
        hat = 0.5 * a.numpy().astype(np.float64).mean(axis=1) + 0.5 * np.eye(n)
        r = (hat / hat.sum(axis=-1, keepdims=True)) @ r
    np.testing.assert_allclose(got, upsampled(r), rtol=1e-5, atol=1e-5)
    assert all("_compute_attention" not in b.attn.__dict__ for b in model.blocks)


def test_an_instance_override_of_the_attention_is_kept() -> None:
    """A user's own instance-level ``_compute_attention`` is called through and put back."""
    model, x = model_(), images()
    layer = model.get_layer("block0_attn")
    calls: list[int] = []
    original = layer._compute_attention

    def own(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    layer.__dict__["_compute_attention"] = own
    got = np.asarray(xk.xai.explain(model, x, method="transformer_attribution", target=1))
    assert calls and layer.__dict__["_compute_attention"] is own
    del layer.__dict__["_compute_attention"]
    np.testing.assert_allclose(got, direct(model, x, True, cls=1), rtol=1e-5, atol=1e-5)


def test_a_compiled_call_is_refused_naming_tf_function() -> None:
    """A model whose call is a tf.function runs its traced graph: no eager attention to read."""
    inner, x = model_(), images()

    class Compiled(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.body = inner

        @tf.function
        def call(self, t: Any) -> Any:
            return self.body(t)

    with pytest.raises(XaikitValueError, match=r"in an eager pass; no call was seen .* tf.function"):
        xk.xai.explain(Compiled(), x, method="attention_rollout")
    untouched(inner, inner.get_weights())


def test_a_failing_pass_leaves_the_model_as_it_was() -> None:
    model, x = model_(), images()
    weights = model.get_weights()
    fc, attn, call = model.get_layer("block1_fc1"), model.get_layer("block0_attn"), None
    call = model.get_layer("block1_fc1").call

    def failing(*args: Any, **kwargs: Any) -> Any:
        if "_compute_attention" in attn.__dict__:  # only in the attention pass (wrapped then)
            raise RuntimeError("boom in the attention pass")
        return call(*args, **kwargs)

    fc.__dict__["call"] = failing  # block 1 raises after block 0's attention was recorded
    try:
        with pytest.raises(RuntimeError, match="boom in the attention pass"):
            xk.xai.explain(model, x, method="transformer_attribution", target=0)
    finally:
        fc.__dict__.pop("call")
    untouched(model, weights)
    np.testing.assert_allclose(
        np.asarray(xk.xai.explain(model, x, method="attention_rollout")), direct(model, x, False),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip


def test_saved_and_loaded_vit_gives_the_same_maps(tmp_path: Path) -> None:
    model, x = model_(), images()
    path = tmp_path / "vit.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    for method in METHODS:
        a = np.asarray(xk.xai.explain(model, x, method=method, target=1))
        b = np.asarray(xk.xai.explain(loaded, x, method=method, target=1))
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_gradcam_on_a_token_layer_equals_the_hand_computation() -> None:
    """Grad-CAM on block 1's output tokens (B, 17, C): the 16 patch tokens on their 4x4 grid,
    the class token dropped, channels weighted by their mean gradient, ReLU."""
    model, x = model_(), images()
    weights = model.get_weights()
    target = [1, 2]
    ours = xk.xai.explain(model, x, target=np.array(target), method="gradcam", layer="block1", raw=True)
    assert ours.maps.shape == (B, GRID, GRID)
    probe = keras.Model(model.inputs, [model.get_layer("block1").output, model.output])
    with tf.GradientTape() as tape:
        acts, logits = probe(tf.constant(x))
        score = tf.reduce_sum(tf.gather(logits, target, axis=1, batch_dims=1))
    g = tape.gradient(score, acts).numpy().astype(np.float64)[:, 1:].reshape(B, GRID, GRID, -1)
    a = acts.numpy().astype(np.float64)[:, 1:].reshape(B, GRID, GRID, -1)
    theirs = np.maximum((g.mean(axis=(1, 2), keepdims=True) * a).sum(axis=-1), 0)
    assert theirs.max(axis=(1, 2)).min() > 0  # no map all zero
    np.testing.assert_allclose(ours.maps, theirs, rtol=1e-4, atol=1e-6 * np.abs(theirs).max())
    untouched(model, weights)


def test_refusals() -> None:
    inp = keras.Input((8, 8, 3))
    flat = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(inp)))
    with pytest.raises(
        XaikitTypeError, match=r"model: the attention methods .*MultiHeadAttention layers; .* has none"
    ):
        xk.xai.explain(flat, np.zeros((1, 8, 8, 3), np.float32), method="attention_rollout")
    with pytest.raises(XaikitValueError, match=r"patch must divide image_size; got patch=5, image_size=32"):
        vit(image_size=32, patch=5)
    with pytest.raises(XaikitValueError, match=r"dim must be a multiple of heads; got dim=30, heads=4"):
        vit(dim=30, heads=4)


class Windowed(keras.Model):  # type: ignore[misc]
    """16 patch tokens of a 16x16 image; attention within 3 windows of 5 of them (the windows of
    each image stacked along the batch, (B * 3, 5, C), as Swin does), or cross-attention of the
    first 5 tokens (queries) to all 16 (keys)."""

    def __init__(self, cross: bool = False) -> None:
        super().__init__()
        self.cross = cross
        self.embed = keras.layers.Conv2D(8, 4, strides=4)
        self.attn = keras.layers.MultiHeadAttention(2, 4, name="cross_attn" if cross else "window_attn")
        self.head = keras.layers.Dense(3)

    def call(self, x: Any) -> Any:
        t = tf.reshape(self.embed(x), (-1, 16, 8))
        if self.cross:
            t = self.attn(t[:, :5], t)
        else:
            windows = tf.reshape(t[:, :15], (-1, 5, 8))
            t = tf.reshape(self.attn(windows, windows), (-1, 15, 8))
        return self.head(t[:, 0])


#: the refusal of attention that is not global self-attention over one token sequence
NOT_GLOBAL = (
    r"the attention methods read ViT-style global self-attention .* windowed attention such as Swin's"
)


REFUSED = {
    # the (B * 3, heads, 5, 5) windows (5 tokens: a class token and a 2x2 grid, to the map) gave
    # 6 maps for 2 images, silently
    "windows": (
        False,
        r"block 0 \('window_attn'\) gave attention probabilities \(6, 2, 5, 5\), expected \(2, 2, 5, 5\): "
        r"6 rows for a batch of 2 \(windowed .*",
    ),
    # a raw numpy ValueError (operands could not be broadcast together)
    "cross": (
        True,
        r"block 0 \('cross_attn'\) gave attention probabilities \(2, 2, 5, 16\), expected \(2, 2, N, N\): "
        r"5 queries attend to 16 keys \(cross-attention\)",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("method", METHODS)
def test_windowed_and_cross_attention_are_refused(method: str, case: str) -> None:
    cross, why = REFUSED[case]
    keras.utils.set_random_seed(0)
    model, x = Windowed(cross=cross), np.random.default_rng(1).random((B, 16, 16, 3)).astype(np.float32)
    model(x)
    with pytest.raises(XaikitValueError, match=rf"model: {method}: {why}; {NOT_GLOBAL}"):
        xk.xai.explain(model, x, method=method)
    assert "_compute_attention" not in model.attn.__dict__


# --- the same ViT in both frameworks --------------------------------------------------------------


def hf_vit() -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=DEPTH, num_attention_heads=2, intermediate_size=64,
        image_size=SIZE, patch_size=PATCH, num_labels=3, initializer_range=0.3,
    )  # fmt: skip
    return transformers.ViTForImageClassification(cfg).eval()


def ported(hf: Any) -> Any:
    """A Keras ViT holding the HF ViT's weights (transformers' current names: ``vit.layers.{i}``,
    ``attention.{q,k,v,o}_proj``, ``mlp.fc{1,2}``; q/k/v/out split per head, Conv2d and Linear
    kernels transposed to Keras layouts, LayerNorm eps 1e-12 as HF's)."""
    model = vit(image_size=SIZE, patch=PATCH, dim=32, depth=DEPTH, heads=2, classes=3, mlp_dim=64,
                norm_epsilon=1e-12)  # fmt: skip
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    heads, hd = 2, 16

    def dense(name: str, key: str) -> None:
        model.get_layer(name).set_weights([sd[key + ".weight"].T, sd[key + ".bias"]])

    def norm(name: str, key: str) -> None:
        model.get_layer(name).set_weights([sd[key + ".weight"], sd[key + ".bias"]])

    emb = "vit.embeddings."
    model.get_layer("patch_embed").set_weights(
        [sd[emb + "patch_embeddings.projection.weight"].transpose(2, 3, 1, 0),
         sd[emb + "patch_embeddings.projection.bias"]]
    )  # fmt: skip
    model.get_layer("embeddings").set_weights([sd[emb + "cls_token"], sd[emb + "position_embeddings"]])
    for i in range(DEPTH):
        p = f"vit.layers.{i}."
        attn = model.get_layer(f"block{i}_attn")
        for sub, key in ((attn.query_dense, "q"), (attn.key_dense, "k"), (attn.value_dense, "v")):
            w, b = sd[p + f"attention.{key}_proj.weight"], sd[p + f"attention.{key}_proj.bias"]
            sub.set_weights([w.T.reshape(32, heads, hd), b.reshape(heads, hd)])
        w, b = sd[p + "attention.o_proj.weight"], sd[p + "attention.o_proj.bias"]
        attn.output_dense.set_weights([w.T.reshape(heads, hd, 32), b])
        norm(f"block{i}_norm1", p + "layernorm_before")
        norm(f"block{i}_norm2", p + "layernorm_after")
        dense(f"block{i}_fc1", p + "mlp.fc1")
        dense(f"block{i}_fc2", p + "mlp.fc2")
    norm("norm", "vit.layernorm")
    dense("head", "classifier")
    return model


def test_torch_and_keras_vits_agree() -> None:
    import torch

    hf = hf_vit()
    model = ported(hf)
    x = images()
    xt = torch.as_tensor(x.transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        want = hf(xt).logits.numpy()
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-4, atol=1e-4)
    for method in METHODS:
        theirs = np.asarray(xk.xai.explain(hf, xt, method=method, target=1))
        ours = np.asarray(xk.xai.explain(model, x, method=method, target=1))
        assert ours.shape == theirs.shape == (B, SIZE, SIZE)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())
