"""Forward hooks for the module of a ``torch.export`` program, by rewriting a copy of its graph.

An exported program calls aten ops, not its submodules, so a forward hook on a submodule never
fires. Its graph still says which module each op ran in (``node.meta["nn_module_stack"]``: the
module paths of the original ``nn.Module``, outermost first), so:

* a *layer* is a module path of the original model (``"layer4.1.conv2"``, ``"relu2"``): its
  output is the last op that ran inside it (the module returns what it computed last);
* hooking a layer is a copy of the graph (``torch.fx.GraphModule`` over the same root: the same
  parameter tensors) with one call inserted after that op, which hands the rest of the graph
  what the hook returns (guided backprop and deconvnet need no copy: the program's ``aten.relu``
  calls are modified as they run, :mod:`xaikit.backend.torch.relevance`).

The copies are cached per model (the exported module is never changed).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

_copies: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


class Tap:
    """What a hooked copy calls at the layer: ``fn(output) -> output for the rest``; the copy
    calls ``tap(t)``, and ``tap.fn`` is set per call."""

    def __init__(self) -> None:
        self.fn: Callable[[Any], Any] = lambda t: t
        self.__name__ = "xaikit_tap"  # what the graph's generated code calls it

    def __call__(self, t: Any) -> Any:
        return self.fn(t)


def _stack(node: Any) -> list[tuple[str, str]]:
    """``(module path, type name)`` of the modules a node ran in, outermost first (no root)."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for value in stack.values():
        path, kind = value[0], value[1]
        kind = kind if isinstance(kind, str) else f"{kind.__module__}.{kind.__qualname__}"
        if path:
            out.append((str(path), kind))
    return out


def _tensor_node(node: Any) -> bool:
    return node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor)


def layers(model: Any) -> dict[str, Any]:
    """Every module path the graph ran ops in -> the node of its output (its last tensor op), in
    the order the modules finished (inner modules before the module that holds them)."""
    last: dict[str, Any] = {}
    for node in model.graph.nodes:
        if _tensor_node(node):
            for path, _ in _stack(node):
                last[path] = node
    position = {node: i for i, node in enumerate(model.graph.nodes)}
    # finish order: by the output node, and at the same node the outer module after the inner
    return dict(sorted(last.items(), key=lambda kv: (position[kv[1]], -kv[0].count("."), kv[0])))


def spatial(node: Any) -> bool:
    """Whether the op's output is (B, C, h, w) with h * w > 1 (read from the graph's shapes)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.ndim != 4:
        return False
    h, w = val.shape[2], val.shape[3]
    return isinstance(h, int) and isinstance(w, int) and h * w > 1


def _copy(model: Any, key: Any, wrap: Callable[[Any], bool], fn: Callable[..., Any]) -> Any:
    """A GraphModule over ``model``'s root whose nodes for which ``wrap`` is true go through
    ``fn`` before their users see them (cached per model and ``key``)."""
    cache = _copies.setdefault(model, {})
    if key in cache:
        return cache[key]
    graph = torch.fx.Graph()
    values: dict[Any, Any] = {}
    out = graph.graph_copy(model.graph, values)
    graph.output(out)
    graph._codegen = model.graph._codegen  # the same pytree calling convention (read only)
    for old, new in values.items():
        if wrap(old):
            with graph.inserting_after(new):
                tapped = graph.call_function(fn, (new,))
            new.replace_all_uses_with(tapped, delete_user_cb=lambda user, t=tapped: user is not t)
    gm = torch.fx.GraphModule(model, graph)
    cache[key] = gm
    return gm


def hooked(model: Any, path: str) -> tuple[Any, Tap]:
    """A copy of ``model`` whose layer ``path`` hands its output through the returned tap (set
    its ``fn`` before each call)."""
    cache = _copies.setdefault(model, {})
    key = ("tap", path)
    if key not in cache:
        cache[key] = Tap()
    tap = cache[key]
    if ("layer", path) in cache:
        return cache[("layer", path)], tap
    node = layers(model)[path]
    return _copy(model, ("layer", path), lambda n: n is node, tap), tap


def find(model: Any, layer: Any) -> str:
    """The module path a CAM explains in an exported program: ``layer`` as a path of the
    original model, a weight-holding submodule of the program, or None (the last module that
    finished with a spatial (B, C, h, w) output, h * w > 1)."""
    scopes = layers(model)
    if layer is None:
        for path, node in reversed(list(scopes.items())):
            if spatial(node):
                return path
        raise XaikitValueError(
            "layer=None looks for the last module with a spatial (B, C, h, w) output (h * w > 1) and "
            "the exported program has none: pass layer= (a module path of the original model, with "
            "reshape= for a token output)"
        )
    if isinstance(layer, str):
        if layer in scopes:
            return layer
        raise XaikitValueError(
            f"layer {layer!r} is not a module that ran in the exported program; layer must be a "
            f"module path of the original model as the program's graph records it (nn_module_stack), "
            f"e.g. {list(scopes)[-4:]}, or None (the last layer with a spatial output)"
        )
    if isinstance(layer, torch.nn.Module):
        paths = [n for n, m in model.named_modules() if m is layer and n in scopes]
        if paths:
            return paths[0]
        raise XaikitValueError(
            f"layer must be a module of the model; got a {type(layer).__name__} that is not one of "
            "the exported program's modules: pass its module path (a str) instead"
        )
    raise XaikitTypeError(
        f"layer must be a module path (str), a module of the model or None; got {describe(layer)}"
    )
