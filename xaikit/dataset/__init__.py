"""Datasets: :class:`NumpyDataset` and the bundled data in :mod:`xaikit.dataset.data`.

Example:
    >>> import numpy as np
    >>> from xaikit.dataset import NumpyDataset
    >>> len(NumpyDataset({"x": np.zeros((4, 2))}))
    4
"""

from __future__ import annotations

from xaikit.dataset import data
from xaikit.dataset.numpy_dataset import NumpyDataset

__all__ = ["NumpyDataset", "data"]
