"""Bundled datasets, made locally without downloads.

* :mod:`xaikit.dataset.data.shapes` — synthetic colour images of shapes with object masks.
* :mod:`xaikit.dataset.data.shape_scenes` — larger multi-label scenes of one or two shapes
  with a class map (the pointing game's "Difficult" images).
* :mod:`xaikit.dataset.data.shortcut` — ``shapes`` with a planted shortcut: a coloured corner
  tag on most images of one class (the test bed of :func:`xaikit.analyze.dataset`).
* :mod:`xaikit.dataset.data.digits` — scikit-learn's 8x8 digits, the MNIST stand-in.
"""

from __future__ import annotations

from xaikit.dataset.data import digits, shape_scenes, shapes, shortcut

__all__ = ["digits", "shape_scenes", "shapes", "shortcut"]
