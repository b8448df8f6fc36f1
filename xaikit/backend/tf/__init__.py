"""The TensorFlow / Keras backend: ``core.py`` (tensors, the gradient step) and the facets
``train.py``, ``eval.py``, ``inspect.py`` and ``layers.py``, loaded when first used. Imported only
by :func:`xaikit.backend.load_backend`, after TensorFlow is known to be installed."""

from __future__ import annotations

from xaikit.backend.tf.core import TFBackend

__all__ = ["TFBackend"]
