"""Walking a Keras model's layers (nested models included): the layer facet shared by evaluation
and, later, layer hooks."""

from __future__ import annotations

from typing import Any


def sublayers(layer: Any) -> list[Any]:
    """The direct sub-layers of a layer or model (``[]`` for a leaf layer)."""
    subs = getattr(layer, "layers", None)
    return list(subs) if isinstance(subs, (list, tuple)) else []


def weighted_layers(model: Any) -> list[tuple[str, Any]]:
    """``(name, layer)`` of every leaf layer with trainable weights, in ``model.layers`` order
    (nested models are walked; their layers are named ``"outer/inner"``)."""
    out: list[tuple[str, Any]] = []

    def walk(layer: Any, prefix: str) -> None:
        for sub in sublayers(layer):
            name = f"{prefix}{sub.name}"
            if sublayers(sub):
                walk(sub, name + "/")
            elif list(getattr(sub, "trainable_weights", []) or []):
                out.append((name, sub))

    walk(model, "")
    return out


def all_layers(model: Any) -> list[Any]:
    """Every layer of a model, nested models walked depth-first, in ``model.layers`` order."""
    out: list[Any] = []
    for sub in sublayers(model):
        out.append(sub)
        out.extend(all_layers(sub))
    return out
