"""Dataset analysis: what a model relies on across a whole dataset, from the maps of an
``explain_dataset`` store (docs/analyze.md).

* :func:`dataset` (``run.py``): per-class mean and spread maps, atypical samples, SpRAy strategy
  clusters with an eigengap choice of k, a t-SNE embedding for display; with the data and the
  model also concepts and a region-ablation check per cluster; written into
  ``<store>/analysis/`` (format :data:`FORMAT`)
* :func:`open`: read it back as a :class:`DatasetAnalysis` (``results.py``)
* :func:`concepts` (``concepts.py``): CRAFT-style concepts of a class's images, without a store
* ``maps.py`` (the streaming reader of the store), ``clusters.py`` (SpRAy, atypicality, the
  embedding), ``ablation.py`` (the region-ablation check), ``images.py`` (thumbnails)

Example:
    >>> import xaikit as xk
    >>> xk.analyze.FORMAT
    1
"""

from xaikit.analyze.concepts import ConceptSet, extract_concepts
from xaikit.analyze.results import FORMAT, ClassAnalysis, Cluster, Concept, DatasetAnalysis
from xaikit.analyze.results import open_analysis as open
from xaikit.analyze.run import dataset

#: ``xk.analyze.concepts(model, x, klass, ...)``: :func:`extract_concepts` without a store
concepts = extract_concepts

__all__ = [
    "FORMAT",
    "ClassAnalysis",
    "Cluster",
    "Concept",
    "ConceptSet",
    "DatasetAnalysis",
    "concepts",
    "dataset",
    "extract_concepts",
    "open",
]
