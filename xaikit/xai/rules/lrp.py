"""Layer-wise relevance propagation (Bach et al., 2015, https://doi.org/10.1371/journal.pone.0130140;
Montavon et al., 2019, https://doi.org/10.1007/978-3-030-28954-6_10): the target score
redistributed layer by layer down to the input by the rules a composite assigns
(:mod:`xaikit.xai.rules.spec`), in one modified backward pass per chunk of rows
(``bk.relevance.lrp_step``).

``"lrp"`` takes a named composite (``composite="epsilon_plus_flat"`` by default) or a
:class:`~xaikit.xai.rules.spec.Composite`; ``"lrp_epsilon"`` is the epsilon rule on every
convolution and dense layer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.backend import Rows
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai.cam.maps import per_input
from xaikit.xai.registry import Call, CallSettings, Explained, Method, flag, non_negative, register_method
from xaikit.xai.rules.spec import COMPOSITES, Composite, composite

__all__ = ["relevance", "run_lrp", "run_lrp_epsilon"]


def _bound(inp: Inputs, value: Any, low: bool) -> Any:
    """The z^B rule's bound: as given, or the batch's lowest / highest input value (the whole
    batch, so that every chunk uses the same bound)."""
    if value is not None:
        return value
    bk = inp.bk
    t = inp.tensors[0]
    found = bk.to_numpy(bk.sample_min(t) if low else bk.sample_max(t))
    return float(np.min(found) if low else np.max(found))


def relevance(inp: Inputs, targets: Any, comp: Composite, settings: CallSettings) -> list[np.ndarray]:
    """LRP relevance of each input (B, ...) in the model's layout, chunked like the other methods
    (the settings' ``max_batch``); the settings' ``target``: a bound target object (``targets``
    then sample indices) whose score is relevance's start."""
    bk, output, target = inp.bk, settings.output, settings.target

    def step(rows: list[Any], tg: Any, kw: dict[str, Any] | None) -> list[Any]:
        rel, _ = bk.relevance.lrp_step(Rows(inp.model, rows, tg, output, kw, target), comp)
        return rel

    return per_input(inp, targets, settings.max_batch, step)


def _check(options: dict[str, Any]) -> None:
    value = options.get("composite")
    if value is not None and not isinstance(value, (str, Composite)):
        raise XaikitTypeError(f"composite must be one of {COMPOSITES} or a Composite; got {describe(value)}")
    if isinstance(value, str):
        composite(value, low=0.0, high=1.0)  # an unknown name is refused before any model runs
    flag(options.get("canonize"), "canonize")
    for key in ("epsilon", "gamma"):
        non_negative(options.get(key), key)
    preset = [k for k in ("epsilon", "gamma", "low", "high") if k in options]
    if isinstance(value, Composite) and preset:
        raise XaikitValueError(
            f"explain(method='lrp') got composite=Composite(...) and {preset}: those options set a named "
            "composite's rules, and a Composite carries its own (they would be ignored). Set them in "
            "its rules (e.g. Epsilon(0.0), Gamma(0.1), ZBox(low, high)), or pass the composite's name"
        )


def run_lrp(
    call: Call,
    *,
    composite: Any = "epsilon_plus_flat",
    canonize: bool = True,
    epsilon: float = 1e-6,
    gamma: float = 0.25,
    low: Any = None,
    high: Any = None,
) -> Explained:
    """The runner of ``"lrp"``: relevance with each input's shape, in the caller's layout."""
    from xaikit.xai.rules import spec

    name = composite.lower().replace("-", "_") if isinstance(composite, str) else None
    if name == "epsilon_gamma_box":
        low, high = _bound(call.inp, low, True), _bound(call.inp, high, False)
    comp = spec.composite(
        composite, epsilon=epsilon, gamma=gamma, low=low, high=high, canonize=bool(canonize)
    )
    values = relevance(call.inp, call.targets, comp, call.settings())
    return Explained(call.inp.to_user(values))


def run_lrp_epsilon(call: Call, *, epsilon: float = 1e-6, canonize: bool = True) -> Explained:
    """The runner of ``"lrp_epsilon"``: the epsilon rule on every convolution and dense layer."""
    return run_lrp(call, composite="epsilon", epsilon=epsilon, canonize=canonize)


_LRP = "Bach et al., 2015, https://doi.org/10.1371/journal.pone.0130140"
register_method(
    Method(
        "lrp", "rules", "LRP", run_lrp,
        {"composite": "epsilon_plus_flat", "canonize": True, "epsilon": 1e-6, "gamma": 0.25, "low": None,
         "high": None},
        aliases=("layerwise_relevance_propagation",), check=_check, reference=_LRP, target_objects=True,
        summary="the score redistributed layer by layer by the rules of a composite: which pixels carry the evidence",
    )
)  # fmt: skip
register_method(
    Method(
        "lrp_epsilon", "rules", "LRP-ε", run_lrp_epsilon, {"epsilon": 1e-6, "canonize": True},
        aliases=("lrp_eps", "lrpepsilon"), short="LRP-eps", check=_check, reference=_LRP, target_objects=True,
        summary="LRP with the epsilon rule everywhere (epsilon=0: LRP-0, gradient x input of a ReLU net)",
    )
)  # fmt: skip
