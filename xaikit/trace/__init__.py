"""Traces: objects that watch and steer the training loop.

``xk.trace.Trace`` is the base class; :class:`Data` is what the hooks receive and
:class:`System` is the run-wide state behind ``trace.system``. Ready-made traces live in
sub-modules: ``xk.trace.metric`` (Accuracy, Precision, Recall, F1Score, MCC),
``xk.trace.adapt`` (BestModelSaver, LRScheduler, EarlyStopping), ``xk.trace.xai``,
``xk.trace.io`` and ``xk.trace.inspect`` (ActivationStats, the module tracker as a trace).
"""

from __future__ import annotations

from types import ModuleType

from xaikit._lazy import submodule
from xaikit.trace.base import Data, DSData, System, Trace
from xaikit.trace.sort import sort_traces

__all__ = ["DSData", "Data", "System", "Trace", "sort_traces"]

_SUBMODULES = {"adapt", "essential", "inspect", "io", "metric", "xai"}


def __getattr__(name: str) -> ModuleType:
    # ``xk.trace.metric.Accuracy`` works without importing the sub-module first
    return submodule(__name__, name, _SUBMODULES)
