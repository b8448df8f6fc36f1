"""PyTorch attention facet (``get_backend(model).attention``): the attention probabilities of
a Hugging Face ``transformers`` vision model, read through its own outputs.

The model is called with ``output_attentions=True``. Its attention implementation is switched
to ``"eager"`` for the call (the default ``"sdpa"`` kernels return no probabilities) through
the model's ``set_attn_implementation`` and switched back in a ``finally`` block, so the model
is left as it was. The probabilities are those the model multiplied its values by (after
softmax; dropout is off in eval mode). Their gradients come from one ``torch.autograd.grad``
of the summed target scores: no parameter's ``.grad`` is touched.
"""

from __future__ import annotations

from typing import Any

import torch

from xaikit.backend.facets import AttentionFacet, Attentions
from xaikit.backend.outputs import as_matrix, select_output
from xaikit.backend.rows import Rows
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

#: the methods named in refusals
_METHODS = "the attention methods (attention_rollout, transformer_attribution)"


def _attentions_of(raw: Any) -> Any:
    found = raw.get("attentions") if isinstance(raw, dict) else getattr(raw, "attentions", None)
    return found


class Attention(AttentionFacet):
    """The attention facet of the torch backend."""

    def attentions(self, rows: Rows, gradients: bool) -> Attentions:
        model, inputs, targets, target = rows.model, rows.inputs, rows.targets, rows.target
        config = getattr(model, "config", None)
        switch = getattr(model, "set_attn_implementation", None)
        if config is None or switch is None:
            raise XaikitTypeError(
                f"model: {_METHODS} read the attention probabilities a Hugging Face transformers model "
                f"returns with output_attentions=True; got {describe(model)}, which is not one. Use a "
                "transformers vision model (ViTForImageClassification, DeiT, ...), or a CAM method with a "
                "token layer (gradcam, layer=...)"
            )
        saved = getattr(config, "_attn_implementation", None) or "eager"
        kw = dict(rows.model_kwargs or {})
        kw["output_attentions"] = True
        try:
            switch("eager")
            with torch.enable_grad() if gradients else torch.no_grad():
                xs = [x.detach() for x in inputs]
                raw = self.bk._raw(model, xs, kw)
                atts = _attentions_of(raw)
                if not atts or any(not isinstance(a, torch.Tensor) or a.ndim != 4 for a in atts):
                    raise XaikitValueError(
                        f"model: {_METHODS} need the per-block attention probabilities (B, heads, N, N) "
                        f"in the output's 'attentions' with output_attentions=True; got {describe(atts)}"
                    )
                grads = None
                if gradients:
                    if target is not None:
                        scores = target.scores(self.bk, raw, targets)
                    else:
                        out = as_matrix(select_output(raw, rows.output, len(xs[0])))
                        scores = out.gather(1, targets[:, None]).squeeze(1)
                    grads = torch.autograd.grad(scores.sum(), list(atts), allow_unused=True)
                    if any(g is None for g in grads):
                        raise XaikitValueError(
                            f"model: the target scores do not depend on every block's attention (a block "
                            f"after the class token was read?); {_METHODS} need each block on the path"
                        )
        finally:
            switch(saved)
        return self._host(atts, grads)
