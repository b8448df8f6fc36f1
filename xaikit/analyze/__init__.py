"""What strategies does a model use across a dataset? Analyses of an ``explain_dataset`` store.

* :func:`concepts` — CRAFT-style concepts (Fel et al., 2023): a non-negative factorization of
  one layer's activations over a class's images, each concept's heatmaps and its importance for
  the class (:class:`~xaikit.analyze.concepts.ConceptSet`).
"""

from xaikit.analyze.concepts import ConceptSet, extract_concepts

#: ``xk.analyze.concepts(model, x, klass, ...)``: :func:`extract_concepts` without a store
concepts = extract_concepts

__all__ = ["ConceptSet", "concepts", "extract_concepts"]
