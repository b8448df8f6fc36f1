"""Which LRP rule each layer of a Keras model gets (:class:`Assignment`), the layer kinds of
:data:`xaikit.xai.rules.spec.KINDS` as Keras layer classes, and the BatchNorms that the
canonizer merges (:func:`merge_pairs`): read from the model's graph, before anything runs.

Example:
    >>> import keras
    >>> from xaikit.xai.rules.spec import composite
    >>> m = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3, name="c"),
    ...                       keras.layers.BatchNormalization(name="bn"), keras.layers.Flatten(),
    ...                       keras.layers.Dense(2, name="fc")])
    >>> plan = Assignment(m, composite("epsilon_plus_flat"))
    >>> [plan.rules[id(m.get_layer(n))].kind for n in ("c", "fc")], len(plan.pairs)
    (['flat', 'epsilon'], 1)
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import keras

from xaikit.backend.facets import LRP_ALLOWED as ALLOWED
from xaikit.backend.tf.cam import _call_attr
from xaikit.backend.tf.forms import refuse_layerless
from xaikit.backend.tf.layers import all_layers, sublayers
from xaikit.errors import XaikitValueError

__all__ = [
    "ALLOWED",
    "Assignment",
    "composite_key",
    "is_linear",
    "kind_of",
    "kind_rule",
    "merge_pairs",
    "zbox_slots",
]

_L = keras.layers
#: the layer classes of each kind of :data:`xaikit.xai.rules.spec.KINDS`
_CONV = (
    _L.Conv1D, _L.Conv2D, _L.Conv3D, _L.Conv1DTranspose, _L.Conv2DTranspose, _L.Conv3DTranspose,
    _L.DepthwiseConv1D, _L.DepthwiseConv2D, _L.SeparableConv1D, _L.SeparableConv2D,
)  # fmt: skip
_CLASSES: dict[str, tuple[type, ...]] = {
    "conv": _CONV,
    "dense": (_L.Dense,),
    "avgpool": (
        _L.AveragePooling1D, _L.AveragePooling2D, _L.AveragePooling3D,
        _L.GlobalAveragePooling1D, _L.GlobalAveragePooling2D, _L.GlobalAveragePooling3D,
    ),
    "maxpool": (
        _L.MaxPooling1D, _L.MaxPooling2D, _L.MaxPooling3D,
        _L.GlobalMaxPooling1D, _L.GlobalMaxPooling2D, _L.GlobalMaxPooling3D,
    ),
    "batchnorm": (_L.BatchNormalization,),
    "activation": (_L.Activation, _L.ReLU, _L.LeakyReLU, _L.PReLU, _L.ELU, _L.Softmax),
}  # fmt: skip


def kind_of(layer: Any) -> str | None:
    """The layer's kind (``"conv"``, ``"dense"``, ``"avgpool"``, ``"maxpool"``,
    ``"batchnorm"``, ``"activation"``), or None."""
    for kind, classes in _CLASSES.items():
        if isinstance(layer, classes):
            return kind
    return None


# ---- which rule each layer gets ----------------------------------------------------------------
class Assignment:
    """The rules of a model's layers under a composite: ``rules[id(layer)]`` (the rule of a
    separable convolution's pointwise part in ``pointwise``), checked before anything runs."""

    def __init__(self, model: Any, comp: Any) -> None:
        refuse_layerless(model, "LRP", "each layer gets a rule")
        self.layers = all_layers(model)
        leaves = [la for la in self.layers if not sublayers(la)]
        names = {str(la.name) for la in leaves}
        unknown = sorted(set(comp.names) - names)
        if unknown:
            raise XaikitValueError(
                f"composite names {unknown} match no layer of the model; names are Keras layer names, "
                f"e.g. {sorted(names)[:6]}"
            )
        weighted = [la for la in leaves if kind_of(la) in ("conv", "dense")]
        first = weighted[0] if weighted else None
        self.rules: dict[int, Any] = {}
        self.pointwise: dict[int, Any] = {}
        self.slots: dict[int, str | None] = {}
        self.kinds: dict[int, str | None] = {}
        for la in leaves:
            kind, name = kind_of(la), str(la.name)
            rule = comp.rule_for(name, kind, la is first)
            if rule.kind not in ALLOWED[kind] and not (kind == "batchnorm" and comp.canonize):
                # (a BatchNorm's own rule counts only where it is not merged: checked as it runs)
                what = f"a {type(la).__name__} layer" + ("" if kind else " (no LRP rule of its own)")
                raise XaikitValueError(
                    f"layer {name!r} ({what}) cannot take the {rule.kind!r} rule; it takes "
                    f"{list(ALLOWED[kind])}: change the composite's rule for it"
                )
            if kind in ("conv", "dense") and rule.kind != "gradient" and _call_attr(la) != "call":
                raise XaikitValueError(
                    f"layer {name!r} is quantized ({la.quantization_mode}): LRP rules need float weights; "
                    "explain the float model"
                )
            self.rules[id(la)], self.kinds[id(la)] = rule, kind
            self.slots[id(la)] = _slot(comp, name, kind, la is first)
            if isinstance(la, (_L.SeparableConv1D, _L.SeparableConv2D)):
                self.pointwise[id(la)] = comp.rule_for(name, kind, False)
        self.fused = kind_rule(comp, "activation")
        self.gradient = kind_rule(comp, None)
        self.pairs = merge_pairs(model) if comp.canonize else set()


def kind_rule(comp: Any, kind: str | None) -> Any:
    """The rule of a kind, whatever a layer's name (for a fused activation)."""
    return comp.rule_for("", kind, False)


def _slot(comp: Any, name: str, kind: str | None, first: bool) -> str | None:
    """Where ``comp.rule_for`` found a layer's rule (the key of a z^B rule's bounds)."""
    if name in comp.names:
        return f"names/{name}"
    if first and kind in comp.first:
        return f"first/{kind}"
    if kind in comp.layers:
        return f"layers/{kind}"
    return None


def zbox_slots(comp: Any) -> dict[str, Any]:
    """Every z^B rule of a composite, by slot."""
    out = {}
    for where, table in (("names", comp.names), ("first", comp.first), ("layers", comp.layers)):
        for key, rule in table.items():
            if rule.kind == "zbox":
                out[f"{where}/{key}"] = rule
    return out


def composite_key(comp: Any) -> tuple[Any, ...]:
    """A hashable key of a composite, its z^B bounds left out (they are arguments of the step)."""

    def table(rules: Any) -> tuple[Any, ...]:
        return tuple(
            sorted(
                (k, r.kind, r.epsilon, r.gamma, r.alpha, r.beta, _shape(r.low), _shape(r.high))
                for k, r in rules.items()
            )
        )

    return (table(comp.layers), table(comp.first), table(comp.names), comp.canonize)


def _shape(bound: Any) -> Any:
    return None if bound is None else (len(bound) if isinstance(bound, tuple) else ())


# ---- BatchNorm pairs -----------------------------------------------------------------------------
def _mergeable(layer: Any) -> bool:
    act = getattr(layer, "activation", None)
    return kind_of(layer) in ("conv", "dense") and (act is None or is_linear(act))


def is_linear(fn: Any) -> bool:
    return fn is None or getattr(fn, "__name__", "") == "linear"


def merge_pairs(model: Any) -> set[tuple[int, int]]:
    """``(id(layer), id(batchnorm))`` for every BatchNorm that normalizes the output of a
    convolution or dense layer (without an activation) that feeds nothing else: neighbours in a
    Sequential model, or a single-consumer edge of a Functional graph (nested models walked)."""
    pairs: set[tuple[int, int]] = set()
    for m in [model, *all_layers(model)]:
        if isinstance(m, keras.Sequential):
            subs = sublayers(m)
            for a, b in itertools.pairwise(subs):
                if isinstance(b, _L.BatchNormalization) and _mergeable(a):
                    pairs.add((id(a), id(b)))
        elif hasattr(m, "_nodes_by_depth"):
            nodes = [n for level in m._nodes_by_depth.values() for n in level]
            uses: Counter[int] = Counter(id(t) for n in nodes for t in n.input_tensors)
            uses.update(id(t) for t in m.outputs)
            made = {id(t): n.operation for n in nodes for t in n.outputs}
            for n in nodes:
                ins = n.input_tensors
                if isinstance(n.operation, _L.BatchNormalization) and len(ins) == 1 and uses[id(ins[0])] == 1:
                    src = made.get(id(ins[0]))
                    if src is not None and _mergeable(src):
                        pairs.add((id(src), id(n.operation)))
    return pairs
