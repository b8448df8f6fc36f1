"""AttnLRP's rules for the operations of a transformer (Achtibat et al., 2024,
https://arxiv.org/abs/2402.05602), as a ``TorchFunctionMode`` the torch LRP pass runs under, in
xaikit's relevance convention (relevance ``R = a * g`` at every tensor ``a``,
:mod:`xaikit.xai.rules.spec`):

* **softmax**: AttnLRP's rule ``R_in = x * (R_out - s * sum(R_out))`` is, in this convention,
  the softmax's own gradient times its input: nothing to change.
* **products of two input-dependent tensors** (``q @ k^T``, ``attention @ v``, a gated unit's
  ``a * b`` of equal shapes): the uniform rule, each operand gets half the relevance of each
  product term: the gradient to both operands is halved (``0.5 * y + 0.5 * y.detach()``; the
  value is unchanged). An operand that is a parameter (or a view of one) is a weight: the product
  is a linear map, left as it is.
* **gates**: an element-wise product whose operands differ in shape (squeeze-excitation's
  ``x * scale``, scale ``(B, C, 1, 1)``): the smaller operand is treated as a constant, so the
  relevance goes to the gated signal (as the Keras backend does for a ``Multiply`` gate).
* **layer normalization** (``F.layer_norm``, ``F.rms_norm``, ``F.group_norm``): the
  normalizing scale is treated as a constant (detached), so the layer is linear in its input and
  relevance passes through it as through a linear map (AttnLRP's LN rule).
* **element-wise activations** called as functions (``F.gelu``, ``F.silu``, ``torch.tanh``, ...):
  the identity rule (``R_in = R_out``): the gradient becomes ``y / x`` (``nn`` activation modules
  get the same by the composite's ``pass``).
* ``F.scaled_dot_product_attention`` is computed as its matrix products and softmax, so that the
  rules above apply to it.

The model is not changed; the mode ends with the call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["TransformerRules", "half_grad", "identity_rule", "is_weight"]

F = torch.nn.functional

_PRODUCTS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm)
_ELEMENTWISE_PRODUCTS = (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__)
_ACTIVATIONS = (F.gelu, F.silu, F.mish, F.elu, F.selu, F.softplus, torch.tanh, torch.Tensor.tanh, torch.sigmoid,
                torch.Tensor.sigmoid, F.hardswish, F.relu6, F.leaky_relu)  # fmt: skip


def is_weight(t: Any) -> bool:
    """Whether ``t`` is a parameter or a view of one (a constant of the explained function)."""
    param = torch.nn.Parameter
    return isinstance(t, param) or isinstance(getattr(t, "_base", None), param)


def _from_input(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and not is_weight(t)


def half_grad(y: torch.Tensor) -> torch.Tensor:
    """``y``, with half its gradient passed back (the uniform rule of a product of two operands)."""
    return 0.5 * y + 0.5 * y.detach()


def identity_rule(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y = f(x)`` with the gradient ``y / x``: relevance ``x * g_x = y * g_y`` passes unchanged
    (where x is 0 its relevance is 0 whatever the ratio)."""
    ratio = torch.where(x.abs() > 1e-12, y / torch.where(x == 0, torch.ones_like(x), x), torch.zeros_like(x))
    return y.detach() + (x - x.detach()) * ratio.detach()


def _layer_norm(
    x: torch.Tensor, shape: Sequence[int], weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Any:
    dims = tuple(range(-len(shape), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    y = (x - mean) / torch.sqrt(var + eps).detach()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _rms_norm(x: torch.Tensor, shape: Sequence[int], weight: Any = None, eps: float | None = None) -> Any:
    dims = tuple(range(-len(shape), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    y = x / torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps).detach()
    return y if weight is None else y * weight


def _sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
          scale: float | None = None, enable_gqa: bool = False) -> Any:  # fmt: skip
    """``F.scaled_dot_product_attention`` as matrix products and a softmax (eval: no dropout)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    # inside a mode's handler the mode is off: the uniform rule of the two products is applied here
    scores = _product(q, k.transpose(-2, -1)) * scale
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        keep = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(diagonal=m - n)
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (
            scores.masked_fill(~attn_mask, float("-inf"))
            if attn_mask.dtype == torch.bool
            else scores + attn_mask
        )
    return _product(torch.softmax(scores, dim=-1), v)


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``, with the uniform rule when both operands depend on the input."""
    out = torch.matmul(a, b)
    return half_grad(out) if _from_input(a) and _from_input(b) else out


class TransformerRules(TorchFunctionMode):
    """The mode of AttnLRP's rules (see the module's docstring); ``calls`` counts the operations
    it changed, by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self._count("attention")
            return _sdpa(*args, **kwargs)
        if func is F.layer_norm:
            self._count("layer_norm")
            return _layer_norm(*args, **kwargs)
        if func is getattr(F, "rms_norm", None):
            self._count("rms_norm")
            return _rms_norm(*args, **kwargs)
        if func in _ELEMENTWISE_PRODUCTS and len(args) >= 2 and _from_input(args[0]) and _from_input(args[1]):
            a, b = args[0], args[1]
            if a.shape != b.shape:  # a gate (squeeze-excitation): the smaller operand is constant
                self._count("gate")
                return (
                    func(a, b.detach(), **kwargs) if a.numel() >= b.numel() else func(a.detach(), b, **kwargs)
                )
            self._count("product")
            return half_grad(func(*args, **kwargs))
        out = func(*args, **kwargs)
        if func in _PRODUCTS:
            if len(args) >= 2 and _from_input(args[0]) and _from_input(args[1]):
                self._count("product")
                return half_grad(out)
            return out
        if func in _ACTIVATIONS and args and _from_input(args[0]) and isinstance(out, torch.Tensor):
            self._count("activation")
            return identity_rule(args[0], out)
        return out
