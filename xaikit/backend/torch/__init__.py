"""The PyTorch backend: ``core.py`` (tensors, the gradient step) and the facets ``train.py``,
``eval.py``, ``inspect.py`` and ``layers.py``, loaded when first used. Imported only by
:func:`xaikit.backend.load_backend`, after torch is known to be installed."""

from __future__ import annotations

from xaikit.backend.torch.core import TorchBackend

__all__ = ["TorchBackend"]
