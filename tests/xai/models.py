"""Tiny models with known gradients, and a small CNN defined identically in both frameworks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tests.evaluate_models import weights_of


def analytic(framework: str, kind: str, w: np.ndarray) -> Any:
    """f_c(x) = sum_j w[c, j] * g(x_j) for x of shape (B, D); g = identity, square or sin.

    torch: an ``nn.Module``; TF: a Keras model for "linear", plain TF functions otherwise
    (exercising the "any TF callable" path).
    """
    w = np.asarray(w, dtype=np.float32)
    if framework == "torch":
        import torch

        wt = torch.as_tensor(w)

        class Analytic(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(wt.clone())

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                g = {"linear": x, "quadratic": x * x, "sin": torch.sin(x)}[kind]
                return g @ self.w.T

        return Analytic()
    import tensorflow as tf

    if kind == "linear":
        layer = tf.keras.layers.Dense(w.shape[0], use_bias=False)
        model = tf.keras.Sequential([tf.keras.layers.Input((w.shape[1],)), layer])
        layer.set_weights([w.T])
        return model
    wt = tf.constant(w.T)
    op = {"quadratic": lambda x: x * x, "sin": tf.sin}[kind]
    return tf.function(lambda x: tf.matmul(op(x), wt))


def analytic_grad(kind: str, w: np.ndarray, x: np.ndarray, target: np.ndarray) -> np.ndarray:
    wt = np.asarray(w, dtype=np.float64)[target]
    d = {"linear": np.ones_like(x), "quadratic": 2 * x, "sin": np.cos(x)}[kind]
    return wt * d


def analytic_f(kind: str, w: np.ndarray, x: np.ndarray, target: np.ndarray) -> np.ndarray:
    g = {"linear": x, "quadratic": x * x, "sin": np.sin(x)}[kind]
    return np.sum(np.asarray(w, dtype=np.float64)[target] * g, axis=1)


def cnn_weights(seed: int = 0, classes: int = 5, size: int = 12) -> dict[str, np.ndarray]:
    """Weights of a small ReLU CNN (two 3x3 convs, two dense layers), torch layouts."""
    rng = np.random.default_rng(seed)
    h = (size - 2) // 2 - 2

    def he(*shape: int, fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "c1": he(8, 3, 3, 3, fan_in=27),
        "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "c2": he(8, 8, 3, 3, fan_in=72),
        "b2": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "d1": he(16, 8 * h * h, fan_in=8 * h * h),
        "e1": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "d2": he(classes, 16, fan_in=16),
        "e2": (rng.standard_normal(classes) * 0.1).astype(np.float32),
        "size": np.array(size),
        "h": np.array(h),
    }


def cnn(
    framework: str, weights: dict[str, np.ndarray], softmax: bool = False, activation: str = "relu"
) -> Any:
    """The CNN of ``cnn_weights`` in one framework: torch channel-first, Keras channel-last."""
    size, h = int(weights["size"]), int(weights["h"])
    classes = weights["d2"].shape[0]
    if framework == "torch":
        import torch

        nn = torch.nn
        act = nn.ReLU if activation == "relu" else nn.Softplus
        pool = nn.MaxPool2d(2) if activation == "relu" else nn.AvgPool2d(2)
        tm = nn.Sequential(
            nn.Conv2d(3, 8, 3),
            act(),
            pool,
            nn.Conv2d(8, 8, 3),
            act(),
            nn.Flatten(),
            nn.Linear(8 * h * h, 16),
            act(),
            nn.Linear(16, classes),
            *([nn.Softmax(dim=1)] if softmax else []),
        )
        with torch.no_grad():
            for mod, (w, b) in zip(
                [tm[0], tm[3], tm[6], tm[8]], [("c1", "b1"), ("c2", "b2"), ("d1", "e1"), ("d2", "e2")]
            ):
                mod.weight.copy_(torch.as_tensor(weights[w]))
                mod.bias.copy_(torch.as_tensor(weights[b]))
        return tm
    import tensorflow as tf

    layers = tf.keras.layers
    km = tf.keras.Sequential(
        [
            layers.Input((size, size, 3)),
            layers.Conv2D(8, 3, activation=activation),
            layers.MaxPooling2D(2) if activation == "relu" else layers.AveragePooling2D(2),
            layers.Conv2D(8, 3, activation=activation),
            layers.Flatten(),
            layers.Dense(16, activation=activation),
            layers.Dense(classes, activation="softmax" if softmax else None),
        ]
    )
    conv = [la for la in km.layers if isinstance(la, layers.Conv2D)]
    dense = [la for la in km.layers if isinstance(la, layers.Dense)]
    conv[0].set_weights([weights["c1"].transpose(2, 3, 1, 0), weights["b1"]])
    conv[1].set_weights([weights["c2"].transpose(2, 3, 1, 0), weights["b2"]])
    # torch flattens (C, H, W), Keras (H, W, C): permute the first dense layer's input rows.
    w1 = weights["d1"].reshape(16, 8, h, h).transpose(0, 2, 3, 1).reshape(16, -1)
    dense[0].set_weights([w1.T, weights["e1"]])
    dense[1].set_weights([weights["d2"].T, weights["e2"]])
    return km


def images(rng: np.random.Generator, batch: int = 4, size: int = 12) -> np.ndarray:
    """Channel-last float32 images in [0, 1]."""
    return rng.random((batch, size, size, 3)).astype(np.float32)


def model_for(framework: str, seed: int = 0, **kw: Any) -> tuple[Any, Any]:
    """(model, layout function) for one framework: the layout function turns channel-last
    numpy images into that model's input layout."""
    softmax = kw.pop("softmax", False)
    activation = kw.pop("activation", "relu")
    model = cnn(framework, cnn_weights(seed, **kw), softmax=softmax, activation=activation)
    if framework == "torch":
        return model, to_channel_first
    return model, lambda x: x


def to_channel_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))


def from_layout(framework: str, a: np.ndarray) -> np.ndarray:
    """Back to channel-last, for comparing the two frameworks."""
    return np.transpose(a, (0, 2, 3, 1)) if framework == "torch" else a


class ModelCache:
    """A test module's models, each built once per key: a fresh model pays its first explanation's
    plan tuning (and, for Keras, its step tracing) again, ~1-3 s a test. Each model's weights at
    build time are kept: :meth:`check_unchanged` (an autouse fixture's job) proves after every
    test that explaining changed none of them. Tests whose point needs a model nothing explained
    yet (once-per-model warnings, trace counts, simulated failures, wrapped models) build their own.
    """

    def __init__(self) -> None:
        self.models: dict[tuple[Any, ...], tuple[Any, Any, list[np.ndarray]]] = {}

    def get(self, framework: str, key: tuple[Any, ...], make: Any) -> tuple[Any, Any]:
        """``make()``'s ``(model, layout)``, made the first time ``(framework, *key)`` is asked for."""
        full = (framework, *key)
        if full not in self.models:
            model, layout = make()
            self.models[full] = (model, layout, weights_of(framework, model))
        model, layout, _ = self.models[full]
        return model, layout

    def check_unchanged(self) -> None:
        for (framework, *_), (model, _, built) in self.models.items():
            for old, new in zip(built, weights_of(framework, model), strict=True):
                np.testing.assert_array_equal(old, new)

    def clear(self) -> None:
        self.models.clear()

    def fixtures(self) -> tuple[Any, Any]:
        """Two autouse fixtures for the test module that holds the cache (assign them to module
        names): one checks the models unchanged after every test, one forgets them at the
        module's end."""
        import pytest

        @pytest.fixture(autouse=True)
        def unchanged() -> Iterator[None]:
            yield
            self.check_unchanged()

        @pytest.fixture(scope="module", autouse=True)
        def forget() -> Iterator[None]:
            yield
            self.clear()

        return unchanged, forget
