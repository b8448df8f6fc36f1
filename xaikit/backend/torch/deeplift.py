"""DeepLIFT with the Rescale rule (Shrikumar et al., 2017, https://arxiv.org/abs/1704.02685) for
torch models: :func:`deeplift_step`, the backend step of ``bk.relevance.deeplift_step``.

A chunk of n rows and their n baseline rows run as one batch of 2n rows (the inputs first, then
the baselines) in one forward pass, and one backward pass from the inputs' target scores gives
the multipliers; the attributions are ``(x - baseline) * multipliers``.

The backward pass is the plain gradient except at the nonlinearities, which a
``torch.overrides.TorchFunctionMode`` (:class:`DeepLiftMode`) sees while the forward runs:
every call, from an ``nn`` module or written as a function in a ``forward``
(``torch.relu``, ``F.relu``, ``x.relu_()``, ``torch.sigmoid``, ``F.gelu``...), is computed by an
autograd function with its own backward:

* an elementwise nonlinearity ``y = f(a)`` (ReLU, sigmoid, tanh, GELU, SiLU, ELU, SELU, CELU,
  leaky ReLU, ReLU6, hardtanh, softplus, softsign, log-sigmoid, mish, hardswish, hardsigmoid,
  PReLU, exp, threshold (``nn.Threshold``); ``clamp`` / ``clip`` and ``maximum`` / ``minimum``
  in their first argument, where no other argument is a tensor of the 2n rows: a ReLU written
  ``z.clamp(min=0)`` or ``torch.maximum(z, zero)``) passes the gradient times the Rescale multiplier
  ``(f(a) - f(a0)) / (a - a0)`` of each element, ``a0`` being the same element in the baseline
  row; where ``|a - a0| <`` :data:`EPS` the plain derivative ``f'(a)`` is used instead (the
  element's contribution ``(a - a0) * multiplier`` is then below ``EPS`` times the slope);
* a max (max pooling 1-D/2-D/3-D, adaptive max pooling, ``amax``, ``max`` over a dimension)
  routes ``max(y, y0) - y0`` through the input's own argmax and ``y - max(y, y0)`` through the
  baseline's argmax (the max-pooling rule of captum): the routed amounts sum to ``y - y0``
  exactly, where captum's ``max_unpool`` loses them when windows overlap;
* everything else (convolutions, linear layers, sums, BatchNorm in eval mode, average pooling,
  reshapes) keeps its gradient.

With only these operations between input and output the attributions sum to
``f(x) - f(baseline)`` up to float rounding (summation-to-delta). A product of two tensors,
a softmax or a normalization keeps its plain gradient, so the sum then misses by the
completeness delta (``return_delta=True`` reports it).

A nonlinearity applies the rule only to a tensor of 2n rows that requires grad: a parameter or
a constant passed through ``exp`` or ``softplus`` (a learned scale) keeps its plain function. A
model that moves the batch off the first axis (a sequence-first RNN) keeps plain gradients
there; a model that holds a TorchScript module is refused (its graph runs without the calls the
mode sees: the attributions would miss the score change without a word). A TorchScript
*function* called in a ``forward``, or a ReLU written another way (``torch.where(z > 0, z, 0)``),
is not seen either: the runner warns where the attributions do not add up
(:data:`xaikit.xai.rules.deeplift.COMPLETENESS_TOL`). The module of a
torch.export program and a ``torch.compile`` part are seen (dynamo keeps the mode: the same
attributions as the eager model, tested). The
baseline rows get no gradient (their multipliers are the inputs'). In-place calls stay in place
(``nn.ReLU(inplace=True)``, ``x.relu_()``). Nothing of the model changes: no hook is
registered, the mode ends with the forward pass.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from xaikit.backend.base import T
from xaikit.backend.facets import DEEPLIFT_EPS, DEEPLIFT_TIES, MAX_TIE_ROUNDS, check_baselines
from xaikit.backend.outputs import as_matrix
from xaikit.backend.rows import Rows
from xaikit.backend.torch.forms import eager_module, form_of, hook_refusal, part_out_of_reach
from xaikit.backend.torch.grads import input_grads
from xaikit.backend.torch.nonlinear import BOUNDED, ELEMENTWISE, IN_PLACE, MAXES
from xaikit.errors import XaikitTypeError

__all__ = ["EPS", "DeepLiftMode", "deeplift_step", "snap_ties"]

#: ``|x - x0|`` below which an elementwise nonlinearity (and a max) uses its plain derivative
#: instead of the Rescale multiplier (:data:`~xaikit.backend.facets.DEEPLIFT_EPS`)
EPS = DEEPLIFT_EPS


_KIND: dict[Any, str] = {
    **dict.fromkeys(ELEMENTWISE, "elementwise"),
    **dict.fromkeys(BOUNDED, "bounded"),
    **{op: "bounded" if twin in BOUNDED else "elementwise" for op, twin in IN_PLACE.items()},
    **dict.fromkeys(MAXES, "max"),
}
#: the signatures of the Python functions with an ``inplace`` argument (read once)
_SIGNATURES: dict[Any, inspect.Signature | None] = {}


def _signature(func: Any) -> inspect.Signature | None:
    if func not in _SIGNATURES:
        try:
            sig: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            sig = None
        _SIGNATURES[func] = sig if sig is not None and "inplace" in sig.parameters else None
    return _SIGNATURES[func]


def _out_of_place(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Callable[[T], T], bool]:
    """``(fn, in_place)``: ``fn(t)`` computes the call ``func(*args, **kwargs)`` on ``t`` in
    place of its first argument, out of place; ``in_place``: the call was to write its input."""
    if func in IN_PLACE:
        twin, rest = IN_PLACE[func], tuple(args[1:])
        return (lambda t: twin(t, *rest, **kwargs)), True
    sig = _signature(func)
    if sig is None:
        rest = tuple(args[1:])
        return (lambda t: func(t, *rest, **kwargs)), False
    bound = sig.bind(*args, **kwargs)
    in_place = bool(bound.arguments.pop("inplace", False))
    first = next(iter(sig.parameters))
    named = {k: v for k, v in bound.arguments.items() if k != first}
    return (lambda t: func(t, **named)), in_place


def _split(t: T) -> tuple[T, T]:
    n = int(t.shape[0]) // 2
    return t[:n], t[n:]


class _Rescale(torch.autograd.Function):
    """``y = fn(a)`` on the 2n rows [inputs; baselines]; backward: the inputs' rows get the
    gradient times the Rescale multiplier (the plain derivative where ``|a - a0| < EPS``), the
    baselines' rows none."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, fn: Callable[[T], T]) -> torch.Tensor:
        with torch.enable_grad():
            leaf = a.detach().requires_grad_(True)
            y = fn(leaf)
            (slope,) = torch.autograd.grad(y, leaf, torch.ones_like(y))
        y = y.detach()
        (ax, a0), (yx, y0) = _split(a.detach()), _split(y)
        d = ax - a0
        small = d.abs() < EPS
        ctx.save_for_backward(torch.where(small, _split(slope)[0], (yx - y0) / torch.where(small, 1.0, d)))
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mult,) = ctx.saved_tensors
        gx, g0 = _split(grad)
        return torch.cat([gx * mult, torch.zeros_like(g0)]), None


def _values(out: Any) -> torch.Tensor:
    """A max's values (without the indices some return)."""
    return out if isinstance(out, torch.Tensor) else out[0]


def _graph(fn: Callable[[T], Any], a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(leaf, values)``: the max of a fresh leaf holding ``a``, with its autograd graph."""
    with torch.enable_grad():
        leaf = a.detach().requires_grad_(True)
        return leaf, _values(fn(leaf))


def snap_ties(fn: Callable[[T], Any], a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``a`` with every value within ``DEEPLIFT_TIES`` (of its row's largest ``|a|``) of the
    maximum ``y`` of a window it belongs to raised to that maximum: near-ties that float
    rounding alone tells apart (a constant baseline's activations, computed by other kernels
    for another chunk size) become exact ties, which the max's own gradient breaks by a fixed
    rule (the first position of a max-pooling window; ``amax`` shares them). Found by peeling:
    each round masks the positions the last round's maxima came from, at most
    :data:`MAX_TIE_ROUNDS` rounds."""
    rows = int(a.shape[0])
    tol = DEEPLIFT_TIES * a.abs().reshape(rows, -1).amax(1).reshape(rows, *([1] * (y.dim() - 1)))
    low = a.min() - 1  # below every value: a masked position is never a maximum again
    masked, snapped = a, a.clone()
    for r in range(MAX_TIE_ROUNDS):
        leaf, found = _graph(fn, masked)
        active = (found >= y - tol) & (found > low)  # the window's next maximum is (near-)tied
        if r and not bool(active.any()):
            break
        weight = active.to(a.dtype)
        (count,) = torch.autograd.grad(found, leaf, weight, retain_graph=True)
        (value,) = torch.autograd.grad(found, leaf, weight * y)
        hit = count > 0
        snapped = torch.where(hit, value / torch.where(hit, count, 1.0), snapped)
        masked = torch.where(hit, low, masked)
    return snapped


class _MaxRule(torch.autograd.Function):
    """``out = fn(a)`` (a max that keeps the batch axis; a tuple with indices too) on the 2n rows
    [inputs; baselines]; backward: ``g * (max(y, y0) - y0)`` routed through the input's argmax
    plus ``g * (y - max(y, y0))`` through the baseline's (near-ties made exact first:
    :func:`snap_ties`), divided by ``a - a0`` (the plain gradient where ``|a - a0| < EPS``);
    the baselines' rows get none."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, fn: Callable[[T], Any]) -> Any:
        out = fn(a)
        values = _values(out)
        ctx.fn, ctx.values = fn, values
        ctx.paired = values.dim() >= 1 and values.shape[0] == a.shape[0]
        ctx.save_for_backward(a)  # an input written in place afterwards is an error, as in autograd
        y = values.detach().clone()  # a copy: the caller may write it in place (a ReLU after it)
        if isinstance(out, torch.Tensor):
            return y
        rest = tuple(o.detach() for o in out[1:])
        ctx.mark_non_differentiable(*rest)
        return (y, *rest)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[torch.Tensor, None]:
        (a,) = ctx.saved_tensors
        values = ctx.values
        if not ctx.paired:  # a max over the batch axis: no pairs to compare, the plain gradient
            leaf, found = _graph(ctx.fn, a)
            (plain,) = torch.autograd.grad(found, leaf, grad)
            return plain, None
        leaf, found = _graph(ctx.fn, snap_ties(ctx.fn, a, values))
        gx, _g0 = _split(grad)
        yx, y0 = _split(values)
        top = torch.maximum(yx, y0)
        zeros = torch.zeros_like(gx)
        (routed,) = torch.autograd.grad(
            found, leaf, torch.cat([gx * (top - y0), gx * (yx - top)]), retain_graph=True
        )
        (plain,) = torch.autograd.grad(found, leaf, torch.cat([gx, zeros]))
        rx, r0 = _split(routed)
        ax, a0 = _split(a)
        d = ax - a0
        small = d.abs() < EPS
        mult = torch.where(small, _split(plain)[0], (rx + r0) / torch.where(small, 1.0, d))
        return torch.cat([mult, torch.zeros_like(mult)]), None


class DeepLiftMode(TorchFunctionMode):
    """Within the block, every elementwise nonlinearity and max on a tensor of ``rows`` rows
    (the 2n rows [inputs; baselines]) that requires grad computes through :class:`_Rescale` /
    :class:`_MaxRule`; ``calls`` counts them."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows
        self.calls = 0

    def _paired(self, t: Any) -> bool:
        return (
            isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and t.requires_grad
            and t.dim() >= 1
            and int(t.shape[0]) == self.rows
        )

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        try:
            kind = _KIND.get(func)
        except TypeError:  # an unhashable callable: not one of ours
            kind = None
        if kind is None or not args or not self._paired(args[0]):
            return func(*args, **kwargs)
        if kind == "bounded" and any(self._paired(v) for v in (*args[1:], *kwargs.values())):
            return func(*args, **kwargs)  # a bound or second operand from the input: its gradient counts
        if kind == "max":
            named = func in (torch.max, torch.Tensor.max)
            if named and "dim" not in kwargs and (len(args) < 2 or isinstance(args[1], torch.Tensor)):
                return func(*args, **kwargs)  # the max of all elements, or of two tensors: no rule
            self.calls += 1
            rest = tuple(args[1:])
            out = _MaxRule.apply(args[0], lambda t: func(t, *rest, **kwargs))
            return torch.return_types.max(out) if named else out  # max's (values, indices) by name
        self.calls += 1
        fn, in_place = _out_of_place(func, args, kwargs)
        y = _Rescale.apply(args[0], fn)
        return args[0].copy_(y) if in_place else y


def deeplift_step(bk: Any, rows: Rows, baselines: Sequence[T]) -> tuple[list[T], T, T]:
    """DeepLIFT (Rescale rule) of n rows of a torch model against one baseline row each (see
    :meth:`xaikit.backend.facets.RelevanceFacet.deeplift_step`); the model is in eval mode (the
    caller runs it inside ``bk.inference``)."""
    model, inputs, targets, output = rows.model, rows.inputs, rows.targets, rows.output
    model_kwargs, target = rows.model_kwargs, rows.target
    check_baselines(inputs, baselines)
    refusal = hook_refusal(model, "DeepLIFT maps (deeplift, deepliftshap)")
    if refusal is not None:  # TorchScript runs its graph without the Python calls the rules replace
        raise refusal
    part = part_out_of_reach(model, exported=False)  # an exported program's calls are seen
    if part is not None:
        raise XaikitTypeError(
            f"DeepLIFT maps (deeplift, deepliftshap): submodule {part[0]!r} of the model is "
            f"{form_of(part[1])}, whose nonlinearities run without DeepLIFT's rules (their plain "
            "gradients instead): the attributions would miss f(x) - f(baseline). Explain a model of "
            "Python nn.Modules (load the submodule's weights into its Python class), or use a method "
            "that needs no rules (the gradient methods)"
        )
    model = eager_module(model)  # a torch.compile module: its eager module (same weights)
    n = int(inputs[0].shape[0])
    with torch.enable_grad():
        xs = [x.detach().requires_grad_(True) for x in inputs]
        stacked = [torch.cat([x, b.detach().to(x.dtype)]) for x, b in zip(xs, baselines)]
        both = torch.cat([targets, targets])
        with DeepLiftMode(2 * n):
            if target is not None:
                raw = bk._raw(model, stacked, model_kwargs)
            else:
                out = as_matrix(bk._call(model, stacked, output, model_kwargs))
        picked = (
            target.scores(bk, raw, both) if target is not None else out.gather(1, both[:, None]).squeeze(1)
        )
        scores, base = picked[:n], picked[n:]
        grads = input_grads(model, scores, xs, output)
    attributions = [(x.detach() - b.to(x.dtype)) * g for x, b, g in zip(xs, baselines, grads)]
    return attributions, scores.detach(), base.detach()
