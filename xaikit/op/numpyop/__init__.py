"""Pipeline ops (numpy, applied to whole batches with per-sample randomness).

Example:
    >>> import numpy as np
    >>> from xaikit.op.numpyop import Minmax
    >>> Minmax(inputs="x", outputs="x").forward_batch([np.array([[0, 5, 10]])], None)[0].tolist()
    [[0.0, 0.5, 1.0]]
"""

from __future__ import annotations

from xaikit.op.numpyop.multivariate import HorizontalFlip, PadIfNeeded, RandomCrop
from xaikit.op.numpyop.numpyop import LambdaOp, NumpyOp, Sometimes
from xaikit.op.numpyop.univariate import CoarseDropout, ExpandDims, Minmax, Normalize

__all__ = [
    "CoarseDropout",
    "ExpandDims",
    "HorizontalFlip",
    "LambdaOp",
    "Minmax",
    "Normalize",
    "NumpyOp",
    "PadIfNeeded",
    "RandomCrop",
    "Sometimes",
]
