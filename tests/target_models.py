"""Models and layouts shared by the target-object tests (``tests/test_targets*.py``): a linear
1x1-convolution segmenter whose class-k logit at a pixel is ``w[k] . x[pixel] + b[k]`` (its
gradients are known exactly), in torch and Keras on the same weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def linear_segmenter(
    framework: str, w: np.ndarray, b: np.ndarray, size: tuple[int, int], pool: bool = False
) -> Any:
    """A 1x1 convolution C -> K (``w`` (K, C), ``b`` (K,)) on (H, W) = ``size`` images; with
    ``pool`` its logits averaged over the image: a linear classifier."""
    k, c = w.shape
    if framework == "torch":
        torch = pytest.importorskip("torch")
        conv = torch.nn.Conv2d(c, k, 1)
        with torch.no_grad():
            conv.weight.copy_(torch.as_tensor(w[:, :, None, None]))
            conv.bias.copy_(torch.as_tensor(b))
        return torch.nn.Sequential(conv, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()) if pool else conv
    keras = pytest.importorskip("keras")
    inp = keras.Input((*size, c))
    layer = keras.layers.Conv2D(k, 1)
    out = layer(inp)
    model = keras.Model(inp, keras.layers.GlobalAveragePooling2D()(out) if pool else out)
    layer.set_weights([w.T[None, None], b])
    return model


def layout(framework: str, x: np.ndarray) -> np.ndarray:
    """(B, H, W, C) images in the framework's layout (channel-first for torch), as numpy."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def batch(framework: str, x: np.ndarray) -> Any:
    """(B, H, W, C) images in the framework's layout and type (a torch tensor for torch)."""
    if framework == "torch":
        import torch

        return torch.as_tensor(layout(framework, x))
    return x


def channel_last(framework: str, a: np.ndarray) -> np.ndarray:
    """A torch (B, C, H, W) result as (B, H, W, C) numpy; anything else as it is."""
    a = np.asarray(a)
    return a.transpose(0, 2, 3, 1) if framework == "torch" and a.ndim == 4 else a
