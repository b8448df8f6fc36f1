"""The gradient family: attributions from the model's gradients w.r.t. its inputs.

* ``sweep.py``: the eight methods of one fused sweep (vanilla, SmoothGrad, Integrated
  Gradients, SmInt, VarGrad, Input x Gradient, Expected Gradients, Blur IG): their parameters of
  the engine's row space (:mod:`xaikit.xai._engine.sweep`), their runner and their records
* ``guided_ig.py``: Guided Integrated Gradients, an adaptive path advanced step by step
* ``xrai.py``: XRAI, regions ranked by their Integrated Gradients attribution
"""

# the records register when imported, in this order (the order of tables and docs)
from xaikit.xai.gradient import sweep  # noqa: F401

# isort: split
from xaikit.xai.gradient import guided_ig, xrai  # noqa: F401
