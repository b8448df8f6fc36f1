"""PyTorch reference architectures (importing this module imports torch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["LeNet"]


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
