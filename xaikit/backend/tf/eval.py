"""TensorFlow / Keras evaluation facet (``get_backend(model).eval``): exact weight snapshots,
re-drawing a layer's weights, and the masked blend of perturbation curves.

Loaded the first time ``xaikit.evaluate`` needs it (never at ``import xaikit`` time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from xaikit.backend.base import T
from xaikit.backend.facets import EvalFacet, redraw
from xaikit.backend.tf.layers import weighted_layers


def _variables(model: Any) -> list[Any]:
    found = getattr(model, "weights", None)
    if found is None:
        found = getattr(model, "variables", None) or []
    return list(found)


class Eval(EvalFacet):
    """The evaluation facet of the TensorFlow backend."""

    weighted_layers = staticmethod(weighted_layers)

    @staticmethod
    def snapshot(model: Any) -> list[tuple[Any, np.ndarray]]:
        """Exact copies of every variable of the model (trainable or not)."""
        seen: set[int] = set()
        out = []
        for v in _variables(model):
            if id(v) in seen:
                continue
            seen.add(id(v))
            out.append((v, np.array(v.numpy(), copy=True)))
        return out

    @staticmethod
    def restore(saved: list[tuple[Any, np.ndarray]]) -> None:
        """Assign the saved values back to the same variables (bit for bit)."""
        for v, value in saved:
            v.assign(value)

    @staticmethod
    def randomize(layer: Any, rng: np.random.Generator) -> list[str]:
        """:func:`~xaikit.backend.facets.redraw` of the layer's trainable variables (``assign``)."""
        weights = list(layer.trainable_weights)
        values = redraw([np.asarray(v.numpy(), dtype=np.float64) for v in weights], rng)
        for v, a in zip(weights, values):
            v.assign(a.astype(str(getattr(v.dtype, "name", v.dtype))))
        return [str(getattr(v, "path", None) or v.name) for v in weights]

    @staticmethod
    def blend(x: T, base: T, rank: T, threshold: T, insert: bool) -> T:
        """Rows where positions with ``rank < threshold`` take the baseline (deletion) or the input
        (insertion, the rest being the baseline); exact values, no arithmetic blending."""
        mask = tf.broadcast_to(rank < threshold, tf.shape(x))
        return tf.where(mask, x, base) if insert else tf.where(mask, base, x)

    @staticmethod
    def absorb_shift(model: Any, shift: float, run: Any) -> str:
        """:func:`xaikit.backend.tf.shift.absorb_shift` (the first of ``model.layers``; ``run`` unused)."""
        from xaikit.backend.tf.shift import absorb_shift

        return absorb_shift(model, shift)
