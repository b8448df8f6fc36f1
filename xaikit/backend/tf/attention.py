"""Keras attention facet (``get_backend(model).attention``): the attention probabilities of
every ``keras.layers.MultiHeadAttention`` layer of a model (functional or subclassed, nested
models and layers included), read in one eager pass.

For the pass, each such layer instance's ``_compute_attention`` (Keras 3: returns
``(attention_output, attention_scores)``) is wrapped by an instance attribute that calls the
class's method with ``return_attention_scores=True`` (so the explicit softmax path runs, not the
fused kernel that returns no probabilities) and records the scores: the probabilities after the
softmax, before dropout (off at inference), which the layer multiplies its values by. The
wrappers are removed in a ``finally`` block, so the model is left as it was, also when the
call raises. Blocks are in call order. Their gradients come from one ``GradientTape`` of the
summed target scores: no variable is changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from xaikit.backend.facets import AttentionFacet, Attentions
from xaikit.backend.outputs import as_matrix
from xaikit.backend.rows import Rows
from xaikit.backend.tf.layers import all_layers
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

#: the methods named in refusals
_METHODS = "the attention methods (attention_rollout, transformer_attribution)"
#: the wrapped method of ``MultiHeadAttention`` (Keras 3)
_METHOD = "_compute_attention"
_MISSING = object()


def attention_layers(model: Any) -> list[Any]:
    """Every ``MultiHeadAttention`` layer of ``model`` (nested models and layers), each once."""
    import keras

    flatten = getattr(model, "_flatten_layers", None)
    found = list(flatten(include_self=False, recursive=True)) if callable(flatten) else all_layers(model)
    out: list[Any] = []
    for layer in found:
        if isinstance(layer, keras.layers.MultiHeadAttention) and all(layer is not o for o in out):
            out.append(layer)
    return out


@contextmanager
def recording(layers: Sequence[Any]) -> Iterator[list[Any]]:
    """Within the block, every call of ``layers`` appends ``(layer name, attention
    probabilities)`` (B, heads, N, N) to the yielded list; each layer's own attributes are
    restored on exit."""
    seen: list[Any] = []
    saved: list[tuple[Any, Any]] = []

    def wrap(layer: Any) -> Callable[..., Any]:
        original = getattr(layer, _METHOD)  # bound: the class's or an instance override

        def compute(
            query: Any, key: Any, value: Any, attention_mask: Any = None, training: Any = None,
            return_attention_scores: bool = False, **kw: Any,
        ) -> Any:  # fmt: skip
            out, scores = original(query, key, value, attention_mask, training, True, **kw)
            seen.append((layer.name, scores))
            return out, scores

        return compute

    try:
        for layer in layers:
            saved.append((layer, layer.__dict__.get(_METHOD, _MISSING)))
            layer.__dict__[_METHOD] = wrap(layer)
        yield seen
    finally:
        for layer, before in reversed(saved):
            if before is _MISSING:
                layer.__dict__.pop(_METHOD, None)
            else:
                layer.__dict__[_METHOD] = before


class Attention(AttentionFacet):
    """The attention facet of the Keras backend."""

    def attentions(self, rows: Rows, gradients: bool) -> Attentions:
        model, inputs, targets, target = rows.model, rows.inputs, rows.targets, rows.target
        tf = self.bk.tf
        layers = attention_layers(model)
        if not layers:
            raise XaikitTypeError(
                f"model: {_METHODS} read the attention probabilities of the model's "
                f"keras.layers.MultiHeadAttention layers; {describe(model)} has none. Use a Keras vision "
                "transformer built on MultiHeadAttention (xaikit.architecture.tensorflow.vit), or a CAM "
                "method with a token layer (gradcam, layer=...)"
            )
        grads = None
        # the tape records every op downstream of the inputs and the variables the pass reads, so
        # the recorded probabilities are on it (no variable's value or gradient is touched)
        with tf.GradientTape() as tape, recording(layers) as seen:
            for x in inputs:
                if x.dtype.is_floating:
                    tape.watch(x)
            raw = self.bk._call(model, list(inputs), rows.model_kwargs)
            if gradients:
                if target is not None:
                    scores = target.scores(self.bk, raw, targets)
                else:
                    out = as_matrix(self.bk.selected(raw, rows.output, int(inputs[0].shape[0])))
                    scores = tf.gather(out, targets, axis=1, batch_dims=1)
                total = tf.reduce_sum(scores)
        names, atts = [n for n, _ in seen], [a for _, a in seen]
        if not atts or any(not hasattr(a, "numpy") for a in atts):
            raise XaikitValueError(
                f"model: {_METHODS} read the attention probabilities of each MultiHeadAttention call in "
                f"an eager pass; {'no call was seen' if not atts else 'the calls ran in a graph'} (the "
                "model's call runs inside a tf.function, or its MultiHeadAttention layers are not called). "
                "Call the model eagerly (no @tf.function on its call)"
            )
        if any(len(a.shape) != 4 for a in atts):
            raise XaikitValueError(
                f"model: {_METHODS} need the per-block attention probabilities (B, heads, N, N) of its "
                f"MultiHeadAttention layers; they have shapes {[tuple(a.shape) for a in atts]} "
                "(attention over several axes, attention_axes=..., is not read)"
            )
        if gradients:
            grads = tape.gradient(total, atts)
            if any(g is None for g in grads):
                raise XaikitValueError(
                    f"model: the target scores do not depend on every MultiHeadAttention call's "
                    f"attention (a block after the class token was read?); {_METHODS} need each "
                    "block on the path"
                )
        return self._host(atts, grads, names)
