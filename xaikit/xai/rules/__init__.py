"""Rule-based methods (the ``rules`` family): modified backward passes.

* LRP (:mod:`xaikit.xai.rules.lrp`): ``"lrp"`` with a composite of rules
  (:mod:`xaikit.xai.rules.spec`: rules, composites and the relevance convention), and
  ``"lrp_epsilon"``.
* Guided backprop and deconvnet (:mod:`xaikit.xai.rules.modified`).
* DeepLIFT and DeepLiftShap (:mod:`xaikit.xai.rules.deeplift`): the Rescale rule against a
  baseline, or averaged over reference samples.

Each runs one modified backward pass per chunk of rows through the backend's relevance facet
(``bk.relevance``, :class:`~xaikit.backend.facets.RelevanceFacet`).
"""

# the records register when imported, in this order (the order of tables and docs)
from xaikit.xai.rules import lrp, modified  # noqa: F401, I001
from xaikit.xai.rules import deeplift  # noqa: F401  (registered after LRP and guided backprop)
from xaikit.xai.rules import spec
from xaikit.xai.rules.spec import *  # noqa: F403  (the rules, the composites and their tables)

__all__ = list(spec.__all__)
