"""Walking a torch model's layers (modules): the layer facet shared by evaluation and, later,
layer hooks."""

from __future__ import annotations

from typing import Any

import torch


def weighted_layers(model: Any) -> list[tuple[str, Any]]:
    """``(name, module)`` of every module that owns parameters itself, in registration order
    (the order of ``named_modules``, taken as the forward order)."""
    if not isinstance(model, torch.nn.Module):
        return []
    out = []
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            out.append((name or "(model)", module))
    return out
