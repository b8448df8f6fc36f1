"""Keras attention facet: not built yet. The attention methods read the attention
probabilities of Hugging Face torch models; a Keras ViT (``MultiHeadAttention`` layers) needs
``return_attention_scores`` read inside the functional graph, which is still to do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xaikit.backend.base import T
from xaikit.backend.facets import AttentionFacet
from xaikit.errors import XaikitTypeError


class Attention(AttentionFacet):
    """Refuses: Keras models are not read by the attention methods yet."""

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    def attentions(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        output: int | str,
        gradients: bool,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        raise XaikitTypeError(
            "model: the attention methods (attention_rollout, transformer_attribution) read Hugging Face "
            "torch transformers models for now; a Keras model is not read yet. For a Keras ViT use a CAM "
            "method on a token layer (gradcam, layer=...): tokens are laid on their patch grid"
        )
