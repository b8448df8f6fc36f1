"""PyTorch reference architectures (importing this module imports torch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from xaikit.checks import check_int
from xaikit.errors import XaikitValueError

__all__ = ["LeNet", "ResNet18", "calibrate_batchnorm"]


class LeNet(nn.Module):
    """A LeNet-style CNN: three 3x3 convolutions (32, 64, 64 filters) and two dense layers.

    The layout follows the reference system's LeNet. Input is channel-first ``(B, C, H, W)``;
    ``input_shape`` may be given channel-first ``(C, H, W)`` or channel-last ``(H, W, C)``
    (a last axis of 1 or 3 is read as channels).

    Args:
        input_shape: shape of one image.
        classes: number of classes.
        softmax: end with a softmax (probabilities, as the reference does) or return logits.

    Example:
        >>> import torch
        >>> model = LeNet(input_shape=(32, 32, 3), classes=4)
        >>> tuple(model(torch.zeros(2, 3, 32, 32)).shape)
        (2, 4)
    """

    def __init__(self, input_shape: Sequence[int] = (1, 28, 28), classes: int = 10, softmax: bool = True):
        super().__init__()
        shape = tuple(int(s) for s in input_shape)
        if len(shape) != 3:
            raise ValueError(f"input_shape must have 3 entries (C, H, W) or (H, W, C); got {input_shape!r}")
        if shape[-1] in (1, 3) and shape[0] not in (1, 3):
            shape = (shape[2], shape[0], shape[1])
        channels, height, width = shape
        self.conv1 = nn.Conv2d(channels, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        self.pool = nn.MaxPool2d(2)
        h = ((height - 2) // 2 - 2) // 2 - 2
        w = ((width - 2) // 2 - 2) // 2 - 2
        self.fc1 = nn.Linear(64 * h * w, 64)
        self.fc2 = nn.Linear(64, classes)
        self.softmax = softmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.pool(self.conv1(x)))
        x = torch.relu(self.pool(self.conv2(x)))
        x = torch.relu(self.conv3(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        x = self.fc2(x)
        return torch.softmax(x, dim=-1) if self.softmax else x


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch normalization and a residual connection."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        short = x if self.downsample is None else self.downsample(x)
        return self.relu(y + short)


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016) with torchvision's module names and shapes.

    Module paths are those of ``torchvision.models.resnet18`` (``conv1``, ``bn1``, ``layer1`` …
    ``layer4.1.conv2``, ``fc``), so a state dict saved from torchvision loads with
    ``load_state_dict`` and layer names in docs and issues mean the same module. Provided because
    the torchvision wheel may not import beside a given torch build; nothing is downloaded: the
    weights are random (see :func:`calibrate_batchnorm` before explaining a random-weight net).
    Input ``(B, 3, H, W)``, any size from 32x32; output: logits ``(B, classes)``.

    Example:
        >>> import torch
        >>> model = ResNet18(classes=5).eval()
        >>> tuple(model(torch.zeros(2, 3, 64, 64)).shape)
        (2, 5)
        >>> sum(p.numel() for p in ResNet18().parameters())
        11689512
    """

    layer1: nn.Sequential
    layer2: nn.Sequential
    layer3: nn.Sequential
    layer4: nn.Sequential

    def __init__(self, classes: int = 1000, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = (64, 128, 256, 512)
        cin = 64
        for i, cout in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", self._stage(cin, cout, stride))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    @staticmethod
    def _stage(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = stage(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, x: torch.Tensor, batch_size: int = 32) -> nn.Module:
    """Set every batch-norm layer's running statistics to those of the batch ``x``.

    A network with random weights and fresh batch norm (mean 0, variance 1) lets activations
    grow or vanish layer after layer, and its input gradients come out around 1e-12: useless to
    explain or to benchmark. One pass over a batch of typical inputs gives it the statistics a
    trained network would have. Only batch-norm layers change (their running mean and variance,
    as a cumulative average over ``x`` in chunks of ``batch_size``); the passes run in eval mode
    for every other module (dropout off), and the model is returned in eval mode.

    Example:
        >>> import torch
        >>> model = ResNet18(classes=3)
        >>> x = torch.randn(8, 3, 64, 64)
        >>> _ = calibrate_batchnorm(model, x)
        >>> bool(torch.allclose(model.bn1.running_mean, model.conv1(x).mean(dim=(0, 2, 3)), atol=1e-4))
        True
    """
    step = check_int(batch_size, "batch_size", 1)
    if len(x) == 0:
        raise XaikitValueError("calibrate_batchnorm needs a non-empty batch x; got 0 samples")
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    model.eval()
    saved = [m.momentum for m in norms]
    try:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration passes
            m.train()
        for i in range(0, len(x), step):
            model(x[i : i + step])
    finally:
        for m, momentum in zip(norms, saved, strict=True):
            m.momentum = momentum
            m.eval()
    return model.eval()
