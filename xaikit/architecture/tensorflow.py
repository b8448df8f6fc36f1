"""TensorFlow / Keras reference architectures (importing this module imports TensorFlow)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

__all__ = ["LeNet"]


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
