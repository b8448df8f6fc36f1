"""Output traces: save, show or log what other traces produce.

* :class:`ImageSaver` writes each ``ImgData`` (e.g. from ``Saliency``) or history (the list of
  ``Summary`` from ``LabelTracker`` / ``InstanceTracker``) to ``<key>_<mode>_epoch_<n>.png``,
  and, with ``save_data=True``, its data beside it (``.npz`` cells / ``.json`` history, read by
  ``xaikit report``).
* :class:`ImageViewer` shows them where a display exists, and otherwise saves them.
* :class:`TensorBoard` logs the logged metrics as scalars and chosen keys as images.

Painting goes through :mod:`xaikit.viz` (headless, atomic files).

Example:
    >>> from xaikit.trace.io import ImageSaver
    >>> ImageSaver(inputs=["saliency", "ce_by_y"], save_dir="runs/images").keys
    ['saliency', 'ce_by_y']
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.trace.base import Data, Trace, to_list

__all__ = ["ImageSaver", "ImageViewer", "TensorBoard"]


def _check_dpi(dpi: Any) -> float:
    return float(check_number(dpi, "dpi", low=0, low_open=True))


def _check_dir(path: Any, name: str) -> str:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise XaikitTypeError(f"{name} must be a folder path (str or PathLike); got {describe(path)}")
    return str(path)


class ImageSaver(Trace):
    """Save images and histories that other traces write, as PNG files.

    For each key of ``inputs`` present in the data at an epoch end (in the trace's modes) or at
    the end of the run, the value is painted and written atomically to
    ``<save_dir>/<key>_<mode>_epoch_<epoch>.png``: an :class:`~xaikit.viz.ImgData` as its grid, a
    ``Summary`` or list of ``Summary`` (trackers) by :func:`~xaikit.viz.plot_history`, a
    matplotlib figure as it is. Keys that are absent (e.g. a ``Saliency`` switched off by its
    scheduler this epoch) are skipped.

    The saver runs after every other trace (its ``inputs`` is ``"*"``; the keys are in
    :attr:`keys`), so it does not need the same scheduler as the trace it draws; at the end of
    the run it warns about keys that no trace ever wrote (a typo, usually).

    With ``save_data=True`` the data behind each picture is also written beside it, for
    :func:`xaikit.viz.report` (``xaikit report``): an ``ImgData`` as ``<same name>.npz`` (its
    columns as painted, images at most 128 px a side) and a tracker history as
    ``<same name>.json`` (the series as numbers); see :mod:`xaikit.viz.run_data`.

    Args:
        inputs: the key(s) to save.
        save_dir: the folder (created when needed).
        dpi: resolution of the PNG files.
        mode: modes whose epoch ends are saved (the end of the run always is).
        ds_id: dataset ids to run on.
        save_data: also write the data of each picture (``.npz`` / ``.json``) beside it.

    Attributes:
        saved: the paths written so far, in order (data files included).
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        save_dir: str | os.PathLike[str] = ".",
        dpi: float = 150,
        mode: str | Iterable[str] | None = ("eval", "test"),
        ds_id: str | Iterable[str] | None = None,
        save_data: bool = False,
    ) -> None:
        keys = to_list(inputs, "inputs")
        if not keys:
            raise XaikitValueError("inputs must name at least one key to save; got none")
        # "*": run after every trace that writes something, and do not require the keys to be
        # written in every epoch (the trace drawing them may be switched off by a scheduler)
        super().__init__(inputs="*", mode=mode, ds_id=ds_id)
        self.keys = keys
        self.save_dir = _check_dir(save_dir, "save_dir")
        self.dpi = _check_dpi(dpi)
        if not isinstance(save_data, bool):
            raise XaikitTypeError(f"save_data must be True or False; got {describe(save_data)}")
        self.save_data = save_data
        self.saved: list[str] = []
        self._found: set[str] = set()

    def on_epoch_end(self, data: Data) -> None:
        self._output(data)

    def on_end(self, data: Data) -> None:
        self._output(data)
        never = [k for k in self.keys if k not in self._found]
        if never:
            warnings.warn(
                f"{type(self).__name__}: no trace wrote {never} during the run; check the key names",
                stacklevel=2,
            )

    def _figures(self, data: Data) -> Iterable[tuple[str, Any, Any]]:
        from xaikit.viz._output import paint_value

        for key in self.keys:
            if key not in data:
                continue
            self._found.add(key)
            value = data[key]
            fig = paint_value(value, title=key, dpi=self.dpi)
            if fig is None:
                if isinstance(value, list) and not value:
                    continue  # an empty history (nothing tracked) has nothing to draw
                raise XaikitTypeError(
                    f"{type(self).__name__} can draw ImgData, Summary, a list of Summary or a figure; "
                    f"key {key!r} holds {describe(value)}"
                )
            yield key, value, fig

    def _path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_.|" else "_" for c in key).replace("|", "_")
        name = f"{safe}_{self.system.mode}_epoch_{self.system.epoch_idx}.png"
        return Path(self.save_dir) / name

    def _output(self, data: Data) -> None:
        from xaikit.viz import save_figure

        for key, value, fig in self._figures(data):
            path = save_figure(fig, self._path(key), dpi=self.dpi)
            self.saved.append(str(path))
            if self.save_data:
                written = _save_data(value, path, key)
                if written is not None:
                    self.saved.append(str(written))


def _save_data(value: Any, png: Path, key: str) -> Path | None:
    """The data behind a saved picture, beside it: an ImgData's cells (``.npz``), a history's
    series (``.json``); None for anything else (a bare figure)."""
    from xaikit.summary import Summary
    from xaikit.viz import ImgData
    from xaikit.viz.run_data import save_cells, save_history

    if isinstance(value, ImgData):
        return save_cells(value, png.with_suffix(".npz"))
    if isinstance(value, Summary) or (
        isinstance(value, list) and value and all(isinstance(s, Summary) for s in value)
    ):
        return save_history(value, png.with_suffix(".json"), title=key)
    return None


class ImageViewer(ImageSaver):
    """Show images and histories that other traces write (notebook or desktop window).

    Where nothing can be shown (a headless machine, the Agg backend) the pictures are saved to
    ``save_dir`` instead, like :class:`ImageSaver`, and a one-time notice says where.

    Args:
        inputs: the key(s) to show.
        mode: modes whose epoch ends are shown (the end of the run always is).
        ds_id: dataset ids to run on.
        save_dir: where pictures go when they cannot be shown.
        dpi: resolution of the pictures.
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        mode: str | Iterable[str] | None = ("eval", "test"),
        ds_id: str | Iterable[str] | None = None,
        save_dir: str | os.PathLike[str] = "xaikit_images",
        dpi: float = 96,
    ) -> None:
        super().__init__(inputs=inputs, save_dir=save_dir, dpi=dpi, mode=mode, ds_id=ds_id)
        self._noticed = False

    def _output(self, data: Data) -> None:
        from xaikit.viz._output import can_show, show_figure

        if can_show():
            for _, _, fig in self._figures(data):
                show_figure(fig)
            return
        before = len(self.saved)
        super()._output(data)
        if len(self.saved) > before and not self._noticed:
            self._noticed = True
            print(
                f"ImageViewer: no display to show images on; saving them to {os.path.abspath(self.save_dir)} "
                "instead (use ImageSaver to choose the folder)"
            )


class TensorBoard(Trace):
    """Write logged metrics (scalars) and chosen images to TensorBoard event files.

    Every value logged in a hook round (losses, metrics: what the ``xaikit-Train``/``-Eval``
    lines print) that is a number is written as a scalar at the global step, one run folder per
    mode: ``<log_dir>/<mode>``. Keys in ``write_images`` are painted with :mod:`xaikit.viz` and
    written as images (``ImgData`` grids, tracker histories).

    Args:
        log_dir: the folder of the event files.
        update_freq: ``"epoch"`` (scalars at epoch ends) or an int ``n`` (also the training
            values every ``n`` steps: the network's loss keys and whatever was logged).
        write_images: key(s) to write as images (at epoch ends and at the end of the run).
        mode: modes to log.

    Example:
        >>> TensorBoard(log_dir="runs/tb", write_images="saliency").write_images
        ['saliency']
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = "logs",
        update_freq: str | int = "epoch",
        write_images: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
    ) -> None:
        images = to_list(write_images, "write_images")
        super().__init__(inputs="*", outputs=None, mode=mode)
        self.log_dir = _check_dir(log_dir, "log_dir")
        if update_freq != "epoch":
            check_int(update_freq, "update_freq", 1, alternative="'epoch' or ")
        self.update_freq = update_freq
        self.write_images = images
        self._writers: dict[str, Any] = {}

    def _writer(self, mode: str) -> Any:
        if mode not in self._writers:
            from tensorboardX import SummaryWriter

            self._writers[mode] = SummaryWriter(logdir=os.path.join(self.log_dir, mode))
        return self._writers[mode]

    def _scalars(self, values: dict[str, Any]) -> None:
        writer = None
        for key, value in values.items():
            number = _scalar(value)
            if number is None:
                continue
            writer = writer or self._writer(self.system.mode)
            writer.add_scalar(key, number, self.system.global_step)

    def _images(self, data: Data) -> None:
        from xaikit.viz._output import figure_to_array, paint_value

        for key in self.write_images:
            if key not in data:
                continue
            fig = paint_value(data[key], title=key)
            if fig is None:
                continue
            self._writer(self.system.mode).add_image(
                key, figure_to_array(fig), self.system.global_step, dataformats="HWC"
            )

    def on_batch_end(self, data: Data) -> None:
        s = self.system
        if s.mode != "train" or self.update_freq == "epoch" or s.global_step % int(self.update_freq):
            return
        values = data.read_logs()
        network = s.network
        losses = network.get_loss_keys() if callable(getattr(network, "get_loss_keys", None)) else ()
        for key in losses:
            if key in data and key not in values:
                values[key] = data[key]
        self._scalars(values)

    def on_epoch_end(self, data: Data) -> None:
        self._scalars(data.read_logs())
        self._images(data)
        for writer in self._writers.values():
            writer.flush()

    def on_end(self, data: Data) -> None:
        self._scalars(data.read_logs())
        self._images(data)
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_writers"] = {}
        return state


def _scalar(value: Any) -> float | None:
    from xaikit.summary import ValWithError

    if isinstance(value, ValWithError):
        return float(value.mid)
    if isinstance(value, (bool, str, bytes)) or value is None:
        return None
    try:
        arr = np.asarray(value if isinstance(value, (int, float, np.ndarray, np.generic)) else _to_np(value))
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind not in "iuf" or arr.size != 1:
        return None  # vectors (per-class metrics) are not scalars
    number = float(arr.reshape(()))
    return number if np.isfinite(number) else None


def _to_np(value: Any) -> Any:
    from xaikit.backend import framework_of, to_number

    return to_number(value) if framework_of(value) else value
