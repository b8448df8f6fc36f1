"""Real architectures at 224x224 with random weights (nothing is downloaded), fed as real
pipelines feed them: pictures of the bundled ``shapes`` data, normalized by the model's statistics.

* torch: ``xaikit.architecture.torch.ResNet18`` (torchvision's module names), ImageNet mean/std;
* Keras: ``keras.applications`` with ``weights=None`` and logits out, ``x / 127.5 - 1``
  (``mobilenet_v2.preprocess_input``; EfficientNet rescales inside and takes 0..255);
* Hugging Face: ``ViTForImageClassification`` from a small ``ViTConfig``, mean = std = 0.5
  (``ViTImageProcessor``'s defaults).

Random batch-norm nets are calibrated on the batch (``calibrate_batchnorm``): fresh statistics
make their input gradients vanish (~1e-12).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.dataset.data import shapes

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
VIT_MEAN = VIT_STD = (0.5, 0.5, 0.5)
SIZE = 224
CLASSES = len(shapes.label_mapping)


def pictures(n: int, size: int = SIZE, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` shapes pictures ``(n, size, size, 3)`` uint8 and their labels."""
    data, _ = shapes.load_data(image_size=size, n_train=n, n_eval=1, seed=seed)
    return data["x"], data["y"]


def normalize(pixels: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``(pixels / 255 - mean) / std`` per channel, channel-last float32."""
    return ((pixels / 255.0 - np.array(mean)) / np.array(std)).astype(np.float32)


def channel_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def torch_resnet18(calibration: np.ndarray, seed: int = 0) -> Any:
    """ResNet-18 with 5 classes, random weights, batch norm calibrated on ``calibration`` (NCHW)."""
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(seed)
    model = ResNet18(classes=CLASSES)
    return calibrate_batchnorm(model, torch.as_tensor(calibration))


def keras_application(name: str, calibration: np.ndarray, seed: int = 0) -> Any:
    """``keras.applications.<name>(weights=None)`` with 5 logits, calibrated on ``calibration``."""
    import keras

    from xaikit.architecture.tensorflow import calibrate_batchnorm

    keras.utils.set_random_seed(seed)
    build = getattr(keras.applications, name)
    model = build(weights=None, input_shape=(SIZE, SIZE, 3), classes=CLASSES, classifier_activation=None)
    return calibrate_batchnorm(model, calibration)


def tiny_vit(seed: int = 0, image_size: int = SIZE) -> Any:
    """``ViTForImageClassification`` from a config: patch 16, hidden 64, 2 layers, 4 heads."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=image_size,
        patch_size=16,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=CLASSES,
    )
    return ViTForImageClassification(config).eval()


def torch_scores(model: Any, x: Any) -> np.ndarray:
    """Class scores ``(B, classes)`` of a torch model (``.logits`` of an output object)."""
    import torch

    with torch.no_grad():
        out = model(torch.as_tensor(x))
    return getattr(out, "logits", out).double().numpy()
