"""Input invariance (Kindermans et al., 2017) on a torch model: the first layer's bias absorbs a
constant shift of the input, so that ``f'(x + m) = f(x)``. The caller snapshots and restores the
weights (:meth:`~xaikit.backend.facets.EvalFacet.snapshot`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from xaikit.errors import XaikitTypeError, XaikitValueError

#: layers before the first one that pass their input on unchanged (up to its shape)
_PASS_THROUGH = (nn.Flatten, nn.Unflatten, nn.Identity, nn.Dropout)
#: the layers whose bias can absorb a constant shift of their whole input
_SHIFTABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def first_layer(model: Any, run: Callable[[], Any]) -> tuple[str, nn.Module]:
    """The first leaf module ``run()`` (one forward pass of ``model``) calls, past the layers of
    :data:`_PASS_THROUGH`; every hook is removed, also when the pass raises."""
    if not isinstance(model, nn.Module):
        raise XaikitTypeError(
            f"input_invariance shifts the first layer's bias: model must be a torch.nn.Module (or a "
            f"Keras model); got {type(model).__name__}"
        )
    order: list[tuple[str, nn.Module]] = []
    hooks = []
    for name, module in model.named_modules():
        if next(module.children(), None) is None:
            hooks.append(
                module.register_forward_pre_hook(lambda mod, args, name=name: order.append((name, mod)))
            )
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    for name, module in order:
        if not isinstance(module, _PASS_THROUGH):
            return name or type(model).__name__, module
    raise XaikitValueError("input_invariance needs a model with a dense or convolution layer; found none")


def absorb_shift(model: Any, shift: float, run: Callable[[], Any]) -> str:
    """Subtract the response of the model's first layer to an input of ``shift`` everywhere from
    its bias (``b <- b - W m``, computed in float64); returns the layer's name. A first layer that
    is not ``Linear`` / ``Conv1d-3d`` with a bias, or a convolution that pads with zeros (its
    border outputs see less of the shift, which no bias can absorb), is refused by name."""
    name, layer = first_layer(model, run)
    kind = type(layer).__name__
    if not isinstance(layer, _SHIFTABLE) or isinstance(layer, nn.modules.conv._ConvTransposeNd):
        raise XaikitValueError(
            f"input_invariance needs a model whose first layer is a dense (Linear) or convolution "
            f"(Conv1d/2d/3d) layer with a bias, to absorb the input shift; its first layer {name!r} is "
            f"a {kind}"
        )
    if layer.bias is None:
        raise XaikitValueError(
            f"input_invariance needs a bias in the model's first layer {name!r} ({kind}, bias=False) to "
            "absorb the input shift; give the layer a bias"
        )
    if isinstance(layer, nn.modules.conv._ConvNd) and layer.padding_mode == "zeros":
        pads = (
            layer.padding
            if not isinstance(layer.padding, str)
            else (0,)
            if layer.padding == "valid"
            else (1,)
        )
        if any(int(p) for p in pads):
            raise XaikitValueError(
                f"input_invariance: the model's first layer {name!r} ({kind}) pads its input with zeros "
                f"(padding={layer.padding!r}), so its border outputs see only part of a shifted input and no "
                "bias can absorb the shift; use padding=0 or a padding_mode that repeats the input "
                "('replicate', 'reflect', 'circular')"
            )
    with torch.no_grad():
        weight = layer.weight.detach().double()
        response = float(shift) * weight.sum(dim=tuple(range(1, weight.ndim)))
        layer.bias.copy_((layer.bias.detach().double() - response).to(layer.bias.dtype))
    return name
