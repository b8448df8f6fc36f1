"""LRP for torch models: one forward pass with hooks, one modified backward pass
(``bk.relevance.lrp_step``; rules, composites and the relevance convention ``R = a * g`` in
:mod:`xaikit.xai.rules.spec`).

Each module of a kind that a composite assigns rules to (``nn.Conv1d/2d/3d`` (grouped and
depthwise too), ``nn.ConvTranspose1d/2d/3d``, ``nn.Linear``, average and max pooling (adaptive
too), BatchNorm, element-wise activations) gets a forward hook. The hook hands the rest of the
network the module's output through an autograd function whose forward is the identity on
that output and whose backward applies the layer's rule:

* convolution / dense layer: the function takes the layer's input and computes the gradient
  at the input by the rule from the saved input, the output and the module's weights
  (:mod:`xaikit.backend.torch.lrp_rules`); the module's own backward never runs;
* ``pass`` (activations, an unmerged BatchNorm): ``g_x = g_y * y / x`` (nothing where
  ``|x| <= 1e-12``); ``nn.ReLU``, ``nn.LeakyReLU``, ``nn.PReLU`` and ``nn.RReLU`` are not hooked
  for it: their plain gradient is that exactly;
* ``norm`` / ``epsilon`` on a layer without weights (pooling) or a BatchNorm: the gradient at
  the output scaled by ``y / stab(y)``, then the module's own backward.

With ``composite.canonize`` a BatchNorm whose input is the output of a convolution or dense
layer that no other hooked module read before it (and nothing changed in place) is merged
into that layer: the pair gets the
layer's rule with the merged weights (:class:`~xaikit.backend.torch.lrp_rules.Affine`), computed
from the layer's input and the BatchNorm's output; nothing of the model is written.

A tensor changed in place after a hooked layer wrote it (``out += identity``, ``F.relu(...,
inplace=True)``) is seen by its version counter: the layer's output is recomputed from its
input in the backward pass (an ``nn.ReLU(inplace=True)`` module after the layer is allowed for:
the relevance ``y * g`` is the same with ``relu(y)``). Other in-place activation modules run on
a copy of their input. Hooks are removed and the train/eval flags restored in ``finally``
blocks: the model is left as it was, also when the call raises.

Functional calls (``F.conv2d``, ``torch.matmul``, ``F.relu``) are not hooked: they pass
relevance on by their plain gradient, LRP-0 for a linear operation.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from xaikit.backend.base import T
from xaikit.backend.facets import LRP_ALLOWED as _ALLOWED
from xaikit.backend.rows import Rows
from xaikit.backend.torch.attn_rules import TransformerRules
from xaikit.backend.torch.forms import eager_module, form_of, hook_refusal, is_exported, part_out_of_reach
from xaikit.backend.torch.grads import input_grads
from xaikit.backend.torch.lrp_rules import Affine, rule_backward, stabilized_ratio
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["kind_of", "lrp_step"]

#: element-wise activation modules (kind "activation")
ACTIVATIONS = (
    nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.SiLU, nn.GELU, nn.Tanh,
    nn.Sigmoid, nn.ELU, nn.CELU, nn.SELU, nn.Hardswish, nn.Hardsigmoid, nn.Mish, nn.Softplus,
    nn.Softsign, nn.LogSigmoid, nn.Tanhshrink, nn.Hardshrink, nn.Softshrink, nn.Threshold,
)  # fmt: skip
#: activations whose plain gradient is the pass rule exactly (linear on each side of 0)
_PIECEWISE_LINEAR = (nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.RReLU)
#: |x| at or below which the pass rule passes nothing (y / x would overflow)
_TINY = 1e-12
#: autograd nodes of a reshape that the input rules follow (each saves its input's sizes)
_VIEWS = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0")

#: one step between a model input and a layer's input, outermost first: ``("pad", F.pad's
#: padding)`` or ``("view", the shape before the reshape)``
Step = tuple[str, tuple[int, ...]]


#: what the method is called in refusals
_LRP = "LRP (methods 'lrp' and 'lrp_epsilon')"


def kind_of(module: Any) -> str | None:
    """The composite's kind of a module (:data:`xaikit.xai.rules.spec.KINDS`), or None.

    Example:
        >>> kind_of(nn.Conv2d(3, 4, 3)), kind_of(nn.BatchNorm2d(4)), kind_of(nn.Flatten())
        ('conv', 'batchnorm', None)
    """
    if isinstance(module, nn.Linear):
        return "dense"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, (nn.modules.pooling._AvgPoolNd, nn.modules.pooling._AdaptiveAvgPoolNd)):
        return "avgpool"
    if isinstance(module, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)):
        return "maxpool"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batchnorm"
    if isinstance(module, ACTIVATIONS):
        return "activation"
    return None


@dataclass
class _Layer:
    """A hooked module: its name (as the model's ``named_modules()`` gives it), kind and rule."""

    name: str
    kind: str
    rule: Any
    #: a convolution / dense layer's rule where it reads a model input (the composite's ``first``)
    first_rule: Any = None


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """float32 for a half-precision tensor, else its dtype."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


class _Site:
    """One call of a hooked module: what its backward reads.

    ``how``: ``"affine"`` (a convolution / dense layer, or one merged with its BatchNorm: the
    rule from the input), ``"pass"`` (``g * y / x``) or ``"scale"`` (``g * y / stab(y)``, then
    the module's own backward). Values are kept as detached aliases with their version
    counters: a value changed in place is recomputed (the output) or refused (the input).
    """

    def __init__(
        self, name: str, rule: Any, how: str, module: Any, x: torch.Tensor, out: torch.Tensor
    ) -> None:
        self.name, self.rule, self.how, self.module = name, rule, how, module
        self.x_in = x  # with its autograd history: what a merged BatchNorm's node reads
        self.x, self.x_version = x.detach(), x._version
        self.value = out.detach()
        self.version = self.value._version
        self.bumps = 0  # in-place nn.ReLU modules applied to the output (allowed for)
        self.readers = 0  # hooked modules that read the output
        self.affine: Affine | None = None
        self.index: int | None = None  # the model input it reads (input rules)
        self.pads: list[Step] = []  # zero paddings and reshapes of that input on the way (outermost first)
        self.support: torch.Tensor | None = None  # 1 on the input, 0 on its padding (one row)
        self.direct: dict[int, torch.Tensor] | None = None
        self.grad_dtype = x.dtype  # the dtype of the tensor the node's gradient is for

    def values(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The input and the output as the forward pass computed them."""
        if self.x._version != self.x_version:
            raise XaikitValueError(
                f"the input of layer {self.name!r} was changed in place after the layer read it (an "
                "in-place operation such as x += ..., x.relu_() or an inplace=True module on it): LRP "
                "needs the values the layer saw. Make that operation out of place"
            )
        if self.value._version == self.version + self.bumps:
            return self.x, self.value
        with torch.no_grad():
            if self.affine is not None:
                w, b = self.affine.params()
                dt = self.affine.dtype
                out = self.affine.fwd(self.affine.pad(self.x.to(dt)), w, b)
            else:
                out = self.module.forward(self.x.clone())
        return self.x, out

    def backward(self, g: torch.Tensor) -> torch.Tensor:
        x, out = self.values()
        dt = _compute_dtype(g)
        g, x, out = g.to(dt), x.to(dt), out.to(dt)
        if self.how == "pass":
            res = (g * out).div_(x).masked_fill_(x.abs() <= _TINY, 0.0)
        elif self.how == "scale":
            res = stabilized_ratio(out * g, out, self.rule.epsilon)
        else:
            if self.affine is None:  # set with how="affine"
                raise XaikitValueError(f"layer {self.name!r}: no layer to apply the rule to")
            res = rule_backward(self.affine, self.rule, x, out, g, self.name, self.support)
            if self.rule.reads_input and self.direct is not None and self.index is not None:
                i = self.index
                res = _unpad(res, self.pads)
                self.direct[i] = res if i not in self.direct else self.direct[i] + res
                return torch.zeros_like(self.x, dtype=self.grad_dtype)  # an affine node's input is x
        return res.to(self.grad_dtype)


class _Node(torch.autograd.Function):
    """Identity forward on a module's output (a fresh alias of it); backward: the site's rule."""

    @staticmethod
    def forward(ctx: Any, site: _Site, x: torch.Tensor) -> torch.Tensor:
        ctx.site = site
        return site.value.detach()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, ctx.site.backward(g)


def _refuse(model: Any) -> None:
    """The forms whose modules LRP cannot hook: refused with what to do instead."""
    if not isinstance(model, nn.Module):
        raise XaikitTypeError(f"{_LRP} needs a torch.nn.Module (to hook its layers); got {describe(model)}")
    refusal = hook_refusal(model, _LRP)
    if refusal is not None:  # the refusal of every layer-hooking method (CAMs, guided backprop)
        raise refusal
    if is_exported(model):
        raise XaikitTypeError(
            f"{_LRP} cannot be computed for {form_of(model)}: its graph calls aten operators, not the "
            "model's modules, so no rule can be attached to a layer. Explain the nn.Module that was "
            "exported (same weights), or use a method that needs no hooks (the gradient methods)"
        )
    part = part_out_of_reach(model)
    if part is not None:
        raise XaikitTypeError(
            f"{_LRP}: submodule {part[0]!r} of the model is {form_of(part[1])}, whose layers cannot be "
            "hooked, so they would get no rule. Explain a model of Python nn.Modules (load the "
            "submodule's weights into its Python class)"
        )


def _plan(model: Any, eager: Any, comp: Any) -> dict[int, tuple[Any, _Layer]]:
    """Each module the composite gives a rule to: ``{id(module): (module, layer)}``; names,
    kinds and rules checked before the model runs."""
    prefix = "_orig_mod." if eager is not model else ""
    named = list(eager.named_modules())
    known = {n for n, _ in named} | {prefix + n for n, _ in named}
    unknown = sorted(k for k in comp.names if k not in known)
    if unknown:
        raise XaikitValueError(
            f"composite names {unknown} are not modules of the model; names are module paths as "
            f"model.named_modules() gives them, e.g. {[prefix + n for n, _ in named if n][:6]}"
        )
    plan: dict[int, tuple[Any, _Layer]] = {}
    for n, m in named:
        full = (prefix + n) if n else (prefix[:-1] or "(the model)")
        key = full if full in comp.names else n
        kind = kind_of(m)
        if kind is None:
            if key in comp.names:
                raise XaikitValueError(
                    f"composite names[{key!r}]: layer {full!r} is a {type(m).__name__}, which LRP does "
                    "not assign rules to; rules apply to convolutions, nn.Linear, pooling, BatchNorm "
                    "and element-wise activation modules"
                )
            continue
        rule = comp.rule_for(key, kind, False)
        first_rule = comp.rule_for(key, kind, True) if kind in ("conv", "dense") else None
        for r in (rule, first_rule):
            if r is not None and r.kind not in _ALLOWED[kind] and not (kind == "batchnorm" and comp.canonize):
                raise XaikitValueError(
                    f"layer {full!r} ({type(m).__name__}, kind {kind!r}) cannot take the {r.kind!r} rule; "
                    f"its kind takes {_ALLOWED[kind]}"
                )
        plan[id(m)] = (m, _Layer(full, kind, rule, first_rule))
    return plan


def _bn_merge(bn: Any, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A BatchNorm (eval mode) as ``y = a * z + c``: ``(a, c)`` per channel."""
    var = bn.running_var.detach().to(dtype)
    a = torch.rsqrt(var + bn.eps)
    if bn.weight is not None:
        a = a * bn.weight.detach().to(dtype)
    c = -bn.running_mean.detach().to(dtype) * a
    if bn.bias is not None:
        c = c + bn.bias.detach().to(dtype)
    return a, c


class _Pass:
    """The hooks of one relevance pass and what they record."""

    def __init__(self, plan: dict[int, tuple[Any, _Layer]], comp: Any, xs: Sequence[torch.Tensor]) -> None:
        self.plan, self.comp, self.xs = plan, comp, list(xs)
        self.outs: dict[int, tuple[Any, _Site]] = {}
        self.direct: dict[int, torch.Tensor] = {}
        self.pending: dict[int, list[torch.Tensor]] = {}
        self.ran = 0
        self.firsts = 0  # conv / dense calls that read a model input (they get the first rule)
        self.first_ran: _Layer | None = None  # the first conv / dense layer that ran
        #: the layer given the first rule where no layer reads a model input (see lrp_step)
        self.forced: _Layer | None = None

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _register(self, t: torch.Tensor, site: _Site) -> None:
        key = id(t)
        outs = self.outs
        self.outs[key] = (weakref.ref(t, lambda _r: outs.pop(key, None)), site)

    def _site_of(self, t: Any) -> _Site | None:
        entry = self.outs.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1]

    def _read(self, t: Any) -> _Site | None:
        site = self._site_of(t)
        if site is not None:
            site.readers += 1
        return site

    def _wrap(self, site: _Site, x: torch.Tensor) -> torch.Tensor:
        site.grad_dtype = x.dtype
        t = _Node.apply(site, x)
        site.version = t._version
        self._register(t, site)
        return t

    # ---- hooks ---------------------------------------------------------------------------------
    def attach(self) -> list[Any]:
        handles = []
        for module, layer in self.plan.values():
            if layer.kind in ("conv", "dense"):
                handles.append(module.register_forward_hook(self._affine_hook))
            elif layer.kind == "batchnorm":
                handles.append(module.register_forward_hook(self._bn_hook))
            elif layer.kind in ("avgpool", "maxpool") and layer.rule.kind != "gradient":
                handles.append(module.register_forward_hook(self._elementwise_hook))
            elif layer.kind == "activation":
                inplace = bool(getattr(module, "inplace", False))
                if type(module) is nn.ReLU:
                    if inplace:
                        handles.append(module.register_forward_hook(self._relu_hook))
                    continue
                if inplace:
                    handles.append(module.register_forward_pre_hook(self._copy_hook))
                handles.append(module.register_forward_hook(self._elementwise_hook))
        return handles

    def _affine_hook(self, module: Any, args: Any, out: Any) -> Any:
        _, layer = self.plan[id(module)]
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return None
        self._read(x)
        self.ran += 1
        if self.first_ran is None:
            self.first_ran = layer
        rule = layer.rule
        steps: list[Step] = []
        support: torch.Tensor | None = None
        # the first rule: where a model input is read (through zero padding and reshapes)
        index = next((i for i, leaf in enumerate(self.xs) if leaf is x), None)
        found = _zero_padded_input(x, self.xs) if index is None else None
        if found is not None:
            index, steps, support = found
        if index is not None or layer is self.forced:
            rule = layer.first_rule
            self.firsts += index is not None
        site = _Site(layer.name, rule, "affine", module, x, out)
        site.affine = Affine(module, x.shape, out.shape, dtype=_compute_dtype(x))
        if rule.kind != "gradient":
            base, hooked = _own_forward(module), _other_forward_hooks(module, self._affine_hook)
            if base is not None or hooked:
                _check_own_forward(layer.name, module, base, site.affine, x, out, self.comp)
        if rule.reads_input:
            if index is None:
                raise XaikitValueError(
                    f"layer {layer.name!r} has the {rule.kind!r} rule, which gives the relevance "
                    "of the model's input itself, and its input is not a model input (it reads the "
                    "output of another operation): give that rule to the layer that reads the input, "
                    "or another rule to this one (composite names=)"
                )
            site.index, site.direct, site.pads, site.support = index, self.direct, steps, support
        if rule.kind == "gradient":  # the module's own backward; still seen by its BatchNorm
            self._register(out, site)
            return None
        return self._wrap(site, x)

    def _bn_hook(self, module: Any, args: Any, out: Any) -> Any:
        _, layer = self.plan[id(module)]
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return None
        src = self._read(x)
        mergeable = (
            self.comp.canonize
            and src is not None
            and src.affine is not None
            and src.affine.scale is None
            and src.readers == 1
            and src.value._version == src.version  # not changed in place on the way (F.relu_)
            and module.running_mean is not None
            and module.running_var is not None
            and not module.training
            and (not src.affine.dense or out.ndim == 2)
        )
        if not mergeable or src is None or src.affine is None:
            if layer.rule.kind not in _ALLOWED["batchnorm"]:
                raise XaikitValueError(
                    f"layer {layer.name!r} (a BatchNorm not merged into a convolution or dense layer) "
                    f"cannot take the {layer.rule.kind!r} rule; it takes {_ALLOWED['batchnorm']}"
                )
            return self._elementwise(module, layer, x, out)
        if src.rule.kind == "gradient":  # the pair's plain gradient: both modules' own backward
            return None
        dtype = src.affine.dtype
        a, c = _bn_merge(module, dtype)
        if _other_forward_hooks(module, self._bn_hook):
            _check_hooked_batchnorm(layer.name, module, src.name, x, out, a, c)
        site = _Site(f"{src.name} (merged with {layer.name})", src.rule, "affine", src.module, src.x_in, out)
        site.x, site.x_version = src.x, src.x_version
        site.affine = Affine(src.module, src.x.shape, out.shape, scale=a, shift=c, dtype=dtype)
        site.index, site.direct, site.pads, site.support = src.index, src.direct, src.pads, src.support
        return self._wrap(site, src.x_in)

    def _elementwise_hook(self, module: Any, args: Any, out: Any) -> Any:
        _, layer = self.plan[id(module)]
        stack = self.pending.get(id(module))
        x = stack.pop() if stack else (args[0] if args else None)
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return None
        self._read(x)
        return self._elementwise(module, layer, x, out)

    def _elementwise(self, module: Any, layer: _Layer, x: torch.Tensor, out: torch.Tensor) -> Any:
        kind = layer.rule.kind
        if kind == "gradient" or (kind == "pass" and isinstance(module, _PIECEWISE_LINEAR)):
            return None
        if kind == "pass":
            return self._wrap(_Site(layer.name, layer.rule, "pass", module, x, out), x)
        site = _Site(layer.name, layer.rule, "scale", module, x, out)  # norm / epsilon
        return self._wrap(site, out)

    def _copy_hook(self, module: Any, args: Any) -> Any:
        """An in-place activation runs on a copy of its input (kept for its rule)."""
        if not args or not isinstance(args[0], torch.Tensor):
            return None
        self.pending.setdefault(id(module), []).append(args[0])
        return (args[0].clone(), *args[1:])

    def _relu_hook(self, module: Any, args: Any, out: Any) -> None:
        """An in-place ``nn.ReLU`` on a hooked layer's output: allowed for (its relevance
        ``relu(y) * g`` is ``y * g``: the ReLU's gradient is 0 where it changed ``y``)."""
        site = self._read(args[0]) if args else None
        if site is not None and out is args[0]:
            site.bumps += 1


def _own_forward(module: Any) -> type | None:
    """The torch layer class whose ``forward`` (or ``_conv_forward``) the module's class replaces
    (a weight-standardized convolution, a LoRA adapter, a convolution that pads inside its
    forward), or None."""
    base = next((c for c in type(module).__mro__ if c.__module__.startswith("torch.nn.modules")), None)
    if base is None or base is type(module):
        return None
    replaced = any(
        getattr(type(module), n, None) is not getattr(base, n, None)
        for n in ("forward", "_conv_forward")
        if hasattr(base, n)
    )
    return base if replaced else None


def _differs(z: torch.Tensor, out: torch.Tensor) -> str | None:
    """How the recomputed output ``z`` differs from the module's ``out`` beyond ``out``'s own
    rounding (a half-precision model's float32 recomputation differs by that dtype's
    resolution), or None."""
    ref = out.detach().to(z.dtype)
    if z.shape != ref.shape:
        return f"an output of shape {tuple(z.shape)}, not the module's {tuple(ref.shape)}"
    scale = float(ref.abs().amax()) if ref.numel() else 0.0
    tol = 1e-10 if out.dtype == torch.float64 else max(1e-5, 4 * torch.finfo(out.dtype).eps)
    err = float((z - ref).abs().amax()) if ref.numel() else 0.0
    if err <= tol * max(scale, 1e-30):
        return None
    return f"a different output (max difference {err:.3g}, {err / max(scale, 1e-30):.3g} of its largest)"


def _check_hooked_batchnorm(
    name: str, module: Any, into: str, x: torch.Tensor, out: torch.Tensor, a: torch.Tensor, c: torch.Tensor
) -> None:
    """A BatchNorm with someone else's forward hooks is merged into the layer before it only where
    its output is still ``a * x + c`` (a hook that only reads it passes), else refused."""
    with torch.no_grad():
        shape = (1, -1) + (1,) * (x.dim() - 2)
        why = _differs(x.detach().to(a.dtype) * a.reshape(shape) + c.reshape(shape), out)
    if why is not None:
        raise XaikitValueError(
            f"layer {name!r} is a {type(module).__name__}, whose forward hooks can change its output, "
            f"and LRP merges it into {into!r} with its running statistics, weight and bias: computed "
            f"that way it gives {why}, so the merged rule would not describe what the layer computes. "
            "Remove the hook that changes its output, or pass canonize=False (the BatchNorm then "
            "takes a rule of its own on the output the hook returns)"
        )


def _other_forward_hooks(module: Any, ours: Any) -> bool:
    """Whether forward hooks other than ``ours`` run on the module's output (its own or global
    ones: they run before ``ours``, which sees the output they return)."""
    hooks = torch.nn.modules.module._global_forward_hooks
    return bool(hooks) or any(h != ours for h in module._forward_hooks.values())


def _check_own_forward(
    name: str,
    module: Any,
    base: type | None,
    affine: Affine,
    x: torch.Tensor,
    out: torch.Tensor,
    comp: Any,
) -> None:
    """A module with its own forward (``base``: the torch layer it subclasses) or with forward
    hooks of someone else's (``base`` None) gets its rule only where its output is the layer's
    operator with ``module.weight`` and ``module.bias`` on its input (the rules use those):
    checked on this call's values, else refused (its relevance would follow another output,
    silently). A hook that only reads the output passes."""
    try:
        with torch.no_grad():
            z = affine.fwd(affine.pad(x.detach().to(affine.dtype)), *affine.raw())
            why = _differs(z, out)
    except RuntimeError as e:
        why = f"an error ({str(e).splitlines()[0][:160]})"
    if why is not None:
        yours = (
            f"xk.xai.rules.composite({comp.name!r}, <the same epsilon/gamma/low/high>)"
            if comp.name != "custom"
            else "your_composite"
        )
        what, fix = (
            (
                f"a subclass of {base.__name__} with its own forward",
                "write its forward as the plain layer with the weight it computes with",
            )
            if base is not None
            else ("whose forward hooks can change its output", "remove the hook that changes its output")
        )
        raise XaikitValueError(
            f"layer {name!r} is a {type(module).__name__}, {what}, and LRP's rules compute with its "
            f".weight and .bias: recomputed that way the layer gives {why}, so its rule would not "
            "describe what the layer computes. Give that layer its plain gradient (method='lrp', "
            f"composite={yours}.with_names({{{name!r}: xk.xai.rules.Gradient()}})), or {fix}"
        )


def _zero_padded_input(
    x: torch.Tensor, leaves: Sequence[torch.Tensor]
) -> tuple[int, list[Step], torch.Tensor] | None:
    """``(index, steps, support)`` when ``x`` is model input ``index`` padded with zeros
    (``nn.ZeroPad2d``, ``F.pad``) and/or reshaped with its batch axis kept (``nn.Flatten``,
    ``x.view(B, -1)``, ``x.unsqueeze(1)``): the steps read from the autograd graph, outermost first; a padding is
    checked on the values (the padded border of ``x`` holds only zeros). ``support``: one row of
    ``x``'s shape, 1 on the input and 0 on the padding. Else None."""
    steps: list[Step] = []
    outs: list[tuple[int, ...]] = []  # each step's output shape, outermost first
    fn = x.grad_fn
    batch = int(x.shape[0]) if x.ndim else -1
    shape = tuple(int(n) for n in x.shape)  # the current step's output shape
    while fn is not None and fn.next_functions:
        outs.append(shape)
        if fn.name() == "ConstantPadNdBackward0":
            pad = tuple(int(p) for p in fn._saved_pad)  # type: ignore[attr-defined]
            if min(pad) < 0 or len(pad) // 2 > len(shape):  # a negative padding crops
                return None
            steps.append(("pad", pad))
            cut = list(shape)
            for k in range(len(pad) // 2):
                cut[len(cut) - 1 - k] -= pad[2 * k] + pad[2 * k + 1]
            shape = tuple(cut)
        elif fn.name() in _VIEWS and hasattr(fn, "_saved_self_sym_sizes"):
            shape = tuple(int(n) for n in fn._saved_self_sym_sizes)
            if not shape or shape[0] != batch:  # a reshape that mixes the rows
                return None
            steps.append(("view", shape))
        elif fn.name() == "UnsqueezeBackward0" and len(shape) > 1:  # x.unsqueeze(1), x[:, None]
            dim = int(fn._saved_dim)  # type: ignore[attr-defined]
            dim = dim - 2**64 if dim >= 2**63 else dim  # a negative dim comes back unsigned
            dim = dim % len(shape)
            if dim == 0 or shape[dim] != 1:
                return None
            shape = shape[:dim] + shape[dim + 1 :]
            steps.append(("view", shape))
        else:
            outs.pop()
            break
        fn = fn.next_functions[0][0]
    leaf = getattr(fn, "variable", None) if steps else None
    index = next((i for i, t in enumerate(leaves) if t is leaf), None)
    if index is None:
        return None
    if shape[1:] != tuple(leaves[index].shape[1:]):
        return None
    support = torch.ones((1, *leaves[index].shape[1:]), dtype=x.dtype, device=x.device)
    for (kind, value), out in zip(reversed(steps), reversed(outs)):
        support = torch.nn.functional.pad(support, value) if kind == "pad" else support.reshape(1, *out[1:])
    if tuple(support.shape[1:]) != tuple(x.shape[1:]) or bool(((x.detach() != 0) & (support == 0)).any()):
        return None  # not a zero padding (another value, or a shape this reading does not follow)
    return index, steps, support


def _unpad(r: torch.Tensor, steps: list[Step]) -> torch.Tensor:
    """Relevance of a padded or reshaped input taken back to the input (``steps`` outermost
    first; a padding in ``F.pad``'s order: the last axis's before and after first)."""
    for kind, value in steps:
        if kind == "view":
            r = r.reshape(r.shape[0], *value[1:])
            continue
        index = [slice(None)] * r.ndim
        for k in range(len(value) // 2):
            axis, before, after = r.ndim - 1 - k, value[2 * k], value[2 * k + 1]
            index[axis] = slice(before, r.shape[axis] - after)
        r = r[tuple(index)]
    return r


def _no_input_reader(run: _Pass) -> _Layer | None:
    """Where no convolution or dense layer read a model input (a normalization inside
    ``forward``): the first one that ran, to be given the composite's first rule as it would be
    without that normalization, when that rule differs from its own; an input rule (flat,
    w-square, z^B) there is refused, since that layer's input is not the model's. Else None."""
    layer = run.first_ran
    if run.firsts or layer is None or layer.first_rule == layer.rule:
        return None
    if layer.first_rule.reads_input:
        raise XaikitValueError(
            f"the composite gives the first layer the {layer.first_rule.kind!r} rule, which gives the "
            "relevance of the model's input itself, and no convolution or nn.Linear module reads a "
            f"model input (through zero padding or a reshape at most): the first that runs, "
            f"{layer.name!r}, reads the output of another operation (a normalization or rescaling "
            "inside forward, an unsqueeze). Use a composite without an input rule (e.g. "
            "composite='epsilon_plus'), or move that operation out of the model"
        )
    return layer


def lrp_step(bk: Any, rows: Rows, composite: Any) -> tuple[list[T], T]:
    """LRP of a chunk of rows (see :meth:`xaikit.backend.facets.RelevanceFacet.lrp_step`):
    ``(relevance per input (float32, each input's shape), target scores (rows,))``; a bound
    ``rows.target`` object scores the raw output (``rows.targets`` are then sample indices)."""
    model, inputs, output = rows.model, rows.inputs, rows.output
    _refuse(model)
    eager = eager_module(model)
    plan = _plan(model, eager, composite)
    half = bk._half(eager)
    with bk.inference(model), torch.enable_grad():
        xs = [
            (x.to(half) if half is not None and x.is_floating_point() else x).detach().requires_grad_(True)
            for x in inputs
        ]
        run = _Pass(plan, composite, xs)
        handles = run.attach()
        try:
            with TransformerRules():  # AttnLRP's rules for attention, LayerNorm, functional activations
                scores, _ = bk._scored(rows, xs, eager)
            forced = _no_input_reader(run)
            if forced is not None:  # once more, with the first rule on the first layer that ran
                for h in handles:
                    h.remove()
                run = _Pass(plan, composite, xs)
                run.forced = forced
                handles = run.attach()
                with TransformerRules():
                    scores, _ = bk._scored(rows, xs, eager)
            if not run.ran:
                raise XaikitValueError(
                    f"{_LRP} assigns its rules to the model's convolution and nn.Linear modules, and the "
                    f"forward pass of {form_of(model)} called none (its layers are functional calls "
                    "such as F.conv2d / torch.matmul, or run inside a module LRP does not know): its "
                    "relevance would be gradient x input. Build the model from nn.Conv*/nn.Linear "
                    "modules, or use method='input_x_gradient' for that"
                )
            grads = input_grads(model, scores, xs, output)
        finally:
            for h in handles:
                h.remove()
            run.outs.clear()
            run.pending.clear()
    rel = []
    for i, (x, g) in enumerate(zip(xs, grads)):
        r = x.detach().float() * g.float()
        if i in run.direct:
            r = r + run.direct[i].float()
        rel.append(r)
    return rel, scores.detach().float()
