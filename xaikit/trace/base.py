"""The trace life cycle: :class:`Trace`, the :class:`Data` it reads and writes, the :class:`System`.

A trace is a small object with six hooks that the :class:`~xaikit.estimator.Estimator` calls while
it trains, evaluates and tests. Hooks receive a :class:`Data` (the current batch, the network's
predictions and whatever earlier traces wrote) and can read run-wide facts from ``self.system``.

Example:
    >>> class CountBatches(Trace):
    ...     def __init__(self):
    ...         super().__init__(outputs="n_batches", mode="eval")
    ...         self.n = 0
    ...     def on_epoch_begin(self, data):
    ...         self.n = 0
    ...     def on_batch_end(self, data):
    ...         self.n += 1
    ...     def on_epoch_end(self, data):
    ...         data.write_with_log("n_batches", self.n)
    >>> t = CountBatches()
    >>> sorted(t.mode), t.outputs
    (['eval'], ['n_batches'])
"""

from __future__ import annotations

import time
from collections import ChainMap
from collections.abc import Iterable, Mapping
from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.modes import ALL_MODES, MODES, ds_id_matches, parse_ds_ids, parse_modes, to_list
from xaikit.summary import Summary

__all__ = ["MODES", "DSData", "Data", "System", "Trace", "parse_ds_ids", "parse_modes", "to_list"]


class Data(ChainMap):  # type: ignore[type-arg]
    """The dictionary traces share during one hook round.

    Reading looks first at what traces wrote, then at the layers given at construction (the
    network's predictions, then the batch). Writing goes to a fresh top layer, so the batch itself
    is never modified.

    Args:
        *layers: Mappings to read from, first one wins.

    Example:
        >>> d = Data({"x": 1})
        >>> d.write_with_log("acc", 0.5)
        >>> d.write_without_log("tmp", 2)
        >>> d["x"], d["acc"], "tmp" in d, d.read_logs()
        (1, 0.5, True, {'acc': 0.5})
    """

    def __init__(self, *layers: Mapping[str, Any]) -> None:
        super().__init__({}, *layers)  # type: ignore[arg-type]
        self._logged: dict[str, None] = {}

    def write_with_log(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``; the Logger prints it and the run summary records it."""
        self.maps[0][key] = value
        self._logged[key] = None

    def write_without_log(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` for later traces only (not printed, not recorded)."""
        self.maps[0][key] = value
        self._logged.pop(key, None)

    def read_logs(self) -> dict[str, Any]:
        """Everything written with :meth:`write_with_log` in this round, by key."""
        return {key: self[key] for key in self._logged}

    def add_layer(self, layer: Mapping[str, Any]) -> None:
        """Put ``layer`` under the written values and above the existing layers (predictions)."""
        self.maps.insert(1, layer)  # type: ignore[arg-type]


class DSData:
    """A view of :class:`Data` that writes every key as ``"key|ds_id"`` (per-dataset results).

    Example:
        >>> d = Data()
        >>> DSData("ds1", d).write_with_log("accuracy", 0.8)
        >>> d.read_logs()
        {'accuracy|ds1': 0.8}
    """

    def __init__(self, ds_id: str, data: Data) -> None:
        self.ds_id = ds_id
        self.data = data

    def _key(self, key: str) -> str:
        return f"{key}|{self.ds_id}"

    def __getitem__(self, key: str) -> Any:
        return self.data[self._key(key)]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._key(key) in self.data

    def write_with_log(self, key: str, value: Any) -> None:
        self.data.write_with_log(self._key(key), value)

    def write_without_log(self, key: str, value: Any) -> None:
        self.data.write_without_log(self._key(key), value)


class System:
    """Run-wide state the Estimator shares with every trace (``trace.system``).

    Attributes:
        mode: The current mode (``"train"``, ``"eval"``, ``"test"``).
        ds_id: The current dataset id (``""`` for a single unnamed dataset).
        global_step: Training steps done so far (1 during the first training batch).
        batch_idx: The 1-based index of the batch in the current epoch and dataset.
        epoch_idx: The 1-based index of the current epoch.
        total_epochs: How many epochs ``fit`` runs.
        log_steps: Print a training line every this many steps (``None``: no logging).
        num_devices: How many devices run the step (1 on a single CPU or GPU).
        stop_training: Set it to ``True`` to end training after the current batch.
        network: The network being trained.
        pipeline: The pipeline feeding it.
        traces: Every trace of the run.
        max_train_steps_per_epoch: Cap on training batches per epoch (``None``: whole dataset).
        max_eval_steps_per_epoch: Cap on evaluation batches per epoch and dataset.
        summary: The run's :class:`~xaikit.summary.Summary`; loggers write ``history[mode][key][step]``.
        experiment_time: When the run started (``time.strftime`` of local time).
    """

    def __init__(
        self,
        network: Any = None,
        pipeline: Any = None,
        traces: list[Any] | None = None,
        total_epochs: int = 1,
        log_steps: int | None = 100,
        max_train_steps_per_epoch: int | None = None,
        max_eval_steps_per_epoch: int | None = None,
        num_devices: int = 1,
        summary: Summary | None = None,
    ) -> None:
        self.network = network
        self.pipeline = pipeline
        self.traces: list[Any] = list(traces or [])
        self.total_epochs = total_epochs
        self.log_steps = log_steps
        self.max_train_steps_per_epoch = max_train_steps_per_epoch
        self.max_eval_steps_per_epoch = max_eval_steps_per_epoch
        self.num_devices = num_devices
        self.summary = summary if summary is not None else Summary()
        self._zero()
        self.experiment_time = ""

    def _zero(self) -> None:
        self.mode = "train"
        self.ds_id = ""
        self.global_step = 0
        self.epoch_idx = 0
        self.batch_idx = 0
        self.stop_training = False

    def reset(self) -> None:
        """Prepare for a new ``fit``: counters back to zero, a fresh summary."""
        self._zero()
        self.summary = Summary(self.summary.name)
        self.experiment_time = time.strftime("%Y-%m-%d-%H-%M-%S")

    def reset_for_test(self) -> None:
        """Prepare for ``test``: keeps the step and epoch reached by training."""
        self.mode = "test"
        self.ds_id = ""
        self.batch_idx = 0
        self.stop_training = False
        if not self.experiment_time:
            self.experiment_time = time.strftime("%Y-%m-%d-%H-%M-%S")

    def write_summary(self, key: str, value: Any) -> None:
        """Record ``value`` at ``summary.history[mode][key][global_step]``."""
        self.summary.history[self.mode][key][self.global_step] = value

    def __repr__(self) -> str:
        return (
            f"System(mode={self.mode!r}, ds_id={self.ds_id!r}, global_step={self.global_step}, "
            f"epoch_idx={self.epoch_idx}, batch_idx={self.batch_idx}, stop_training={self.stop_training})"
        )


class Trace:
    """Base class of everything that watches or steers the training loop.

    The Estimator calls the hooks in this order (``fit`` on the left, ``test`` on the right)::

        fit()                                         test()
        =====                                         ======
        on_begin                                      on_begin
          |                                             |
          +--> epoch e = 1 .. epochs                    +--> on_epoch_begin   [test]
          |      on_epoch_begin   [train]               |      for each dataset id:
          |        for each batch:                      |        for each batch:
          |          on_batch_begin                     |          on_batch_begin
          |          (network step: predictions)        |          (network step)
          |          on_batch_end                       |          on_batch_end
          |      on_epoch_end     [train]               |    on_epoch_end     [test]
          |      on_epoch_begin   [eval]                |
          |        for each dataset id:                 on_end
          |          for each batch:
          |            on_batch_begin
          |            (network step)
          |            on_batch_end
          |      on_epoch_end     [eval]
          |      (stop here if system.stop_training)
          +--<
        on_end

    Only traces whose ``mode`` contains the current mode run (and, for batch hooks, whose
    ``ds_id`` admits the current dataset). Inside each hook round the traces run in an order
    that puts every trace after the traces producing its ``inputs`` (see
    :func:`xaikit.trace.sort_traces`).

    Args:
        inputs: Keys this trace reads from the data; used to order traces. ``"*"`` means it reads
            everything and must run last.
        outputs: Keys this trace writes.
        mode: Modes it runs in: ``None`` (all), a mode, several, or ``"!train"`` (all but train).
        ds_id: Dataset ids it runs on: ``None`` (all), ids, or ``"!ds1"`` (all but ``ds1``).

    Attributes:
        system: The run's :class:`System`, set by the Estimator before ``on_begin``. It is not
            pickled with the trace.
        monitor_names: Keys the trace wants averaged over evaluation and logged (like losses).
    """

    system: System
    inputs: list[str]
    outputs: list[str]
    mode: frozenset[str]
    ds_id: set[str]

    def __init__(
        self,
        inputs: str | Iterable[str] | None = None,
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
        ds_id: str | Iterable[str] | None = None,
    ) -> None:
        self.inputs = to_list(inputs, "inputs")
        self.outputs = to_list(outputs, "outputs")
        if "*" in self.outputs:
            raise XaikitValueError(f"outputs cannot contain '*'; got {self.outputs!r}")
        self.mode = parse_modes(mode)
        self.ds_id = parse_ds_ids(ds_id)
        self.monitor_names: set[str] = set()

    # ---- hooks -------------------------------------------------------------------------------
    def on_begin(self, data: Data) -> None:
        """Runs once when ``fit`` or ``test`` starts."""

    def on_epoch_begin(self, data: Data) -> None:
        """Runs at the start of each epoch of a mode this trace runs in."""

    def on_batch_begin(self, data: Data) -> None:
        """Runs before the network sees a batch; ``data`` holds the batch."""

    def on_batch_end(self, data: Data) -> None:
        """Runs after the network step; ``data`` holds the batch, the predictions and earlier writes."""

    def on_epoch_end(self, data: Data) -> None:
        """Runs at the end of each epoch; values written with log here are printed on the epoch line."""

    def on_end(self, data: Data) -> None:
        """Runs once when ``fit`` or ``test`` ends (also after an early stop)."""

    # ---- helpers ----------------------------------------------------------------------------
    def get_outputs(self, ds_ids: Iterable[str] | None = None) -> list[str]:
        """The keys this trace writes when it runs on the given dataset ids."""
        return list(self.outputs)

    def runs_in(self, mode: str | None = None, ds_id: str | None = None) -> bool:
        """Whether this trace runs in ``mode`` (and on dataset ``ds_id`` when given)."""
        if mode is not None and mode not in self.mode:
            return False
        return ds_id is None or ds_id_matches(self.ds_id, ds_id)

    def state_dict(self) -> dict[str, Any]:
        """The trace's state as a plain dict (everything but ``system``), for checkpoints."""
        return {k: v for k, v in self.__dict__.items() if k != "system"}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state produced by :meth:`state_dict`."""
        if not isinstance(state, Mapping):
            raise XaikitTypeError(f"state must be a mapping from state_dict(); got {describe(state)}")
        self.__dict__.update({k: v for k, v in state.items() if k != "system"})

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        parts = []
        if self.inputs:
            parts.append(f"inputs={self.inputs}")
        if self.outputs:
            parts.append(f"outputs={self.outputs}")
        if self.mode != ALL_MODES:
            parts.append(f"mode={sorted(self.mode)}")
        if self.ds_id:
            parts.append(f"ds_id={sorted(self.ds_id)}")
        return f"{type(self).__name__}({', '.join(parts)})"
