"""``ActivationStats``: the module tracker of :mod:`xaikit.inspect` as a trace of the training loop.

Example:
    >>> import tempfile, torch
    >>> from xaikit.trace.inspect import ActivationStats
    >>> trace = ActivationStats(torch.nn.Linear(3, 2), log_dir=tempfile.mkdtemp(), every_n_steps=50)
    >>> trace.outputs
    ['activation_stats', 'activation_stats_flags']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.inspect import KINDS, ModuleTracker
from xaikit.inspect._record import StatFn
from xaikit.trace.base import Data, Trace

__all__ = ["ActivationStats"]

_TRACKER_OPTIONS = ("dead_threshold", "explode_threshold", "vanish_threshold")


class ActivationStats(Trace):
    """Record module statistics of a model every N training steps, inside an Estimator run.

    On a sampled training batch (global step 1 and every ``every_n_steps``-th step) the trace
    attaches a :class:`~xaikit.inspect.ModuleTracker` in ``on_batch_begin``, lets the network
    step run, records weights and gradients in ``on_batch_end`` (torch reads ``.grad``, which
    the update left in place; Keras gradients are not visible to traces and are recorded as
    absent), writes the records under the step's ``global_step`` and detaches again. Other
    batches run with no hooks at all. A Keras network step runs inside a ``tf.function``,
    where layer calls are symbolic, so for Keras models only the weights are recorded.

    The latest step's records (a pandas DataFrame) are written to the data under ``outputs``
    (without logging); the number of flags raised during an epoch is logged as
    ``"<outputs>_flags"`` at the end of each training epoch.

    Args:
        model: the torch or Keras model to watch (the one the network trains).
        log_dir: the run folder (default ``./runs/inspect/<ModelClass>_<timestamp>``).
        every_n_steps: record every n-th training step.
        stats: custom statistic functions per kind (see ``ModuleTracker``).
        kinds: which kinds to record.
        outputs: the data key of the latest records.
        mode: only ``"train"`` makes sense (gradients); kept for symmetry with other traces.
        **tracker_options: ``dead_threshold``, ``explode_threshold``, ``vanish_threshold``.

    Attributes:
        tracker: the :class:`~xaikit.inspect.ModuleTracker` (``tracker.df``, ``tracker.flags``,
            ``tracker.tree``).
    """

    def __init__(
        self,
        model: Any,
        log_dir: str | Path | None = None,
        every_n_steps: int = 100,
        stats: Mapping[str, StatFn] | None = None,
        kinds: Sequence[str] = KINDS,
        outputs: str = "activation_stats",
        mode: str | Iterable[str] | None = "train",
        **tracker_options: Any,
    ) -> None:
        if not isinstance(outputs, str) or not outputs:
            raise XaikitTypeError(f"outputs must be a non-empty string; got {describe(outputs)}")
        super().__init__(inputs=None, outputs=[outputs, f"{outputs}_flags"], mode=mode)
        unknown = sorted(set(tracker_options) - set(_TRACKER_OPTIONS))
        if unknown:
            raise XaikitValueError(
                f"ActivationStats got unknown options {unknown}; expected some of {sorted(_TRACKER_OPTIONS)}"
            )
        check_int(every_n_steps, "every_n_steps", 1)
        self.every_n_steps = every_n_steps
        self.key = outputs
        # validates every argument now; hooks go on only for sampled batches
        self.tracker = ModuleTracker(
            model,
            log_dir,
            every_n_steps=1,
            stats=stats,
            kinds=kinds,
            attach=False,
            **tracker_options,
        )
        self._epoch_flags = 0
        self._active = False

    def _sampled(self) -> bool:
        step = int(self.system.global_step)
        return self.system.mode == "train" and (step == 1 or step % self.every_n_steps == 0)

    def on_epoch_begin(self, data: Data) -> None:
        self._epoch_flags = len(self.tracker.flags)

    def on_batch_begin(self, data: Data) -> None:
        if self._sampled():
            self.tracker.current_step = int(self.system.global_step)
            self.tracker.attach()
            self._active = True

    def on_batch_end(self, data: Data) -> None:
        if not self._active:
            return
        self._active = False
        self.tracker.step()
        self.tracker.detach()
        data.write_without_log(self.key, self.tracker.latest_df)

    def on_epoch_end(self, data: Data) -> None:
        if self.system.mode == "train":
            data.write_with_log(f"{self.key}_flags", len(self.tracker.flags) - self._epoch_flags)

    def on_end(self, data: Data) -> None:
        self.tracker.detach()
