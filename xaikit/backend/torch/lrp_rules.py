"""The LRP rules of a linear layer (``nn.Conv1d/2d/3d``, grouped and depthwise too,
``nn.ConvTranspose1d/2d/3d``, ``nn.Linear``), as the torch backend's relevance pass computes
them (:mod:`xaikit.backend.torch.lrp`).

A layer ``z = W x + b`` is seen as an :class:`Affine`: its weights (with a BatchNorm merged:
``W' = W * a``, ``b' = b * a + c`` per output channel, computed here, the module never
written), its operator ``fwd(x, W, b)`` and the operator's transpose ``T(g, W) = W^T g`` (one
``aten.convolution`` each, with the module's stride, padding, dilation, groups; a transposed
convolution's transpose is a convolution). :func:`rule_backward` turns the gradient ``g`` at
the layer's output into the gradient at its input by a rule of :mod:`xaikit.xai.rules.spec`
(relevance ``R = out * g``; a rule is any object with the attributes of
:class:`xaikit.xai.rules.spec.Rule`, which the backend does not import): for the ``x * c`` rules it returns ``c`` (``R_x = x * c``), for
the input rules (flat, wsquare, zbox) the input's relevance itself.

The rules that split inputs and weights into positive and negative parts (zplus, alpha_beta,
gamma) run their parts as one convolution: the parts' inputs concatenated along the channels
and their weights as one block matrix (:meth:`Affine.fwd_blocks`, :meth:`Affine.T_blocks`; a
grouped convolution runs one call per block instead), and skip the negative-input parts when
the layer's input has no negative value (the input of a layer after a ReLU).
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
    if eps > 0:
        return r / torch.where(d >= 0, d + eps, d - eps)
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

    def T(self, g: Tensor, w: Tensor, in_shape: Sequence[int]) -> Tensor:
        """``W^T g``: the transpose of :meth:`fwd` (its input gradient), for an input of shape
        ``in_shape``."""
        if self.dense:
            return g.matmul(w)
        if self.transposed:
            pad_out = [0] * len(self.stride)
        else:
            k = w.shape[2:]
            pad_out = []
            for i, s in enumerate(self.stride):
                used = (
                    (int(g.shape[2 + i]) - 1) * s
                    - 2 * self.padding[i]
                    + self.dilation[i] * (int(k[i]) - 1)
                    + 1
                )
                pad_out.append(int(in_shape[2 + i]) - used)
        return torch.ops.aten.convolution.default(
            g, w, None, self.stride, self.padding, self.dilation, not self.transposed, pad_out, self.groups
        )

    # ---- block operators: several (input part, weight) pairs as one call -----------------------
    def fwd_blocks(self, xs: Sequence[Tensor], rows: Sequence[Sequence[Tensor]]) -> list[Tensor]:
        """``[sum_j fwd(xs[j], rows[i][j]) for i]``: one operator call on the channel-concatenated
        inputs with a block weight (a grouped convolution: one call per block)."""
        if self.groups > 1:
            return [_total(self.fwd(x, w) for x, w in zip(xs, row)) for row in rows]
        axis = self.channel_axis(xs[0].ndim)
        x = xs[0] if len(xs) == 1 else torch.cat(list(xs), dim=axis)
        big = self._block(rows)
        out = self.fwd(x, big)
        return list(out.chunk(len(rows), dim=axis))

    def T_blocks(
        self, gs: Sequence[Tensor], rows: Sequence[Sequence[Tensor]], in_shape: Sequence[int]
    ) -> list[Tensor]:
        """``[sum_i T(gs[i], rows[i][j]) for j]``: the transpose of :meth:`fwd_blocks`."""
        if self.groups > 1:
            return [
                _total(self.T(g, row[j], in_shape) for g, row in zip(gs, rows)) for j in range(len(rows[0]))
            ]
        axis = self.channel_axis(gs[0].ndim)
        g = gs[0] if len(gs) == 1 else torch.cat(list(gs), dim=axis)
        n_in = len(rows[0])
        shape = list(in_shape)
        shape[axis] *= n_in
        out = self.T(g, self._block(rows), shape)
        return list(out.chunk(n_in, dim=axis))

    def _block(self, rows: Sequence[Sequence[Tensor]]) -> Tensor:
        """The block weight of ``rows`` (output blocks) x ``rows[i]`` (input blocks), groups = 1."""
        if len(rows) == 1 and len(rows[0]) == 1:
            return rows[0][0]
        in_axis, out_axis = (0, 1) if self.transposed else (1, 0)
        return torch.cat([torch.cat(list(row), dim=in_axis) for row in rows], dim=out_axis)


def _total(terms: Any) -> Tensor:
    """The sum of an iterable of tensors (at least one)."""
    it = iter(terms)
    out = next(it)
    for t in it:
        out = out + t
    return out


def _signs(x: Tensor) -> tuple[Tensor, Tensor, bool]:
    """``x+``, ``x-`` and whether ``x`` has a negative value at all."""
    neg = bool((x < 0).any())
    return x.clamp(min=0), x.clamp(max=0), neg


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
    """
    axis = layer.channel_axis(r.ndim)
    two = coef_n != 0.0
    xp, xn, neg = _signs(x)
    if neg:
        rows = [[w_p, w_n], [w_n, w_p]] if two else [[w_p, w_n]]
        ds = layer.fwd_blocks([xp, xn], rows)
    else:
        rows = [[w_p], [w_n]] if two else [[w_p]]
        ds = layer.fwd_blocks([x], rows)
    p = stabilized_ratio(r, _add_bias(ds[0], b_p, axis), eps)
    if mask is not None:
        p = p * (mask > 0)
    if coef_p != 1.0:
        p = p * coef_p
    gs = [p]
    if two:
        n = stabilized_ratio(r, _add_bias(ds[1], b_n, axis), eps)
        if mask is not None:
            n = n * (mask < 0)
        gs.append(n * coef_n)
    cs = layer.T_blocks(gs, rows, x.shape)
    if not neg:
        return cs[0]
    return torch.where(x > 0, cs[0], cs[1])


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


def rule_backward(layer: Affine, rule: Any, x: Tensor, out: Tensor, g: Tensor, name: str) -> Tensor:
    """The gradient at the layer's input by ``rule`` (the input's relevance itself for
    flat / wsquare / zbox), from its input ``x``, its output ``out`` (with a merged BatchNorm:
    the BatchNorm's output) and the gradient ``g`` at the output, all in the compute dtype."""
    kind, eps = rule.kind, rule.epsilon
    axis = layer.channel_axis(out.ndim)
    r = out * g
    xp = layer.pad(x)
    if kind in ("epsilon", "norm"):
        p = stabilized_ratio(r, out, eps)
        if layer.scale is not None:  # W' = W a: W'^T p = W^T (a p), no merged copy of W
            p = p * _channel_view(layer.scale, p.ndim, axis)
        c = layer.T(p, layer.raw()[0], xp.shape)
    elif kind == "zplus":
        w, b = layer.params()
        c = _two_sided(layer, xp, r, w.clamp(min=0), w.clamp(max=0), _pos(b), None, 1.0, 0.0, eps)
    elif kind == "alpha_beta":
        w, b = layer.params()
        wp, wn = w.clamp(min=0), w.clamp(max=0)
        c = _two_sided(layer, xp, r, wp, wn, _pos(b), _neg(b), rule.alpha, -rule.beta, eps)
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
        low = layer.pad(_bound(rule.low, x, axis, name, "low"))
        high = layer.pad(_bound(rule.high, x, axis, name, "high"))
        (d,) = layer.fwd_blocks([xp], [[w]])
        (d_box,) = layer.fwd_blocks([low, high], [[wp, wn]])  # one row: broadcast over the batch
        q = stabilized_ratio(r, d - d_box, eps)
        cx, cl, ch = layer.T_blocks([q], [[w, wp, wn]], xp.shape)
        return layer.unpad(x, xp * cx - low * cl - high * ch)
    elif kind in ("flat", "wsquare"):
        w, b = layer.params()
        if kind == "flat":
            w, b = torch.ones_like(w), None
        else:
            w, b = w * w, None if b is None else b * b
        ones = layer.pad(torch.ones((1, *x.shape[1:]), dtype=x.dtype, device=x.device))
        d = _add_bias(layer.fwd(ones, w), b, axis)
        rel = layer.T(stabilized_ratio(r, d, eps), w, xp.shape)
        return layer.unpad(x, rel)
    else:  # checked before the model runs
        raise XaikitValueError(
            f"layer {name!r}: the {kind!r} rule does not apply to a convolution or dense layer"
        )
    return layer.unpad(x, c)
