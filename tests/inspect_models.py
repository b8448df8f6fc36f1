"""Tiny AlexNet-like models (3 conv + 2 dense on 16x16x3) for the inspect tests, in both frameworks.

Both have the same tree: ``model`` -> ``features`` (conv, relu, pool, conv, relu, pool, conv, relu)
and ``classifier`` (flatten, dense, relu, dense): 15 modules, 5 with a weight and a bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np

N_MODULES = 15
N_PARAMS = 10
FEATURES = ["conv0", "relu0", "pool0", "conv1", "relu1", "pool1", "conv2", "relu2"]
CLASSIFIER = ["flatten", "fc0", "relu3", "fc1"]


class Kit:
    """A model of one framework and the few framework calls the tests need."""

    def __init__(self, framework: str, seed: int = 0) -> None:
        self.framework = framework
        if framework == "torch":
            import torch
            from torch import nn

            torch.manual_seed(seed)
            features = nn.Sequential()
            for name, layer in zip(
                FEATURES,
                [
                    nn.Conv2d(3, 4, 3, padding=1),
                    nn.ReLU(),
                    nn.MaxPool2d(2),
                    nn.Conv2d(4, 8, 3, padding=1),
                    nn.ReLU(),
                    nn.MaxPool2d(2),
                    nn.Conv2d(8, 8, 3, padding=1),
                    nn.ReLU(),
                ],
            ):
                features.add_module(name, layer)
            classifier = nn.Sequential()
            for name, layer in zip(
                CLASSIFIER, [nn.Flatten(), nn.Linear(128, 16), nn.ReLU(), nn.Linear(16, 5)]
            ):
                classifier.add_module(name, layer)
            self.model: Any = nn.Sequential()
            self.model.add_module("features", features)
            self.model.add_module("classifier", classifier)
        else:
            import keras

            keras.utils.set_random_seed(seed)
            L = keras.layers
            features = keras.Sequential(
                [
                    L.Conv2D(4, 3, padding="same", name="conv0"),
                    L.ReLU(name="relu0"),
                    L.MaxPooling2D(2, name="pool0"),
                    L.Conv2D(8, 3, padding="same", name="conv1"),
                    L.ReLU(name="relu1"),
                    L.MaxPooling2D(2, name="pool1"),
                    L.Conv2D(8, 3, padding="same", name="conv2"),
                    L.ReLU(name="relu2"),
                ],
                name="features",
            )
            classifier = keras.Sequential(
                [
                    L.Flatten(name="flatten"),
                    L.Dense(16, name="fc0"),
                    L.ReLU(name="relu3"),
                    L.Dense(5, name="fc1"),
                ],
                name="classifier",
            )
            self.model = keras.Sequential([keras.Input((16, 16, 3)), features, classifier], name="tiny")

    # inputs are given channel-last (B, 16, 16, 3) numpy arrays
    def tensor(self, x: np.ndarray) -> Any:
        if self.framework == "torch":
            import torch

            return torch.as_tensor(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        import tensorflow as tf

        return tf.convert_to_tensor(x)

    def forward(self, x: np.ndarray) -> np.ndarray:
        out = self.model(self.tensor(x))
        return out.detach().numpy() if self.framework == "torch" else out.numpy()

    def train_step(self, tracker: Any, x: np.ndarray) -> dict[str, np.ndarray]:
        """Forward, backward on sum(out**2), ``tracker.step``; returns grads by 'module/param'."""
        if self.framework == "torch":
            self.model.zero_grad()
            out = self.model(self.tensor(x))
            (out**2).sum().backward()
            tracker.step()
            return {
                f"model.{n.rsplit('.', 1)[0]}/{n.rsplit('.', 1)[1]}": p.grad.numpy().copy()
                for n, p in self.model.named_parameters()
            }
        import tensorflow as tf

        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            out = self.model(self.tensor(x))
            loss = tf.reduce_sum(out**2)
        grads = tape.gradient(loss, variables)
        tracker.step(grads)
        return {self.var_key(v): g.numpy() for v, g in zip(variables, grads)}

    def var_key(self, v: Any) -> str:
        layer, name = v.path.rsplit("/", 1)
        for part in ("features", "classifier"):
            if self.layer_of(layer) in [layer_.name for layer_ in self.model.get_layer(part).layers]:
                return f"model.{part}.{self.layer_of(layer)}/{name}"
        raise KeyError(v.path)

    @staticmethod
    def layer_of(path: str) -> str:
        return path.rsplit("/", 1)[-1]

    def set_biases(self, value: float) -> None:
        """Set every conv/dense bias to ``value`` (very negative: every ReLU output is 0)."""
        if self.framework == "torch":
            import torch

            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    if name.endswith("bias"):
                        p.fill_(value)
        else:
            for v in self.model.trainable_variables:
                if v.path.endswith("bias"):
                    v.assign(np.full(v.shape, value, dtype="float32"))

    def unit_axis(self) -> int:
        return 1 if self.framework == "torch" else -1
