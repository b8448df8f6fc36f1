"""Explanations by name: the gradient family (vanilla, SmoothGrad, IG, SmInt, VarGrad,
Input x Gradient, Expected Gradients, Blur IG, Guided IG, XRAI), class-activation maps and
perturbation methods; ``SaliencyNet`` for the batch-dict API; ``explain_dataset`` for a whole
dataset into a resumable Zarr store. Fused, seeded and exact.

Every method is one record (:class:`Method`, :mod:`xaikit.xai.registry`); ``METHODS`` names
them all, and :func:`register_method` adds one of your own to ``explain``, the traces,
``explain_dataset``, ``xk.evaluate`` and the CLI.

Example:
    >>> import torch, xaikit as xk
    >>> model = torch.nn.Linear(4, 3)
    >>> attr = xk.xai.explain(model, torch.rand(2, 4), method="integrated", nsamples=16, baseline="zeros")
    >>> attr.shape
    (2, 4)
    >>> "gradcam" in xk.xai.METHODS
    True
"""

from typing import Any

# the family packages register the built-in methods' records when imported
from xaikit.xai import agnostic, cam, gradient, perturbation, rules, transformer  # noqa: F401
from xaikit.xai.dataset import DatasetExplanation, ModelSpec, StoreLockedError, explain_dataset
from xaikit.xai.explain import explain
from xaikit.xai.net import SaliencyNet
from xaikit.xai.registry import (
    Call,
    CallSettings,
    Explained,
    Method,
    get_method,
    method_names,
    register_method,
    unregister_method,
)

__all__ = [
    "METHODS",
    "Call",
    "CallSettings",
    "DatasetExplanation",
    "Explained",
    "Method",
    "ModelSpec",
    "SaliencyNet",
    "StoreLockedError",
    "explain",
    "explain_dataset",
    "get_method",
    "register_method",
    "unregister_method",
]


def __getattr__(name: str) -> Any:
    if name == "METHODS":  # every registered method, a methods registered later included
        return method_names()
    raise AttributeError(f"module 'xaikit.xai' has no attribute {name!r}")
