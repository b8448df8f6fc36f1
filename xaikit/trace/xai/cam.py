"""``GradCAM`` and ``EigenCAM`` traces: class-activation maps of a few samples over training.

The reference system's traces of these names take tensors that the Network computed
(``grads``: gradients of one output component with respect to a conv layer; ``activations``: the
layer's output) and paint them over the images. Its Grad-CAM averages the gradients over the
channels without weighting the activations, which is not Grad-CAM as published. These traces
compute the published maps (:mod:`xaikit.xai.cam`), in one of two ways:

* from the model (``model=``, ``layer=``): the trace runs the method on the same fixed samples
  every time (the ``Saliency`` trace's sample rule), with the model as it is at that epoch;
* from batch keys, for a Network that already computes them (``grads=`` *and*
  ``activations=`` for the gradient methods, ``activations=`` for Eigen-CAM): the first
  ``n_samples`` of each epoch, as the reference collects them.

The grid shows the label and prediction columns (mapped through ``label_mapping``), the image,
the map laid over the image (:func:`xaikit.viz.overlay`) and the map itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from xaikit.backend import to_number
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.layout import channel_axis_of
from xaikit.trace.base import Data, Trace
from xaikit.trace.xai._samples import SampleCollector
from xaikit.trace.xai.saliency import _class_ids, invert_mapping, maps_grid, to_names
from xaikit.xai import get_method, method_names

__all__ = ["EigenCAM", "GradCAM"]

log = logging.getLogger(__name__)


def _from_grads() -> list[str]:
    """The CAM methods a layer's activations and their gradients give (the records with a
    ``formula``): what the ``GradCAM`` trace computes from batch keys."""
    return [m for m in method_names("cam") if get_method(m).formula is not None]


def _of_one_class() -> list[str]:
    """The CAM methods the ``GradCAM`` trace runs on the model: the class-activation maps (a
    ``(B, H, W)`` map) but Eigen-CAM, which has its own trace."""
    return [m for m in method_names("cam", result="map") if m != EigenCAM.method]


def _key(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise XaikitTypeError(f"{name} must be a batch key (str) or None; got {describe(value)}")
    return value


def _unit(maps: np.ndarray) -> np.ndarray:
    """Each map scaled by its own maximum to [0, 1] (a map without a positive value: zeros)."""
    m = np.maximum(np.asarray(maps, dtype=np.float64), 0.0)
    top = m.reshape(m.shape[0], -1).max(axis=1)
    scale = np.where(top > 0, top, 1.0)
    return (m / scale.reshape((-1,) + (1,) * (m.ndim - 1))).astype(np.float32)


def _channel_first(layer_value: np.ndarray, first: bool, name: str) -> np.ndarray:
    """A batch-key layer tensor (activations or their gradients) as (B, C, h, w), from the
    framework's layout (``first``: torch's channels first; else Keras's channels last)."""
    arr = np.asarray(layer_value, dtype=np.float64)
    if arr.ndim != 4:
        raise XaikitValueError(
            f"{name} must hold a conv layer's values per sample, (B, C, h, w) or (B, h, w, C); got "
            f"{describe(layer_value)}"
        )
    return arr if first else np.moveaxis(arr, -1, 1)


class _CamTrace(Trace):
    """What the two traces share: samples, the grid, labels and predictions."""

    method = "gradcam"

    def __init__(
        self,
        images: str,
        n_samples: int | None,
        labels: str | None,
        preds: str | None,
        label_mapping: Mapping[str, Any] | None,
        outputs: str,
        mode: str | Iterable[str] | None,
        ds_id: str | Iterable[str] | None,
        model: Any,
        layer: Any,
        keys: list[str],
        output: int | str,
        model_kwargs: Mapping[str, Any] | None,
        overlay_smooth: float,
    ) -> None:
        if _key(images, "images") is None:
            raise XaikitTypeError(f"images must be a batch key (str); got {describe(images)}")
        self.image_key = images
        self.label_key = _key(labels, "labels")
        self.pred_key = _key(preds, "preds")
        if n_samples is not None:
            check_int(n_samples, "n_samples", 1)
        if not isinstance(outputs, str) or not outputs:
            raise XaikitTypeError(f"outputs must be a non-empty string; got {describe(outputs)}")
        self.model = model
        self.layer = layer
        self.output = output
        self.model_kwargs = model_kwargs
        self.overlay_smooth = float(overlay_smooth)
        self._inverse = invert_mapping(label_mapping)
        wanted = [images] + [k for k in (self.label_key, self.pred_key) if k] + keys
        self.layer_keys = keys
        super().__init__(inputs=list(dict.fromkeys(wanted)), outputs=outputs, mode=mode, ds_id=ds_id)
        self.collector = SampleCollector(n_samples, keys=self.inputs)
        #: the last ImgData painted (``None`` before the first run)
        self.images: Any = None
        #: the name of the layer the maps come from (known after the first run in model mode)
        self.layer_name: str | None = None
        #: whether the layer keys are channel-first (torch tensors), read off the first batch
        self._first = False

    def on_batch_end(self, data: Data) -> None:
        mode = self.system.mode
        if self.collector.wants(mode):
            if self.layer_keys and self.layer_keys[0] in data:
                from xaikit.backend import prefers_channel_first

                self._first = prefers_channel_first(data[self.layer_keys[0]], default=self._image_first(data))
            self.collector.collect(mode, data)

    def _image_first(self, data: Mapping[str, Any]) -> bool:
        """For numpy layer keys: channel-first when the images are."""
        image = data.get(self.image_key)
        shape = tuple(getattr(image, "shape", ()))
        return len(shape) == 4 and channel_axis_of(shape, prefer_first=True) == 1

    def on_epoch_end(self, data: Data) -> None:
        samples = self.collector.finish(self.system.mode)
        if self.layer_keys:  # batch keys: the first n_samples of every epoch, as the reference does
            self.collector.reset()
        if samples is None:
            return
        title = f"{self.outputs[0]}: {self.system.mode} epoch {self.system.epoch_idx}"
        self.images = self.paint(samples, title)
        data.write_without_log(self.outputs[0], self.images)

    # ---- work ------------------------------------------------------------------------------------
    def _targets(self, samples: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The class explained: the ``preds`` key's class when there is one, else None (the
        model's own prediction)."""
        if self.pred_key is None:
            return None
        return _class_ids(samples[self.pred_key]).astype(np.int64)

    def maps(self, samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{column title: (B, h, w) maps}`` at the layer's resolution."""
        raise NotImplementedError  # pragma: no cover

    def paint(self, samples: Mapping[str, Any], title: str | None = None) -> Any:
        """The maps of ``samples`` (a dict holding ``images`` and the other keys) as an ImgData."""
        from xaikit.viz import overlay
        from xaikit.xai.internal import upsample

        image = np.asarray(samples[self.image_key])
        if image.ndim not in (3, 4):
            raise XaikitValueError(
                f"{self.image_key!r} must hold images (B, H, W), (B, C, H, W) or (B, H, W, C); got "
                f"{describe(image)}"
            )
        axis = channel_axis_of(image.shape, prefer_first=True) if image.ndim == 4 else None
        size = image.shape[2:] if axis == 1 else image.shape[1:3]
        cols: dict[str, Any] = {}
        for key in (self.label_key, self.pred_key):
            if key is not None:
                cols[key] = to_names(samples[key], self._inverse)
        cols[self.image_key] = image
        cmaps: dict[str, str] = {}
        for name, layer_maps in self.maps(samples).items():
            full = _unit(upsample(np.asarray(layer_maps, dtype=np.float64), (int(size[0]), int(size[1]))))
            cols[f"{self.image_key} {name}"] = overlay(
                image, full, channel_axis=axis, smooth=self.overlay_smooth
            )
            cols[name] = full
            cmaps[name] = "inferno"
        single = image.ndim == 3 or (axis is not None and image.shape[axis] == 1)
        if single:
            cmaps[self.image_key] = "gray"
        return maps_grid(cols, cmaps, title)

    def _explain_raw(self, samples: Mapping[str, np.ndarray], method: str) -> np.ndarray:
        """The method's maps at the layer's resolution (``raw=True``, for a method whose record
        takes it; else the maps ``explain`` gives)."""
        from xaikit.xai import explain

        x = np.asarray(samples[self.image_key])
        if np.issubdtype(x.dtype, np.integer) or x.dtype == np.float64:
            x = x.astype(np.float32)
        takes = get_method(method).options
        kw: dict[str, Any] = {"output": self.output}
        kw.update({k: v for k, v in (("layer", self.layer), ("raw", True)) if k in takes})
        if self.model_kwargs is not None:
            kw["model_kwargs"] = self.model_kwargs
        result = explain(self.model, x, target=self._targets(samples), method=method, **kw)
        if not hasattr(result, "maps"):  # a method without raw=: (B, H, W) maps at the input's size
            return np.asarray(result)
        self._found_layer(result.layer)
        return np.asarray(result.maps)

    def _found_layer(self, name: str) -> None:
        if self.layer_name is None and self.layer is None:
            log.info("%s: explaining layer %r (found automatically)", type(self).__name__, name)
        self.layer_name = name


class GradCAM(_CamTrace):
    """Grad-CAM maps (or another gradient CAM) of a few samples, laid over the images.

    Args:
        images: the batch key of the images (the model's input in model mode).
        grads: the batch key of the gradients of the explained score with respect to a conv
            layer's output, computed in the Network (reference style); needs ``activations``.
        n_samples: how many samples to show (None: the whole first batch).
        labels: the batch key of the true labels (a column).
        preds: the batch key of the predictions (a column; in model mode, the class explained;
            without it, the model's predicted class).
        label_mapping: ``{class name: value}`` to show names instead of numbers.
        outputs: the key the ImgData is written under.
        mode: modes to run in (default: every mode but training).
        ds_id: dataset ids to run on.
        model: the torch or Keras model to explain (model mode).
        layer: the layer explained in model mode (a torch module path such as
            ``"layer4.1.conv2"``, a Keras layer name, the layer object, or None: the last layer
            with a spatial output, logged when found).
        activations: the batch key of that layer's output (with ``grads``).
        method: ``"gradcam"`` (default) or another class-activation map by any name
            (``"gradcam++"``, ``"xgradcam"``, ``"layercam"``, ``"hirescam"``: the methods whose
            record has a ``formula``, the only ones computed from ``grads``/``activations`` keys;
            in model mode also ``"scorecam"`` and a CAM of your own registered with
            :func:`xaikit.xai.register_method`). The column is titled with the method's title.
        output: the model output explained when the model returns several (model mode).
        model_kwargs: extra keyword arguments of the model's forward call (model mode).
        overlay_smooth: sigma in pixels of the blur of the overlaid map (0: none; CAM maps are
            smooth already).

    Model mode explains the same samples every time (the first ``n_samples`` the trace sees in
    a mode, as the ``Saliency`` trace does); key mode shows the first ``n_samples`` of each epoch.

    Example:
        >>> trace = GradCAM("x", model=model, layer="layer4", labels="y", n_samples=5)  # doctest: +SKIP
    """

    def __init__(
        self,
        images: str,
        grads: str | None = None,
        n_samples: int | None = 5,
        labels: str | None = None,
        preds: str | None = None,
        label_mapping: Mapping[str, Any] | None = None,
        outputs: str = "gradcam",
        mode: str | Iterable[str] | None = "!train",
        ds_id: str | Iterable[str] | None = None,
        *,
        model: Any = None,
        layer: Any = None,
        activations: str | None = None,
        method: str = "gradcam",
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        overlay_smooth: float = 0.0,
    ) -> None:
        record = get_method(method)
        self.method = record.name
        grads, activations = _key(grads, "grads"), _key(activations, "activations")
        if self.method not in _of_one_class():
            hint = "Eigen-CAM has its own trace, EigenCAM"
            if record.name != EigenCAM.method:
                hint = f"{record.title} is not a class-activation map: show it as a Saliency trace column, methods=[{record.name!r}]"
            raise XaikitValueError(
                f"GradCAM traces a class-activation map ({', '.join(_of_one_class())}); got "
                f"method={method!r} ({hint})"
            )
        keys: list[str] = []
        if model is None:
            if grads is None or activations is None:
                raise XaikitValueError(
                    "GradCAM needs model= (the trace computes the maps) or both grads= and "
                    "activations= batch keys: Grad-CAM weighs the layer's activations by the "
                    f"gradients, so gradients alone are not enough; got grads={grads!r}, "
                    f"activations={activations!r}. (The reference's GradCAM trace averaged the "
                    "gradients alone; see docs/migrating.md.)"
                )
            if self.method not in _from_grads():
                raise XaikitValueError(
                    f"method={method!r} needs the model (model=): it is not computed from a layer's "
                    f"activations and their gradients; from grads/activations keys: {', '.join(_from_grads())}"
                )
            keys = [activations, grads]
        elif grads is not None or activations is not None:
            raise XaikitValueError(
                "pass either model= (the trace computes the maps) or grads=/activations= batch keys, "
                f"not both; got model and grads={grads!r}, activations={activations!r}"
            )
        self.grad_key, self.activation_key = grads, activations
        super().__init__(
            images, n_samples, labels, preds, label_mapping, outputs, mode, ds_id, model, layer, keys,
            output, model_kwargs, overlay_smooth,
        )  # fmt: skip

    def maps(self, samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        title = get_method(self.method).title
        if self.model is not None:
            return {title: self._explain_raw(samples, self.method)}
        from xaikit.xai.internal import combine

        a = _channel_first(samples[str(self.activation_key)], self._first, "activations")
        da = _channel_first(samples[str(self.grad_key)], self._first, "grads")
        if a.shape != da.shape:
            raise XaikitValueError(
                f"activations {self.activation_key!r} and grads {self.grad_key!r} must have one shape; "
                f"got {a.shape} and {da.shape}"
            )
        return {title: combine(self.method, a, da)}


class EigenCAM(_CamTrace):
    """Eigen-CAM: the principal components of a conv layer's activations, laid over the images.

    Component ``k`` of a sample is the projection of its (h*w, C) activations, centred per
    channel, on their ``k``-th right-singular vector, clipped at 0. An SVD's signs are arbitrary:
    each component's sign is chosen so that it correlates positively with the channel-mean
    activation (the reference left the sign to the SVD, so a component could come out inverted).

    Args:
        images: the batch key of the images.
        activations: the batch key of a conv layer's output computed in the Network (reference
            style), or None with ``model=``.
        n_components: how many principal components to show (a column each).
        n_samples: how many samples to show (None: the whole first batch).
        labels: the batch key of the true labels (a column).
        preds: the batch key of the predictions (a column only: Eigen-CAM needs no target).
        label_mapping: ``{class name: value}`` to show names instead of numbers.
        outputs: the key the ImgData is written under.
        mode: modes to run in (default: every mode but training).
        ds_id: dataset ids to run on.
        model: the torch or Keras model whose layer is decomposed (model mode).
        layer: the layer, as :class:`GradCAM` takes it (None: the last spatial layer).
        output: the model output when the model returns several (model mode).
        model_kwargs: extra keyword arguments of the model's forward call (model mode).
        overlay_smooth: sigma in pixels of the blur of the overlaid map (0: none).

    Example:
        >>> trace = EigenCAM("x", model=model, n_components=2)  # doctest: +SKIP
    """

    method = "eigencam"

    def __init__(
        self,
        images: str,
        activations: str | None = None,
        n_components: int = 3,
        n_samples: int | None = 5,
        labels: str | None = None,
        preds: str | None = None,
        label_mapping: Mapping[str, Any] | None = None,
        outputs: str = "eigencam",
        mode: str | Iterable[str] | None = "!train",
        ds_id: str | Iterable[str] | None = None,
        *,
        model: Any = None,
        layer: Any = None,
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        overlay_smooth: float = 0.0,
    ) -> None:
        self.n_components = check_int(n_components, "n_components", 1)
        activations = _key(activations, "activations")
        if (model is None) == (activations is None):
            raise XaikitValueError(
                "EigenCAM needs exactly one of model= (the trace runs the layer) or activations= (a "
                f"batch key with the layer's output); got model={describe(model)}, activations={activations!r}"
            )
        self.activation_key = activations
        super().__init__(
            images, n_samples, labels, preds, label_mapping, outputs, mode, ds_id, model, layer,
            [activations] if activations else [], output, model_kwargs, overlay_smooth,
        )  # fmt: skip

    def maps(self, samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from xaikit.xai.internal import eigen_components, layer_activations

        image = np.asarray(samples[self.image_key])
        if self.model is not None:
            x = image.astype(np.float32) if image.dtype != np.float32 else image
            acts, name = layer_activations(
                self.model, x, self.layer, output=self.output, model_kwargs=self.model_kwargs
            )
            self._found_layer(name)
        else:
            acts = _channel_first(to_number(samples[str(self.activation_key)]), self._first, "activations")
        comps = eigen_components(acts, self.n_components)
        return {f"Component {k}": np.maximum(c, 0.0) for k, c in enumerate(comps)}
