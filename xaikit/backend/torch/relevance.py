"""The relevance facet of the torch backend (:class:`~xaikit.backend.facets.RelevanceFacet`):
LRP (:mod:`xaikit.backend.torch.lrp`), DeepLIFT (:mod:`xaikit.backend.torch.deeplift`), and
guided backprop / deconvnet here.

Guided backprop and deconvnet change the backward of every ReLU the forward pass calls: a
``torch.overrides.TorchFunctionMode`` sees each ``torch.relu`` / ``F.relu`` call (an
``nn.ReLU`` module calls them too, in place or not), so a ReLU written as a function inside a
``forward`` is modified as well, not only ``nn.ReLU`` modules. Nothing of the model changes; the
mode ends with the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from xaikit.backend.base import T
from xaikit.backend.facets import RelevanceFacet
from xaikit.backend.torch.forms import compiled_module, hook_refusal
from xaikit.backend.torch.nonlinear import RELUS as _RELUS
from xaikit.errors import XaikitValueError

__all__ = ["Relevance", "ReluMode", "guided_grads"]


class _GuidedRelu(torch.autograd.Function):
    """ReLU forward; backward: the gradient's positive part, where the input was positive."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad.clamp(min=0) * (x > 0).to(grad.dtype)


class _DeconvRelu(torch.autograd.Function):
    """ReLU forward; backward: the ReLU of the gradient, whatever the input."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.clamp(min=0)


class ReluMode(TorchFunctionMode):
    """Within the block, every ReLU call computes ``fn.apply(x)`` (an autograd function with a
    ReLU forward). In-place ReLUs become out-of-place (their result is returned, which is what
    ``nn.ReLU(inplace=True)`` passes on)."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _RELUS and args and isinstance(args[0], torch.Tensor):
            self.calls += 1
            return self.fn.apply(args[0])
        return func(*args, **kwargs)


class Relevance(RelevanceFacet):
    """The relevance facet of the torch backend."""

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    def lrp_step(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        composite: Any,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> tuple[list[T], T]:
        from xaikit.backend.torch import lrp

        return lrp.lrp_step(self.bk, model, inputs, targets, composite, output, model_kwargs, target)

    def deeplift_step(
        self,
        model: Any,
        inputs: Sequence[T],
        baselines: Sequence[T],
        targets: T,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> tuple[list[T], T, T]:
        from xaikit.backend.torch import deeplift

        return deeplift.deeplift_step(
            self.bk, model, inputs, baselines, targets, output, model_kwargs, target
        )

    def modified_step(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        mode: str,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> list[T]:
        if mode == "guided":  # Guided Grad-CAM's guided part: the same pass, with its refusals
            return self.bk.cam.guided_step(model, inputs, targets, output, model_kwargs, target)
        return guided_grads(self.bk, model, inputs, targets, mode, output, model_kwargs, target)


def guided_grads(
    bk: Any,
    model: Any,
    inputs: Sequence[T],
    targets: T,
    mode: str,
    output: int | str = 0,
    model_kwargs: dict[str, Any] | None = None,
    target: Any = None,
) -> list[T]:
    """Input gradients of the target scores with every ReLU's backward modified: ``mode``
    ``"guided"`` or ``"deconvnet"``. A forward pass that calls no ReLU is an error (its map would
    be the plain gradient, silently). ``target``: a bound target object scoring the rows
    (``targets`` are then sample indices)."""
    if mode not in ("guided", "deconvnet"):
        raise XaikitValueError(f"mode must be 'guided' or 'deconvnet'; got {mode!r}")
    refusal = hook_refusal(model, f"{'guided backprop' if mode == 'guided' else 'deconvnet'} maps")
    if refusal is not None:
        raise refusal
    inner = compiled_module(model)  # a torch.compile module: its eager module (same weights)
    model = model if inner is None else inner
    relus = ReluMode(_GuidedRelu if mode == "guided" else _DeconvRelu)
    with relus:
        _, grads, _ = bk.grad_step(model, inputs, targets, output, False, model_kwargs, target=target)
    if not relus.calls:
        name = "guided backprop" if mode == "guided" else "deconvnet"
        raise XaikitValueError(
            f"{name} modifies the backward pass of the model's ReLUs, and its forward pass called "
            "no torch.relu / F.relu / nn.ReLU (a model without ReLUs, or one whose ReLUs run inside "
            "TorchScript or a compiled graph): its map would be the plain gradient. Use "
            "method='vanilla' for that, or explain the eager model"
        )
    return list(grads)
