"""TensorFlow / Keras reference architectures (importing this module imports TensorFlow)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from xaikit.checks import check_int
from xaikit.errors import XaikitValueError

__all__ = ["LeNet", "calibrate_batchnorm"]


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
