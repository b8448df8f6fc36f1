"""Run xaikit traces inside ``lightning.Trainer.fit`` through a Lightning ``Callback``.

:class:`XaikitCallback` maps Lightning's hooks onto the trace life cycle of the
:class:`~xaikit.estimator.Estimator`: one ``"train"`` epoch per training epoch, one ``"eval"``
epoch per validation run, in that order (the sanity-check validation that Lightning runs before
training is not an epoch for the traces). What each batch gives the traces:

* the batch, a dict as it comes or a tuple/list named by ``batch_keys`` (e.g.
  ``("x", "y", "index")``);
* what ``training_step`` / ``validation_step`` returned: a dict's entries under their own names
  (or only the ones ``step_outputs`` maps, renamed); a tensor counts as ``{"loss": tensor}``,
  as Lightning itself reads it. Return the predictions from the step, e.g.
  ``{"loss": loss, "y_pred": logits}``, and they cost nothing more;
* what ``predict(module, batch)`` computes, when the step returns only the loss: ``y_pred``
  (or a dict of values), from one more forward pass under ``torch.no_grad()`` with the module in
  eval mode (its train/eval flags restored after), so training is left as it was. In training
  batches it sees the weights after that batch's optimizer step.

Tensors are detached and copied to the host once per batch, and only in modes where some trace
runs (the metric and XAI traces run in ``"eval"`` by default: training batches then cost
nothing). Trace epoch ends run with gradients enabled, also inside Lightning's
``torch.inference_mode`` validation loop, so a ``Saliency`` trace built on the LightningModule
(or the network inside it) works there; it explains with ``torch.autograd.grad`` with respect
to the inputs only (no parameter ``.grad`` is touched) and gives every submodule back its
train/eval flag.

Scalars the traces log at an epoch end (``accuracy``, ...) are logged with ``pl_module.log`` as
``val_<name>`` (eval epochs) or ``train_<name>`` (train epochs), so the trainer's loggers,
``trainer.callback_metrics``, ``ModelCheckpoint(monitor=...)`` and ``EarlyStopping`` see them;
they are also kept in :attr:`XaikitCallback.history`. Everything the traces write (saliency
``ImgData`` grids, tracker histories at the end of ``fit``) is in
:attr:`XaikitCallback.results`.

Only ``Trainer.fit`` drives the traces (``validate``/``test``/``predict`` runs are ignored). In
a multi-process run (DDP) each process runs the traces on its own share of the data. Lightning
2.x: the callback derives from ``lightning.pytorch.Callback`` (from ``pytorch_lightning.Callback``
where only the standalone ``pytorch_lightning`` package is installed); a
``pytorch_lightning.Trainer`` runs it too.

Example:
    >>> from xaikit.integrations.lightning import XaikitCallback
    >>> from xaikit.trace.metric import Accuracy
    >>> cb = XaikitCallback([Accuracy(true_key="y", pred_key="y_pred")], batch_keys=("x", "y"))
    >>> trainer = lightning.Trainer(max_epochs=3, callbacks=[cb])  # doctest: +SKIP
    >>> trainer.fit(module, train_loader, val_loader)  # doctest: +SKIP
    >>> cb.history["val_accuracy"]  # doctest: +SKIP
    {1: 0.83, 2: 0.91, 3: 0.94}
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.integrations.torch import TorchTraceRunner
from xaikit.summary import ValWithError

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package: the same classes under the old name
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError as exc:
        raise ImportError(
            'xaikit.integrations.lightning needs Lightning 2.x: pip install "xaikit[lightning]"'
        ) from exc

__all__ = ["XaikitCallback"]

#: the modes of the runner for Lightning's training and validation loops
TRAIN, EVAL = "train", "eval"


@contextlib.contextmanager
def _grad_enabled() -> Iterator[None]:
    """Autograd on, also inside Lightning's ``torch.inference_mode`` validation loop."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


@contextlib.contextmanager
def _eval_no_grad(module: torch.nn.Module) -> Iterator[None]:
    """The module in eval mode under ``torch.no_grad``; every submodule's flag restored after."""
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, flag in flags:
            m.training = flag


def _scalar(value: Any) -> float | None:
    """A logged value as a float, or ``None`` when it is not one number (vectors, text, images)."""
    if isinstance(value, ValWithError):
        return float(value.mid)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        return float(value.reshape(()))
    return None


def _length(values: Mapping[str, Any]) -> int | None:
    for value in values.values():
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return None


def _shuffled(loader: Any) -> bool:
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, torch.utils.data.RandomSampler):
        return True
    return bool(getattr(sampler, "shuffle", False))


class XaikitCallback(pl.Callback):
    """A Lightning callback that runs xaikit traces during ``Trainer.fit``.

    Hooks, and what the traces see:

    | Lightning | traces |
    | --- | --- |
    | ``on_fit_start`` | ``on_begin`` |
    | ``on_train_epoch_start`` | ``on_epoch_begin``, ``"train"`` mode, epoch ``current_epoch + 1`` |
    | ``on_train_batch_end`` | ``on_batch_end``: the batch, the step's outputs, ``predict`` |
    | ``on_validation_epoch_start`` | ends the train epoch when its batches are done, then ``on_epoch_begin``, ``"eval"`` mode, the same epoch number; nothing during the sanity check |
    | ``on_validation_batch_end`` | ``on_batch_end`` |
    | ``on_validation_epoch_end`` | ``on_epoch_end``; scalars logged as ``val_<name>`` |
    | ``on_train_epoch_end`` | ``on_epoch_end`` (unless ended already); scalars logged as ``train_<name>`` |
    | ``on_fit_end`` | ``on_end``: tracker histories into :attr:`results` |

    A validation run in the middle of a training epoch (``val_check_interval < 1``) is an eval
    epoch of its own; the train epoch is paused meanwhile and goes on after it. Only the loop's
    counters are paused: a trace that runs in both modes (``mode=None``, e.g. a metric) starts
    its eval epoch afresh and so forgets the train batches before the pause; give such traces
    one mode each when validating mid-epoch. Several
    validation loaders feed one eval epoch. The global step of the traces counts training
    batches.

    Args:
        traces: traces or schedulers of traces (``Saliency`` built on the LightningModule or its
            inner network).
        batch_keys: names of the elements of tuple/list batches, e.g. ``("x", "y", "index")``;
            dict batches keep their keys.
        step_outputs: which entries of the dict that ``training_step``/``validation_step``
            returns reach the traces, and under which names: ``{"logits": "y_pred"}``; ``None``:
            every entry under its own name. A tensor returned by the step is ``{"loss": tensor}``.
            Entries missing from a step's return value are skipped.
        predict: ``predict(module, batch) -> tensor or dict``: predictions computed after each
            step, for steps that return only the loss. ``batch`` is the named batch (device
            tensors); a tensor result is stored under ``pred_key``. It runs under
            ``torch.no_grad()`` with the module in eval mode.
        pred_key: the key of a tensor returned by ``predict``.
        index_key: when set, a batch has no such key and a running trace reads it (e.g.
            ``InstanceTracker("index", ...)``), the samples' positions in the epoch (0, 1, ... in
            loader order, per validation loader) are added under it. A shuffled loader is
            refused: return the index from your ``Dataset`` instead.
        log: log the traces' scalars with ``pl_module.log``; a dict is passed to it as keyword
            arguments (e.g. ``{"prog_bar": True}``); ``False``: do not log.
        prefixes: the name prefixes of logged values, per mode.

    Attributes:
        runner: the underlying :class:`~xaikit.integrations.torch.TorchTraceRunner`
            (``runner.system`` is the :class:`~xaikit.trace.System` the traces see).
        history: ``{logged name: {epoch: value}}`` of every scalar logged at an epoch end, e.g.
            ``history["val_accuracy"][2]`` (with several validations in an epoch, the last).
        results: every value the traces wrote, the last one per key (``"saliency"``: an
            ``ImgData``; after ``fit``, the trackers' lists of ``Summary``).
    """

    def __init__(
        self,
        traces: Any,
        batch_keys: Sequence[str] = ("x", "y"),
        step_outputs: Mapping[str, str] | None = None,
        predict: Callable[[Any, dict[str, Any]], Any] | None = None,
        pred_key: str = "y_pred",
        index_key: str | None = None,
        log: bool | Mapping[str, Any] = True,
        prefixes: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(batch_keys, str) or not all(isinstance(k, str) for k in batch_keys):
            raise XaikitTypeError(f"batch_keys must be a sequence of key names; got {describe(batch_keys)}")
        if step_outputs is not None and (
            not isinstance(step_outputs, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in step_outputs.items())
        ):
            raise XaikitTypeError(
                "step_outputs must be a dict {key returned by the step: key for the traces} or None; "
                f"got {describe(step_outputs)}"
            )
        if predict is not None and not callable(predict):
            raise XaikitTypeError(
                f"predict must be a function (module, batch) -> predictions; got {describe(predict)}"
            )
        for name, value in (("pred_key", pred_key), ("index_key", index_key)):
            if value is not None and (not isinstance(value, str) or not value):
                raise XaikitTypeError(f"{name} must be a non-empty string; got {describe(value)}")
        if not isinstance(log, (bool, Mapping)):
            raise XaikitTypeError(
                f"log must be True, False or a dict of pl_module.log arguments; got {describe(log)}"
            )
        names = {TRAIN: "train_", EVAL: "val_"}
        if prefixes is not None:
            if (
                not isinstance(prefixes, Mapping)
                or set(prefixes) - set(names)
                or not all(isinstance(v, str) for v in prefixes.values())
            ):
                raise XaikitValueError(
                    f"prefixes must be a dict {{mode: str}} with modes among {sorted(names)}; "
                    f"got {describe(prefixes)}"
                )
            names.update(prefixes)
        self.runner = TorchTraceRunner(traces, batch_keys=batch_keys)
        self.step_outputs = dict(step_outputs) if step_outputs is not None else None
        self.predict = predict
        self.pred_key = pred_key
        self.index_key = index_key
        self.log_kwargs: dict[str, Any] | None = None
        if log is not False:
            self.log_kwargs = dict(log) if isinstance(log, Mapping) else {}
        self.prefixes = names
        self.history: dict[str, dict[int, float]] = {}
        self.results: dict[str, Any] = {}
        self._fitting = False
        self._open: str | None = None  # the mode of the runner's open epoch
        self._paused: dict[str, Any] | None = None  # a train epoch paused by mid-epoch validation
        self._train_batches = 0
        self._train_logs: dict[str, Any] | None = None  # ended, waiting for on_train_epoch_end
        self._positions: dict[tuple[str, int], int] = {}
        self._checked = False

    # ---- Lightning hooks -----------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        epochs = trainer.max_epochs if isinstance(trainer.max_epochs, int) and trainer.max_epochs > 0 else 1
        self.history, self.results = {}, {}
        self._open, self._paused, self._train_logs = None, None, None
        self.runner.on_begin()
        self._keep()
        self.runner.system.total_epochs = epochs
        self._fitting = True

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._fitting:
            return
        self._begin(TRAIN, trainer)
        self._train_batches = 0
        self._train_logs = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._open != TRAIN:
            return
        self._train_batches += 1
        self._batch(trainer, pl_module, outputs, batch, 0)

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._fitting or trainer.sanity_checking:
            return
        if self._open == TRAIN:
            if self._train_done(trainer):
                self._end_train(trainer)
            else:  # validation inside the epoch: pause the train epoch, go on after
                self._paused = self._pause()
        self._begin(EVAL, trainer)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._open != EVAL:
            return
        self._batch(trainer, pl_module, outputs, batch, dataloader_idx)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._open != EVAL:
            return
        logs = self._end(trainer)
        self._log(pl_module, logs, EVAL, trainer)
        if self._paused is not None:
            self._resume(self._paused)
            self._paused = None

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._open == TRAIN:
            self._end_train(trainer)
        if self._train_logs is not None:
            self._log(pl_module, self._train_logs, TRAIN, trainer)
            self._train_logs = None

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._fitting:
            return
        if self._open is not None:  # interrupted inside an epoch
            self._end(trainer)
        self._paused = None
        with _grad_enabled():
            self.runner.on_end()
        self._keep()
        self._fitting = False

    # ---- the runner ----------------------------------------------------------------------------
    def _begin(self, mode: str, trainer: Any) -> None:
        self.runner.on_epoch_begin(mode, epoch=int(trainer.current_epoch) + 1)
        self._keep()
        self._open = mode
        self._positions = {k: v for k, v in self._positions.items() if k[0] != mode}
        self._checked = False

    def _end(self, trainer: Any) -> dict[str, Any]:
        with _grad_enabled():
            logs = self.runner.on_epoch_end()
        self._keep()
        self._open = None
        if self.runner.system.stop_training:
            trainer.should_stop = True
        return logs

    def _end_train(self, trainer: Any) -> None:
        self._train_logs = self._end(trainer)

    def _train_done(self, trainer: Any) -> bool:
        """Whether the open train epoch has seen its last batch (validation at the epoch's end)."""
        total = trainer.num_training_batches
        if isinstance(total, (int, float)) and self._train_batches >= total:
            return True
        progress = getattr(getattr(trainer.fit_loop, "epoch_loop", None), "batch_progress", None)
        return bool(getattr(progress, "is_last_batch", False)) or bool(trainer.should_stop)

    def _pause(self) -> dict[str, Any]:
        state = self.runner.pause_epoch()
        self._open = None
        return state

    def _resume(self, state: dict[str, Any]) -> None:
        self.runner.resume_epoch(state)
        self._open = TRAIN

    def _keep(self) -> None:
        """Keep what the traces wrote in the last hook round."""
        self.results.update(self.runner.outputs)

    def _batch(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, loader: int) -> None:
        if not self.runner.active:  # no trace runs in this mode: count the batch, copy nothing
            self.runner.on_batch_end({}, {})
            return
        named = dict(self.runner.named(batch))
        mode = self._open or EVAL
        key = self.index_key
        if key is not None and key not in named and any(key in t.inputs for t in self.runner.active):
            named[key] = self._index(trainer, named, mode, loader)
        values = self._step_values(outputs, mode)
        if self.predict is not None:
            with _eval_no_grad(pl_module):
                predicted = self.predict(pl_module, named)
            if isinstance(predicted, Mapping):
                values.update(predicted)
            elif isinstance(predicted, torch.Tensor):
                values[self.pred_key] = predicted
            else:
                raise XaikitTypeError(
                    f"predict must return a tensor (stored as {self.pred_key!r}) or a dict of tensors; "
                    f"got {describe(predicted)}"
                )
        if not self._checked:
            self._check_inputs(named, values, mode)
            self._checked = True
        self.runner.on_batch_end(named, values)

    def _step_values(self, outputs: Any, mode: str) -> dict[str, Any]:
        step = "training_step" if mode == TRAIN else "validation_step"
        if outputs is None:
            return {}
        if isinstance(outputs, torch.Tensor):
            outputs = {"loss": outputs}
        if not isinstance(outputs, Mapping):
            raise XaikitTypeError(
                f"{step} returned {describe(outputs)}; XaikitCallback reads a dict of tensors or a loss tensor"
            )
        if self.step_outputs is None:
            return {str(k): v for k, v in outputs.items()}
        return {new: outputs[old] for old, new in self.step_outputs.items() if old in outputs}

    def _index(self, trainer: Any, named: Mapping[str, Any], mode: str, loader: int) -> np.ndarray:
        source = trainer.train_dataloader if mode == TRAIN else trainer.val_dataloaders
        if isinstance(source, Sequence):
            source = source[loader] if loader < len(source) else None
        if _shuffled(source):
            raise XaikitValueError(
                f"index_key={self.index_key!r} numbers samples by their position in the loader, but the "
                f"{mode} loader shuffles; return the index from your Dataset (and name it in batch_keys) instead"
            )
        n = _length(named)
        if n is None:
            raise XaikitValueError(
                f"index_key={self.index_key!r}: the batch holds no tensor to count samples from; it has {sorted(named)}"
            )
        start = self._positions.get((mode, loader), 0)
        self._positions[(mode, loader)] = start + n
        return np.arange(start, start + n)

    def _check_inputs(self, named: Mapping[str, Any], values: Mapping[str, Any], mode: str) -> None:
        """Name the option that fixes a key a trace reads and nobody provides."""
        written = {k for t in self.runner.system.traces for k in t.outputs}
        have = set(named) | set(values) | written
        for trace in self.runner.active:
            missing = [k for k in trace.inputs if k != "*" and k not in have]
            if missing:
                step = "training_step" if mode == TRAIN else "validation_step"
                raise XaikitValueError(
                    f"{type(trace).__name__} reads {missing} in {mode!r} epochs, but the batch has "
                    f"{sorted(named)} (named by batch_keys) and {step} gave {sorted(values)}; return "
                    "them from the step in a dict, rename them with step_outputs=, or compute them "
                    "with predict="
                )

    def _log(self, pl_module: Any, logs: Mapping[str, Any], mode: str, trainer: Any) -> None:
        epoch = int(trainer.current_epoch) + 1
        for key, value in logs.items():
            number = _scalar(value)
            if number is None:
                continue
            name = f"{self.prefixes[mode]}{key}"
            self.history.setdefault(name, {})[epoch] = number
            if self.log_kwargs is not None:
                pl_module.log(name, number, **self.log_kwargs)
