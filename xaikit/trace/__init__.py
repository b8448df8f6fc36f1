"""Traces: objects that watch and steer the training loop.

``xk.trace.Trace`` is the base class; :class:`Data` is what the hooks receive and
:class:`System` is the run-wide state behind ``trace.system``. Ready-made traces live in
sub-modules: ``xk.trace.metric`` (Accuracy, Precision, Recall, F1Score, MCC),
``xk.trace.adapt`` (BestModelSaver, LRScheduler, EarlyStopping), ``xk.trace.xai``,
``xk.trace.io`` and ``xk.trace.inspect`` (ActivationStats, the module tracker as a trace).
"""

from __future__ import annotations

import importlib
from typing import Any

from xaikit.trace.base import Data, DSData, System, Trace
from xaikit.trace.sort import sort_traces

__all__ = ["DSData", "Data", "System", "Trace", "sort_traces"]

_SUBMODULES = {"adapt", "essential", "inspect", "io", "metric", "xai"}


def __getattr__(name: str) -> Any:
    # ``xk.trace.metric.Accuracy`` works without importing the sub-module first
    if name in _SUBMODULES:
        module = importlib.import_module(f"xaikit.trace.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'xaikit.trace' has no attribute {name!r}")
