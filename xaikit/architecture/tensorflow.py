"""TensorFlow / Keras reference architectures (importing this module imports TensorFlow)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from xaikit.checks import check_int
from xaikit.errors import XaikitValueError

__all__ = ["ClassTokenOf", "LeNet", "TokenEmbedding", "calibrate_batchnorm", "vit"]


def LeNet(
    input_shape: Sequence[int] = (28, 28, 1), classes: int = 10, softmax: bool = True
) -> tf.keras.Model:
    """A LeNet-style Keras CNN, the same layers as ``xaikit.architecture.torch.LeNet``.

    Input is channel-last ``(B, H, W, C)``.

    Args:
        input_shape: shape of one image, ``(H, W, C)``.
        classes: number of classes.
        softmax: end with a softmax (probabilities, as the reference does) or return logits.

    Example:
        >>> model = LeNet(input_shape=(32, 32, 3), classes=4)
        >>> tuple(model.output_shape)
        (None, 4)
    """
    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [
            layers.Input(shape=tuple(int(s) for s in input_shape)),
            layers.Conv2D(32, 3, activation=None, name="conv1"),
            layers.MaxPooling2D(2),
            layers.ReLU(),
            layers.Conv2D(64, 3, activation=None, name="conv2"),
            layers.MaxPooling2D(2),
            layers.ReLU(),
            layers.Conv2D(64, 3, activation="relu", name="conv3"),
            layers.Flatten(),
            layers.Dense(64, activation="relu", name="fc1"),
            layers.Dense(classes, activation="softmax" if softmax else None, name="fc2"),
        ],
        name="lenet",
    )
    return model


def _all_layers(model: tf.keras.Model) -> list[tf.keras.layers.Layer]:
    """Every layer of ``model``, nested models' layers included, each once."""
    out: list[tf.keras.layers.Layer] = []
    seen: set[int] = set()
    stack = list(reversed(getattr(model, "layers", [])))
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        out.append(layer)
        stack.extend(reversed(getattr(layer, "layers", [])))
    return out


def calibrate_batchnorm(model: tf.keras.Model, x: object, batch_size: int = 32) -> tf.keras.Model:
    """Set every ``BatchNormalization`` layer's moving statistics to those of the batch ``x``.

    The Keras counterpart of ``xaikit.architecture.torch.calibrate_batchnorm``: a
    ``keras.applications`` model built with ``weights=None`` has fresh batch norm (mean 0,
    variance 1) and its input gradients vanish; one pass over typical inputs fixes that. Each
    layer ends with the average, over chunks of ``batch_size``, of its input's per-channel mean
    and variance, seen with the layers below it already calibrated the same way. Dropout (and
    stochastic depth built on it) is switched off during the pass; nothing else changes.

    Example:
        >>> import numpy as np
        >>> inp = tf.keras.Input((8, 8, 3))
        >>> model = tf.keras.Model(inp, tf.keras.layers.BatchNormalization(name="bn")(inp))
        >>> x = np.random.default_rng(0).normal(2.0, 3.0, (64, 8, 8, 3)).astype("float32")
        >>> _ = calibrate_batchnorm(model, x)
        >>> np.allclose(model.get_layer("bn").moving_mean.numpy(), x.mean(axis=(0, 1, 2)), atol=1e-4)
        True
    """
    norms, drops = [], []
    for layer in _all_layers(model):
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            norms.append(layer)
        elif isinstance(layer, tf.keras.layers.Dropout):
            drops.append(layer)
    saved = [(n.momentum, n.moving_mean.numpy(), n.moving_variance.numpy()) for n in norms]
    rates = [d.rate for d in drops]
    data = tf.convert_to_tensor(x)
    n_rows = int(data.shape[0])
    step = check_int(batch_size, "batch_size", 1)
    if n_rows == 0:  # no chunk would run, and every moving statistic would become 0
        raise XaikitValueError("calibrate_batchnorm needs a non-empty batch x; got 0 samples")
    sums = [[np.zeros_like(m), np.zeros_like(v)] for _, m, v in saved]
    chunks = 0
    try:
        for d in drops:
            d.rate = 0.0
        for i in range(0, n_rows, step):
            for n in norms:
                n.momentum = 0.0  # moving statistics := this chunk's statistics
            model(data[i : i + step], training=True)
            for acc, n in zip(sums, norms, strict=True):
                acc[0] += n.moving_mean.numpy()
                acc[1] += n.moving_variance.numpy()
            chunks += 1
        for acc, n in zip(sums, norms, strict=True):
            n.moving_mean.assign(acc[0] / chunks)
            n.moving_variance.assign(acc[1] / chunks)
    except BaseException:
        for n, (_momentum, mean, var) in zip(norms, saved, strict=True):
            n.moving_mean.assign(mean)
            n.moving_variance.assign(var)
        raise
    finally:
        for n, (momentum, _m, _v) in zip(norms, saved, strict=True):
            n.momentum = momentum
        for d, rate in zip(drops, rates, strict=True):
            d.rate = rate
    return model


@tf.keras.utils.register_keras_serializable(package="xaikit")
class TokenEmbedding(tf.keras.layers.Layer):
    """Prepends a learned class token to (B, N, C) patch tokens and adds learned position
    embeddings (1, N + 1, C): the embedding step of a ViT."""

    def build(self, input_shape: Sequence[int | None]) -> None:
        n, dim = int(input_shape[1]), int(input_shape[2])  # type: ignore[arg-type]
        init = tf.keras.initializers.TruncatedNormal(stddev=0.02)
        self.cls_token = self.add_weight(name="cls_token", shape=(1, 1, dim), initializer=init)
        self.position = self.add_weight(name="position", shape=(1, n + 1, dim), initializer=init)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        cls = tf.repeat(tf.cast(self.cls_token, x.dtype), tf.shape(x)[0], axis=0)
        return tf.concat([cls, x], axis=1) + tf.cast(self.position, x.dtype)

    def compute_output_shape(self, input_shape: Sequence[int | None]) -> tuple[int | None, ...]:
        n = input_shape[1]
        return (input_shape[0], None if n is None else n + 1, input_shape[2])


@tf.keras.utils.register_keras_serializable(package="xaikit")
class ClassTokenOf(tf.keras.layers.Layer):
    """The class token (the first) of (B, N, C) tokens: (B, C)."""

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return x[:, 0]

    def compute_output_shape(self, input_shape: Sequence[int | None]) -> tuple[int | None, ...]:
        return (input_shape[0], input_shape[2])


def vit(
    image_size: int = 32,
    patch: int = 8,
    dim: int = 64,
    depth: int = 4,
    heads: int = 4,
    classes: int = 10,
    channels: int = 3,
    mlp_dim: int | None = None,
    norm_epsilon: float = 1e-6,
) -> tf.keras.Model:
    """A small Keras vision transformer (ViT-style, random weights), channel-last ``(B, H, W, C)``.

    Patch embedding (``Conv2D`` with kernel and stride ``patch``), a learned class token and
    learned position embeddings (:class:`TokenEmbedding`), ``depth`` pre-norm blocks
    (``LayerNormalization`` -> ``keras.layers.MultiHeadAttention`` -> residual add, then
    ``LayerNormalization`` -> ``Dense(mlp_dim, gelu)`` -> ``Dense(dim)`` -> residual add), a
    final ``LayerNormalization`` and a ``Dense`` head on the class token (logits). Layer names:
    ``patch_embed``, ``embeddings``, ``block{i}_norm1``, ``block{i}_attn``, ``block{i}_norm2``,
    ``block{i}_fc1``, ``block{i}_fc2``, ``block{i}`` (the block's output tokens, (B, N, dim):
    a token layer for a CAM), ``norm``, ``head``. Same layout as Hugging Face's
    ``ViTForImageClassification`` (which uses ``norm_epsilon=1e-12``). Saves and loads as
    ``.keras`` (the custom layers are registered under the package ``xaikit``).

    Args:
        image_size: height and width of the (square) images.
        patch: patch size; must divide ``image_size``.
        dim: token width; must be a multiple of ``heads``.
        depth: number of transformer blocks.
        heads: attention heads per block.
        classes: number of classes.
        channels: image channels.
        mlp_dim: hidden width of the MLPs (default ``4 * dim``).
        norm_epsilon: epsilon of every ``LayerNormalization``.

    Example:
        >>> model = vit(image_size=16, patch=4, dim=32, depth=2, heads=2, classes=3)
        >>> tuple(model.output_shape), tuple(model.get_layer("block1").output.shape)
        ((None, 3), (None, 17, 32))
    """
    for name, value in (("image_size", image_size), ("patch", patch), ("dim", dim), ("depth", depth),
                        ("heads", heads), ("classes", classes), ("channels", channels)):  # fmt: skip
        check_int(value, name, low=1)
    if image_size % patch:
        raise XaikitValueError(
            f"patch must divide image_size; got patch={patch}, image_size={image_size}. "
            "Pick a patch size that tiles the image"
        )
    if dim % heads:
        raise XaikitValueError(f"dim must be a multiple of heads; got dim={dim}, heads={heads}")
    hidden = 4 * dim if mlp_dim is None else check_int(mlp_dim, "mlp_dim", low=1)
    layers = tf.keras.layers
    grid = image_size // patch
    inp = layers.Input(shape=(image_size, image_size, channels))
    x = layers.Conv2D(dim, patch, strides=patch, name="patch_embed")(inp)
    x = layers.Reshape((grid * grid, dim), name="patch_tokens")(x)
    x = TokenEmbedding(name="embeddings")(x)
    for i in range(depth):
        h = layers.LayerNormalization(epsilon=norm_epsilon, name=f"block{i}_norm1")(x)
        h = layers.MultiHeadAttention(heads, dim // heads, name=f"block{i}_attn")(h, h)
        x = layers.Add(name=f"block{i}_res1")([x, h])
        h = layers.LayerNormalization(epsilon=norm_epsilon, name=f"block{i}_norm2")(x)
        h = layers.Dense(hidden, activation="gelu", name=f"block{i}_fc1")(h)
        h = layers.Dense(dim, name=f"block{i}_fc2")(h)
        x = layers.Add(name=f"block{i}")([x, h])
    x = layers.LayerNormalization(epsilon=norm_epsilon, name="norm")(x)
    out = layers.Dense(classes, name="head")(ClassTokenOf(name="class_token")(x))
    return tf.keras.Model(inp, out, name="vit")
