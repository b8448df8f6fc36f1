"""Explanations by name: the gradient family (vanilla, SmoothGrad, IG, SmInt, VarGrad,
Input x Gradient, Expected Gradients, Blur IG, Guided IG, XRAI), class-activation maps and
perturbation methods; ``SaliencyNet`` for the batch-dict API; ``explain_dataset`` for a whole
dataset into a resumable Zarr store. Fused, seeded and exact.

Example:
    >>> import torch, xaikit as xk
    >>> model = torch.nn.Linear(4, 3)
    >>> attr = xk.xai.explain(model, torch.rand(2, 4), method="integrated", nsamples=16, baseline="zeros")
    >>> attr.shape
    (2, 4)
"""

from xaikit.xai.dataset import DatasetExplanation, ModelSpec, StoreLockedError, explain_dataset
from xaikit.xai.methods import METHODS
from xaikit.xai.saliency import SaliencyNet, explain

__all__ = [
    "METHODS",
    "DatasetExplanation",
    "ModelSpec",
    "SaliencyNet",
    "StoreLockedError",
    "explain",
    "explain_dataset",
]
