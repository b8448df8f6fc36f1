"""Faithfulness over training: traces that score the explanations of a fixed sample set.

* :class:`DeletionAUC` logs the mean deletion AUC of the samples' maps each time it runs
  (lower = the maps point at what the model really uses).
* :class:`SaliencyStability` logs the Spearman rank correlation between the samples' maps now
  and the last time it ran: "when did the explanation settle?"
* :class:`Compare` runs :func:`~xaikit.evaluate.compare` on the samples, keeps each table and
  logs each method's mean rank: "which explanation should I trust, and since when?"

Both explain the same samples every time (collected once, like the ``Saliency`` trace), run in
``eval`` mode by default, and can be wrapped in a scheduler (``EpochScheduler``,
``RepeatScheduler``) to run only on some epochs.

Samples are chosen by the XAI traces' :class:`~xaikit.trace.xai.SampleCollector` (per mode):
``samples=None`` takes the first batch the trace sees; an int ``n`` the first ``n`` samples
(across batches if needed; the set is frozen at the end of the first epoch); a dict
``{key: array}`` gives the samples directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.backend.outputs import check_output
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, describe
from xaikit.evaluate._common import input_layout, refuse_raw, spatial_shape, spearman, to_spatial
from xaikit.trace.base import Data, Trace
from xaikit.trace.xai._samples import SampleCollector

__all__ = ["Compare", "DeletionAUC", "SaliencyStability"]


class _SampleTrace(Trace):
    """A trace that works on the samples its ``collector`` keeps (per mode)."""

    collector: SampleCollector

    def _mode(self) -> str:
        return str(getattr(getattr(self, "system", None), "mode", None) or "eval")

    def _epoch(self) -> int:
        return int(getattr(getattr(self, "system", None), "epoch_idx", 0) or 0)

    def on_batch_end(self, data: Data) -> None:
        self.collector.collect(self._mode(), data)


def _class_targets(labels: np.ndarray, n: int) -> np.ndarray:
    """The classes of ``n`` samples from their labels: integer labels, or one-hot / probability
    rows (their argmax)."""
    if labels.ndim <= 1 or labels.shape[1:] == (1,):
        return labels.reshape(-1).astype(np.int64)
    return labels.reshape(n, -1).argmax(axis=1).astype(np.int64)


class _FixedSampleTrace(_SampleTrace):
    def __init__(
        self,
        model: Any,
        model_inputs: str,
        samples: int | Mapping[str, Any] | None,
        class_key: str | None,
        method: str,
        outputs: str,
        mode: Any,
        ds_id: Any,
        seed: int,
        method_options: dict[str, Any],
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model_inputs, str):
            raise XaikitTypeError(f"model_inputs must be one batch key (str); got {describe(model_inputs)}")
        keys = [model_inputs] + ([class_key] if class_key else [])
        super().__init__(inputs=keys, outputs=outputs, mode=mode, ds_id=ds_id)
        from xaikit.xai.registry import canonical

        self.model = model
        self.model_inputs = model_inputs
        self.class_key = class_key
        self.method = canonical(method)
        self.seed = seed
        from xaikit.xai.internal import merge_model_kwargs

        self.output = check_output(output)
        self.model_kwargs = merge_model_kwargs(model_kwargs, None)
        refuse_raw(method_options, f"{type(self).__name__}(method={self.method!r})")
        self.method_options = dict(method_options)
        self.collector = SampleCollector(samples, keys=keys)
        #: (epoch, value) pairs logged so far
        self.history: list[tuple[int, float]] = []

    def _inputs(self) -> tuple[np.ndarray, np.ndarray | None] | None:
        ready = self.collector.finish(self._mode())
        if ready is None:
            return None
        x = ready[self.model_inputs]  # explain() and the curves move it into the model's layout
        if not self.class_key:
            return x, None
        return x, _class_targets(ready[self.class_key], len(x))

    def _maps(self, x: np.ndarray, target: np.ndarray | None) -> np.ndarray:
        from xaikit.xai import explain

        return np.asarray(
            explain(
                self.model,
                x,
                target=target,
                method=self.method,
                seed=self.seed,
                output=self.output,
                model_kwargs=self.model_kwargs,
                **self.method_options,
            )
        )

    def on_epoch_end(self, data: Data) -> None:
        got = self._inputs()
        if got is not None:
            self._evaluate(data, *got)

    def _evaluate(self, data: Data, x: np.ndarray, target: np.ndarray | None) -> None:
        raise NotImplementedError

    def _log(self, data: Data, value: float) -> None:
        self.history.append((self._epoch(), value))
        data.write_with_log(self.outputs[0], value)


class DeletionAUC(_FixedSampleTrace):
    """Log the mean deletion AUC of a fixed sample set's saliency maps each time it runs.

    Args:
        model: the torch or Keras model being trained.
        model_inputs: the batch key of the model's input.
        samples: None (the first batch seen), a number of samples, or a dict of arrays.
        class_key: a batch key with the classes to explain and score (default: the model's
            prediction at that time).
        method: the saliency method (any name :func:`xaikit.xai.explain` accepts).
        steps: deletion steps.
        baseline: what deleted pixels become (see :func:`xaikit.evaluate.deletion`).
        outputs: the logged key.
        mode: modes it runs in (samples are collected from these modes' batches).
        ds_id: dataset ids it runs on.
        seed: seed of the method's noise and of tie-breaking.
        max_batch: rows per forward pass of the curve.
        rank: the pixel order, ``"auto"`` (signed for a map with negative values, else by
            magnitude), ``"signed"`` or ``"magnitude"`` (see :func:`xaikit.evaluate.deletion`).
        output: the model output to explain and score when the model returns several: an index,
            a dict key or an attribute name such as ``"logits"``.
        model_kwargs: extra keyword arguments of the model's forward call; a tensor or array
            whose first axis is the number of samples is per-sample.
        **method_options: options of the method (``nsamples``, ...; the IG path's baseline is
            ``ig_baseline`` here, since ``baseline`` is the deletion baseline).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> trace = DeletionAUC(model, samples=2, steps=4)
        >>> d = Data({"x": np.random.rand(4, 4, 4, 1).astype(np.float32)})
        >>> trace.on_batch_end(d); trace.on_epoch_end(d)
        >>> sorted(d.read_logs())
        ['deletion_auc']
    """

    def __init__(
        self,
        model: Any,
        model_inputs: str = "x",
        samples: int | Mapping[str, Any] | None = None,
        class_key: str | None = None,
        method: str = "vanilla",
        steps: int = 10,
        baseline: Any = "black",
        outputs: str = "deletion_auc",
        mode: Any = "eval",
        ds_id: Any = None,
        seed: int = 0,
        max_batch: int | str = "auto",
        rank: str = "auto",
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        **method_options: Any,
    ) -> None:
        from xaikit.evaluate.perturbation import _check_baseline, check_rank

        self.steps = check_int(steps, "steps", 1)
        _check_baseline(baseline)
        self.rank = check_rank(rank)
        self.baseline = baseline
        self.max_batch = max_batch
        if "ig_baseline" in method_options:
            method_options["baseline"] = method_options.pop("ig_baseline")
        super().__init__(
            model, model_inputs, samples, class_key, method, outputs, mode, ds_id, seed, method_options,
            output, model_kwargs,
        )  # fmt: skip
        #: per-sample AUCs of the last run
        self.last_auc: np.ndarray | None = None

    def _evaluate(self, data: Data, x: np.ndarray, target: np.ndarray | None) -> None:
        from xaikit.evaluate.perturbation import deletion

        maps = self._maps(x, target)
        curve = deletion(
            self.model, x, maps, target=target, steps=self.steps, baseline=self.baseline,
            max_batch=self.max_batch, rank=self.rank, seed=self.seed, output=self.output,
            model_kwargs=self.model_kwargs,
        )  # fmt: skip
        self.last_auc = curve.auc
        self._log(data, curve.auc_mean)


class SaliencyStability(_FixedSampleTrace):
    """Log how similar a fixed sample set's maps are to the last time the trace ran.

    The value is the mean over samples of the Spearman rank correlation between the maps'
    magnitudes (channels summed) now and at the previous run; nothing is logged the first time.
    Values near 1 mean the explanation has settled.

    Args:
        model: the torch or Keras model being trained.
        model_inputs: the batch key of the model's input.
        samples: None (the first batch seen), a number of samples, or a dict of arrays.
        class_key: a batch key with the classes to explain (default: the prediction at that
            time, so a change of prediction shows up as instability).
        method: the saliency method.
        outputs: the logged key.
        mode: modes it runs in.
        ds_id: dataset ids it runs on.
        seed: seed of the method's noise (the same every run, so noise does not count as change).
        output: the model output to explain when the model returns several: an index,
            a dict key or an attribute name such as ``"logits"``.
        model_kwargs: extra keyword arguments of the model's forward call; a tensor or array
            whose first axis is the number of samples is per-sample.
        **method_options: options of the method.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> trace = SaliencyStability(model)
        >>> d = Data({"x": np.random.rand(2, 1, 4, 4).astype(np.float32)})
        >>> trace.on_batch_end(d); trace.on_epoch_end(d); d.read_logs()
        {}
        >>> trace.on_epoch_end(d); d.read_logs()
        {'saliency_stability': 1.0}
    """

    def __init__(
        self,
        model: Any,
        model_inputs: str = "x",
        samples: int | Mapping[str, Any] | None = None,
        class_key: str | None = None,
        method: str = "vanilla",
        outputs: str = "saliency_stability",
        mode: Any = "eval",
        ds_id: Any = None,
        seed: int = 0,
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        **method_options: Any,
    ) -> None:
        super().__init__(
            model, model_inputs, samples, class_key, method, outputs, mode, ds_id, seed, method_options,
            output, model_kwargs,
        )  # fmt: skip
        #: the maps of the previous run, per mode
        self.previous: dict[str, np.ndarray] = {}
        #: per-sample correlations of the last run
        self.last_spearman: np.ndarray | None = None

    def _evaluate(self, data: Data, x: np.ndarray, target: np.ndarray | None) -> None:
        bk = get_backend(self.model)
        shape, channel_axis = input_layout(x, bk)
        channels = shape[channel_axis] if channel_axis is not None else None
        current = to_spatial(
            self._maps(x, target), spatial_shape(shape, channel_axis), shape[0], channels=channels
        )
        mode = self._mode()
        previous, self.previous[mode] = self.previous.get(mode), current
        if previous is None:
            return
        rho = spearman(previous, current)
        self.last_spearman = rho
        self._log(data, float(rho.mean()))


class Compare(_SampleTrace):
    """Run :func:`~xaikit.evaluate.compare` on a fixed sample set each time it runs.

    Keeps every comparison (``results``: epoch -> :class:`~xaikit.evaluate.CompareResult`) and
    logs each method's mean rank as ``<outputs>_<method>_mean_rank`` (1 = best on every metric).
    Wrap it in a scheduler (``EpochScheduler``, ``RepeatScheduler``) to run only on some epochs.

    Args:
        model: the torch or Keras model being trained.
        methods: method names (or a dict label -> method name), as for ``compare``.
        model_inputs: the batch key of the model's input.
        samples: None (the first batch seen), a number of samples, or a dict of arrays.
        class_key: a batch key with the classes to explain and score (default: the prediction).
        mask_key: a batch key with ground-truth masks (B, H, W) for the localization metrics.
        metrics: metric names (None: the default set of ``compare``).
        outputs: the prefix of the logged keys.
        mode: modes it runs in.
        ds_id: dataset ids it runs on.
        seed: the methods' noise and the metrics' draws (the same every run).
        method_options: method -> options, as for ``compare``.
        max_batch: rows per forward pass.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> trace = Compare(model, ["vanilla", "input_x_gradient"], metrics=["sparseness"])
        >>> d = Data({"x": np.random.rand(2, 1, 4, 4).astype(np.float32)})
        >>> trace.on_batch_end(d); trace.on_epoch_end(d)
        >>> sorted(d.read_logs())
        ['compare_input_x_gradient_mean_rank', 'compare_vanilla_mean_rank']
    """

    def __init__(
        self,
        model: Any,
        methods: Any = ("vanilla", "integrated"),
        model_inputs: str = "x",
        samples: int | Mapping[str, Any] | None = None,
        class_key: str | None = None,
        mask_key: str | None = None,
        metrics: Any = None,
        outputs: str = "compare",
        mode: Any = "eval",
        ds_id: Any = None,
        seed: int = 0,
        method_options: Mapping[str, Mapping[str, Any]] | None = None,
        max_batch: int | str = "auto",
    ) -> None:
        from xaikit.evaluate.compare import _methods, _metrics, _options

        if not isinstance(model_inputs, str):
            raise XaikitTypeError(f"model_inputs must be one batch key (str); got {describe(model_inputs)}")
        if not isinstance(outputs, str):
            raise XaikitTypeError(
                f"outputs must be a str (the prefix of the logged keys); got {describe(outputs)}"
            )
        entries = _methods(methods)
        if any(name is None for _, name, _ in entries):
            raise XaikitTypeError(
                "methods of the Compare trace must be method names (maps change over training)"
            )
        self.methods = {label: name for label, name, _ in entries}
        _metrics(metrics, True if mask_key else None)  # unknown names / masks needed: fail now
        _options(method_options, entries)
        keys = [model_inputs] + [k for k in (class_key, mask_key) if k]
        labels = list(self.methods)
        super().__init__(
            inputs=keys, outputs=[f"{outputs}_{m}_mean_rank" for m in labels], mode=mode, ds_id=ds_id
        )
        self.model = model
        self.model_inputs = model_inputs
        self.class_key = class_key
        self.mask_key = mask_key
        self.metrics = metrics
        self.seed = seed
        self.method_options = method_options
        self.max_batch = max_batch
        self.collector = SampleCollector(samples, keys=keys)
        #: epoch -> the comparison of that run
        self.results: dict[int, Any] = {}

    def on_epoch_end(self, data: Data) -> None:
        from xaikit.evaluate.compare import compare

        ready = self.collector.finish(self._mode())
        if ready is None:
            return
        labels = ready[self.class_key] if self.class_key else None
        target = None if labels is None else _class_targets(labels, len(labels))
        result = compare(
            self.model, ready[self.model_inputs], self.methods, metrics=self.metrics,
            mask=ready[self.mask_key] if self.mask_key else None, target=target, seed=self.seed,
            method_options=self.method_options, max_batch=self.max_batch,
        )  # fmt: skip
        self.results[self._epoch()] = result
        for key, rank in zip(self.outputs, result.table["mean rank"]):
            data.write_with_log(key, float(rank))
