"""Explanation traces: ``Saliency`` (masks of fixed samples over training), ``LabelTracker``
(a per-sample metric grouped by label) and ``InstanceTracker`` (a per-sample metric by index).
The faithfulness traces ``DeletionAUC`` and ``SaliencyStability`` of ``xaikit.evaluate`` are
available here too.

Example:
    >>> from xaikit.trace.xai import Saliency, LabelTracker, InstanceTracker
"""

from __future__ import annotations

from typing import Any

from xaikit.trace.xai._samples import SampleCollector
from xaikit.trace.xai.saliency import Saliency
from xaikit.trace.xai.trackers import InstanceTracker, LabelTracker

__all__ = [
    "DeletionAUC",
    "InstanceTracker",
    "LabelTracker",
    "Saliency",
    "SaliencyStability",
    "SampleCollector",
]

_EVALUATE_TRACES = ("DeletionAUC", "SaliencyStability")


def __getattr__(name: str) -> Any:
    # resolved lazily: xaikit.evaluate.traces itself imports this package's sample collector
    if name in _EVALUATE_TRACES:
        from xaikit.evaluate import traces

        return getattr(traces, name)
    raise AttributeError(f"module 'xaikit.trace.xai' has no attribute {name!r}")
