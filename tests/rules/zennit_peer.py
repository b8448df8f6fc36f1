"""zennit (LGPL-3.0) as a test-time peer: imported, never vendored or copied.

zennit 0.5.1 imports ``torchvision.models.resnet`` when it is imported (for its ResNet
canonizer); the torchvision wheel does not import beside this machine's CPU torch build, so a
stub module stands in for it, holding xaikit's own ResNet-18 block
(:class:`xaikit.architecture.torch.ResNet18` has torchvision's module names, so zennit's
``ResNetCanonizer`` recognizes its blocks). A real torchvision, where it imports, is used as it is.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


def zennit() -> Any:
    """The ``zennit`` package (the test skips, with the reason, where it is not installed)."""
    try:
        import torchvision.models.resnet  # noqa: F401
    except Exception:  # a missing or broken torchvision: the stub below
        import torch

        from xaikit.architecture.torch import _BasicBlock

        class Bottleneck(torch.nn.Module):
            """Never instantiated: xaikit's ResNet-18 has basic blocks only."""

        resnet = types.ModuleType("torchvision.models.resnet")
        resnet.BasicBlock = _BasicBlock  # type: ignore[attr-defined]
        resnet.Bottleneck = Bottleneck  # type: ignore[attr-defined]
        models = types.ModuleType("torchvision.models")
        models.resnet = resnet  # type: ignore[attr-defined]
        root = types.ModuleType("torchvision")
        root.models = models  # type: ignore[attr-defined]
        stubs = {"torchvision": root, "torchvision.models": models, "torchvision.models.resnet": resnet}
        sys.modules.update(stubs)
        try:
            return pytest.importorskip(
                "zennit", reason="zennit (test-time peer) is not installed: make installs it"
            )
        finally:  # zennit holds the classes now; other packages (transformers) must not see the stub
            for name, module in stubs.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]
    return pytest.importorskip("zennit", reason="zennit (test-time peer) is not installed: make installs it")
