"""The ``Saliency`` trace: saliency masks of a few fixed samples, painted as an ``ImgData`` grid."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from xaikit.backend import to_number
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.layout import channel_axis_of
from xaikit.trace.base import Data, Trace, to_list
from xaikit.trace.xai._samples import SampleCollector
from xaikit.xai.registry import canonical, method_names
from xaikit.xai.registry import title as method_title

__all__ = ["Saliency", "invert_mapping", "to_names"]

#: ``overlay=`` choices → the mask column prefix ("" is the vanilla column)
_OVERLAY_PREFIX = {"saliency": "", "smoothed": "Smoothed", "integrated": "Integrated", "smint": "SmInt"}
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


def _check_methods(methods: Any, inputs: list[str]) -> dict[str, dict[str, Any]]:
    """``methods=`` checked: ``{canonical name: options}`` in the given order."""
    if methods is None:
        return {}
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
    out: dict[str, dict[str, Any]] = {}
    for name, options in items:
        m = canonical(name, "methods")
        if m in method_names(core=True):
            raise XaikitValueError(
                f"methods={name!r}: the trace computes the gradient masks itself (vanilla always; "
                "smoothing= for SmoothGrad, integrating= for Integrated Gradients and SmInt); methods "
                "adds the others (a CAM, occlusion, RISE)"
            )
        if not isinstance(options, Mapping):
            raise XaikitTypeError(f"methods[{name!r}] must be a dict of options; got {describe(options)}")
        out[m] = dict(options)
    if out and len(inputs) != 1:
        raise XaikitValueError(
            f"methods needs a model with a single input (the image explained); model_inputs is {inputs}"
        )
    return out


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
    (Integrated Gradients), ``"SmInt <mask>"``. Single-channel input images are drawn grey, masks
    with ``"inferno"`` and a colorbar. The grid's title names the mode and epoch.

    The seconds spent computing the masks and building the grid are logged on the line of the
    epoch the trace ran in, as ``saliency_time(sec)`` (``<outputs>_time(sec)`` for another
    ``outputs``).

    Each method is one fused :class:`~xaikit.xai.SaliencyNet` call over all the samples. The
    class explained is the model's prediction (the label column shows the truth beside it).

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
            ``"saliency"`` (vanilla) or one of ``methods``; ``None`` (default): the most refined
            gradient mask computed, SmInt > integrated > smoothed > vanilla.
        overlay_smooth: sigma in pixels of the blur of the overlaid mask (see
            :func:`xaikit.viz.overlay`); ``"auto"`` (default): max(1, the image's longer side /
            32); 0 draws the raw mask.
        output: the model output to explain when the model returns several: an index, a dict
            key or an attribute name such as ``"logits"`` (see :class:`~xaikit.xai.SaliencyNet`).
        model_kwargs: extra keyword arguments of the model's forward call (e.g. a flag); a tensor
            or array whose first axis is the number of samples is per-sample.
        methods: more methods shown as columns after the gradient ones, each by name as
            :func:`xaikit.xai.explain` takes it (``"gradcam"``, ``"occlusion"``, ``"rise"``, ...; see
            :mod:`xaikit.xai.registry`), or a dict ``{name: {option: value}}`` with the method's
            options (``layer``, ``window``, ``n_masks``, ...). Column ``"<title> <mask>"`` (e.g.
            ``"Grad-CAM saliency"``), explaining the same predicted class with the trace's
            ``seed``, ``max_batch``, ``output`` and ``model_kwargs``; needs a single model input.
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
    ) -> None:
        inputs = to_list(model_inputs, "model_inputs")
        self.methods = _check_methods(methods, inputs)
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
        computed = {"saliency": True, "smoothed": bool(smoothing), "integrated": bool(n_int)}
        computed["smint"] = bool(n_int and n_smint)
        extra = {method_title(m): m for m in self.methods}
        if overlay is not None and overlay not in _OVERLAY_PREFIX:
            try:
                overlay_method = canonical(overlay, "overlay")
            except XaikitError:
                overlay_method = None
            if overlay_method not in self.methods:
                raise XaikitValueError(
                    f"overlay must be None, one of {sorted(_OVERLAY_PREFIX)} or one of methods "
                    f"{list(self.methods)}; got {describe(overlay)}"
                )
            overlay = method_title(overlay_method)
        if overlay is not None and overlay not in extra and not computed[overlay]:
            raise XaikitValueError(
                f"overlay={overlay!r} needs that mask, which this trace does not compute "
                f"(smoothing={smoothing!r}, integrating={integrating!r}); computed: "
                f"{[k for k, v in computed.items() if v]}"
            )
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
        from xaikit.xai import SaliencyNet

        self.salnet = SaliencyNet(
            model,
            model_inputs=inputs,
            model_outputs=outs,
            outputs=self.mask_keys,
            seed=seed,
            max_batch=max_batch,
            output=output,
            model_kwargs=model_kwargs,
        )
        self.output = self.salnet.output
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
    def _model_batch(self, samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The samples as float32 arrays (SaliencyNet moves them into the model's layout and
        gives the masks back in theirs)."""
        batch = dict(samples)
        for key in self.model_inputs:
            x = np.asarray(batch[key])
            if np.issubdtype(x.dtype, np.integer) or x.dtype == np.float64:
                x = x.astype(np.float32)
            batch[key] = x
        return batch

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
        batch = self._model_batch(samples)

        def back(res: Mapping[str, Any]) -> list[np.ndarray]:
            return [to_number(res[key]).astype(np.float32) for key in self.mask_keys]

        vanilla = self.salnet.get_masks(batch)
        columns: dict[str, list[np.ndarray]] = {"": back(vanilla)}
        if self.smoothing:
            res = self.salnet.get_smoothed_masks(
                batch, stdev_spread=self.stdev_spread, nsamples=self.smoothing
            )
            columns["Smoothed"] = back(res)
        if self.n_integration:
            res = self.salnet.get_integrated_masks(batch, nsamples=self.n_integration)
            columns["Integrated"] = back(res)
            if self.n_smint:
                res = self.salnet.get_smoothed_masks(
                    batch,
                    stdev_spread=self.stdev_spread,
                    nsamples=self.n_smint,
                    nintegration=self.n_integration,
                )
                columns["SmInt"] = back(res)
        if self.methods:
            x = batch[self.model_inputs[0]]
            axis = _mask_axis(columns[""][0].shape, x.shape)
            predicted = _class_ids(vanilla[self.model_outputs[0]]).astype(np.int64)  # the class explained
            for method, options in self.methods.items():
                columns[method_title(method)] = [self._method_mask(method, options, x, axis, predicted)]
        if self.overlay is None:
            best = [c for c in columns if c in _OVERLAY_PREFIX.values()][-1]
        else:
            best = _OVERLAY_PREFIX.get(self.overlay, self.overlay)
        return self._grid(samples, vanilla, columns, best, title)

    def _method_mask(
        self, method: str, options: Mapping[str, Any], x: np.ndarray, axis: int | None, target: np.ndarray
    ) -> np.ndarray:
        """One of ``methods`` on the samples, explaining ``target`` (the class the gradient masks
        explain), as a display mask in [0, 1] shaped like the gradient masks (the input's
        layout, one channel)."""
        from xaikit.xai import explain
        from xaikit.xai.internal import to_display

        net = self.salnet
        kw = {"seed": net.seed, "max_batch": net.max_batch, "output": net.output, **options}
        if net.model_kwargs is not None:
            kw.setdefault("model_kwargs", net.model_kwargs)
        raw = np.asarray(explain(self.model, x, target=target, method=method, **kw), dtype=np.float64)
        if raw.shape == x.shape:  # input-shaped attributions
            return to_display(raw, axis)
        shown = to_display(raw, None, percentile=100.0)  # a (B, H, W) map
        return shown if axis is None else np.expand_dims(shown, axis)

    def _grid(
        self,
        samples: Mapping[str, Any],
        vanilla: Mapping[str, Any],
        columns: Mapping[str, list[np.ndarray]],
        best: str,
        title: str | None,
    ) -> Any:
        """The ImgData: labels, predictions (wrong ones red and marked), images, overlays, masks."""
        from xaikit.viz import ImgData, overlay

        cols: dict[str, Any] = {}
        cmaps: dict[str, str] = {}
        text_colors: dict[str, list[str | None]] = {}
        labels = None
        if self.class_key is not None and self.class_key in samples:
            labels = _class_ids(samples[self.class_key])
            cols[self.class_key] = to_names(samples[self.class_key], self._inverse)
        for key in self.model_outputs:
            names = to_names(vanilla[key], self._inverse)
            if labels is not None:
                wrong = [bool(w) for w in _class_ids(vanilla[key]) != labels]
                names = [n + WRONG_MARK if w else n for n, w in zip(names, wrong)]
                text_colors[key] = [WRONG_COLOR if w else None for w in wrong]
            cols[key] = names
        for i, key in enumerate(self.model_inputs):
            given = np.asarray(samples[key])
            image = given
            if self._display.get(key) is not None and given.ndim in (3, 4):
                image = self._display[key].apply(given, self.salnet.channel_axis)
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
        mask_cols = [name for name, cmap in cmaps.items() if cmap == "inferno"]
        return ImgData(
            cols,
            colormap="inferno",
            colormaps=cmaps,
            vranges=dict.fromkeys(mask_cols, (0.0, 1.0)),
            colorbars=mask_cols,
            text_colors=text_colors,
            figure_title=title,
        )

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
