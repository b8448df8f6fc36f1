"""The engine behind every method; private: the layers above use :mod:`xaikit.xai.internal`.

One small module per concern, imported directly (this package re-exports nothing):

* ``job.py``: :class:`~xaikit.xai._engine.job.Job`, one row space (B samples x S noise samples
  x M path steps)
* ``sweep.py``: the fused gradient sweep of a job, chunk by chunk, and the completeness
  delta's endpoint scores
* ``plan.py``: the chunk size (``max_batch="auto"``, ``memory_budget``, memory and timing
  probes)
* ``chunks.py``: chunked forward passes, the padding of short chunks, a chunk's error message
* ``seeds.py``: the seeded random streams
* ``inputs.py``: the validated inputs (:func:`~xaikit.xai._engine.inputs.prepare`)
* ``targets.py``: the classes explained (:func:`~xaikit.xai._engine.targets.pin`)
* ``kwargs.py``: extra forward arguments (``model_kwargs=``)
* ``baselines.py``, ``blur.py``, ``quadrature.py``: baselines, Blur IG's path, IG's
  quadrature rules
* ``display.py``: display normalisation of masks
* ``progress.py``: progress of long calls
* ``threads.py``: host threads for numpy work beside the model
"""
