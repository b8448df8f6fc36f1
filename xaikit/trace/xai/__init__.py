"""Explanation traces: ``Saliency`` (masks of fixed samples over training), ``GradCAM`` and
``EigenCAM`` (class-activation maps), ``LabelTracker`` (a per-sample metric grouped by label)
and ``InstanceTracker`` (a per-sample metric by index).
The faithfulness traces ``DeletionAUC``, ``SaliencyStability`` and ``Compare`` live in
:mod:`xaikit.evaluate`.

Example:
    >>> from xaikit.trace.xai import Saliency, GradCAM, EigenCAM, LabelTracker, InstanceTracker
"""

from __future__ import annotations

from xaikit.trace.xai._samples import SampleCollector
from xaikit.trace.xai.cam import EigenCAM, GradCAM
from xaikit.trace.xai.saliency import Saliency
from xaikit.trace.xai.trackers import InstanceTracker, LabelTracker

__all__ = ["EigenCAM", "GradCAM", "InstanceTracker", "LabelTracker", "Saliency", "SampleCollector"]
