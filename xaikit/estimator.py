"""The training loop: :class:`Estimator` runs a Pipeline through a Network and calls the traces.

Example:
    >>> import xaikit as xk
    >>> est = xk.Estimator(pipeline=pipeline, network=network, epochs=2)  # doctest: +SKIP
    >>> summary = est.fit()  # doctest: +SKIP
    >>> est.test()  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.schedule import Scheduler, get_current_items
from xaikit.summary import Summary
from xaikit.trace.base import Data, System, Trace, to_list
from xaikit.trace.essential import EvalEssential, Logger, TestEssential, TrainEssential
from xaikit.trace.sort import sort_traces

__all__ = ["Estimator"]


def _check_count(name: str, value: Any, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    return check_int(value, name, 1, allow_none=allow_none)


def _check_traces(traces: Any) -> list[Trace | Scheduler[Trace]]:
    if traces is None:
        return []
    items = [traces] if isinstance(traces, (Trace, Scheduler)) else traces
    if not isinstance(items, Iterable) or isinstance(items, (str, dict)):
        raise XaikitTypeError(
            f"traces must be a Trace, a scheduler of traces or a list of them; got {describe(traces)}"
        )
    out: list[Trace | Scheduler[Trace]] = []
    for i, item in enumerate(items):
        values = item.get_all_values() if isinstance(item, Scheduler) else [item]
        for value in values:
            if value is not None and not isinstance(value, Trace):
                raise XaikitTypeError(
                    f"traces[{i}] must be a Trace (or a scheduler of Traces and None); got {describe(value)}"
                )
        out.append(item)
    return out


class Estimator:
    """Trains, evaluates and tests a network on a pipeline, calling the traces on the way.

    Args:
        pipeline: The data: an ``xk.Pipeline`` (``get_modes``, ``get_ds_ids``, ``get_loader``).
        network: The model steps: an ``xk.Network`` (``load_epoch``, ``run_step``, ``get_loss_keys``).
        epochs: How many training epochs ``fit`` runs (each followed by an evaluation epoch when
            the pipeline has evaluation data).
        traces: Traces, schedulers of traces (``None`` values switch a trace off for an epoch),
            or a list of them.
        log_steps: Print a training line every this many steps (and at step 1); ``None`` prints
            nothing (the summary is still recorded).
        max_train_steps_per_epoch: Stop each training epoch after this many batches.
        max_eval_steps_per_epoch: Stop each evaluation (and test) epoch, per dataset, after this
            many batches.
        monitor_names: Extra keys averaged over evaluation and logged like the losses (the
            network's loss keys are always monitored).

    Attributes:
        system: The :class:`~xaikit.trace.System` the traces see.
        traces: The user's traces as given.

    Early stop: a trace sets ``system.stop_training = True``; the loop finishes the current
    batch, runs ``on_epoch_end`` of that epoch and then ``on_end``.
    """

    def __init__(
        self,
        pipeline: Any,
        network: Any,
        epochs: int,
        traces: Trace | Scheduler[Trace] | Iterable[Trace | Scheduler[Trace]] | None = None,
        log_steps: int | None = 100,
        max_train_steps_per_epoch: int | None = None,
        max_eval_steps_per_epoch: int | None = None,
        monitor_names: str | Iterable[str] | None = None,
    ) -> None:
        for name, needed in (
            ("pipeline", ("get_modes", "get_ds_ids", "get_loader")),
            ("network", ("load_epoch", "run_step", "get_loss_keys")),
        ):
            obj = pipeline if name == "pipeline" else network
            missing = [m for m in needed if not callable(getattr(obj, m, None))]
            if missing:
                raise XaikitTypeError(
                    f"{name} must be an xk.{name.capitalize()} (it needs {', '.join(needed)}); "
                    f"got {describe(obj)} without {', '.join(missing)}"
                )
        epochs_checked = _check_count("epochs", epochs, allow_none=False)
        if log_steps == 0:
            log_steps = None
        self.pipeline = pipeline
        self.network = network
        self.traces = _check_traces(traces)
        self.monitor_names = set(to_list(monitor_names, "monitor_names"))
        self.system = System(
            network=network,
            pipeline=pipeline,
            total_epochs=int(epochs_checked or 1),
            log_steps=_check_count("log_steps", log_steps),
            max_train_steps_per_epoch=_check_count("max_train_steps_per_epoch", max_train_steps_per_epoch),
            max_eval_steps_per_epoch=_check_count("max_eval_steps_per_epoch", max_eval_steps_per_epoch),
        )

    # ---- public ---------------------------------------------------------------------------
    def fit(self, summary: str | None = None) -> Summary:
        """Train for ``epochs`` epochs (with an evaluation epoch after each when there is eval data).

        Args:
            summary: A name for the run's summary (used as a label in plots).

        Returns:
            The run's :class:`~xaikit.summary.Summary` (``history[mode][key][step]``).
        """
        modes = set(self.pipeline.get_modes())
        if "train" not in modes:
            raise XaikitValueError(f"fit needs training data; pipeline has data for modes {sorted(modes)}")
        self.system.reset()
        self.system.summary = Summary(summary)
        run_modes = ["train", "eval"] if "eval" in modes else ["train"]
        self._run(run_modes)
        return self.system.summary

    def test(self, summary: str | None = None) -> Summary:
        """Run one test epoch over every test dataset (after ``fit``, or on its own).

        Args:
            summary: A name for the summary when ``test`` runs without ``fit`` before it.

        Returns:
            The run's summary, with the test values under ``history["test"]``.
        """
        modes = set(self.pipeline.get_modes())
        if "test" not in modes:
            raise XaikitValueError(f"test needs test data; the pipeline has data for modes {sorted(modes)}")
        if summary is not None:
            self.system.summary = Summary(summary)
        self.system.reset_for_test()
        self._run(["test"])
        return self.system.summary

    # ---- the loop --------------------------------------------------------------------------
    def _monitor_names(self) -> set[str]:
        names = set(self.network.get_loss_keys()) | self.monitor_names
        for trace in get_current_items(self.traces):
            names |= set(getattr(trace, "monitor_names", ()))
        return names

    def _run(self, run_modes: list[str]) -> None:
        system = self.system
        monitor = self._monitor_names()
        if run_modes == ["test"]:
            essentials: list[Trace] = [TestEssential(monitor)]
        else:
            essentials = [TrainEssential(monitor), EvalEssential(monitor)]
        self._all_items: list[Trace | Scheduler[Trace]] = [*essentials, *self.traces, Logger()]
        every = sort_traces(get_current_items(self._all_items, run_modes))
        for trace in every:
            trace.system = system
        system.traces = every
        system.mode = run_modes[0]

        data = Data()
        for trace in every:
            trace.on_begin(data)
        if run_modes == ["test"]:
            system.epoch_idx = max(system.epoch_idx, 1)
            if not system.stop_training:
                self._run_epoch("test")
        else:
            for epoch in range(1, system.total_epochs + 1):
                if system.stop_training:
                    break
                system.epoch_idx = epoch
                for mode in run_modes:
                    self._run_epoch(mode)
                    if system.stop_training:
                        break
            system.mode = "train"
        system.ds_id = ""
        data = Data()
        for trace in every:
            trace.on_end(data)

    def _run_epoch(self, mode: str) -> None:
        system = self.system
        system.mode = mode
        system.ds_id = ""
        epoch = system.epoch_idx
        ds_ids = list(self.pipeline.get_ds_ids(mode)) or [""]
        active = get_current_items(self._all_items, mode, epoch)
        traces = [t for t in sort_traces(active, ds_ids) if any(t.runs_in(ds_id=d) for d in ds_ids)]
        max_steps = system.max_train_steps_per_epoch if mode == "train" else system.max_eval_steps_per_epoch

        self.network.load_epoch(mode, epoch)
        try:
            data = Data()
            for trace in traces:
                trace.on_epoch_begin(data)
            for ds_id in ds_ids:
                if system.stop_training:
                    break
                system.ds_id = ds_id
                self._run_ds(mode, epoch, ds_id, [t for t in traces if t.runs_in(ds_id=ds_id)], max_steps)
            system.ds_id = ""
            for trace in traces:
                trace.on_epoch_end(data)
        finally:
            unload = getattr(self.network, "unload_epoch", None)
            if callable(unload):
                unload()

    def _run_ds(self, mode: str, epoch: int, ds_id: str, traces: list[Trace], max_steps: int | None) -> None:
        system = self.system
        loader: Iterable[Any] = self.pipeline.get_loader(mode, epoch, ds_id)
        if max_steps is not None:
            loader = itertools.islice(loader, max_steps)
        checked = False
        for batch_idx, batch in enumerate(self._progress(loader, mode, epoch, ds_id, max_steps), start=1):
            system.batch_idx = batch_idx
            if mode == "train":
                system.global_step += 1
            data = Data(batch)
            for trace in traces:
                trace.on_batch_begin(data)
            prediction = self.network.run_step(batch, mode)
            data.add_layer(prediction if prediction is not None else {})
            if not checked:
                self._check_inputs(traces, data, mode, epoch, ds_id)
                checked = True
            for trace in traces:
                trace.on_batch_end(data)
            if system.stop_training:
                break

    def _check_inputs(self, traces: list[Trace], data: Data, mode: str, epoch: int, ds_id: str) -> None:
        """Fail early on a trace input that nothing can ever provide (a typo, a missing op).

        Keys written by a trace of this run that is off in this epoch or mode (a scheduled
        ``Saliency``, say) are allowed: the reading trace must cope with their absence.
        """
        written = {k for t in self.system.traces for k in t.get_outputs([ds_id])}
        for trace in traces:
            if getattr(trace, "_runs_first", False) or "*" in trace.inputs:
                continue
            for key in trace.inputs:
                if key not in data and key not in written:
                    where = f"mode {mode!r}, epoch {epoch}" + (f", dataset {ds_id!r}" if ds_id else "")
                    raise XaikitValueError(
                        f"trace {type(trace).__name__} reads key {key!r}, which no trace of this run writes "
                        f"and the data does not hold; data keys: {sorted(data.keys())}; keys written by "
                        f"traces: {sorted(written)} ({where})"
                    )

    def _progress(
        self, loader: Iterable[Any], mode: str, epoch: int, ds_id: str, max_steps: int | None
    ) -> Iterator[Any]:
        if not sys.stdout.isatty():
            yield from loader
            return
        from tqdm import tqdm

        total = None
        steps = getattr(self.pipeline, "steps_per_epoch", None)
        if callable(steps):
            total = steps(mode, ds_id)
        if max_steps is not None:
            total = min(total, max_steps) if total else max_steps
        desc = f"{mode} {epoch}" + (f" {ds_id}" if ds_id else "")
        with tqdm(loader, total=total, desc=desc, leave=False, dynamic_ncols=True) as bar:
            yield from bar
