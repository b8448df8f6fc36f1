"""The relevance steps of the TensorFlow/Keras backend, which
:class:`~xaikit.backend.facets.RelevanceFacet` calls: LRP
(:func:`~xaikit.backend.tf.lrp.lrp_step`), DeepLIFT (:func:`~xaikit.backend.tf.deeplift.deeplift_step`),
guided backprop and deconvnet (:func:`~xaikit.backend.tf.lrp.modified_step`: the same swapped
layer calls as LRP)."""

from __future__ import annotations

from xaikit.backend.tf.deeplift import deeplift_step
from xaikit.backend.tf.lrp import lrp_step, modified_step

__all__ = ["deeplift_step", "lrp_step", "modified_step"]
