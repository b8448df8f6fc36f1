"""Run xaikit traces inside your own training loop.

* :class:`TraceRunner` (framework-neutral, this package) calls the trace hooks in dependency
  order with a :class:`~xaikit.trace.Data` and a :class:`~xaikit.trace.System`.
* ``xaikit.integrations.torch``: :class:`TorchTraceRunner` for a plain PyTorch loop.
* ``xaikit.integrations.keras``: :class:`TraceCallback`, a ``keras.callbacks.Callback`` for
  ``model.fit``.
* ``xaikit.integrations.lightning``: :class:`XaikitCallback`, a Lightning ``Callback`` for
  ``Trainer.fit``.

The framework modules are imported only when you import them.
"""

from __future__ import annotations

from xaikit.integrations.runner import TraceRunner

__all__ = ["TraceRunner"]
