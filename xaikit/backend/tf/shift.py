"""Input invariance (Kindermans et al., 2017) on a Keras model: the first layer's bias absorbs a
constant shift of the input, so that ``f'(x + m) = f(x)``. The caller snapshots and restores the
weights (:meth:`~xaikit.backend.facets.EvalFacet.snapshot`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from xaikit.errors import XaikitTypeError, XaikitValueError

keras = tf.keras
#: layers before the first one that pass their input on unchanged (up to its shape)
_PASS_THROUGH = tuple(
    getattr(keras.layers, n)
    for n in ("InputLayer", "Flatten", "Reshape", "Dropout", "Identity")
    if hasattr(keras.layers, n)
)
#: the layers whose bias can absorb a constant shift of their whole input
_SHIFTABLE = (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
_TRANSPOSED = tuple(
    getattr(keras.layers, n) for n in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")
)


def first_layer(model: Any) -> Any:
    """The model's first layer past the layers of :data:`_PASS_THROUGH`."""
    layers = getattr(model, "layers", None)
    if layers is None:
        raise XaikitTypeError(
            f"input_invariance shifts the first layer's bias: model must be a Keras model (or a "
            f"torch.nn.Module); got {type(model).__name__}"
        )
    for layer in layers:
        if not isinstance(layer, _PASS_THROUGH):
            return layer
    raise XaikitValueError("input_invariance needs a model with a dense or convolution layer; found none")


def absorb_shift(model: Any, shift: float) -> str:
    """Subtract the response of the model's first layer to an input of ``shift`` everywhere from
    its bias (``b <- b - W m``, computed in float64); returns the layer's name. A first layer that
    is not ``Dense`` / ``Conv1D-3D`` with a bias, or a convolution with ``padding="same"`` or
    ``"causal"`` (zeros at the border, which no bias can absorb), is refused by name."""
    layer = first_layer(model)
    name, kind = layer.name, type(layer).__name__
    if not isinstance(layer, _SHIFTABLE) or isinstance(layer, _TRANSPOSED):
        raise XaikitValueError(
            f"input_invariance needs a model whose first layer is a dense (Dense) or convolution "
            f"(Conv1D/2D/3D) layer with a bias, to absorb the input shift; its first layer {name!r} is a {kind}"
        )
    if not layer.use_bias:
        raise XaikitValueError(
            f"input_invariance needs a bias in the model's first layer {name!r} ({kind}, use_bias=False) to "
            "absorb the input shift; give the layer a bias"
        )
    padding = getattr(layer, "padding", "valid")
    if padding != "valid":
        raise XaikitValueError(
            f"input_invariance: the model's first layer {name!r} ({kind}) pads its input with zeros "
            f"(padding={padding!r}), so its border outputs see only part of a shifted input and no bias "
            "can absorb the shift; use padding='valid'"
        )
    kernel = np.asarray(layer.kernel.numpy(), dtype=np.float64)  # (..., in, out)
    response = float(shift) * kernel.sum(axis=tuple(range(kernel.ndim - 1)))
    bias = layer.bias
    bias.assign((np.asarray(bias.numpy(), dtype=np.float64) - response).astype(bias.numpy().dtype))
    return str(name)
