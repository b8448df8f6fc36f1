"""Perturbation methods (the ``perturbation`` family): attributions from forward passes only, no
gradients.

* Occlusion (:mod:`xaikit.xai.perturbation.occlusion`) — Zeiler & Fergus, 2014,
  https://arxiv.org/abs/1311.2901, as captum's ``Occlusion``: a window (all channels) slides
  over each image; a pixel's attribution is the mean, over the windows covering it, of
  score(x) - score(x with the window set to ``baseline``).
* RISE (:mod:`xaikit.xai.perturbation.rise`) — Petsiuk et al., 2018,
  https://arxiv.org/abs/1806.07421: N random masks (binary ``cell`` x ``cell`` grids kept with
  probability ``p``, upsampled bilinearly and shifted at random); saliency =
  sum_i score(x * M_i) M_i / (N p).

Both are one row space run by the engine's chunked forward passes
(:func:`~xaikit.xai._engine.chunks.forward_rows`): row ``r`` is perturbation ``r // B`` of sample
``r % B``, so a chunk of rows needs only its own windows or masks, which are made for that chunk
alone (memory is one chunk of rows whatever the number of windows or masks). The chunk size comes
from the engine's :class:`~xaikit.xai._engine.plan.ChunkPlan` (``max_batch``, ``memory_budget``,
forward-only row costs), and an out-of-memory error halves it. Scores come to the host once, at
the end, where they are folded into the maps in float64. ``_image.py`` holds what both read of
their one image input.
"""

# the records register when imported, in this order (the order of tables and docs)
from xaikit.xai.perturbation import occlusion, rise  # noqa: F401
