"""The relevance steps of the torch backend, which :class:`~xaikit.backend.facets.RelevanceFacet`
calls: LRP (:func:`~xaikit.backend.torch.lrp.lrp_step`), DeepLIFT
(:func:`~xaikit.backend.torch.deeplift.deeplift_step`), and guided backprop / deconvnet
(:func:`modified_step`, here).

Guided backprop and deconvnet change the backward of every ReLU the forward pass calls: a
``torch.overrides.TorchFunctionMode`` sees each ``torch.relu`` / ``F.relu`` call (an
``nn.ReLU`` module calls them too, in place or not), so a ReLU written as a function inside a
``forward`` is modified as well, not only ``nn.ReLU`` modules. Nothing of the model changes; the
mode ends with the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from xaikit.backend.base import T
from xaikit.backend.rows import Rows
from xaikit.backend.torch.deeplift import deeplift_step
from xaikit.backend.torch.forms import eager_module, hook_refusal, is_exported, part_out_of_reach
from xaikit.backend.torch.lrp import lrp_step
from xaikit.backend.torch.nonlinear import IN_PLACE
from xaikit.backend.torch.nonlinear import RELUS as _RELUS
from xaikit.errors import XaikitValueError

__all__ = ["ReluMode", "deeplift_step", "lrp_step", "modified_step"]


class _GuidedRelu(torch.autograd.Function):
    """ReLU forward; backward: the gradient's positive part, where the input was positive."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        # the mask, not ``x``: a ReLU in place writes ``x`` after this (the version check would fail)
        ctx.save_for_backward(x > 0)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (positive,) = ctx.saved_tensors
        return grad.clamp(min=0) * positive.to(grad.dtype)


class _DeconvRelu(torch.autograd.Function):
    """ReLU forward; backward: the ReLU of the gradient, whatever the input."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.clamp(min=0)


def _writes_input(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether this ReLU call writes its input: ``torch.relu_``, ``x.relu_()``,
    ``F.relu(x, inplace=True)`` (``nn.ReLU(inplace=True)`` calls that)."""
    if func in IN_PLACE:
        return True
    if func is torch.nn.functional.relu:
        return bool(kwargs.get("inplace", args[1] if len(args) > 1 else False))
    return False


class ReluMode(TorchFunctionMode):
    """Within the block, every ReLU call computes ``fn.apply(x)`` (an autograd function with a
    ReLU forward). A ReLU in place writes that result back into its input (``x.copy_``, which
    autograd follows), so a forward that ignores the return value (``h.relu_()``) is modified
    too."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _RELUS and args and isinstance(args[0], torch.Tensor):
            self.calls += 1
            y = self.fn.apply(args[0])
            return args[0].copy_(y) if _writes_input(func, args, kwargs) else y
        return func(*args, **kwargs)


def modified_step(bk: Any, rows: Rows, mode: str) -> list[T]:
    """Input gradients of the target scores with every ReLU's backward modified: ``mode``
    ``"guided"`` or ``"deconvnet"`` (the torch backend's
    :meth:`~xaikit.backend.facets.RelevanceFacet.modified_step`; Guided Grad-CAM's guided part
    too). A forward pass that calls no ReLU is an error (its map would be the plain gradient,
    silently), and so is a model that holds a TorchScript module or a torch.export program (the
    ReLUs inside run unmodified: its map would be modified only in part). ``rows.target``: a
    bound target object scoring the rows (``rows.targets`` are then sample indices). ``mode`` is
    checked by the facet."""
    model = rows.model
    name = "guided backprop (guided_backprop, guided_gradcam)" if mode == "guided" else "deconvnet"
    refusal = hook_refusal(model, f"{name} maps")
    if refusal is not None:
        raise refusal
    part = None if is_exported(model) else part_out_of_reach(model)
    if part is not None:
        raise XaikitValueError(
            f"{name} replaces the gradient of every ReLU the forward pass calls, and this model "
            f"holds a TorchScript module or a torch.export program whose ReLUs it cannot see "
            f"(submodule {part[0]!r}): its map would be {mode} only in part. Explain a model of "
            "Python nn.Modules, or use a method that needs no hooks"
        )
    # a torch.compile module: its eager module (same weights)
    rows = replace(rows, model=eager_module(model))
    relus = ReluMode(_GuidedRelu if mode == "guided" else _DeconvRelu)
    with relus:
        _, grads, _ = bk.grad_step(rows)
    if not relus.calls:
        name = "guided backprop" if mode == "guided" else "deconvnet"
        raise XaikitValueError(
            f"{name} modifies the backward pass of the model's ReLUs, and its forward pass called "
            "no torch.relu / F.relu / nn.ReLU (a model without ReLUs, or one whose ReLUs run inside "
            "TorchScript or a compiled graph): its map would be the plain gradient. Use "
            "method='vanilla' for that, or explain the eager model"
        )
    return list(grads)
