"""The torch functions that compute a nonlinearity, as a ``TorchFunctionMode`` sees them: the
ReLUs that guided backprop and deconvnet modify (:mod:`xaikit.backend.torch.relevance`) and
that DeepLIFT rescales (:mod:`xaikit.backend.torch.deeplift`, with the other activations)."""

from __future__ import annotations

import torch

__all__ = ["RELUS"]

#: the functions that compute a ReLU (out of place and in place; an ``nn.ReLU`` module calls
#: ``F.relu``; the aten ops: what the module of a torch.export program calls)
RELUS = (
    torch.relu, torch.relu_, torch.nn.functional.relu, torch.Tensor.relu, torch.Tensor.relu_,
    torch.ops.aten.relu.default, torch.ops.aten.relu_.default,
)  # fmt: skip
