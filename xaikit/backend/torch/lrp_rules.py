"""The LRP rules of a linear layer (``nn.Conv1d/2d/3d``, grouped and depthwise too,
``nn.ConvTranspose1d/2d/3d``, ``nn.Linear``), as the torch backend's relevance pass computes
them (:mod:`xaikit.backend.torch.lrp`).

A layer ``z = W x + b`` is seen as an :class:`Affine`: its weights (with a BatchNorm merged:
``W' = W * a``, ``b' = b * a + c`` per output channel, computed here, the module never
written), its operator ``fwd(x, W, b)`` and the operator's transpose ``T(g, W) = W^T g`` (one
call each with the module's stride, padding, dilation, groups: ``aten.convolution``, and
``aten.convolution_backward`` for the input's gradient, which ran 1.5x faster than a transposed
convolution on the CPU). :func:`rule_backward` turns the gradient ``g`` at the layer's output
into the gradient at its input by a rule of :mod:`xaikit.xai.rules.spec` (relevance
``R = out * g``; a rule is any object with the attributes of
:class:`~xaikit.xai.rules.spec.Rule`, which the backend does not import): for the ``x * c``
rules it returns ``c`` (``R_x = x * c``), for the input rules (flat, wsquare, zbox) the
input's relevance itself.

The rules that split inputs and weights into positive and negative parts (zplus, alpha_beta,
gamma) skip the negative-input parts when the layer's input has no negative value (the input of
a layer after a ReLU): zplus then costs one convolution and one transpose more than the plain
backward, alpha-beta and gamma three. Running the parts as one convolution on channel-concatenated
inputs with a block weight ran slower on the CPU (1.3x to 1.7x for one such pair at 64 to 128
channels) and is not done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xaikit.errors import XaikitValueError

__all__ = ["Affine", "rule_backward", "stabilized_ratio"]


def stabilized_ratio(r: Tensor, d: Tensor, eps: float) -> Tensor:
    """``r / stab(d)`` with ``stab(d) = d + eps * sign(d)`` (sign(0) = +1); with ``eps == 0``
    a zero denominator gives 0 (its relevance is 0 in the convention ``R = a * g``)."""
    if eps > 0:  # one temporary for the denominator (a where() of d + eps and d - eps takes three)
        den = (d >= 0).to(d.dtype).mul_(2.0 * eps).sub_(eps).add_(d)
        return r / den
    return torch.where(d == 0, torch.zeros_like(r), r / d)


def _channel_view(v: Tensor, ndim: int, axis: int) -> Tensor:
    """A per-channel vector shaped to broadcast along ``axis`` of an ``ndim`` tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


class Affine:
    """A convolution or dense layer as its rules see it.

    Args:
        module: the ``nn.Linear`` / ``nn.Conv*`` / ``nn.ConvTranspose*`` module.
        x_shape: the shape of the input it read (to recover padding and output sizes).
        out_shape: the shape of its output.
        scale, shift: a merged BatchNorm's per-channel scale ``a`` and shift ``c`` (or None).
        dtype: the dtype the rules compute in.
    """

    def __init__(
        self,
        module: Any,
        x_shape: Sequence[int],
        out_shape: Sequence[int],
        scale: Tensor | None = None,
        shift: Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.module = module
        self.dtype = dtype
        self.scale = scale
        self.shift = shift
        self.dense = isinstance(module, torch.nn.Linear)
        self.transposed = isinstance(module, torch.nn.modules.conv._ConvTransposeNd)
        self.groups = 1 if self.dense else int(module.groups)
        self._params: tuple[Tensor, Tensor | None] | None = None
        self.prepad: tuple[list[int], str] | None = None
        if self.dense:
            return
        dims = len(x_shape) - 2
        self.stride = list(module.stride)
        self.dilation = list(module.dilation)
        padding = module.padding
        if module.padding_mode != "zeros" or isinstance(padding, str):
            pads = [int(p) for p in module._reversed_padding_repeated_twice]
            mode = "constant" if module.padding_mode == "zeros" else module.padding_mode
            if any(pads):
                self.prepad = (pads, mode)
            self.padding = [0] * dims
        else:
            self.padding = [int(p) for p in padding]
        k = module.weight.shape[2:]
        self.output_padding = [0] * dims
        if self.transposed:  # output_size= may have chosen an output padding: read it off the shapes
            for i in range(dims):
                base = (x_shape[2 + i] - 1) * self.stride[i] - 2 * self.padding[i]
                base += self.dilation[i] * (int(k[i]) - 1) + 1
                self.output_padding[i] = int(out_shape[2 + i]) - base

    # ---- weights ----------------------------------------------------------------------------
    def raw(self) -> tuple[Tensor, Tensor | None]:
        """The module's own weight and bias, in the compute dtype (detached)."""
        w = self.module.weight.detach().to(self.dtype)
        b = self.module.bias
        return w, None if b is None else b.detach().to(self.dtype)

    def params(self) -> tuple[Tensor, Tensor | None]:
        """Weight and bias with the merged BatchNorm applied (the rules' ``W``, ``b``)."""
        if self._params is None:
            w, b = self.raw()
            if self.scale is not None and self.shift is not None:
                w = self._scaled(w, self.scale)
                b = self.shift if b is None else b * self.scale + self.shift
            self._params = (w, b)
        return self._params

    def _scaled(self, w: Tensor, a: Tensor) -> Tensor:
        """``w`` with each output channel multiplied by ``a``."""
        if not self.transposed:
            return w * _channel_view(a, w.ndim, 0)
        g = self.groups
        grouped = w.reshape(g, w.shape[0] // g, *w.shape[1:])
        return (grouped * a.reshape(g, 1, -1, *([1] * (w.ndim - 2)))).reshape(w.shape)

    def channel_axis(self, ndim: int) -> int:
        """The axis of the output channels in an output of ``ndim`` dimensions."""
        return ndim - 1 if self.dense else 1

    # ---- the operator and its transpose ------------------------------------------------------
    def pad(self, x: Tensor) -> Tensor:
        """The input as the operator reads it (padded here when the module pads with a mode
        other than zeros, or asymmetrically for ``padding="same"``)."""
        if self.prepad is None:
            return x
        pads, mode = self.prepad
        return F.pad(x, pads, mode=mode)

    def unpad(self, x: Tensor, g: Tensor) -> Tensor:
        """The transpose of :meth:`pad` applied to ``g`` (a padded copy's share summed back)."""
        if self.prepad is None:
            return g
        with torch.enable_grad():
            xv = x.detach().requires_grad_(True)
            (out,) = torch.autograd.grad(self.pad(xv), xv, g)
        return out

    def fwd(self, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        """The layer's operator with weight ``w`` and bias ``b`` on a (padded) input."""
        if self.dense:
            return F.linear(x, w, b)
        return torch.ops.aten.convolution.default(
            x,
            w,
            b,
            self.stride,
            self.padding,
            self.dilation,
            self.transposed,
            self.output_padding,
            self.groups,
        )

    def T(self, g: Tensor, w: Tensor, like: Tensor) -> Tensor:
        """``W^T g``: the transpose of :meth:`fwd` (its input gradient) for an input of the
        shape of ``like`` (the padded input)."""
        if self.dense:
            return g.matmul(w)
        return torch.ops.aten.convolution_backward.default(
            g, like, w, None, self.stride, self.padding, self.dilation, self.transposed, self.output_padding,
            self.groups, [True, False, False],
        )[0]  # fmt: skip


def _pos(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.clamp(min=0)


def _neg(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.clamp(max=0)


def _add_bias(d: Tensor, b: Tensor | None, axis: int) -> Tensor:
    return d if b is None else d + _channel_view(b, d.ndim, axis)


def _two_sided(
    layer: Affine,
    x: Tensor,
    r: Tensor,
    w_p: Tensor,
    w_n: Tensor,
    b_p: Tensor | None,
    b_n: Tensor | None,
    coef_p: float,
    coef_n: float,
    eps: float,
    mask: Tensor | None = None,
) -> Tensor:
    """The gradient ``c`` at the input (``R_x = x * c``) of the rules built from two weight
    variants: the positive term ``p = coef_p * R / stab(w_p x+ + w_n x- + b_p)`` and the
    negative term ``n = coef_n * R / stab(w_n x+ + w_p x- + b_n)`` (not computed when
    ``coef_n`` is 0), ``c = w_p^T p + w_n^T n`` where ``x > 0`` and ``w_n^T p + w_p^T n`` where
    ``x < 0``. zplus: ``(W+, W-, 1, 0)``; alpha-beta: ``(W+, W-, alpha, -beta)``; gamma:
    ``(W + g W+, W + g W-, 1, 1)`` with ``mask`` the output's sign (p where z > 0, n where z < 0).
    For an input with negative values (an input without them: :func:`_after_relu`).
    """
    axis = layer.channel_axis(r.ndim)
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    p = stabilized_ratio(r, _add_bias(layer.fwd(xp, w_p) + layer.fwd(xn, w_n), b_p, axis), eps)
    if mask is not None:
        p = p * (mask > 0)
    if coef_p != 1.0:
        p = p * coef_p
    if coef_n == 0.0:
        return torch.where(x > 0, layer.T(p, w_p, x), layer.T(p, w_n, x))
    n = stabilized_ratio(r, _add_bias(layer.fwd(xp, w_n) + layer.fwd(xn, w_p), b_n, axis), eps)
    if mask is not None:
        n = n * (mask < 0)
    n = n * coef_n
    c_pos = layer.T(p, w_p, x) + layer.T(n, w_n, x)
    c_neg = layer.T(p, w_n, x) + layer.T(n, w_p, x)
    return torch.where(x > 0, c_pos, c_neg)


def _after_relu(layer: Affine, kind: str, rule: Any, x: Tensor, out: Tensor, r: Tensor) -> Tensor:
    """zplus, alpha-beta and gamma on an input without negative values, from one convolution:
    with ``u = W+ x + b+`` and the layer's output ``z = W x + b``, the denominators are
    ``u`` (zplus, alpha-beta's positive part), ``v = W- x + b-`` (alpha-beta's negative part,
    its own convolution), ``z + g u`` and ``(1 + g) z - g u`` (gamma's), and the transposes
    combine into two: alpha-beta ``W+^T p - W-^T q`` (``p = alpha R / stab(u)``,
    ``q = beta R / stab(v)``), gamma ``W^T (p + (1 + g) n) + g W+^T (p - n)``."""
    eps = rule.epsilon
    w, b = layer.params()
    wp = w.clamp(min=0)
    u = _add_bias(layer.fwd(x, wp), _pos(b), layer.channel_axis(out.ndim))
    if kind == "zplus":
        return layer.T(stabilized_ratio(r, u, eps), wp, x)
    if kind == "alpha_beta":
        p = stabilized_ratio(r, u, eps) * rule.alpha
        if rule.beta == 0.0:
            return layer.T(p, wp, x)
        # the negative part from its own convolution, not as z - u: where W- x is small next to
        # W+ x the difference cancels (float32: 4.6e-3 of the largest relevance off on a
        # depthwise block, zennit's 2e-6)
        wn = w.clamp(max=0)
        v = _add_bias(layer.fwd(x, wn), _neg(b), layer.channel_axis(out.ndim))
        q = stabilized_ratio(r, v, eps) * rule.beta
        return layer.T(p, wp, x) - layer.T(q, wn, x)
    g = rule.gamma
    p = stabilized_ratio(r, out + g * u, eps) * (out > 0)
    n = stabilized_ratio(r, (1.0 + g) * out - g * u, eps) * (out < 0)
    return layer.T(p + (1.0 + g) * n, w, x) + g * layer.T(p - n, wp, x)


def _bound(value: Any, x: Tensor, axis: int, layer: str, key: str) -> Tensor:
    """The z^B rule's bound as one row of the input's shape: a number, or one per channel
    (``axis``: 1 for a convolution's input, the last axis for a dense layer's)."""
    if isinstance(value, tuple):
        t = torch.tensor(value, dtype=x.dtype, device=x.device)
        if len(value) != int(x.shape[axis]):
            raise XaikitValueError(
                f"zbox rule of layer {layer!r}: {key} has {len(value)} values (one per channel) and the "
                f"layer's input has {int(x.shape[axis])} channels (shape {tuple(x.shape)}); pass a number "
                "or one value per input channel"
            )
        return _channel_view(t, x.ndim, axis).expand(1, *x.shape[1:])
    return torch.full((1, *x.shape[1:]), float(value), dtype=x.dtype, device=x.device)


def rule_backward(
    layer: Affine, rule: Any, x: Tensor, out: Tensor, g: Tensor, name: str, support: Tensor | None = None
) -> Tensor:
    """The gradient at the layer's input by ``rule`` (the input's relevance itself for
    flat / wsquare / zbox), from its input ``x``, its output ``out`` (with a merged BatchNorm:
    the BatchNorm's output) and the gradient ``g`` at the output, all in the compute dtype.
    ``support`` (input rules): one row, 1 where ``x`` holds the model's input and 0 where it
    holds a zero padding of it (an ``nn.ZeroPad2d`` before the layer); the padding then counts as
    no input, as the convolution's own padding does not, and gets no relevance."""
    kind, eps = rule.kind, rule.epsilon
    axis = layer.channel_axis(out.ndim)
    r = out * g
    xp = layer.pad(x)
    if kind in ("epsilon", "norm"):
        p = stabilized_ratio(r, out, eps)
        if layer.scale is not None:  # W' = W a: W'^T p = W^T (a p), no merged copy of W
            p = p * _channel_view(layer.scale, p.ndim, axis)
        c = layer.T(p, layer.raw()[0], xp)
    elif kind in ("zplus", "alpha_beta", "gamma") and not bool((xp < 0).any()):  # one device sync
        c = _after_relu(layer, kind, rule, xp, out, r)
    elif kind in ("zplus", "alpha_beta"):
        w, b = layer.params()
        wp, wn = w.clamp(min=0), w.clamp(max=0)
        alpha, beta = (1.0, 0.0) if kind == "zplus" else (rule.alpha, rule.beta)
        c = _two_sided(layer, xp, r, wp, wn, _pos(b), _neg(b), alpha, -beta, eps)
    elif kind == "gamma":
        w, b = layer.params()
        gam = rule.gamma
        wp, wn = w + gam * w.clamp(min=0), w + gam * w.clamp(max=0)
        bp = None if b is None else b + gam * b.clamp(min=0)
        bn = None if b is None else b + gam * b.clamp(max=0)
        c = _two_sided(layer, xp, r, wp, wn, bp, bn, 1.0, 1.0, eps, mask=out)
    elif kind == "zbox":
        w, _ = layer.params()
        wp, wn = w.clamp(min=0), w.clamp(max=0)
        inside = 1.0 if support is None else support.to(x.dtype)
        low = layer.pad(_bound(rule.low, x, axis, name, "low") * inside)
        high = layer.pad(_bound(rule.high, x, axis, name, "high") * inside)
        d_box = layer.fwd(low, wp) + layer.fwd(high, wn)  # one row: broadcast over the batch
        q = stabilized_ratio(r, layer.fwd(xp, w) - d_box, eps)
        rel = xp * layer.T(q, w, xp) - low * layer.T(q, wp, xp) - high * layer.T(q, wn, xp)
        return layer.unpad(x, rel)
    elif kind in ("flat", "wsquare"):
        w, b = layer.params()
        if kind == "flat":
            w, b = torch.ones_like(w), None
        else:
            w, b = w * w, None if b is None else b * b
        if support is None:
            inside = torch.ones((1, *x.shape[1:]), dtype=x.dtype, device=x.device)
        else:
            inside = support.to(x.dtype)
        d = _add_bias(layer.fwd(layer.pad(inside), w), b, axis)
        rel = layer.unpad(x, layer.T(stabilized_ratio(r, d, eps), w, xp))
        return rel if support is None else rel * inside
    else:  # checked before the model runs
        raise XaikitValueError(
            f"layer {name!r}: the {kind!r} rule does not apply to a convolution or dense layer"
        )
    return layer.unpad(x, c)
