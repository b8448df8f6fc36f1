"""Guided backpropagation (Springenberg et al., 2015, https://arxiv.org/abs/1412.6806) and
deconvnet (Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901): the gradient of the target
score with every ReLU's backward modified (``bk.relevance.modified_step``): guided backprop
passes only positive gradients where the ReLU's input was positive; deconvnet passes positive
gradients whatever the input (the ReLU applied to the gradient).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.backend import Rows
from xaikit.xai._engine.plan import check_max_batch
from xaikit.xai.cam.maps import chunked
from xaikit.xai.registry import Call, Explained, Method, register_method

__all__ = ["run_modified"]


def run_modified(call: Call) -> Explained:
    """The runner of ``"guided_backprop"`` and ``"deconvnet"``: input-shaped gradients."""
    inp = call.inp
    bk = inp.bk
    mode = "guided" if call.method.name == "guided_backprop" else "deconvnet"
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in inp.tensors]

    def step(rows: list[Any], tg: Any, kw: dict[str, Any] | None) -> np.ndarray:
        grads = bk.relevance.modified_step(Rows(inp.model, rows, tg, call.output, kw, call.spec), mode)
        n = int(tg.shape[0])
        return np.concatenate(
            [np.asarray(bk.to_numpy(g), dtype=np.float32).reshape(n, -1) for g in grads], axis=1
        )

    flat = chunked(inp, call.targets, check_max_batch(call.max_batch), step)
    ends = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    values = [flat[:, ends[i] : ends[i + 1]].reshape(inp.batch, *shapes[i]) for i in range(len(shapes))]
    return Explained(inp.to_user(values))


register_method(
    Method(
        "guided_backprop", "rules", "Guided Backprop", run_modified, aliases=("guided_backpropagation", "guidedbp"),
        short="Guided BP", reference="Springenberg et al., 2015, https://arxiv.org/abs/1412.6806", target_objects=True,
        summary="gradients passed back only where positive through every ReLU: sharp edges of what excites the class",
    )
)  # fmt: skip
register_method(
    Method(
        "deconvnet", "rules", "Deconvnet", run_modified, aliases=("deconvolution",), target_objects=True,
        reference="Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901",
        summary="the gradient with each ReLU applied to the gradient itself: patterns a unit responds to",
    )
)  # fmt: skip
