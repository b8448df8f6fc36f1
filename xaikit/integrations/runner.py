"""``TraceRunner``: the trace life cycle of the Estimator, driven by your own loop."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xaikit.backend import framework_of, to_number
from xaikit.checks import check_choice, check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.schedule import Scheduler, get_current_items
from xaikit.trace.base import MODES, Data, System, Trace
from xaikit.trace.sort import sort_traces

__all__ = ["TraceRunner"]


def _host(values: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """Framework tensors become numpy arrays (as the Estimator gives traces); others stay."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise XaikitTypeError(
            f"{name} must be a dict of arrays or tensors keyed by name; got {describe(values)}"
        )
    return {k: to_number(v) if framework_of(v) is not None else v for k, v in values.items()}


class TraceRunner:
    """Calls traces the way the :class:`~xaikit.estimator.Estimator` does, from any loop.

    Call, in order::

        runner.on_begin()
        for epoch ...:
            runner.on_epoch_begin("train")
            for batch ...:
                ...                                   # your step
                runner.on_batch_end(batch, predictions)
            runner.on_epoch_end()
            runner.on_epoch_begin("eval")             # optional evaluation epoch
            ...
            runner.on_epoch_end()
        runner.on_end()

    The epoch counter goes up with each ``"train"`` epoch (a loop without training epochs can
    pass ``epoch=``), ``global_step`` with each training batch. Batches and predictions are
    dicts; framework tensors in them are turned into numpy arrays before traces see them.
    Schedulers of traces are resolved per epoch like in the Estimator.

    Args:
        traces: traces or schedulers of traces.
        total_epochs: what ``system.total_epochs`` says (for traces that look at it).
        network: anything with ``models`` / ``get_loss_keys`` for traces that look at it.

    Attributes:
        system: the :class:`~xaikit.trace.System` the traces see.
        logs: what traces logged (``write_with_log``) in the last hook round.
        outputs: every value traces wrote in the last round (e.g. ``ImgData``, tracker histories).
    """

    def __init__(self, traces: Any, total_epochs: int = 1, network: Any = None) -> None:
        items = [traces] if isinstance(traces, (Trace, Scheduler)) else traces
        if not isinstance(items, Iterable) or isinstance(items, (str, Mapping)):
            raise XaikitTypeError(
                f"traces must be a Trace, a scheduler or a list of them; got {describe(traces)}"
            )
        self.items: list[Any] = list(items)
        for i, item in enumerate(self.items):
            values = item.get_all_values() if isinstance(item, Scheduler) else [item]
            for value in values:
                if value is not None and not isinstance(value, Trace):
                    raise XaikitTypeError(
                        f"traces[{i}] must be a Trace or a scheduler of Traces; got {describe(value)}"
                    )
        self.system = System(network=network, total_epochs=total_epochs, log_steps=None)
        self._active: list[Trace] = []
        self._in_epoch = False
        self.logs: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}

    @property
    def active(self) -> list[Trace]:
        """The traces that run in the open epoch (its mode and epoch number)."""
        return list(self._active)

    def pause_epoch(self) -> dict[str, Any]:
        """Set the open epoch aside (e.g. while a framework runs a validation in the middle of a
        training epoch); :meth:`resume_epoch` with the returned state continues it."""
        self._check_epoch("pause_epoch")
        s = self.system
        state = {
            "active": self._active,
            "mode": s.mode,
            "batch_idx": s.batch_idx,
            "ds_id": s.ds_id,
            "epoch": s.epoch_idx,
        }
        self._in_epoch = False
        return state

    def resume_epoch(self, state: Mapping[str, Any]) -> None:
        """Continue an epoch set aside by :meth:`pause_epoch` (its traces, mode, batch count)."""
        s = self.system
        self._active, self._in_epoch = list(state["active"]), True
        s.mode, s.batch_idx, s.ds_id, s.epoch_idx = (
            state["mode"],
            state["batch_idx"],
            state["ds_id"],
            state["epoch"],
        )

    def _round(self, traces: list[Trace], hook: str, data: Data) -> Data:
        for trace in traces:
            getattr(trace, hook)(data)
        self.logs = data.read_logs()
        self.outputs = dict(data.maps[0])
        return data

    def on_begin(self) -> dict[str, Any]:
        """Start a run: every trace (all scheduler values) gets ``on_begin``. Returns the logs."""
        self.system.reset()
        every = sort_traces(get_current_items(self.items, list(MODES)))
        for trace in every:
            trace.system = self.system
        self.system.traces = every
        return self._round(every, "on_begin", Data()).read_logs()

    def on_epoch_begin(self, mode: str = "train", epoch: int | None = None) -> dict[str, Any]:
        """Start an epoch of ``mode`` (``"train"`` counts epochs up unless ``epoch`` is given)."""
        check_choice(mode, "mode", MODES)
        s = self.system
        if epoch is not None:
            check_int(epoch, "epoch", 1)
            s.epoch_idx = epoch
        elif mode == "train" or s.epoch_idx == 0:
            s.epoch_idx += 1
        s.mode, s.ds_id, s.batch_idx = mode, "", 0
        active = get_current_items(self.items, mode, s.epoch_idx)
        for trace in active:
            trace.system = s
        self._active = [t for t in sort_traces(active, [""]) if t.runs_in(mode, "")]
        self._in_epoch = True
        return self._round(self._active, "on_epoch_begin", Data()).read_logs()

    def _check_epoch(self, hook: str) -> None:
        if not self._in_epoch:
            raise XaikitValueError(f"{hook} must come between on_epoch_begin and on_epoch_end")

    def on_batch_begin(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Before your step (optional)."""
        self._check_epoch("on_batch_begin")
        return self._round(self._active, "on_batch_begin", Data(_host(batch, "batch"))).read_logs()

    def on_batch_end(
        self, batch: Mapping[str, Any], predictions: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """After your step: ``batch`` (inputs, labels, ...) and ``predictions`` (model outputs,
        per-sample losses, ...) are what the traces read. Returns what they logged."""
        self._check_epoch("on_batch_end")
        s = self.system
        s.batch_idx += 1
        if s.mode == "train":
            s.global_step += 1
        data = Data(_host(batch, "batch"))
        data.add_layer(_host(predictions, "predictions"))
        return self._round(self._active, "on_batch_end", data).read_logs()

    def on_epoch_end(self) -> dict[str, Any]:
        """End the epoch; returns what traces logged (e.g. ``{"accuracy": 0.93}``)."""
        self._check_epoch("on_epoch_end")
        logs = self._round(self._active, "on_epoch_end", Data()).read_logs()
        self._in_epoch = False
        return logs

    def on_end(self) -> dict[str, Any]:
        """End the run: every trace gets ``on_end``. Returns every value written (e.g. the
        trackers' lists of Summary under their output keys)."""
        every = sort_traces(get_current_items(self.items, list(MODES)))
        for trace in every:
            trace.system = self.system
        self._round(every, "on_end", Data())
        return dict(self.outputs)
