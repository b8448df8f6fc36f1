"""``SaliencyNet``: the reference's batch-dict API over the fused engine, and ``explain``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.backend.outputs import check_output as _check_output
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.modes import to_list
from xaikit.xai._engine.display import to_display
from xaikit.xai._engine.inputs import Inputs, prepare
from xaikit.xai._engine.kwargs import merge_model_kwargs
from xaikit.xai._engine.plan import DEFAULT_BUDGET, check_memory_budget
from xaikit.xai._engine.seeds import check_seed
from xaikit.xai._engine.targets import logits, pin, predictions_of
from xaikit.xai.explain import explain, fresh_seed, run
from xaikit.xai.registry import get_method

__all__ = ["SaliencyNet", "explain"]


def _as_list(value: str | Sequence[str], name: str) -> list[str]:
    return to_list(value, name, allow_empty=False)


class SaliencyNet:
    """Saliency masks for a whole batch of a torch or Keras/TF model, one API for both.

    Every method evaluates all of its rows (batch x noise samples x path steps) in large fused
    chunks on the model's device, with memory bounded by one chunk; see ``docs/saliency.md``.

    Args:
        model: a ``torch.nn.Module``, a Keras model or a TF callable returning (batch, classes)
            scores, (batch,) scores (one per sample), or several outputs (a tuple/list, a dict,
            or an object such as a Hugging Face output with ``.logits``).
        model_inputs: batch key(s) fed to the model, in the model's argument order.
        model_outputs: key(s) under which each sample's prediction is returned: the argmax class
            of a (batch, classes) output, the score itself of a (batch,) output. One key: the
            explained output's; several: outputs 0, 1, ... of the model, in order.
        outputs: key(s) of the masks, one per model input.
        class_key: a batch key holding per-sample classes to explain instead of the prediction.
        seed: makes noise and random baselines reproducible (None: fresh randomness per call).
        max_batch: rows per fused forward+backward, or ``"auto"``: a size fixed at the model's
            first call per input shape from a memory probe, ``memory_budget`` and timing (see
            "How the plan chooses chunks" in ``docs/saliency.md``).
        memory_budget: what an ``"auto"`` chunk may use: bytes (an int), or a fraction in
            (0, 1] (a float) of the memory available when the plan is made (the RAM on a CPU,
            free memory on a GPU); default 0.5. Ignored with an explicit ``max_batch``.
        framework: ``"torch"`` or ``"tf"`` for a model that is a plain Python function.
        channel_axis: channel axis of 4-D inputs when the shape is ambiguous (1 or -1).
        xla: compile the TensorFlow chunk step with XLA (``jit_compile``); ignored for torch.
        output: the model output to explain: an index (tuple/list), a dict key or an attribute
            name (``"logits"``); the default 0 takes the tensor, the first output, or the
            ``logits`` attribute of an output object.
        model_kwargs: extra keyword arguments of the model's forward call (captum's
            ``additional_forward_args``), for every call; a call's own ``model_kwargs=`` adds to
            and overrides them key by key. A tensor or array whose first axis is the batch size
            is per-sample: each row of a chunk gets its sample's value (not interpolated along an
            IG path); anything else is passed unchanged. See ``docs/saliency.md``.

    Every call checks its maps (:mod:`xaikit.xai.health`): ``last_status`` holds each sample's
    status ("" when sound) and a degenerate one gives a ``DegenerateMapWarning``, once per model,
    method and status.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
        >>> net = SaliencyNet(model, model_inputs="x", model_outputs="y_pred", seed=0)
        >>> res = net.get_masks({"x": torch.rand(2, 3, 2, 2)})
        >>> res["saliency"].shape, res["y_pred"].shape
        ((2, 1, 2, 2), (2,))
    """

    def __init__(
        self,
        model: Any,
        model_inputs: str | Sequence[str],
        model_outputs: str | Sequence[str],
        outputs: str | Sequence[str] = "saliency",
        class_key: str | None = None,
        seed: int | None = None,
        max_batch: int | str = "auto",
        framework: str | None = None,
        channel_axis: int | None = None,
        xla: bool = False,
        output: int | str = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float = DEFAULT_BUDGET,
    ) -> None:
        self.bk = get_backend(model, framework)
        self.memory_budget = check_memory_budget(memory_budget)
        self.output = _check_output(output)
        self.model_kwargs = merge_model_kwargs(model_kwargs, None)
        self.xla = bool(xla)
        self.model = model
        self._inputs = _as_list(model_inputs, "model_inputs")
        self._outputs = _as_list(model_outputs, "model_outputs")
        self.outputs = _as_list(outputs, "outputs")
        if len(self.outputs) != len(self._inputs):
            raise XaikitValueError(
                f"outputs must name one mask per model input ({len(self._inputs)}: {self._inputs}); "
                f"got {self.outputs}"
            )
        if class_key is not None and not isinstance(class_key, str):
            raise XaikitTypeError(f"class_key must be a batch key (str) or None; got {class_key!r}")
        if channel_axis not in (None, 1, 3, -1):
            raise XaikitValueError(f"channel_axis must be None, 1 or -1; got {channel_axis!r}")
        self.class_key = class_key
        self.seed = check_seed(seed)
        self.max_batch = max_batch
        self.channel_axis = 3 if channel_axis == -1 else channel_axis
        #: rows per chunk of the last call (for inspection and benchmarks)
        self.last_chunks: list[int] = []
        #: the (B,) map status of each sample of the last call: "" when ok, else "non-finite",
        #: "zero", "constant" or "underflow" (see :mod:`xaikit.xai.health`)
        self.last_status: np.ndarray = np.zeros(0, dtype=str)

    @property
    def model_inputs(self) -> list[str]:
        return list(self._inputs)

    @property
    def model_outputs(self) -> list[str]:
        return list(self._outputs)

    # ---- public methods ---------------------------------------------------------------------------
    def get_masks(
        self,
        batch: Mapping[str, Any],
        *,
        target: Any = None,
        raw: bool = False,
        seed: int | None = None,
        max_batch: int | str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float | None = None,
    ) -> dict[str, Any]:
        """Vanilla gradients of the target score with respect to each input.

        Keyword arguments shared by the three methods: ``target`` (classes to explain instead of
        the prediction, or a target object of :mod:`xaikit.targets`: a region of a segmentation
        output, a regression unit, an embedding's similarity, a callable), ``raw`` (signed attributions instead of display masks), ``seed`` (this
        call's seed instead of the net's), ``max_batch`` (this call's rows per chunk instead
        of the net's), ``memory_budget`` (this call's budget of an ``"auto"`` chunk) and
        ``model_kwargs`` (this call's extra forward arguments, added to the net's).

        Returns:
            The batch's keys, each ``model_outputs`` key as the predicted class per sample (with a
            target object, the explained output's key holds the target's (B,) clean scores), and
            each mask under its ``outputs`` key: display masks in [0, 1] (or, with ``raw=True``,
            signed gradients with the input's shape).
        """
        return self._run(
            batch,
            "vanilla",
            target=target,
            raw=raw,
            seed=seed,
            max_batch=max_batch,
            model_kwargs=model_kwargs,
            memory_budget=memory_budget,
        )

    def get_smoothed_masks(
        self,
        batch: Mapping[str, Any],
        stdev_spread: float = 0.15,
        nsamples: int = 25,
        nintegration: int | None = None,
        magnitude: bool = True,
        *,
        target: Any = None,
        raw: bool = False,
        seed: int | None = None,
        baseline: Any = None,
        quadrature: str | None = None,
        max_batch: int | str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float | None = None,
    ) -> dict[str, Any]:
        """SmoothGrad: gradients averaged over ``nsamples`` noisy copies of each input.

        The noise is Gaussian with sigma = ``stdev_spread`` x (max - min) of each sample. With
        ``magnitude`` the squared gradients are averaged. With ``nintegration`` (an integer >= 1)
        each noisy copy is explained by Integrated Gradients with that many steps instead
        (SmInt), from ``baseline`` (default ``"uniform"``) with the ``quadrature`` rule (default
        ``"gausslegendre"``); ``None`` (the default) means plain SmoothGrad, and 0 or a negative
        number is an error, as are ``baseline`` or ``quadrature`` without ``nintegration`` (plain
        SmoothGrad has no path for them). The target class is pinned to the clean input's
        prediction (or ``target`` / ``class_key``).
        """
        path: dict[str, Any] = {"baseline": baseline, "quadrature": quadrature}
        if nintegration is None:
            unused = [k for k, v in path.items() if v is not None]
            if unused:
                raise XaikitTypeError(
                    f"get_smoothed_masks got {', '.join(unused)} without nintegration: they set the "
                    "paths of SmInt (SmoothGrad of Integrated Gradients); pass nintegration= (the "
                    "steps of each path) too, or leave them out for plain SmoothGrad"
                )
            method, path = "smoothgrad", {}
        else:
            method, path["nintegration"] = "smint", nintegration
        return self._run(
            batch,
            method,
            target=target,
            raw=raw,
            seed=seed,
            max_batch=max_batch,
            model_kwargs=model_kwargs,
            memory_budget=memory_budget,
            nsamples=nsamples,
            stdev_spread=stdev_spread,
            magnitude=magnitude,
            **{k: v for k, v in path.items() if v is not None},
        )

    def get_integrated_masks(
        self,
        batch: Mapping[str, Any],
        nsamples: int = 25,
        *,
        baseline: Any = "uniform",
        quadrature: str = "gausslegendre",
        target: Any = None,
        raw: bool = False,
        seed: int | None = None,
        max_batch: int | str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float | None = None,
    ) -> dict[str, Any]:
        """Integrated Gradients with ``nsamples`` path steps from ``baseline`` to the input.

        With ``raw=True`` the result also holds ``<output>_delta``: the per-sample completeness
        error sum(attributions) - (f(x) - f(baseline)).
        """
        return self._run(
            batch,
            "integrated",
            target=target,
            raw=raw,
            seed=seed,
            max_batch=max_batch,
            model_kwargs=model_kwargs,
            memory_budget=memory_budget,
            nsamples=nsamples,
            baseline=baseline,
            quadrature=quadrature,
        )

    # ---- the one code path -------------------------------------------------------------------------
    def _run(
        self,
        batch: Mapping[str, Any],
        method: str,
        *,
        target: Any,
        raw: bool,
        seed: int | None,
        max_batch: int | str | None,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        if not isinstance(batch, Mapping):
            raise XaikitTypeError(
                f"batch must be a dict of arrays or tensors keyed by name; got {describe(batch)}"
            )
        missing = [k for k in self._inputs if k not in batch]
        if missing:
            raise XaikitValueError(
                f"model_inputs key(s) {missing} not found in the batch; the batch has keys {sorted(map(str, batch))}"
            )
        if target is None and self.class_key is not None:
            if self.class_key not in batch:
                raise XaikitValueError(
                    f"class_key {self.class_key!r} not found in the batch; the batch has keys {sorted(map(str, batch))}"
                )
            target = batch[self.class_key]
        inp = prepare(
            self.bk,
            self.model,
            [batch[k] for k in self._inputs],
            self._inputs,
            self.channel_axis,
            merge_model_kwargs(self.model_kwargs, model_kwargs),
        )
        seed = check_seed(seed)
        seed = (self.seed if self.seed is not None else fresh_seed()) if seed is None else seed
        record = get_method(method)
        _, own = record.split_options(options)
        budget = self.memory_budget if memory_budget is None else check_memory_budget(memory_budget)
        with self.bk.inference(self.model):
            pinned = pin(inp, target, self.output, objects=record.target_objects)
            # a target object's clean (B,) scores stand for the explained output's predictions
            explained = pinned.output if pinned.spec is not None else pinned.predictions
            predictions = _predictions(inp, explained, len(self._outputs), self.output)
            result, self.last_status = run(
                record, inp, pinned, own, seed=seed, max_batch=self.max_batch if max_batch is None else max_batch,
                memory_budget=budget, output=self.output, xla=self.xla, with_delta=raw, where=" in SaliencyNet",
            )  # fmt: skip
        self.last_chunks = result.chunks
        out = dict(batch)
        for key, pred in zip(self._outputs, predictions):
            out[key] = pred
        for key, arr, axis in zip(self.outputs, result.values, inp.user_axes):
            out[key] = arr if raw else to_display(arr, axis)
        if raw and result.delta is not None:
            out[f"{self.outputs[0]}_delta"] = result.delta
        return out


def _predictions(inp: Inputs, explained: Any, n_outputs: int, output: int | str) -> list[np.ndarray]:
    """The predictions of the model outputs: the explained one's (read when its classes were
    pinned), or outputs 0 .. n_outputs - 1 (one forward pass each for the others)."""
    explained = np.asarray(explained)
    if n_outputs == 1:
        return [explained]
    return [
        explained if k == output else predictions_of(inp.bk.to_numpy(logits(inp, k)))
        for k in range(n_outputs)
    ]
