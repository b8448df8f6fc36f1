"""``SaliencyNet``: the reference's batch-dict API over the fused engine, and ``explain``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.backend.outputs import check_output as _check_output
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.modes import to_list
from xaikit.xai import health, perturb
from xaikit.xai._display import to_display
from xaikit.xai._engine import DEFAULT_BUDGET, check_max_batch, check_memory_budget
from xaikit.xai._kwargs import merge_model_kwargs
from xaikit.xai._progress import check_progress
from xaikit.xai.cam import (
    CamResult,
    cam_maps,
    cam_targets,
    check_reshape,
    guided_gradcam,
    image_size,
    upsample,
)
from xaikit.xai.methods import (
    Attribution,
    Inputs,
    attribute,
    canonical_method,
    logits,
    pinned_and_output,
    predictions_of,
    prepare,
)
from xaikit.xai.names import canonical, family

__all__ = ["SaliencyNet", "explain"]


def _as_list(value: str | Sequence[str], name: str) -> list[str]:
    return to_list(value, name, allow_empty=False)


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % (2**63))  # type: ignore[operator]


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
        self.seed = seed
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
        the prediction), ``raw`` (signed attributions instead of display masks), ``seed`` (this
        call's seed instead of the net's), ``max_batch`` (this call's rows per chunk instead
        of the net's), ``memory_budget`` (this call's budget of an ``"auto"`` chunk) and
        ``model_kwargs`` (this call's extra forward arguments, added to the net's).

        Returns:
            The batch's keys, each ``model_outputs`` key as the predicted class per sample, and
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
        baseline: Any = "uniform",
        quadrature: str = "gausslegendre",
        max_batch: int | str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        memory_budget: int | float | None = None,
    ) -> dict[str, Any]:
        """SmoothGrad: gradients averaged over ``nsamples`` noisy copies of each input.

        The noise is Gaussian with sigma = ``stdev_spread`` x (max - min) of each sample. With
        ``magnitude`` the squared gradients are averaged. With ``nintegration`` (an integer >= 1)
        each noisy copy is explained by Integrated Gradients with that many steps instead
        (SmInt); ``None`` (the default) means plain SmoothGrad, and 0 or a negative number is an
        error. The target class is pinned to the clean input's prediction (or ``target`` /
        ``class_key``).
        """
        method = "smoothgrad" if nintegration is None else "smint"
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
            nintegration=nintegration,
            stdev_spread=stdev_spread,
            magnitude=magnitude,
            baseline=baseline,
            quadrature_rule=quadrature,
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
            quadrature_rule=quadrature,
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
        seed = (self.seed if self.seed is not None else _fresh_seed()) if seed is None else seed
        chunk = self.max_batch if max_batch is None else max_batch
        options["memory_budget"] = (
            self.memory_budget if memory_budget is None else check_memory_budget(memory_budget)
        )
        with self.bk.inference(self.model):
            result, predictions, seen, targets = _explain(
                inp, method, target, seed, chunk, raw, options, len(self._outputs), self.xla, self.output
            )
        self.last_chunks = result.chunks
        self.last_status = _check(
            inp, result.arrays, method, self.model, seen, targets, options, " in SaliencyNet"
        )
        out = dict(batch)
        for key, pred in zip(self._outputs, predictions):
            out[key] = pred
        for key, arr, axis in zip(self.outputs, result.arrays, inp.user_axes):
            out[key] = arr if raw else to_display(arr, axis)
        if raw and result.delta is not None:
            out[f"{self.outputs[0]}_delta"] = result.delta
        return out


def _explain(
    inp: Inputs,
    method: str,
    target: Any,
    seed: int,
    max_batch: int | str,
    raw: bool,
    options: dict[str, Any],
    n_outputs: int,
    xla: bool,
    output: int | str = 0,
) -> tuple[Attribution, list[np.ndarray], np.ndarray, Any]:
    """The attributions, the predictions of the model outputs (the explained one alone, or
    outputs 0 .. n_outputs - 1), the explained output as read and the pinned classes, inside
    inference mode."""
    bk = inp.bk
    targets, found, seen = pinned_and_output(inp, target, output)
    explained = np.asarray(found)  # predict=True: always the predictions
    if n_outputs == 1:
        predictions = [explained]
    else:
        predictions = [
            explained if k == output else predictions_of(bk.to_numpy(logits(inp, k)))
            for k in range(n_outputs)
        ]
    result = attribute(
        inp,
        targets,
        method,
        seed=seed,
        max_batch=max_batch,
        with_delta=raw,
        xla=xla,
        output=output,
        **options,
    )
    return result, predictions, seen, targets


def _check(
    inp: Inputs,
    maps: Any,
    method: str,
    model: Any,
    seen: Any,
    targets: Any,
    options: Mapping[str, Any],
    where: str = " in explain",
) -> np.ndarray:
    """The map status of each sample (:mod:`xaikit.xai.health`) and, for degenerate maps, the
    warning; on the host, from the maps and the output already read (no model pass). Inside
    ``health.deferred()`` nothing is checked (the caller does it)."""
    if health.is_deferred():
        return np.zeros(0, dtype=str)
    bk = inp.bk
    arrays = getattr(maps, "maps", maps)  # CamResult / XraiResult: their maps
    kind, _ = health.map_kind(method)
    spans = None
    if kind == "gradient":
        spans = [bk.to_numpy(bk.sample_max(x) - bk.sample_min(x)).reshape(-1) for x in inp.tensors]
    host = None if targets is None else (bk.to_numpy(targets) if bk.is_tensor(targets) else targets)
    return health.check_maps(
        arrays, method=method, model=model, output=seen, targets=host, magnitude=options.get("magnitude"),
        nintegration=options.get("nintegration"), spans=spans, where=where,
    )  # fmt: skip


def _prepared(model: Any, x: Any, framework: str | None, model_kwargs: Any) -> tuple[Any, Inputs, bool]:
    """``(backend, prepared inputs, several inputs?)`` of an ``explain`` call: ``x`` is one batch
    (key ``"x"``) or a list of them (keys ``"input_0"``, ...)."""
    bk = get_backend(model, framework)
    multi = isinstance(x, (list, tuple))
    values = list(x) if multi else [x]
    keys = [f"input_{i}" for i in range(len(values))] if multi else ["x"]
    return bk, prepare(bk, model, values, keys, model_kwargs=model_kwargs), multi


def explain(
    model: Any,
    x: Any,
    target: Any = None,
    method: str = "smint",
    *,
    framework: str | None = None,
    seed: int | None = 0,
    max_batch: int | str = "auto",
    memory_budget: int | float = DEFAULT_BUDGET,
    return_delta: bool = False,
    xla: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> Any:
    """Raw, signed attributions of a model for a batch: the stateless form of ``SaliencyNet``.

    Args:
        model: a torch or Keras/TF model returning (batch, classes) or (batch,) scores, or several
            outputs (see ``output``).
        x: the input batch (numpy or tensor), or a list of inputs for a multi-input model.
        target: class per sample (or one class for all); None = the predicted class, pinned.
        method: a gradient method: ``"vanilla"``, ``"smoothgrad"``, ``"integrated"``,
            ``"smint"``, ``"vargrad"`` (the variance of noisy gradients), ``"input_x_gradient"``,
            ``"expected_gradients"`` (captum's GradientShap: IG from reference samples drawn from
            ``baseline=``, an array of N samples, default the batch itself, at random points
            of the path), ``"blur_ig"`` (the path from a blurred image; options ``steps``,
            ``max_sigma``, ``grad_step``, ``sqrt``), ``"guided_ig"`` (an adaptive path; see
            :mod:`xaikit.xai.guided_ig`) or ``"xrai"`` (regions ranked by IG; a (B, H, W) map; see
            :mod:`xaikit.xai.xrai`); the table in ``docs/saliency.md`` lists what each answers
            and costs. Or a perturbation method (forward passes only, :mod:`xaikit.xai.perturb`): ``"occlusion"``
            (options ``window``, ``stride``, ``baseline``; input-shaped result) or ``"rise"``
            (options ``n_masks``, ``cell``, ``p``; a (B, H, W) result, one map per image); or a
            class-activation map (see :mod:`xaikit.xai.cam` and ``docs/cam.md``):
            ``"gradcam"``, ``"hirescam"``, ``"xgradcam"``, ``"gradcam++"``, ``"layercam"``,
            ``"eigencam"``, ``"scorecam"`` or ``"guided_gradcam"``, with the options ``layer``
            (a torch module path as ``named_modules`` gives it, a Keras layer name, the
            module/layer object, or None for the last layer with a spatial output), ``reshape``
            (ViT tokens to a map: None = auto for (B, 1 + h*w, C), a (h, w) pair or a callable),
            ``raw`` (False: the (B, H, W) map upsampled bilinearly to the input's size; True: a
            :class:`~xaikit.xai.cam.CamResult` of the layer-resolution (B, h, w) maps and the
            layer's name), ``output`` and ``model_kwargs``. Every name and alias:
            :mod:`xaikit.xai.names`.
        framework: ``"torch"`` or ``"tf"`` when the model is a plain function.
        seed: seed of noise and random baselines (default 0: reproducible).
        max_batch: rows per fused chunk, or ``"auto"``.
        memory_budget: what an ``"auto"`` chunk may use: bytes (int) or a fraction in (0, 1]
            (float) of the available RAM / free GPU memory; default 0.5.
        return_delta: also return the completeness delta (B,) of IG-based methods.
        xla: compile the TensorFlow chunk step with XLA; ignored for torch.
        progress: progress of the slow methods (``"xrai"``, ``"guided_ig"``, ``"occlusion"``,
            ``"rise"``, ``"scorecam"``) on stderr: a tqdm bar on a terminal, else a line every
            10 s. None (default): shown once the call has run 5 s; True: from the start; False:
            never. The other methods run one fused sweep and report nothing.
        **options: the options of the method (an option it does not take is an error naming
            the ones it does): ``nsamples`` (noise samples; IG's path steps; Expected Gradients'
            draws; Input x Gradient and Blur IG are smoothed with ``nsamples`` > 1),
            ``nintegration``, ``stdev_spread``, ``magnitude``, ``baseline``, ``quadrature``,
            Blur IG's ``steps``, ``max_sigma``, ``grad_step``, ``sqrt``,
            ``output`` (which model output to explain: an index, a dict key or an attribute
            name such as ``"logits"``; default 0, which also takes an output object's ``logits``),
            ``model_kwargs`` (a dict of extra keyword arguments of the model's forward call; a
            tensor or array whose first axis is the batch size is per-sample, cut and repeated
            with the rows; anything else is passed unchanged).

    Returns:
        A numpy array with ``x``'s shape (a list for several inputs); with ``return_delta``,
        ``(attributions, delta)``. CAM methods: (B, H, W) maps, or a ``CamResult`` with ``raw``;
        ``guided_gradcam``: attributions with ``x``'s shape.

    Warns:
        DegenerateMapWarning: maps that hold NaN / inf, are all zero or constant, or account for
            a change of the explained score below float32 resolution (a saturated or near-uniform
            softmax: explain the logits); once per (model, method, status), with the likely cause
            and fix. See :mod:`xaikit.xai.health` and ``docs/degenerate.md``.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(3, 2)
        >>> attr = explain(model, torch.ones(4, 3), target=1, method="vanilla")
        >>> bool(np.allclose(attr, model.weight[1].detach().numpy()))
        True
    """
    kind = family(method)  # an unknown name is refused here, with the list of every method
    progress = check_progress(progress)
    if canonical(method) in OWN_LOOP_METHODS:
        return _explain_own_loop(model, x, target, canonical(method), framework, seed, max_batch, memory_budget, return_delta, xla, options, progress)  # fmt: skip
    if kind == "perturbation":
        return _explain_perturbation(model, x, target, canonical(method), framework, seed, max_batch, memory_budget, return_delta, xla, options, progress)  # fmt: skip
    if kind == "cam":
        if return_delta:
            raise XaikitValueError(
                f"return_delta is the completeness delta of IG-based methods; method {method!r} has "
                "none: call explain without return_delta"
            )
        return _explain_cam(
            model, x, target, canonical(method), framework, max_batch, memory_budget, options, progress
        )
    method = canonical_method(method)
    memory_budget = check_memory_budget(memory_budget)
    opts = dict(options)
    output = _check_output(opts.pop("output", 0))
    model_kwargs = opts.pop("model_kwargs", None)
    if "quadrature" in opts:
        opts["quadrature_rule"] = opts.pop("quadrature")
    allowed = SWEEP_OPTIONS[method]
    unknown = set(opts) - set(allowed)
    if unknown:
        shown = ", ".join(o.replace("quadrature_rule", "quadrature") for o in allowed)
        raise XaikitTypeError(
            f"explain(method={method!r}) got unknown option(s) "
            f"{sorted(o.replace('quadrature_rule', 'quadrature') for o in unknown)}; its options are "
            f"{shown}, output and model_kwargs"
        )
    if method == "smint":
        opts.setdefault("nsamples", 8)
        opts.setdefault("nintegration", 50)
    bk, inp, multi = _prepared(model, x, framework, model_kwargs)
    seed = _fresh_seed() if seed is None else seed
    with bk.inference(model):
        targets, _, seen = pinned_and_output(inp, target, output, predict=False)
        result = attribute(
            inp,
            targets,
            method,
            seed=seed,
            max_batch=max_batch,
            memory_budget=memory_budget,
            output=output,
            with_delta=return_delta,
            xla=xla,
            **opts,
        )
    _check(inp, result.arrays, method, model, seen, targets, opts)
    arrays = result.arrays if multi else result.arrays[0]
    if return_delta:
        return arrays, result.delta
    return arrays


#: gradient methods with a loop of their own around the engine (not one precomputed sweep): the
#: adaptive path of Guided IG and XRAI's regions; module ``xaikit.xai.<name>`` has their ``run``
OWN_LOOP_METHODS = ("guided_ig", "xrai")


def _explain_own_loop(
    model: Any,
    x: Any,
    target: Any,
    method: str,
    framework: str | None,
    seed: int | None,
    max_batch: int | str,
    memory_budget: int | float,
    return_delta: bool,
    xla: bool,
    options: dict[str, Any],
    progress: bool | None = None,
) -> Any:
    """``explain`` for Guided IG and XRAI: inputs prepared and classes pinned here, the method's
    own ``run(inp, targets, *, seed, output, max_batch, memory_budget, xla, return_delta,
    **options)`` does the rest (and checks its options)."""
    module = importlib.import_module(f"xaikit.xai.{method}")
    memory_budget = check_memory_budget(memory_budget)
    max_batch = check_max_batch(max_batch)
    opts = dict(options)
    output = _check_output(opts.pop("output", 0))
    model_kwargs = opts.pop("model_kwargs", None)
    bk, inp, _ = _prepared(model, x, framework, model_kwargs)
    seed = _fresh_seed() if seed is None else seed
    with bk.inference(model):
        targets, _, seen = pinned_and_output(inp, target, output, predict=False)
        result = module.run(
            inp, targets, seed=seed, output=output, max_batch=max_batch, memory_budget=memory_budget,
            xla=xla, return_delta=return_delta, progress=progress, **opts,
        )  # fmt: skip
    _check(inp, result[0] if return_delta else result, method, model, seen, targets, opts)
    return result


_CORE_OPTIONS = ("nsamples", "nintegration", "stdev_spread", "magnitude", "baseline", "quadrature_rule")
#: the options ``explain`` takes per sweep method (besides output and model_kwargs); the four core
#: methods share one list, as they always have
SWEEP_OPTIONS = {
    **dict.fromkeys(("vanilla", "smoothgrad", "integrated", "smint"), _CORE_OPTIONS),
    "vargrad": ("nsamples", "stdev_spread", "nintegration", "baseline", "quadrature_rule"),
    "input_x_gradient": ("nsamples", "stdev_spread", "magnitude"),
    "expected_gradients": ("nsamples", "stdev_spread", "baseline"),
    "blur_ig": ("steps", "max_sigma", "grad_step", "sqrt", "nsamples", "stdev_spread", "magnitude"),
}


def _explain_perturbation(
    model: Any,
    x: Any,
    target: Any,
    method: str,
    framework: str | None,
    seed: int | None,
    max_batch: int | str,
    memory_budget: int | float,
    return_delta: bool,
    xla: bool,
    options: dict[str, Any],
    progress: bool | None = None,
) -> np.ndarray:
    """``explain`` for the perturbation methods of :mod:`xaikit.xai.perturb` (forward passes only)."""
    name = str(perturb.perturbation_method(method))
    memory_budget = check_memory_budget(memory_budget)
    if return_delta:
        raise XaikitValueError(
            f"return_delta is the completeness delta of IG-based methods; method {name!r} has none: "
            "call explain without return_delta"
        )
    opts = dict(options)
    output = _check_output(opts.pop("output", 0))
    model_kwargs = opts.pop("model_kwargs", None)
    perturb.check_options(name, opts)
    bk, inp, _ = _prepared(model, x, framework, model_kwargs)
    seed = _fresh_seed() if seed is None else seed
    run = perturb.occlusion if name == "occlusion" else perturb.rise
    with bk.inference(model):
        targets, _, seen = pinned_and_output(inp, target, output, predict=False)
        maps = run(
            inp, targets, seed=seed, output=output, max_batch=max_batch,
            memory_budget=memory_budget, xla=xla, progress=progress, **opts,
        )  # fmt: skip
    _check(inp, maps, name, model, seen, targets, opts)
    return maps


def _explain_cam(
    model: Any,
    x: Any,
    target: Any,
    method: str,
    framework: str | None,
    max_batch: int | str,
    memory_budget: int | float,
    options: dict[str, Any],
    progress: bool | None = None,
) -> Any:
    """``explain`` for the class-activation maps of :mod:`xaikit.xai.cam`."""
    memory_budget = check_memory_budget(memory_budget)
    opts = dict(options)
    layer = opts.pop("layer", None)
    reshape = check_reshape(opts.pop("reshape", None))
    raw = opts.pop("raw", False)
    output = _check_output(opts.pop("output", 0))
    model_kwargs = opts.pop("model_kwargs", None)
    if opts:
        raise XaikitTypeError(
            f"explain(method={method!r}) got unknown option(s) {sorted(opts)}; the options of a "
            "class-activation map are layer, reshape, raw, output and model_kwargs"
        )
    if not isinstance(raw, bool):
        raise XaikitTypeError(f"raw must be True or False; got {describe(raw)}")
    if raw and method == "guided_gradcam":
        raise XaikitValueError(
            "raw=True gives a layer-resolution map, which guided_gradcam (input-resolution "
            "attributions) does not have: use method='gradcam' with raw=True for its Grad-CAM part"
        )
    max_batch = check_max_batch(max_batch)
    bk, inp, multi = _prepared(model, x, framework, model_kwargs)
    with bk.inference(model):
        if method == "guided_gradcam":  # two passes over the same classes: pinned first
            given = cam_targets(inp, target, output)
            targets = pinned_and_output(inp, None, output)[0] if given is None else given
            grads, _ = guided_gradcam(inp, targets, layer, output, max_batch, reshape)
            arrays = inp.to_user(grads)
            _check(inp, arrays, method, model, None, None, {})
            return arrays if multi else arrays[0]
        chosen = cam_targets(inp, target, output)  # None: predicted, read off the CAM's own pass
        result = cam_maps(inp, chosen, method, layer, output, max_batch, reshape, memory_budget, progress)
    # no scores are read here (the classes come off the CAM's own pass): the maps are checked for
    # NaN, zero, constant and subnormal values only
    _check(inp, result.maps, method, model, None, None, {})
    if raw:
        return CamResult(result.maps.astype(np.float32), result.layer)
    _, size = image_size(inp)
    return upsample(result.maps, size).astype(np.float32)
