"""PyTorch layer facet of the class-activation maps (``get_backend(model).cam``).

A forward hook on the chosen module captures its output and hands the rest of the network a
copy of a detached leaf (``leaf.clone()``), so that one ``torch.autograd.grad`` w.r.t. that
leaf gives the gradient of the target scores with respect to the layer's activations, without
a backward pass through the layers below it and without touching any parameter's ``.grad``.

Guided backpropagation replaces every ReLU the forward pass calls, for the duration of the
pass, with one whose backward passes only positive gradients where its input was positive
(:func:`xaikit.backend.torch.relevance.modified_step`, a ``TorchFunctionMode``): ``nn.ReLU``
modules and ``torch.relu`` / ``F.relu`` calls inside a ``forward`` alike (captum and
pytorch-grad-cam guide ``nn.ReLU`` modules only and leave the others with their plain
gradient). A forward pass that calls no ReLU is an error, not a plain gradient.

Model forms (:mod:`xaikit.backend.torch.forms`): a ``torch.compile`` module is hooked through
its ``_orig_mod`` (the eager module with the same weights, so that adding a hook does not
recompile); layer names are those of the form's own ``named_modules()`` (``"_orig_mod.conv2"``;
the name without the prefix is taken too). The module of a ``torch.export`` program never
calls its submodules: its layer and ReLUs are hooked in a rewritten copy of its graph
(:mod:`~xaikit.backend.torch.graph_hooks`; layers are the original model's module paths).
TorchScript modules never call forward hooks: the CAMs and guided backprop refuse them, and a
TorchScript submodule of a Python model as the layer, with a message that says what works
instead.

A gradient that does not reach the hooked layer is an error (:func:`~xaikit.backend.torch.grads.layer_grad`),
never a map of zeros.

Stacked targets (``spread`` of :meth:`Cam.grad_step`): the hook also gathers the layer's output
to the targets' rows (``index_select``), so the layers below it run once per image and the
leaf, the layers above and the gradient are per target; a model whose rows above the layer do
not follow the layer's (it reads ``x.shape[0]``, or a tensor from below the layer) is an error
that the caller answers by running the repeated rows.

Every hook is removed in a ``finally`` block: the model is left as it was, also when the call
raises. Loaded the first time a CAM method runs (never at ``import xaikit`` time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from xaikit.backend.base import T
from xaikit.backend.facets import CamFacet, CamLayer
from xaikit.backend.outputs import as_matrix, pick_output
from xaikit.backend.rows import Rows
from xaikit.backend.torch import graph_hooks
from xaikit.backend.torch.forms import compiled_module, eager_module, hook_refusal, is_exported, is_script
from xaikit.backend.torch.grads import layer_grad
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe

#: what the CAM methods are called in refusals
_CAMS = "class-activation maps (gradcam, gradcam++, xgradcam, layercam, hirescam, scorecam, eigencam, guided_gradcam)"


def _spatial(out: Any) -> bool:
    return isinstance(out, torch.Tensor) and out.ndim == 4 and int(out.shape[2]) * int(out.shape[3]) > 1


class Cam(CamFacet):
    """The CAM facet of the torch backend."""

    def channel_first(self, model: Any) -> bool:
        return True

    def resolve(
        self,
        model: Any,
        layer: Any,
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str = 0,
    ) -> CamLayer:
        if not isinstance(model, torch.nn.Module):
            raise XaikitTypeError(
                f"class-activation maps need a torch.nn.Module (to hook its layers); got {describe(model)}"
            )
        refusal = hook_refusal(model, _CAMS)
        if refusal is not None:
            raise refusal
        if is_exported(model):  # hooked by rewriting a copy of its graph
            name = graph_hooks.find(model, layer)
            box: dict[str, Any] = {}
            with torch.no_grad():
                raw = self._hooked_call(
                    model,
                    CamLayer(name, None, ()),
                    lambda t: box.setdefault("a", t),
                    inputs,
                    0,
                    model_kwargs,
                    True,
                )
            return _checked(name, None, box.get("a"))._replace(probe=raw)
        named = [(n, m) for n, m in model.named_modules() if n]
        if layer is None:
            hookable = [(n, m) for n, m in named if not _unhookable(m)]
            return self._auto(model, hookable, inputs, model_kwargs, output)
        if isinstance(layer, str):
            modules = dict(named)
            if layer not in modules and compiled_module(model) is not None:
                layer = f"_orig_mod.{layer}" if f"_orig_mod.{layer}" in modules else layer
            if layer not in modules:
                raise XaikitValueError(
                    f"layer {layer!r} is not a module of the model; layer must be a module path as "
                    f"model.named_modules() gives it, e.g. {[n for n, _ in named][-4:]}, or None "
                    "(the last layer with a spatial output)"
                )
            name, module = layer, modules[layer]
        elif isinstance(layer, torch.nn.Module):
            found = [n for n, m in named if m is layer]
            if not found:
                raise XaikitValueError(
                    f"layer must be a module of the model; got a {type(layer).__name__} that is not "
                    "one of model.named_modules()"
                )
            name, module = found[0], layer
        else:
            raise XaikitTypeError(
                f"layer must be a module path (str), a torch.nn.Module of the model or None; got {describe(layer)}"
            )
        if _unhookable(module):
            raise XaikitValueError(
                f"layer {name!r} is a TorchScript module or part of a torch.export program inside "
                f"the model: its forward hooks never fire, so {_CAMS} cannot read it. Pass layer= a "
                "Python nn.Module of the model (named_modules() gives the names)"
            )
        outs, _, raw = self._probe(model, [module], inputs, model_kwargs)
        return _checked(name, module, outs[0])._replace(probe=raw)

    def _probe(
        self,
        model: Any,
        modules: list[Any],
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        grad: bool = False,
    ) -> tuple[list[Any], list[int], Any]:
        """The output of each module (the last call's) on one row, the order in which the
        modules finished and what the model returned; forward only, or with ``grad`` recorded by
        autograd (the inputs made leaves that require grad) so that paths can be followed."""
        seen: dict[int, Any] = {}
        order: list[int] = []

        def hook(module: Any, _args: Any, out: Any) -> None:
            seen[id(module)] = out
            order.append(id(module))

        if grad:
            inputs = [x.detach().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
        handles = [m.register_forward_hook(hook) for m in modules]
        try:
            with torch.enable_grad() if grad else torch.no_grad():
                raw = self.bk._raw(
                    eager_module(model), list(inputs), model_kwargs
                )  # any output (a segmenter's)
        finally:
            for h in handles:
                h.remove()
        return [seen.get(id(m)) for m in modules], order, raw

    def _auto(
        self,
        model: Any,
        named: list[tuple[str, Any]],
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str,
    ) -> CamLayer:
        modules = [m for _, m in named]
        outs, order, raw = self._probe(model, modules, inputs, model_kwargs)
        by_id = {id(m): (n, m, o) for (n, m), o in zip(named, outs)}
        # the last modules to finish with a spatial output, latest first
        spatial = [mid for mid in reversed(order) if _spatial(by_id[mid][2])]
        if len(spatial) > 1 and not isinstance(raw, torch.Tensor):
            # several outputs (a second head, an auxiliary classifier): the last spatial module
            # that the explained output depends on, not one that feeds only another output
            spatial = self._on_path(model, [by_id[mid][1] for mid in spatial], inputs, model_kwargs, output)
        if spatial:
            n, m, o = by_id[spatial[0]]
            return CamLayer(n, m, tuple(int(d) for d in o.shape[1:]), raw)
        raise XaikitValueError(
            "layer=None looks for the last module with a spatial (B, C, h, w) output (h * w > 1) "
            "and the model has none: pass layer= (a module path of named_modules(), with reshape= "
            "for a token output)"
        )

    def _on_path(
        self,
        model: Any,
        candidates: list[Any],
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str,
    ) -> list[int]:
        """The ids of ``candidates`` (modules, latest first) that ``output`` of the model depends
        on, in the same order, found by one recorded pass on the probe's row; all of them when
        none is (the gradient CAMs then say that the layer is off the path)."""
        outs, _, raw = self._probe(model, candidates, inputs, model_kwargs, grad=True)
        try:
            score = pick_output(raw, output)
        except XaikitError:
            return [id(m) for m in candidates]  # the call's own output check says what is wrong
        if not isinstance(score, torch.Tensor) or not score.requires_grad:
            return [id(m) for m in candidates]
        live = [(m, o) for m, o in zip(candidates, outs) if isinstance(o, torch.Tensor) and o.requires_grad]
        grads = torch.autograd.grad(score.float().sum(), [o for _, o in live], allow_unused=True)
        reached = [id(m) for (m, _), g in zip(live, grads) if g is not None]
        return reached or [id(m) for m in candidates]

    def _run(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        output: int | str,
        model_kwargs: dict[str, Any] | None,
        grad: bool,
        raw: bool = False,
        spread: Any = None,
    ) -> tuple[Any, Any]:
        """The layer's activations (a leaf that requires grad when ``grad``) and the model's
        selected output as a matrix, or with ``raw`` what the model returned (a target object
        reads it). ``spread``: the layer's output rows are gathered by it (see
        :meth:`CamFacet.grad_step`); a second call of the layer in one pass is then an error."""
        box: dict[str, Any] = {}

        def grab(out: Any) -> Any:
            if not isinstance(out, torch.Tensor):
                raise XaikitValueError(
                    f"layer {layer.name!r} must output one tensor; it gives {describe(out)}"
                )
            if spread is not None:
                if "a" in box:
                    raise XaikitValueError(
                        f"layer {layer.name!r} runs twice in one pass: its rows cannot be spread"
                    )
                out = out.index_select(0, spread)
            if not grad:
                box["a"] = out.detach()
                return out
            leaf = out.detach().requires_grad_(True)
            box["a"] = leaf
            return leaf.clone()  # later in-place ops (ReLU(inplace=True)) act on the copy

        with torch.enable_grad() if grad else torch.no_grad():
            out = self._hooked_call(model, layer, grab, inputs, output, model_kwargs, raw)
            out = out if raw else as_matrix(out)
        if "a" not in box:
            raise XaikitValueError(_not_called(layer.name))
        return box["a"], out

    def _hooked_call(
        self,
        model: Any,
        layer: CamLayer,
        fn: Any,
        inputs: Sequence[T],
        output: int | str,
        model_kwargs: dict[str, Any] | None,
        raw: bool = False,
    ) -> Any:
        """The selected output of the model (``raw``: what it returned) called with the layer's
        output replaced by ``fn(output)``: a forward hook on the module, or, in an exported
        program, a copy of its graph that calls ``fn`` there
        (:mod:`~xaikit.backend.torch.graph_hooks`)."""

        def call(m: Any) -> Any:
            if raw:
                return self.bk._raw(m, list(inputs), model_kwargs)
            return self.bk._call(m, list(inputs), output, model_kwargs)

        if is_exported(model):
            gm, tap = graph_hooks.hooked(model, layer.name)
            tap.fn = fn
            try:
                return call(gm)
            finally:
                tap.fn = _same
        handle = layer.obj.register_forward_hook(lambda _m, _a, out: fn(out))
        try:
            return call(eager_module(model))
        finally:
            handle.remove()

    def grad_step(self, rows: Rows, layer: CamLayer, spread: T | None = None) -> tuple[T, T, T]:
        model, output, targets, target = rows.model, rows.output, rows.targets, rows.target
        raw = target is not None
        a, out = self._run(
            model, layer, rows.inputs, output, rows.model_kwargs, grad=True, raw=raw, spread=spread
        )
        with torch.enable_grad():
            if target is not None:  # a target object: its scores of the raw output, rows = samples
                scores = target.scores(self.bk, out, targets)
            elif targets is None:  # the predicted class: each row's highest score, from this pass
                scores = out.max(dim=1).values
            else:
                scores = out.gather(1, targets[:, None]).squeeze(1)
            if spread is not None and (
                tuple(scores.shape) != (len(spread),) or (not raw and len(out) != len(spread))
            ):
                raise XaikitValueError(
                    f"the model's rows above layer {layer.name!r} do not follow the layer's rows (it reads "
                    "the input's batch size or a tensor from below the layer): its rows cannot be spread"
                )
            da = layer_grad(model, layer.name, scores, a, output)
        return _working(a.detach()), _working(da), _working(scores.detach())

    def activations(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        a, _ = self._run(model, layer, inputs, output, model_kwargs, grad=False, raw=True)
        return _working(a)

    def guided_step(self, rows: Rows) -> list[T]:
        # every ReLU the forward calls (nn.ReLU modules and torch.relu / F.relu calls alike) is
        # guided for the duration of the pass; a model with TorchScript inside is refused there
        from xaikit.backend.torch.relevance import modified_step

        return modified_step(self.bk, replace(rows, model=eager_module(rows.model)), "guided")


def _same(t: Any) -> Any:
    return t


def _checked(name: str, module: Any, out: Any) -> CamLayer:
    """The layer, with the shape of its output on one row (None: the forward did not reach it)."""
    if out is None:
        raise XaikitValueError(_not_called(name))
    if not isinstance(out, torch.Tensor):
        raise XaikitValueError(f"layer {name!r} must output one tensor; it gives {describe(out)}")
    return CamLayer(name, module, tuple(int(d) for d in out.shape[1:]))


def _unhookable(module: Any) -> bool:
    """A module whose forward hooks never fire: TorchScript, or (part of) a torch.export program."""
    return is_script(module) or is_exported(module)


def _not_called(name: str) -> str:
    return (
        f"layer {name!r} was not called by the model's forward pass (a module of the model that "
        "the forward never calls, or one inside a torch.export program or a TorchScript module, "
        "whose hooks never fire): pass layer= a module that the forward calls"
    )


def _working(t: Any) -> Any:
    """float32 for a half-precision tensor, else as it is."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
