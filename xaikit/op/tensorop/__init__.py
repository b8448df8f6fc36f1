"""Network ops (framework tensors, inside the network's step).

Example:
    >>> from xaikit.op.tensorop import CrossEntropy
    >>> CrossEntropy(inputs=("y_pred", "y"), outputs="ce", average_loss=False).inputs
    ['y_pred', 'y']
"""

from __future__ import annotations

from xaikit.op.tensorop.tensorop import CrossEntropy, LambdaOp, ModelOp, TensorOp, UpdateOp

__all__ = ["CrossEntropy", "LambdaOp", "ModelOp", "TensorOp", "UpdateOp"]
