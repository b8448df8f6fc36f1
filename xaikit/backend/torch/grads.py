"""Gradients that must reach what they explain: an input or a layer whose gradient autograd does
not give (``None``) is an error naming it, the model's form and the likely causes, never a map
of zeros; so is an explained output that does not require grad at all.

Also the error for a ``torch.export`` program called on a batch size it was not exported for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from xaikit.backend.torch.forms import form_of, is_exported
from xaikit.errors import XaikitValueError

_DETACHED = (
    ".detach(), .numpy() / .item() / .tolist(), an integer or bool cast (.long(), .int(), "
    ".bool()), an argmax or index lookup, or code under torch.no_grad() / torch.inference_mode()"
)


def _no_graph(model: Any, output: int | str, what: str) -> XaikitValueError:
    return XaikitValueError(
        f"the explained output (output={output!r}) of {form_of(model)} does not require grad, so "
        f"no gradient reaches {what}: the forward pass gives a result cut from the autograd graph. "
        f"Likely causes: the model's forward (or the code after the layer) runs under "
        f"torch.no_grad() / torch.inference_mode(), or passes its result through {_DETACHED}; or "
        "output= picks an output that does not depend on the inputs. Make the explained output a "
        "differentiable function of the inputs (remove the no_grad block or the detach)"
    )


def input_grads(
    model: Any, scores: Any, xs: Sequence[Any], output: int | str, retain: bool = False
) -> list[Any]:
    """The gradient of ``scores.sum()`` with respect to each input of ``xs`` (``retain``: keep the
    graph for another backward pass).

    Raises:
        XaikitValueError: the scores do not require grad, or an input gets no gradient (named by
            its position in the model's call); never zeros in its place.
    """
    if not scores.requires_grad:
        raise _no_graph(model, output, "the model inputs")
    grads = torch.autograd.grad(scores.sum(), list(xs), allow_unused=True, retain_graph=retain)
    missing = [i for i, g in enumerate(grads) if g is None]
    if missing:
        which = ", ".join(str(i) for i in missing)
        raise XaikitValueError(
            f"the gradient of the explained output (output={output!r}) of {form_of(model)} does not "
            f"reach model input {which} (position in the model's call, from 0, of {len(xs)} "
            f"input(s)): the output does not depend on it through autograd. Likely causes: the "
            f"model does not use that input, or passes it through {_DETACHED} before using it. An "
            "argument that is not to be explained goes in model_kwargs=; an input that must be "
            "explained has to reach the output through differentiable operations"
        )
    return list(grads)


def layer_grad(model: Any, layer: str, scores: Any, a: Any, output: int | str) -> Any:
    """The gradient of ``scores.sum()`` with respect to a layer's (hooked) activations ``a``.

    Raises:
        XaikitValueError: the scores do not require grad, or the layer's output does not flow
            into them (named with the model's form); never zeros in its place.
    """
    if not scores.requires_grad:
        raise _no_graph(model, output, f"layer {layer!r}")
    (da,) = torch.autograd.grad(scores.sum(), [a], allow_unused=True)
    if da is None:
        raise XaikitValueError(
            f"the gradient of the explained output (output={output!r}) of {form_of(model)} does not "
            f"reach the output of layer {layer!r}: the layer runs, but what it gives does not flow "
            f"into that output through autograd. Likely causes: the layer is on a branch that "
            f"output= does not pick (an auxiliary head), its result is replaced or not used, or "
            f"it passes through {_DETACHED} after the layer. Pass layer= a module on the path to "
            "the explained output (named_modules() gives the names)"
        )
    return da


def exported_call_error(model: Any, inputs: Sequence[Any], exc: Exception) -> XaikitValueError | None:
    """The error for a ``torch.export`` program that refuses a batch size (it was exported for
    one batch size only), or None for any other failure."""
    if not is_exported(model) or not re.search(r"(size\(\)|shape)\[0\]", str(exc)):
        return None
    shapes = ", ".join(str(tuple(int(d) for d in x.shape)) for x in inputs)
    return XaikitValueError(
        f"{form_of(model)} refused inputs of shape {shapes}: it was exported for a fixed batch "
        "size, and an explanation calls the model on batches of other sizes (one row, chunks of "
        "perturbed rows). Export it with a dynamic batch axis, e.g. torch.export.export(model, "
        "(x,), dynamic_shapes=({0: torch.export.Dim('batch')},)). torch said: "
        f"{type(exc).__name__}: {exc}"
    )


def f16_scaled_grads(scores: Any, xs: Sequence[Any], grads: list[Any]) -> list[Any]:
    """``grads`` (of ``scores.sum()`` w.r.t. ``xs``, taken with ``retain_graph=True`` through a
    float16 model) again with loss scaling, per row (see
    :data:`xaikit.backend.base.F16_GRAD_GOAL`): rows whose gradients already reach the goal, and
    rows whose scaled gradients are not finite, keep the unscaled ones. ``scores`` must be one
    value per row; other shapes are returned unchanged. No second pass when no row needs one."""
    from xaikit.backend.base import F16_GRAD_GOAL, F16_SCALE_MAX_EXP

    rows = int(xs[0].shape[0]) if xs and xs[0].ndim else 0
    if scores.ndim != 1 or int(scores.shape[0]) != rows or rows == 0:
        return grads
    with torch.no_grad():
        peak = torch.stack([g.abs().reshape(rows, -1).amax(1).float() for g in grads]).amax(0)
        want = torch.floor(torch.log2(F16_GRAD_GOAL / peak.clamp_min(torch.finfo(torch.float32).tiny)))
        exp = torch.where(torch.isfinite(peak), want, torch.zeros_like(want)).clamp(0, F16_SCALE_MAX_EXP)
    if not bool((exp > 0).any()):
        return grads
    scale = torch.exp2(exp)
    again = torch.autograd.grad(scores, list(xs), grad_outputs=scale.to(scores.dtype))
    with torch.no_grad():
        ok = torch.stack([torch.isfinite(a.reshape(rows, -1)).all(1) for a in again]).all(0)
        out = []
        for a, g in zip(again, grads):
            shape = (rows,) + (1,) * (g.ndim - 1)
            out.append(torch.where(ok.view(shape), a / scale.view(shape).to(a.dtype), g))
    return out
