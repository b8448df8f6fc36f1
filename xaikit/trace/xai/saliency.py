"""The ``Saliency`` trace: saliency masks of a few fixed samples, painted as an ``ImgData`` grid.

Its columns are method records (:class:`xaikit.xai.Method`): the core gradient methods that
``smoothing=`` and ``integrating=`` switch on, then every ``methods=`` entry, each titled with
its record's title and checked against its record's options when the trace is built. At the end
of an epoch the samples are prepared once (on the model's device, in its layout) and the
explained classes pinned once (one forward pass of the samples); every column then runs through
``xaikit.xai.internal.run`` on those inputs and classes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import get_backend, to_number
from xaikit.backend.outputs import check_output
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.layout import channel_axis_of
from xaikit.targets import Class, is_target
from xaikit.trace.base import Data, Trace, to_list
from xaikit.trace.xai._samples import SampleCollector
from xaikit.xai import Method, get_method, method_names
from xaikit.xai.internal import (
    check_max_batch,
    fresh_seed,
    merge_model_kwargs,
    pin,
    prepare,
    run,
    to_display,
)

__all__ = ["Saliency", "invert_mapping", "to_names"]

#: the ``overlay=`` name of the vanilla column (the reference's bare mask key); the other core
#: columns go by their record's title in lower case (``"smoothed"``, ``"integrated"``, ``"smint"``)
_VANILLA_OVERLAY = "saliency"
#: the colour and mark of a prediction that differs from the label
WRONG_COLOR = "red"
WRONG_MARK = " ✗"


def invert_mapping(label_mapping: Mapping[str, Any] | None, name: str = "label_mapping") -> dict[Any, str]:
    """``{name: value}`` (the datasets' ``label_mapping``) → ``{value: name}`` for display."""
    if label_mapping is None:
        return {}
    if not isinstance(label_mapping, Mapping):
        raise XaikitTypeError(
            f"{name} must be a dict {{class name: value}} or None; got {describe(label_mapping)}"
        )
    out: dict[Any, str] = {}
    for key, value in label_mapping.items():
        v = value.item() if isinstance(value, np.generic) else value
        out[v] = str(key)
    return out


def _class_ids(value: Any) -> np.ndarray:
    arr = to_number(value)
    if arr.ndim >= 2 and arr.shape[-1] > 1:  # one-hot or scores
        arr = arr.argmax(axis=-1)
    return arr.reshape(arr.shape[0] if arr.ndim else 1, -1)[:, 0]


def to_names(value: Any, inverse: Mapping[Any, str]) -> list[str]:
    """Per-sample class ids (or one-hot / scores) as display strings, mapped through ``inverse``."""
    out = []
    for v in _class_ids(value).tolist():
        key = int(v) if isinstance(v, float) and float(v).is_integer() else v
        out.append(inverse.get(key, str(key)))
    return out


def _check_target(target: Any, columns: Sequence[_Column]) -> None:
    """A target object (:mod:`xaikit.targets`) only where every column's method takes one."""
    if not is_target(target) or isinstance(target, Class):
        return
    refusing = [c.method.name for c in columns if not c.method.target_objects]
    if refusing:
        raise XaikitValueError(
            f"target={type(target).__name__}(...) (a target object) is not taken by the method(s) "
            f"{refusing} of this trace's columns; drop them from methods= or pass target= classes"
        )


def _parse_integrating(integrating: Any, smoothing: int) -> tuple[int, int]:
    if isinstance(integrating, bool):
        raise XaikitTypeError(
            f"integrating must be an int or (n_integration, n_smoothing); got {integrating!r}"
        )
    if isinstance(integrating, (int, np.integer)):
        return int(integrating), (int(smoothing) if integrating else 0)
    if isinstance(integrating, Sequence) and not isinstance(integrating, str) and len(integrating) == 2:
        pair = tuple(integrating)
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
            return int(pair[0]), int(pair[1])
    raise XaikitTypeError(
        f"integrating must be an int or (n_integration, n_smoothing); got {describe(integrating)}"
    )


def maps_grid(
    cols: dict[str, Any],
    colormaps: dict[str, str],
    title: str | None,
    text_colors: Mapping[str, Sequence[str | None]] | None = None,
) -> Any:
    """The ImgData of a saliency or CAM trace: the columns ``cols``, each painted with its
    colormap in ``colormaps``; the maps (the ``"inferno"`` columns) on [0, 1], each with a colorbar."""
    from xaikit.viz import ImgData

    maps = [name for name, cmap in colormaps.items() if cmap == "inferno"]
    return ImgData(
        cols,
        colormap="inferno",
        colormaps=colormaps,
        vranges=dict.fromkeys(maps, (0.0, 1.0)),
        colorbars=maps,
        text_colors=text_colors,
        figure_title=title,
    )


def _strips(values: np.ndarray) -> np.ndarray:
    """A (B, F) tabular batch (or its masks) as B images of one row, (B, 1, F), so that the grid
    draws one strip per sample (a 2-D array would read as one image); other ranks unchanged."""
    return values[:, None, :] if values.ndim == 2 else values


def _mask_axis(mask_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> int | None:
    """The channel axis of the inputs, read off a gradient display mask (one channel, kept)."""
    if len(mask_shape) != len(x_shape) or len(x_shape) < 4:
        return None
    for a in (1, len(x_shape) - 1):
        if mask_shape[a] == 1 and mask_shape[:a] + mask_shape[a + 1 :] == x_shape[:a] + x_shape[a + 1 :]:
            return a
    return None


@dataclass(frozen=True)
class _Column:
    """One mask column of the grid: a method record and its own options (checked against the
    record and filled with its defaults when the trace is built)."""

    method: Method
    options: dict[str, Any]
    core: bool = False

    @property
    def prefix(self) -> str:
        """The column's title before the mask name: the record's title, none for vanilla (the
        reference's bare mask key)."""
        return "" if self.core and self.method.name == "vanilla" else self.method.title

    @property
    def overlay_name(self) -> str:
        """How ``overlay=`` names a core column in messages (any alias or title finds it)."""
        return _VANILLA_OVERLAY if not self.prefix else self.method.title.lower()


def _own_options(record: Method, options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A column's options checked against its record (an unknown one is refused with the list of
    the record's) and filled with the record's defaults; ``output`` and ``model_kwargs`` are the
    trace's own, the same for every column."""
    try:
        shared, own = record.split_options(dict(options))
    except XaikitError as err:
        raise type(err)(f"{where}: {err}") from None
    if shared:
        raise XaikitValueError(
            f"{where}: {sorted(shared)} are the trace's own arguments (output=, model_kwargs=), the "
            "same for every column; pass them to Saliency"
        )
    return own


def _core_columns(smoothing: int, n_int: int, n_smint: int, spread: float) -> list[_Column]:
    """The columns of the core gradient methods (``method_names(core=True)``, in record order:
    vanilla, SmoothGrad, Integrated Gradients, SmInt) that the trace's reference arguments switch
    on: vanilla always, SmoothGrad with ``smoothing`` noise samples, IG with ``n_int`` steps, SmInt
    with both ``n_smint`` noise samples and ``n_int`` steps."""
    asked: dict[str, dict[str, Any] | None] = {
        "vanilla": {},
        "smoothgrad": {"nsamples": smoothing, "stdev_spread": spread} if smoothing else None,
        "integrated": {"nsamples": n_int} if n_int else None,
        "smint": (
            {"nsamples": n_smint, "nintegration": n_int, "stdev_spread": spread}
            if n_int and n_smint
            else None
        ),
    }
    out = []
    for name in method_names(core=True):
        options = asked.get(name)
        if options is not None:
            record = get_method(name)
            out.append(_Column(record, _own_options(record, options, f"Saliency ({name})"), core=True))
    return out


def _method_display(record: Method, raw: np.ndarray, axis: int | None) -> np.ndarray:
    """A ``methods`` column's display mask in [0, 1], shaped like the gradient masks: input-shaped
    attributions summed over the channel ``axis``; a (B, H, W) map scaled by its maximum and
    given that axis back (size 1)."""
    values = np.asarray(raw, dtype=np.float64)
    if record.result == "input":
        return to_display(values, axis)
    shown = to_display(values, None, percentile=100.0)
    return shown if axis is None else np.expand_dims(shown, axis)


def _check_methods(methods: Any, inputs: list[str]) -> list[_Column]:
    """``methods=`` checked: one column per method, in the given order, its options checked
    against its record."""
    if methods is None:
        return []
    if isinstance(methods, str):
        methods = [methods]
    if isinstance(methods, Mapping):
        items = list(methods.items())
    elif isinstance(methods, Sequence):
        items = [(m, {}) for m in methods]
    else:
        raise XaikitTypeError(
            f"methods must be a list of method names or a dict {{name: options}}; got {describe(methods)}"
        )
    out: dict[str, _Column] = {}
    for name, options in items:
        record = get_method(name, "methods")
        if record.core:
            raise XaikitValueError(
                f"methods={name!r}: the trace computes the gradient masks itself (vanilla always; "
                "smoothing= for SmoothGrad, integrating= for Integrated Gradients and SmInt); methods "
                "adds the others (a CAM, occlusion, RISE)"
            )
        if not isinstance(options, Mapping):
            raise XaikitTypeError(f"methods[{name!r}] must be a dict of options; got {describe(options)}")
        out[record.name] = _Column(record, _own_options(record, options, f"methods[{name!r}]"))
    if out and len(inputs) != 1:
        raise XaikitValueError(
            f"methods needs a model with a single input (the image explained); model_inputs is {inputs}"
        )
    return list(out.values())


def _overlay_column(
    overlay: Any, core: list[_Column], extra: list[_Column], smoothing: Any, integrating: Any
) -> _Column | None:
    """The column drawn over the image: ``overlay`` by any name of its method (None: the last
    core column, the most refined gradient mask computed)."""
    if overlay is None:
        return None
    try:
        record: Method | None = get_method(overlay, "overlay")
    except XaikitError:
        record = None
    for column in core + extra:
        if record is not None and column.method.name == record.name:
            return column
    if record is not None and record.core:
        raise XaikitValueError(
            f"overlay={overlay!r} needs that mask, which this trace does not compute "
            f"(smoothing={smoothing!r}, integrating={integrating!r}); computed: "
            f"{[c.overlay_name for c in core]}"
        )
    every_core = sorted(_Column(get_method(m), {}, core=True).overlay_name for m in method_names(core=True))
    raise XaikitValueError(
        f"overlay must be None, one of {every_core} or one of methods "
        f"{[c.method.name for c in extra]}; got {describe(overlay)}"
    )


def _display_options(denormalize: Any, inputs: list[str]) -> dict[str, Any]:
    """``denormalize=`` checked: ``{model input: Denormalizer or None}``."""
    from xaikit.denormalize import to_denormalizer

    if isinstance(denormalize, Mapping):
        unknown = sorted(map(str, set(denormalize) - set(inputs)))
        if unknown:
            raise XaikitValueError(f"denormalize names {unknown}, which are not model_inputs {inputs}")
        return {k: to_denormalizer(v, f"denormalize[{k!r}]") for k, v in denormalize.items()}
    den = to_denormalizer(denormalize)
    return dict.fromkeys(inputs, den)


class Saliency(Trace):
    """Explain the same few samples at the end of every epoch it runs and paint them as a grid.

    Meant to run every few epochs inside a :class:`~xaikit.schedule.RepeatScheduler`; its output
    (an :class:`~xaikit.viz.ImgData`, written without logging) is drawn by ``ImageSaver``,
    ``ImageViewer`` or ``TensorBoard``.

    Columns, left to right: the label (``class_key``, mapped to names), each model output's
    predicted class (mapped; with ``class_key``, a prediction that differs from the label is red,
    bold and marked ``✗``), then for each model input: the image, ``"<input> <mask>"`` (a mask as a
    heat map over the greyscale image, by :func:`xaikit.viz.overlay`; ``overlay`` picks which),
    ``<mask>`` (vanilla gradients), ``"Smoothed <mask>"`` (SmoothGrad), ``"Integrated <mask>"``
    (Integrated Gradients), ``"SmInt <mask>"``, then ``"<title> <mask>"`` for each of
    ``methods`` (the method record's title). Single-channel input images are drawn grey, masks
    with ``"inferno"`` and a colorbar. The grid's title names the mode and epoch.

    The seconds spent computing the masks and building the grid are logged on the line of the
    epoch the trace ran in, as ``saliency_time(sec)`` (``<outputs>_time(sec)`` for another
    ``outputs``).

    Every epoch the trace runs, the samples are prepared once (checked, moved to the model's
    device and layout) and the classes pinned once: one forward pass of the samples gives the
    predictions shown and the class every column explains (the label column shows the truth
    beside it). Each column is then one fused run of its method on those inputs, the same masks
    :class:`~xaikit.xai.SaliencyNet` and :func:`~xaikit.xai.explain` give for the same seed.

    Args:
        model: the torch or Keras model to explain.
        model_inputs: the batch key(s) fed to the model.
        model_outputs: the key(s) under which the predicted class is shown.
        class_key: a batch key with the true label, shown as the first column.
        label_mapping: ``{class name: value}`` to show names instead of numbers; values missing
            from it are shown as numbers.
        outputs: the key the ``ImgData`` is written under (and the mask's name; with several
            model inputs the masks are ``"<outputs>_<input>"``).
        samples: ``None`` (the first batch of the first epoch it runs), an int ``n`` (the first
            ``n`` samples) or a dict ``{key: array}`` of samples holding ``model_inputs`` (and
            ``class_key``). The same samples are explained every time.
        mode: modes to run in.
        ds_id: dataset ids to run on.
        smoothing: SmoothGrad noise samples (0: no smoothed column).
        integrating: ``(n_integration, n_smoothing)``: Integrated Gradients steps and the noise
            samples of SmInt (0: no SmInt column), or an int ``n_integration`` (SmInt then uses
            ``smoothing`` samples); 0 drops both columns.
        seed: seed of the noise and random baselines (the same masks for the same model).
        stdev_spread: SmoothGrad noise level (fraction of each sample's value range).
        max_batch: rows per fused forward+backward pass of the engine (``"auto"``).
        overlay: the mask drawn over the image: ``"smint"``, ``"integrated"``, ``"smoothed"``,
            ``"saliency"`` (vanilla) or one of ``methods`` (any name, alias or title of the
            method); ``None`` (default): the most refined gradient mask computed, SmInt >
            integrated > smoothed > vanilla.
        overlay_smooth: sigma in pixels of the blur of the overlaid mask (see
            :func:`xaikit.viz.overlay`); ``"auto"`` (default): max(1, the image's longer side /
            32); 0 draws the raw mask.
        output: the model output to explain when the model returns several: an index, a dict
            key or an attribute name such as ``"logits"`` (see :class:`~xaikit.xai.SaliencyNet`).
        model_kwargs: extra keyword arguments of the model's forward call (e.g. a flag); a tensor
            or array whose first axis is the number of samples is per-sample.
        methods: more methods shown as columns after the gradient ones, each by any name
            :func:`xaikit.xai.explain` takes (``"gradcam"``, ``"occlusion"``, ``"rise"``, a method
            of your own registered with :func:`xaikit.xai.register_method`, ...; ``xk.xai.METHODS``
            lists them), or a dict ``{name: {option: value}}`` with the method's own options
            (``layer``, ``window``, ``nsamples``, ...; checked against its record when the trace is
            built). Column ``"<title> <mask>"`` (e.g. ``"Grad-CAM saliency"``), explaining the
            same predicted class with the trace's ``seed``, ``max_batch``, ``output`` and
            ``model_kwargs``; needs a single model input.
        target: what every column explains: None (each sample's predicted class), classes (one
            or one per sample), or a target object of :mod:`xaikit.targets` (a region of a
            segmentation output, a regression unit, a similarity, a callable; its per-sample
            fields follow the samples). With an object every column's method must take one, and
            the explained output's column shows the target's clean score instead of a class.
        denormalize: how to show normalized model inputs: ``(mean, std)`` of their
            normalization (numbers or one per channel), so that the image and overlay columns
            show ``x * std + mean`` (see :mod:`xaikit.denormalize`), or a function images ->
            display images; a dict ``{model input: either}`` for several inputs. The masks are
            computed on the inputs as the model takes them.

    Example:
        >>> from xaikit.schedule import RepeatScheduler
        >>> trace = RepeatScheduler([Saliency(model, "x", "y_pred", class_key="y", samples=5),
        ...                          None, None])  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        model_inputs: str | Sequence[str],
        model_outputs: str | Sequence[str],
        class_key: str | None = None,
        label_mapping: Mapping[str, Any] | None = None,
        outputs: str = "saliency",
        samples: int | Mapping[str, Any] | None = None,
        mode: str | Iterable[str] | None = ("eval", "test"),
        ds_id: str | Iterable[str] | None = None,
        smoothing: int = 25,
        integrating: int | tuple[int, int] = (100, 6),
        seed: int | None = 0,
        stdev_spread: float = 0.15,
        max_batch: int | str = "auto",
        overlay: str | None = None,
        overlay_smooth: float | str = "auto",
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        denormalize: Any = None,
        methods: Sequence[str] | Mapping[str, Mapping[str, Any]] | None = None,
        target: Any = None,
    ) -> None:
        inputs = to_list(model_inputs, "model_inputs")
        extra = _check_methods(methods, inputs)
        outs = to_list(model_outputs, "model_outputs")
        if not inputs:
            raise XaikitValueError("model_inputs must name at least one batch key; got none")
        if not outs:
            raise XaikitValueError("model_outputs must name at least one key; got none")
        if class_key is not None and (not isinstance(class_key, str) or not class_key):
            raise XaikitTypeError(f"class_key must be a batch key (str) or None; got {describe(class_key)}")
        if not isinstance(outputs, str) or not outputs:
            raise XaikitTypeError(f"outputs must be a non-empty string; got {describe(outputs)}")
        check_int(smoothing, "smoothing", 0)
        n_int, n_smint = _parse_integrating(integrating, int(smoothing))
        if n_int < 0 or n_smint < 0:
            raise XaikitValueError(f"integrating values must be >= 0; got {integrating!r}")
        core = _core_columns(int(smoothing), n_int, n_smint if n_int else 0, stdev_spread)
        #: every mask column, left to right: the core gradient methods, then ``methods``
        self.columns: list[_Column] = core + extra
        _check_target(target, self.columns)
        #: what every column explains: None (the predicted class), classes, or a target object
        self.target = target
        #: ``methods=`` as checked: ``{canonical name: its options, defaults filled in}``
        self.methods = {c.method.name: c.options for c in extra}
        self._overlay = _overlay_column(overlay, core, extra, smoothing, integrating)
        if overlay_smooth != "auto":
            check_number(overlay_smooth, "overlay_smooth", low=0)
        self.overlay_smooth = overlay_smooth
        self._display = _display_options(denormalize, inputs)
        self.time_key = f"{outputs}_time(sec)"
        super().__init__(
            inputs=([class_key] if class_key else []) + inputs,
            outputs=[outputs, self.time_key],
            mode=mode,
            ds_id=ds_id,
        )
        self.overlay = overlay
        self.model = model
        self.model_inputs = inputs
        self.model_outputs = outs
        self.class_key = class_key
        self._inverse = invert_mapping(label_mapping)
        self.label_mapping = dict(label_mapping) if label_mapping is not None else None
        self.smoothing = int(smoothing)
        self.n_integration = n_int
        self.n_smint = n_smint if n_int else 0
        self.seed = seed
        self.stdev_spread = stdev_spread
        self.mask_keys = [outputs] if len(inputs) == 1 else [f"{outputs}_{k}" for k in inputs]
        keys = inputs + ([class_key] if class_key else [])
        self.collector = SampleCollector(samples, keys=keys)
        get_backend(model)  # a model of a known framework (the backend is not kept: the trace pickles)
        self.max_batch = check_max_batch(max_batch)
        self.output = check_output(output)
        self.model_kwargs = merge_model_kwargs(model_kwargs, None)
        #: the last ImgData painted (``None`` before the first run)
        self.images: Any = None

    # ---- hooks -----------------------------------------------------------------------------------
    def on_batch_end(self, data: Data) -> None:
        if self.collector.wants(self.system.mode):
            missing = [k for k in self.collector.keys or [] if k not in data]
            if missing:
                raise XaikitValueError(
                    f"Saliency: key(s) {missing} (model_inputs/class_key) are not in the batch; "
                    f"it has {sorted(map(str, data))}"
                )
            self.collector.collect(self.system.mode, data)

    def on_epoch_end(self, data: Data) -> None:
        samples = self.collector.finish(self.system.mode)
        if samples is None:
            return
        start = time.perf_counter()
        title = f"{self.outputs[0]}: {self.system.mode} epoch {self.system.epoch_idx}"
        self.images = self.explain(samples, title=title)
        data.write_without_log(self.outputs[0], self.images)
        data.write_with_log(self.time_key, round(time.perf_counter() - start, 2))

    # ---- work ------------------------------------------------------------------------------------
    @property
    def bk(self) -> Any:
        """The model's framework backend."""
        return get_backend(self.model)

    def _model_batch(self, samples: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The model inputs of the samples as float32 arrays (``prepare`` moves them into the
        model's layout; the masks come back in theirs)."""
        out = []
        for key in self.model_inputs:
            x = np.asarray(samples[key])
            if np.issubdtype(x.dtype, np.integer) or x.dtype == np.float64:
                x = x.astype(np.float32)
            out.append(x)
        return out

    def explain(self, samples: Mapping[str, Any], title: str | None = None) -> Any:
        """Compute every mask for ``samples`` (a dict holding ``model_inputs``) and build the grid.

        Args:
            samples: ``{key: array}`` with the ``model_inputs`` (and ``class_key``).
            title: the grid's title (``figure_title`` of the ImgData).

        Returns:
            The :class:`~xaikit.viz.ImgData` the trace writes.
        """
        missing = [k for k in self.model_inputs if k not in samples]
        if missing:
            raise XaikitValueError(
                f"Saliency: model input key(s) {missing} not found in the samples; they have {sorted(samples)}"
            )
        predictions, columns = self.masks(samples)
        best = self._overlay if self._overlay is not None else [c for c in self.columns if c.core][-1]
        return self._grid(samples, predictions, columns, best.prefix, title)

    def masks(self, samples: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, list[np.ndarray]]]:
        """Every column's display masks of ``samples``, from one preparation of the inputs and
        one pinning of the explained classes (the model's predictions: one forward pass).

        Returns:
            ``({model_outputs key: predictions}, {column prefix: [display mask per model
            input]})``; a ``methods`` column holds one mask, shaped like the gradient masks (the
            input's layout, one channel).
        """
        values = self._model_batch(samples)
        bk = self.bk
        inp = prepare(bk, self.model, values, self.model_inputs, None, self.model_kwargs)
        seed = fresh_seed() if self.seed is None else self.seed
        columns: dict[str, list[np.ndarray]] = {}
        with bk.inference(self.model):
            # the one forward pass: predictions and classes (or the target object resolved)
            pinned = pin(inp, self.target, self.output, objects=True)
            predictions = self._predictions(inp, pinned)
            for column in self.columns:
                result, _ = run(
                    column.method, inp, pinned, column.options, seed=seed, max_batch=self.max_batch,
                    output=self.output, where=" in the Saliency trace",
                )  # fmt: skip
                if column.core:
                    shown = [to_display(a, axis) for a, axis in zip(result.values, inp.user_axes)]
                else:
                    axis = _mask_axis(columns[""][0].shape, values[0].shape)
                    shown = [_method_display(column.method, result.values[0], axis)]
                columns[column.prefix] = [m.astype(np.float32) for m in shown]
        return predictions, columns

    def _explained_key(self) -> str:
        """The ``model_outputs`` key of the explained output."""
        if len(self.model_outputs) == 1:
            return self.model_outputs[0]
        return self.model_outputs[self.output] if isinstance(self.output, int) else ""

    def _predictions(self, inp: Any, pinned: Any) -> dict[str, np.ndarray]:
        """``{model_outputs key: predictions}``: the explained output's from the pinning pass;
        with several keys, outputs 0, 1, ... (one more forward pass for each other output)."""
        explained = pinned.output if pinned.spec is not None else pinned.predictions  # a target's scores
        if len(self.model_outputs) == 1:
            return {self.model_outputs[0]: np.asarray(explained)}
        return {
            key: np.asarray(explained if k == self.output else pin(inp, None, k).predictions)
            for k, key in enumerate(self.model_outputs)
        }

    def _grid(
        self,
        samples: Mapping[str, Any],
        predictions: Mapping[str, Any],
        columns: Mapping[str, list[np.ndarray]],
        best: str,
        title: str | None,
    ) -> Any:
        """The ImgData: labels, predictions (wrong ones red and marked), images, overlays, masks."""
        from xaikit.viz import overlay

        cols: dict[str, Any] = {}
        cmaps: dict[str, str] = {}
        text_colors: dict[str, list[str | None]] = {}
        labels = None
        if self.class_key is not None and self.class_key in samples:
            labels = _class_ids(samples[self.class_key])
            cols[self.class_key] = to_names(samples[self.class_key], self._inverse)
        for key in self.model_outputs:
            if is_target(self.target) and not isinstance(self.target, Class) and key == self._explained_key():
                cols[key] = [f"{v:.4g}" for v in np.asarray(predictions[key], dtype=np.float64)]
                continue  # a target object's clean score: not a class to compare with the label
            names = to_names(predictions[key], self._inverse)
            if labels is not None:
                wrong = [bool(w) for w in _class_ids(predictions[key]) != labels]
                names = [n + WRONG_MARK if w else n for n, w in zip(names, wrong)]
                text_colors[key] = [WRONG_COLOR if w else None for w in wrong]
            cols[key] = names
        for i, key in enumerate(self.model_inputs):
            given = np.asarray(samples[key])
            image = given
            if self._display.get(key) is not None and given.ndim in (3, 4):
                image = self._display[key].apply(given)
            image = _strips(image)
            cols[key] = image
            axis = channel_axis_of(image.shape, prefer_first=False)
            single = image.ndim == 3 or (axis is not None and image.shape[axis] == 1)  # (B, 1, H, W) too
            if single:
                cmaps[key] = "gray"
            mask_key = self.mask_keys[i]
            if given.ndim in (3, 4):  # no overlay of tabular rows
                cols[f"{key} {mask_key}"] = overlay(image, columns[best][i], smooth=self._smooth(image))
        for prefix, masks in columns.items():
            for mask_key, mask in zip(self.mask_keys, masks):
                name = f"{prefix} {mask_key}" if prefix else mask_key
                cols[name] = _strips(mask)
                cmaps[name] = "inferno"
        return maps_grid(cols, cmaps, title, text_colors)

    def _smooth(self, image: np.ndarray) -> float:
        if self.overlay_smooth != "auto":
            return float(self.overlay_smooth)
        side = max(image.shape[1:]) if image.ndim >= 3 else 0
        return max(1.0, side / 32.0)

    def __repr__(self) -> str:
        return (
            f"Saliency(model_inputs={self.model_inputs}, model_outputs={self.model_outputs}, "
            f"class_key={self.class_key!r}, outputs={self.outputs}, mode={sorted(self.mode)})"
        )
