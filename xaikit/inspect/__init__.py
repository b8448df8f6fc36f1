"""Model inspection: statistics of every module / layer of a torch or Keras model over training.

:class:`ModuleTracker` hooks every submodule (torch) or layer (Keras 3) and records shape, mean,
std, min, max, zero fraction and non-finite count of inputs, outputs, weights and weight
gradients (or statistics of your own), the module tree and the call order, every N steps, with
one host copy per step. Records go to ``<log_dir>/stats.jsonl`` (JSON lines);
:func:`read_log` loads a run back as a pandas DataFrame. Flags point at dead outputs, NaN/inf
values and exploding or vanishing gradients. Inside an Estimator run, the trace
:class:`xaikit.trace.inspect.ActivationStats` drives a tracker.

Example:
    >>> import tempfile, torch
    >>> import xaikit as xk
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> run = tempfile.mkdtemp()
    >>> with xk.inspect.ModuleTracker(model, log_dir=run) as tracker:
    ...     _ = model(torch.randn(8, 4))
    ...     _ = tracker.step()
    >>> df = xk.inspect.read_log(run)
    >>> df[df.kind == "output"]["module"].tolist()
    ['model.0', 'model.1', 'model']
"""

from __future__ import annotations

from xaikit.inspect._log import read_log
from xaikit.inspect._tracker import KINDS, ModuleTracker

__all__ = ["KINDS", "ModuleTracker", "read_log"]
