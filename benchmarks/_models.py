"""Benchmark models: the LeNet of ``xaikit.architecture`` and a small ResNet-style CNN, for both
frameworks, built with the same layer sizes so torch and TF figures compare like for like.

The ResNet: a 3x3 stem with 16 filters, three residual stages (16, 32, 64 filters; the last two
halve the resolution with a strided convolution and a 1x1 projection on the shortcut), each
one basic block (two 3x3 convolutions with batch normalization), global average pooling and a
dense softmax layer. About 0.2 M parameters; 32x32x3 input.
"""

from __future__ import annotations

from typing import Any

MODELS = ("lenet", "resnet")
INPUT_HWC = (32, 32, 3)
CLASSES = 10


def torch_model(name: str, seed: int = 0) -> Any:
    """A torch model in eval mode (channel-first input ``(B, 3, 32, 32)``)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if name == "lenet":
        from xaikit.architecture.torch import LeNet

        return LeNet(input_shape=INPUT_HWC, classes=CLASSES).eval()
    if name != "resnet":
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + self.short(x))

    class SmallResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.stages = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
            self.fc = nn.Linear(64, CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stages(self.stem(x))
            return torch.softmax(self.fc(x.mean(dim=(2, 3))), dim=-1)

    return SmallResNet().eval()


def tf_model(name: str, seed: int = 0) -> Any:
    """A Keras model (channel-last input ``(B, 32, 32, 3)``)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    if name == "lenet":
        from xaikit.architecture.tensorflow import LeNet

        return LeNet(input_shape=INPUT_HWC, classes=CLASSES)
    if name != "resnet":
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")
    layers = tf.keras.layers

    def block(x: Any, cout: int, stride: int) -> Any:
        y = layers.Conv2D(cout, 3, stride, padding="same", use_bias=False)(x)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.BatchNormalization()(layers.Conv2D(cout, 3, 1, padding="same", use_bias=False)(y))
        if stride != 1 or x.shape[-1] != cout:
            x = layers.BatchNormalization()(layers.Conv2D(cout, 1, stride, use_bias=False)(x))
        return layers.ReLU()(layers.Add()([x, y]))

    inp = layers.Input(shape=INPUT_HWC)
    x = layers.Conv2D(16, 3, 1, padding="same", use_bias=False)(inp)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        x = block(x, cout, stride)
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(CLASSES, activation="softmax")(x)
    return tf.keras.Model(inp, out, name="small_resnet")


def make_model(framework: str, name: str, seed: int = 0) -> Any:
    """The named benchmark model for ``framework`` ("torch" or "tf")."""
    return torch_model(name, seed) if framework == "torch" else tf_model(name, seed)
