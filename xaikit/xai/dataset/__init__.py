"""Explaining a whole dataset: :func:`explain_dataset` streams attributions into a resumable,
sharded Zarr store; :class:`DatasetExplanation` reads them back.

* ``explain.py``: :func:`explain_dataset`, the entry point (checks, the store's lock, the local
  engine; the Ray engine on request)
* ``_shard.py``: one shard, the unit of work and of commit (``Settings``, ``explain_shard``):
  what a worker runs
* ``_ray.py``: the Ray engine (actors that run shards)
* ``spec.py``: :class:`ModelSpec`, how a worker builds the model
* ``options.py``: the method's options and the class names, checked before the model is built
* ``results.py``: :class:`DatasetExplanation`
* ``_store.py``: the store (format, locking, commits; :class:`StoreLockedError`)
* ``_sources.py``: the data sources (arrays, datasets, image folders)
* ``_grids.py``: the pictures of a store that ``xaikit explain`` writes

The modules with a leading underscore are the machinery: no module outside ``xaikit/xai/``
imports them (the CLI reads ``as_source`` and ``save_grids`` through :mod:`xaikit.xai.internal`).
"""

from xaikit.xai.dataset._store import StoreLockedError
from xaikit.xai.dataset.explain import explain_dataset

# the CLI checks a run's options and class names before it starts one
from xaikit.xai.dataset.options import check_method_options, read_classes  # noqa: F401
from xaikit.xai.dataset.results import DatasetExplanation
from xaikit.xai.dataset.spec import ModelSpec

__all__ = ["DatasetExplanation", "ModelSpec", "StoreLockedError", "explain_dataset"]
