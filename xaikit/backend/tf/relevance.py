"""The relevance facet of the TensorFlow/Keras backend
(:class:`~xaikit.backend.facets.RelevanceFacet`): LRP (:mod:`xaikit.backend.tf.lrp`), DeepLIFT
(:mod:`xaikit.backend.tf.deeplift`), guided backprop and deconvnet
(:mod:`xaikit.backend.tf.lrp` too: the same swapped layer calls)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xaikit.backend.base import T
from xaikit.backend.facets import RelevanceFacet

__all__ = ["Relevance"]


class Relevance(RelevanceFacet):
    """The relevance facet of the TensorFlow backend."""

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    def lrp_step(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        composite: Any,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> tuple[list[T], T]:
        from xaikit.backend.tf import lrp

        return lrp.lrp_step(self.bk, model, inputs, targets, composite, output, model_kwargs, target)

    def deeplift_step(
        self,
        model: Any,
        inputs: Sequence[T],
        baselines: Sequence[T],
        targets: T,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> tuple[list[T], T, T]:
        from xaikit.backend.tf import deeplift

        return deeplift.deeplift_step(
            self.bk, model, inputs, baselines, targets, output, model_kwargs, target
        )

    def modified_step(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        mode: str,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
        target: Any = None,
    ) -> list[T]:
        from xaikit.backend.tf import lrp

        return lrp.modified_step(self.bk, model, inputs, targets, mode, output, model_kwargs, target)
