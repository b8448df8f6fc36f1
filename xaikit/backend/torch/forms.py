"""The forms a torch model comes in, and what each lets an explanation see.

A model reaches xaikit as a plain ``torch.nn.Module``, a TorchScript module
(``torch.jit.script`` / ``torch.jit.trace`` / ``torch.jit.load``), a ``torch.compile`` wrapper
(``OptimizedModule``), the module of a ``torch.export`` program (``exported.module()``, a
``torch.fx.GraphModule`` of aten ops) or a ``torch.fx.symbolic_trace`` GraphModule. All are
``nn.Module`` instances and all are differentiable, so every gradient, perturbation and
model-agnostic method runs on each of them. What differs is whether a Python forward hook on a submodule fires, which
the class-activation maps and guided backprop need:

* nn.Module, fx GraphModule (leaf modules stay calls), torch.compile (hooks and guided ReLUs run
  on its ``_orig_mod``, the eager module with the same weights): yes;
* torch.export (or any GraphModule of aten ops): no (its graph calls aten ops, not the modules;
  ``named_modules`` keeps only the modules that hold weights, as attribute holders), but its
  graph records which module each op ran in: :mod:`~xaikit.backend.torch.graph_hooks` hooks a
  copy of the graph instead;
* TorchScript: no (a scripted module refuses hooks; a traced one accepts them and never calls
  them: its graph runs in C++), and nothing to rewrite: :func:`hook_refusal` refuses it, never
  a map of zeros or a plain gradient in place of a guided one.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from xaikit.errors import XaikitValueError

#: the methods that work on every torch model form (no hooks)
WORKS_EVERYWHERE = (
    "the gradient methods (vanilla, smoothgrad, integrated, smint, vargrad, input_x_gradient, "
    "expected_gradients, blur_ig, guided_ig, xrai), the perturbation methods (occlusion, rise) and "
    "the model-agnostic methods (feature_ablation, shapley_sampling, kernel_shap, lime, sobol, hsic)"
)

_CONV_OPS = ("aten.conv2d.default", "aten.convolution.default", "aten._convolution.default")


def is_script(model: Any) -> bool:
    """A TorchScript module: scripted, traced or loaded from a file."""
    return isinstance(model, torch.jit.ScriptModule)


def compiled_module(model: Any) -> Any | None:
    """The eager module inside a ``torch.compile`` wrapper, or None for any other model.

    Example:
        >>> compiled_module(torch.nn.Linear(2, 2)) is None
        True
    """
    dynamo = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled
    wrapper = getattr(dynamo, "OptimizedModule", None)
    if wrapper is not None and isinstance(model, wrapper):
        return model._orig_mod
    return None


def eager_module(model: Any) -> Any:
    """The module to run with hooks or swapped functions: a torch.compile module's eager
    ``_orig_mod`` (same weights; a hook added to a compiled module would recompile it), else the
    model itself."""
    inner = compiled_module(model)
    return model if inner is None else inner


def is_exported(model: Any) -> bool:
    """The module of a ``torch.export`` program, or any other GraphModule whose graph calls aten
    operators (``torch.ops.aten.*`` overloads) rather than its submodules. A
    ``torch.fx.symbolic_trace`` GraphModule calls its leaf modules (``call_module`` nodes): not
    this."""
    if not isinstance(model, torch.fx.GraphModule):
        return False
    aten = type(torch.ops.aten.relu.default)
    return any(node.op == "call_function" and isinstance(node.target, aten) for node in model.graph.nodes)


def form_of(model: Any) -> str:
    """How a model is described in messages: its form and class.

    Example:
        >>> form_of(torch.nn.Linear(2, 2))
        'a torch.nn.Module (Linear)'
    """
    if isinstance(model, torch.jit.TracedModule):
        return f"a traced TorchScript module (torch.jit.trace of {model.original_name})"
    if is_script(model):
        return f"a TorchScript module ({model.original_name}, from torch.jit.script or torch.jit.load)"
    inner = compiled_module(model)
    if inner is not None:
        return f"a torch.compile module (of {type(inner).__name__})"
    if is_exported(model):
        if hasattr(model, "range_constraints"):
            return "the module of a torch.export program (exported.module())"
        return "a torch.fx GraphModule of aten operators"
    if isinstance(model, torch.fx.GraphModule):
        return "a torch.fx GraphModule"
    if isinstance(model, torch.nn.Module):
        return f"a torch.nn.Module ({type(model).__name__})"
    return f"a function ({getattr(model, '__qualname__', type(model).__name__)})"


def part_out_of_reach(model: Any, exported: bool = True) -> tuple[str, Any] | None:
    """The first submodule of a Python model that runs out of the sight of hooks and torch
    function modes, as ``(name, module)``: a TorchScript module (its graph runs without the
    Python calls), and with ``exported`` the module of a torch.export program (its layers are
    not modules); None when there is none, or for a model that is not an ``nn.Module``."""
    if not isinstance(model, torch.nn.Module):
        return None
    for name, m in model.named_modules():
        if name and (is_script(m) or (exported and is_exported(m))):
            return name, m
    return None


def hook_refusal(model: Any, what: str) -> XaikitValueError | None:
    """The error for ``what`` (e.g. ``"class-activation maps"``) on a TorchScript model, whose
    submodule hooks never fire, or None for any other form."""
    if not is_script(model):
        return None
    why = (
        "TorchScript runs its compiled graph without calling Python forward hooks (a scripted "
        "module refuses them, a traced one never calls them)"
    )
    return XaikitValueError(
        f"{what} cannot be computed for {form_of(model)}: they hook the model's layers, and {why}. "
        f"Explain the Python nn.Module with the same weights instead (build the class and "
        f"load_state_dict(model.state_dict())), or use a method that needs no hooks: "
        f"{WORKS_EVERYWHERE}, which work on this model as it is"
    )


def first_conv_channels(model: Any) -> int | None:
    """The input channels of a model's first 2-D convolution (in module order), whatever its
    form; None when it has none.

    nn.Module and torch.compile: the first ``nn.Conv2d``; TorchScript: the first submodule whose
    ``original_name`` is ``Conv2d`` (its ``in_channels``, or its weight's input channels times
    its ``groups``, read from its graph when traced);
    torch.export: the weight of the graph's first convolution op.
    """
    if is_exported(model):
        return _exported_conv_channels(model)
    if is_frozen(model):  # its weights are graph constants
        return _frozen_conv_channels(model)
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            return int(m.in_channels)
        if is_script(m) and m.original_name == "Conv2d":
            if hasattr(m, "in_channels"):
                return int(m.in_channels)
            weight = getattr(m, "weight", None)
            if isinstance(weight, torch.Tensor) and weight.ndim == 4:
                return int(weight.shape[1]) * _script_groups(m)
    return None


def is_frozen(model: Any) -> bool:
    """A frozen TorchScript module (``torch.jit.freeze``): no training flag, no parameters."""
    return is_script(model) and not hasattr(model, "training")


def graph_constants(model: Any) -> list[torch.Tensor]:
    """The tensor constants of a frozen TorchScript module's graph (``torch.jit.freeze`` folds
    the weights into it, so the module has no parameters), in graph order; [] for another model."""
    if not is_frozen(model):
        return []
    out = []
    try:
        for node in model.graph.nodes():
            if node.kind() == "prim::Constant" and node.output().type().kind() == "TensorType":
                value = node.output().toIValue()
                if isinstance(value, torch.Tensor):
                    out.append(value)
    except (AttributeError, RuntimeError):
        return []
    return out


def _frozen_conv_channels(model: Any) -> int | None:
    """The input channels of the first 2-D convolution of a frozen TorchScript module's graph:
    its weight constant's input channels times its groups."""
    try:
        for node in model.graph.nodes():
            kind = node.kind()
            if kind not in ("aten::conv2d", "aten::_convolution", "aten::convolution"):
                continue
            args = list(node.inputs())
            weight = args[1].toIValue()
            if not isinstance(weight, torch.Tensor) or weight.ndim != 4:
                return None
            at = 6 if kind == "aten::conv2d" else 8
            if kind != "aten::conv2d" and args[6].toIValue():
                return None  # a transposed convolution first: weight is (in, out / groups, ...)
            groups = args[at].toIValue() if len(args) > at else 1
            return int(weight.shape[1]) * (int(groups) if isinstance(groups, int) else 1)
    except (AttributeError, IndexError, RuntimeError):
        pass
    return None


def _script_groups(conv: Any) -> int:
    """The ``groups`` of a TorchScript Conv2d: its attribute (scripted) or the constant of the
    convolution in its graph (traced: ``aten::_convolution``'s 9th input)."""
    if hasattr(conv, "groups"):
        return int(conv.groups)
    try:
        for node in conv.graph.nodes():
            if node.kind() == "aten::_convolution":
                value = list(node.inputs())[8].toIValue()
                return int(value) if isinstance(value, int) else 1
    except (AttributeError, IndexError, RuntimeError):
        pass
    return 1


def _exported_conv_channels(model: Any) -> int | None:
    for node in model.graph.nodes:
        if node.op != "call_function" or str(node.target) not in _CONV_OPS or len(node.args) < 2:
            continue
        weight = node.args[1]
        if getattr(weight, "op", None) != "get_attr":
            return None
        w = _attr(model, str(weight.target))
        if not isinstance(w, torch.Tensor) or w.ndim != 4:
            return None
        if str(node.target) == "aten.conv2d.default":
            groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        else:  # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
            if len(node.args) > 6 and node.args[6]:
                return None  # a transposed convolution first: weight is (in, out / groups, ...)
            groups = node.args[8] if len(node.args) > 8 else node.kwargs.get("groups", 1)
        return int(w.shape[1]) * int(groups)
    return None


def _attr(model: Any, path: str) -> Any:
    obj = model
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj
