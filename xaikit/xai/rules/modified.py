"""Guided backpropagation (Springenberg et al., 2015, https://arxiv.org/abs/1412.6806) and
deconvnet (Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901): the gradient of the target
score with every ReLU's backward modified (``bk.relevance.modified_step``): guided backprop
passes only positive gradients where the ReLU's input was positive; deconvnet passes positive
gradients whatever the input (the ReLU applied to the gradient).
"""

from __future__ import annotations

from typing import Any

from xaikit.backend import Rows
from xaikit.xai.cam.maps import per_input
from xaikit.xai.registry import Call, Explained, Method, register_method

__all__ = ["run_modified"]


def run_modified(call: Call) -> Explained:
    """The runner of ``"guided_backprop"`` and ``"deconvnet"``: input-shaped gradients."""
    inp, bk = call.inp, call.bk
    mode = "guided" if call.method.name == "guided_backprop" else "deconvnet"

    def step(rows: list[Any], tg: Any, kw: dict[str, Any] | None) -> list[Any]:
        return bk.relevance.modified_step(Rows(inp.model, rows, tg, call.output, kw, call.spec), mode)

    return Explained(inp.to_user(per_input(inp, call.targets, call.max_batch, step)))


register_method(
    Method(
        "guided_backprop", "rules", "Guided Backprop", run_modified, aliases=("guided_backpropagation", "guidedbp"),
        short="Guided BP", reference="Springenberg et al., 2015, https://arxiv.org/abs/1412.6806", target_objects=True,
        units="none",
        summary="gradients passed back only where positive through every ReLU: sharp edges of what excites the class",
    )
)  # fmt: skip
register_method(
    Method(
        "deconvnet", "rules", "Deconvnet", run_modified, aliases=("deconvolution",), target_objects=True, units="none",
        reference="Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901",
        summary="the gradient with each ReLU applied to the gradient itself: patterns a unit responds to",
    )
)  # fmt: skip
