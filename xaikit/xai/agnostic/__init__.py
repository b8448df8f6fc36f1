"""Model-agnostic methods (the ``agnostic`` family): attributions from forward passes of the
model on coalitions of features, with no gradients and nothing read inside the model, so they
explain any model that maps inputs to scores (exported, quantized, behind non-differentiable
post-processing, tabular).

* :mod:`~xaikit.xai.agnostic.ablation`: feature ablation;
* :mod:`~xaikit.xai.agnostic.shapley`: Shapley value sampling and KernelSHAP;
* :mod:`~xaikit.xai.agnostic.lime`: LIME;
* :mod:`~xaikit.xai.agnostic.sensitivity`: Sobol and HSIC attributions.

A feature is a patch, a superpixel or a group of columns (:mod:`~xaikit.xai.agnostic.features`);
every method is a choice of coalitions of features and an estimator on the model's scores of
them, which :mod:`~xaikit.xai.agnostic.coalitions` computes in the engine's chunked forward
passes, building each chunk's inputs on the device.
"""

# the records register when imported, in this order (the order of tables and docs)
# isort: off
from xaikit.xai.agnostic import ablation, shapley, lime, sensitivity  # noqa: F401
# isort: on
