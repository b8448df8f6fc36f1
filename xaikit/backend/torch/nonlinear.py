"""The torch functions that compute a nonlinearity, as a ``TorchFunctionMode`` sees them (an
``nn`` module calls them too: ``nn.ReLU`` calls ``F.relu``, ``nn.MaxPool2d`` calls
``F.max_pool2d``; the module of a ``torch.export`` program calls the aten ops): the ReLUs that
guided backprop and deconvnet modify (:mod:`xaikit.backend.torch.relevance`), and the
elementwise nonlinearities (clamps and thresholds included) and maxima that DeepLIFT rescales
(:mod:`xaikit.backend.torch.deeplift`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BOUNDED", "ELEMENTWISE", "IN_PLACE", "MAXES", "RELUS"]

F = torch.nn.functional


def _fns(where: Any, *names: str) -> list[Any]:
    """The functions of ``where`` with these names that this torch has."""
    return [getattr(where, n) for n in names if hasattr(where, n)]


def _aten(*names: str) -> list[Any]:
    """The default overloads of these aten ops that this torch has."""
    found = []
    for name in names:
        try:
            found.append(getattr(torch.ops.aten, name).default)
        except (AttributeError, RuntimeError):
            continue
    return found


#: the functions that compute a ReLU (out of place and in place)
RELUS = (
    torch.relu, torch.relu_, F.relu, torch.Tensor.relu, torch.Tensor.relu_,
    torch.ops.aten.relu.default, torch.ops.aten.relu_.default,
)  # fmt: skip

_ACTIVATIONS = (
    "sigmoid", "tanh", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "gelu", "silu", "mish",
    "hardswish", "hardsigmoid", "softplus", "softsign", "logsigmoid", "prelu", "rrelu",
)  # fmt: skip
#: elementwise nonlinearities computed out of place
ELEMENTWISE = (
    *RELUS,  # the in-place ones are computed out of place and written back (IN_PLACE)
    *_fns(torch, "sigmoid", "tanh", "exp", "prelu", "selu", "celu", "rrelu", "threshold"),
    *_fns(torch.Tensor, "sigmoid", "tanh", "exp"),
    *_fns(F, *_ACTIVATIONS, "threshold"),
    *_fns(torch.special, "expit"),
    *_aten("sigmoid", "tanh", "exp", "gelu", "silu", "elu", "selu", "celu", "leaky_relu", "hardtanh", "softplus",
           "mish", "hardswish", "hardsigmoid", "prelu", "_prelu_kernel", "threshold"),
)  # fmt: skip
_BOUNDS = ("clamp", "clip", "clamp_min", "clamp_max")
#: elementwise in their first argument while the others are held fixed: ``clamp`` / ``clip``
#: (a ReLU written ``z.clamp(min=0)``) and a maximum or minimum with a second tensor
#: (``torch.maximum(z, zero)``); DeepLIFT rescales them only where no other argument is a
#: tensor of the explained rows (a bound that depends on the input keeps the plain gradient)
BOUNDED = (
    *_fns(torch, *_BOUNDS, "maximum", "minimum", "fmax", "fmin"),
    *_fns(torch.Tensor, *_BOUNDS, "maximum", "minimum", "fmax", "fmin"),
    *_aten(*_BOUNDS, "maximum", "minimum", "fmax", "fmin"),
)  # fmt: skip


def _in_place(where: Any, names: tuple[str, ...], twin_of: Any) -> list[tuple[Any, Any]]:
    return [(getattr(where, f"{n}_"), twin_of(n)) for n in names if hasattr(where, f"{n}_")]


#: in-place elementwise nonlinearities, each with the out-of-place function it computes
IN_PLACE: dict[Any, Any] = dict(
    [
        *_in_place(
            torch,
            ("relu", "sigmoid", "tanh", "exp", "selu", "celu", "threshold", *_BOUNDS),
            lambda n: getattr(torch, n),
        ),
        *_in_place(torch.Tensor, ("relu", "sigmoid", "tanh", "exp", *_BOUNDS), lambda n: getattr(torch, n)),
        *_in_place(
            F,
            ("relu", "elu", "selu", "celu", "leaky_relu", "hardtanh", "rrelu", "threshold"),
            lambda n: getattr(F, n),
        ),
        *[
            (op[0], twin[0])
            for n in ("relu", "sigmoid", "tanh", "threshold", *_BOUNDS)
            for op, twin in [(_aten(f"{n}_"), _aten(n))]
            if op and twin
        ],
    ]
)
#: maxima over windows or dimensions (the DeepLIFT rule applies where they keep the batch axis)
MAXES = (
    *_fns(
        F, "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
        "max_pool3d_with_indices", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
        "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
    ),
    *_fns(torch, "max_pool1d", "max_pool2d", "max_pool3d", "amax", "max"),
    *_fns(torch.Tensor, "amax", "max"),
    *_aten("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "amax"),
)  # fmt: skip
