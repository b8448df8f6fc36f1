"""The LRP rules (:mod:`xaikit.xai.rules.spec`) on one linear map of a Keras layer, in the
relevance convention of the backends: a backward pass whose "gradient" ``g`` at a tensor ``a``
is its relevance over its value (``R = a * g``).

A :class:`Linear` is ``z = W x + b`` computed with the layer's own operation (its convolution
op and configuration, a matmul), so a rule's modified weights (``W+``, ``W + gamma W+``,
``W^2``, ones...) go through exactly the map the layer computes; the transposed map
``W^T v`` is that operation's vector-Jacobian product. :func:`backward` turns the gradient
``g`` of the layer's output ``z`` into the gradient of its input ``x`` (``x * g_x = R_x``), or,
for the rules whose relevance is not ``x`` times something (flat, w-square, z^B), into the
input's relevance itself.

Example:
    >>> import tensorflow as tf
    >>> from xaikit.xai.rules.spec import Epsilon
    >>> lin = Linear(lambda x, k: tf.matmul(x, k), tf.constant([[1.0], [2.0]]), None, (1, -1), False)
    >>> x = tf.constant([[3.0, 4.0]])
    >>> g_x, direct = backward(Epsilon(0.0), lin, x, lin.forward(x), tf.constant([[1.0]]))
    >>> (x * g_x).numpy().tolist(), direct    # 11 = 3 * 1 + 4 * 2, shared as 3 and 8
    ([[3.0, 8.0]], None)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import keras
import tensorflow as tf

from xaikit.backend.base import T
from xaikit.errors import XaikitValueError

__all__ = ["Linear", "backward", "bounds_like", "linears", "pass_grad", "stab"]


def stab(z: T, eps: float) -> T:
    """``z + eps * sign(z)`` with sign(0) = +1 (every denominator of the rules)."""
    if eps == 0.0:
        return z
    return z + tf.where(z >= 0, tf.constant(eps, z.dtype), tf.constant(-eps, z.dtype))


def _div(a: T, b: T) -> T:
    """``a / b``, 0 where ``b`` is 0 (a zero output with epsilon 0 carries no relevance)."""
    return tf.math.divide_no_nan(a, b)


#: ``|x|`` at or below which the pass rule passes nothing (``y / x`` would overflow)
TINY = 1e-12


def pass_grad(x: T, y: T, g: T) -> T:
    """The gradient of ``x`` for an element-wise layer ``y = f(x)`` that passes relevance on
    unchanged (``R_x = R_y``): ``g * y / x``, and nothing where ``|x| <= 1e-12``."""
    big = tf.abs(x) > TINY
    return tf.where(big, g * y / tf.where(big, x, tf.ones_like(x)), tf.zeros_like(g))


@dataclass(frozen=True)
class Linear:
    """One linear map of a layer: ``z = apply(x, kernel) + bias``.

    Attributes:
        apply: ``(x, kernel) -> W x``: the layer's own operation, without the bias.
        kernel: the kernel, in the computation's dtype.
        bias: the bias shaped to broadcast onto the output, or None.
        scale_shape: the shape a per-output-channel vector takes to scale the kernel (to merge a
            BatchNorm): ``(1, 1, 1, -1)`` for a Conv2D kernel, ``(1, 1, C, M)`` for a depthwise one.
        channels_first: whether the channel axis of the input and output is 1 (else the last).
    """

    apply: Callable[[T, T], T]
    kernel: T
    bias: T | None
    scale_shape: tuple[int, ...]
    channels_first: bool

    def per_channel(self, v: T, rank: int) -> T:
        """A per-channel vector shaped to broadcast onto a tensor of rank ``rank``."""
        return tf.reshape(v, (-1,) + (1,) * (rank - 2)) if self.channels_first else v

    def forward(self, x: T, kernel: T | None = None, bias: T | None = None) -> T:
        """``kernel x + bias`` (the layer's kernel when None; no bias when None)."""
        z = self.apply(x, self.kernel if kernel is None else kernel)
        return z if bias is None else z + bias

    def transpose(self, like: T, kernel: T, v: T) -> T:
        """``kernel^T v``: the vector-Jacobian product of the map at an input shaped like ``like``."""
        with tf.GradientTape() as tape:
            tape.watch(like)
            z = self.apply(like, kernel)
        return tape.gradient(z, like, output_gradients=v)

    def merged(self, a: T, c: T, rank: int) -> Linear:
        """The map followed by ``y = a * z + c`` per output channel (a BatchNorm merged in):
        kernel ``W * a``, bias ``b * a + c``."""
        kernel = self.kernel * tf.reshape(a, self.scale_shape)
        b = self.per_channel(c, rank)
        if self.bias is not None:
            b = self.bias * self.per_channel(a, rank) + b
        return replace(self, kernel=kernel, bias=b)


def bounds_like(lin: Linear, x: T, bound: T) -> T:
    """A z^B bound (a number, or one value per input channel) broadcast to ``x``'s shape."""
    bound = tf.cast(bound, x.dtype)
    if bound.shape.rank and bound.shape.rank > 0:
        bound = lin.per_channel(bound, x.shape.rank)
    return tf.broadcast_to(bound, tf.shape(x))


def backward(
    rule: Any, lin: Linear, x: T, z: T, g: T, bounds: tuple[T, T] | None = None, support: T | None = None
) -> tuple[T | None, T | None]:
    """The rule's backward through ``z = lin(x)``: ``(g_x, None)`` with ``x * g_x`` the input's
    relevance, or ``(None, R_x)`` for the rules that give the relevance itself (flat, w-square,
    z^B: ``bounds`` are z^B's low and high). ``z`` is the layer's output (the merged one when a
    BatchNorm is merged in) and ``g`` its gradient: the output's relevance is ``z * g``.
    ``support``: for those three rules, 1 where ``x`` holds the model's input and 0 where it
    holds a zero padding of it (None: 1 everywhere); the padding then counts as no input, as the
    padding a convolution does inside does not, so that no relevance lands on it."""
    kind, eps = rule.kind, rule.epsilon
    w, b = lin.kernel, lin.bias
    if kind == "gradient":
        return lin.transpose(x, w, g), None
    r = z * g
    if kind in ("epsilon", "norm"):  # norm on a layer with weights: the epsilon rule
        return lin.transpose(x, w, _div(r, stab(z, eps))), None
    inside = tf.ones_like(x) if support is None else tf.cast(support, x.dtype)
    if kind == "flat":
        ones = tf.ones_like(w)
        return None, inside * lin.transpose(x, ones, _div(r, stab(lin.forward(inside, ones), eps)))
    if kind == "wsquare":
        w2 = tf.square(w)
        denom = lin.forward(inside, w2, None if b is None else tf.square(b))
        return None, inside * lin.transpose(x, w2, _div(r, stab(denom, eps)))
    wp, wn = tf.nn.relu(w), tf.minimum(w, 0.0)
    if kind == "zbox":
        if bounds is None:
            raise XaikitValueError("zbox needs its bounds")
        low, high = bounds_like(lin, x, bounds[0]) * inside, bounds_like(lin, x, bounds[1]) * inside
        q = _div(r, stab(lin.forward(x) - lin.forward(low, wp) - lin.forward(high, wn), eps))
        relevance = (
            x * lin.transpose(x, w, q) - low * lin.transpose(x, wp, q) - high * lin.transpose(x, wn, q)
        )
        return None, relevance
    xp, xn = tf.nn.relu(x), tf.minimum(x, 0.0)
    bp = None if b is None else tf.nn.relu(b)
    bn = None if b is None else tf.minimum(b, 0.0)
    pos = x > 0
    if kind in ("zplus", "alpha_beta"):
        p = _div(r, stab(lin.forward(xp, wp, bp) + lin.forward(xn, wn), eps))
        if kind == "zplus":
            return tf.where(pos, lin.transpose(x, wp, p), lin.transpose(x, wn, p)), None
        q = _div(r, stab(lin.forward(xp, wn, bn) + lin.forward(xn, wp), eps))
        al, be = rule.alpha, rule.beta
        return tf.where(
            pos,
            al * lin.transpose(x, wp, p) - be * lin.transpose(x, wn, q),
            al * lin.transpose(x, wn, p) - be * lin.transpose(x, wp, q),
        ), None
    if kind == "gamma":
        ga = rule.gamma
        w_up, w_down = w + ga * wp, w + ga * wn
        b_up = None if b is None else b + ga * bp
        b_down = None if b is None else b + ga * bn
        p = _div(
            r * tf.cast(z > 0, r.dtype), stab(lin.forward(xp, w_up, b_up) + lin.forward(xn, w_down), eps)
        )
        n = _div(
            r * tf.cast(z < 0, r.dtype), stab(lin.forward(xp, w_down, b_down) + lin.forward(xn, w_up), eps)
        )
        return tf.where(
            pos,
            lin.transpose(x, w_up, p) + lin.transpose(x, w_down, n),
            lin.transpose(x, w_down, p) + lin.transpose(x, w_up, n),
        ), None
    raise XaikitValueError(f"rule {kind!r} is not a rule of a linear layer")


# ---- the linear maps of a Keras layer ------------------------------------------------------------
_L = keras.layers


def _tensor(v: Any, dtype: Any) -> T:
    return tf.cast(tf.convert_to_tensor(v), dtype)


def linears(layer: Any, dtype: Any) -> list[Linear]:
    """The layer's linear map(s) (a separable convolution: depthwise, then pointwise), with
    its own operation and configuration, in ``dtype``."""
    ops = keras.ops
    first = getattr(layer, "data_format", "channels_last") == "channels_first"
    bias = _tensor(layer.bias, dtype) if getattr(layer, "use_bias", False) else None
    if first and bias is not None:  # (C, 1, ..., 1) onto a (B, C, ...) output
        bias = tf.reshape(bias, (-1,) + (1,) * layer.rank)
    if isinstance(layer, _L.Dense):
        k = _tensor(layer.kernel, dtype)
        return [Linear(lambda x, w: ops.matmul(x, w), k, bias, (1, -1), False)]
    rank, strides, dil = layer.rank, layer.strides, layer.dilation_rate
    fmt, pad = layer.data_format, layer.padding
    if isinstance(layer, (_L.SeparableConv1D, _L.SeparableConv2D)):
        dk, pk = _tensor(layer.depthwise_kernel, dtype), _tensor(layer.pointwise_kernel, dtype)

        def depthwise(x: T, w: T) -> T:
            return ops.depthwise_conv(x, w, strides=strides, padding=pad, dilation_rate=dil, data_format=fmt)

        def pointwise(x: T, w: T) -> T:
            return ops.conv(x, w, strides=1, padding="valid", data_format=fmt)

        return [
            Linear(depthwise, dk, None, (1,) * rank + tuple(dk.shape[-2:]), first),
            Linear(pointwise, pk, bias, (1,) * (rank + 1) + (-1,), first),
        ]
    k = _tensor(layer.kernel, dtype)
    if isinstance(layer, (_L.DepthwiseConv1D, _L.DepthwiseConv2D)):

        def dw(x: T, w: T) -> T:
            return ops.depthwise_conv(x, w, strides=strides, padding=pad, dilation_rate=dil, data_format=fmt)

        return [Linear(dw, k, bias, (1,) * rank + tuple(k.shape[-2:]), first)]
    if isinstance(layer, (_L.Conv1DTranspose, _L.Conv2DTranspose, _L.Conv3DTranspose)):
        out_pad = layer.output_padding

        def tconv(x: T, w: T) -> T:
            return ops.conv_transpose(
                x, w, strides=strides, padding=pad, output_padding=out_pad, data_format=fmt, dilation_rate=dil
            )

        return [Linear(tconv, k, bias, (1,) * rank + (-1, 1), first)]
    if pad == "causal":  # Conv1D: left padding, then a valid convolution
        causal = layer._compute_causal_padding()

        def conv(x: T, w: T) -> T:
            return ops.conv(
                ops.pad(x, causal), w, strides=strides, padding="valid", dilation_rate=dil, data_format=fmt
            )

        return [Linear(conv, k, bias, (1,) * (rank + 1) + (-1,), first)]
    return [Linear(layer.convolution_op, k, bias, (1,) * (rank + 1) + (-1,), first)]
