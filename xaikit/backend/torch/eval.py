"""PyTorch evaluation facet (``get_backend(model).eval``): exact weight snapshots, re-drawing a
layer's weights, and the masked blend of perturbation curves.

Loaded the first time ``xaikit.evaluate`` needs it (never at ``import xaikit`` time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xaikit.backend.base import T
from xaikit.backend.facets import EvalFacet, redraw
from xaikit.backend.torch.layers import weighted_layers


class Eval(EvalFacet):
    """The evaluation facet of the torch backend."""

    weighted_layers = staticmethod(weighted_layers)

    @staticmethod
    def snapshot(model: Any) -> list[tuple[Any, Any]]:
        """Exact copies of every parameter and buffer (bit-identical restore with :func:`restore`)."""
        if not isinstance(model, torch.nn.Module):
            return []
        tensors = list(model.parameters()) + [b for b in model.buffers() if b is not None]
        seen: set[int] = set()
        out = []
        for t in tensors:
            if id(t) in seen:
                continue
            seen.add(id(t))
            out.append((t, t.detach().clone()))
        return out

    @staticmethod
    def restore(saved: list[tuple[Any, Any]]) -> None:
        """Write the saved values back into the same tensors (in place, bit for bit)."""
        with torch.no_grad():
            for t, value in saved:
                t.copy_(value)

    @staticmethod
    def randomize(layer: Any, rng: np.random.Generator) -> list[str]:
        """:func:`~xaikit.backend.facets.redraw` of the layer's own parameters (``torch.no_grad``)."""
        params = list(layer.named_parameters(recurse=False))
        values = redraw([p.detach().cpu().double().numpy() for _, p in params], rng)
        with torch.no_grad():
            for (_, p), a in zip(params, values):
                p.copy_(torch.as_tensor(a, dtype=p.dtype, device=p.device))
        return [name for name, _ in params]

    @staticmethod
    def blend(x: T, base: T, rank: T, threshold: T, insert: bool) -> T:
        """Rows where positions with ``rank < threshold`` take the baseline (deletion) or the input
        (insertion, the rest being the baseline); exact values, no arithmetic blending."""
        mask = rank < threshold
        return torch.where(mask, x, base) if insert else torch.where(mask, base, x)

    @staticmethod
    def absorb_shift(model: Any, shift: float, run: Any) -> str:
        """:func:`xaikit.backend.torch.shift.absorb_shift` (the first layer called by ``run()``)."""
        from xaikit.backend.torch.shift import absorb_shift

        return absorb_shift(model, shift, run)
