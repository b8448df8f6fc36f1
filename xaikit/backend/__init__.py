"""Framework backends and framework-neutral tensor helpers.

This is the only package of xaikit that imports PyTorch or TensorFlow, and it does so lazily:
a backend is created the first time a value of its framework is seen, so ``import xaikit``
loads neither framework.

One object per framework, ``get_backend(model_or_tensor)``, holds everything xaikit does with
that framework: its core (tensor operations and the fused gradient step of the saliency engine)
and lazily loaded facets: ``bk.train`` (optimizers, weights, the training step), ``bk.eval``
(weight snapshots and re-drawing for ``xaikit.evaluate``), ``bk.inspector(model)`` (hooks for
``xaikit.inspect``), ``bk.seed(n)``, ``bk.limit_threads(n)`` and ``bk.model_layout(model)``.
Each framework's code is a package: ``backend/torch/`` and ``backend/tf/``, one file per facet.

Public helpers that work on numpy arrays, torch tensors and TF tensors alike:
:func:`to_tensor`, :func:`to_number`, :func:`squeeze`, :func:`reduce_mean`.

Example:
    >>> import numpy as np
    >>> from xaikit.backend import to_number, reduce_mean, squeeze
    >>> to_number([1, 2, 3]).tolist()
    [1, 2, 3]
    >>> float(reduce_mean(np.array([1.0, 2.0, 6.0])))
    3.0
    >>> squeeze(np.zeros((1, 3, 1))).shape
    (3,)
"""

from __future__ import annotations

from xaikit.backend.base import Backend, T
from xaikit.backend.ops import reduce_mean, squeeze, to_number, to_tensor
from xaikit.backend.registry import framework_of, get_backend, load_backend, prefers_channel_first
from xaikit.backend.rows import Rows

__all__ = [
    "Backend",
    "Rows",
    "T",
    "framework_of",
    "get_backend",
    "load_backend",
    "prefers_channel_first",
    "reduce_mean",
    "squeeze",
    "to_number",
    "to_tensor",
]
