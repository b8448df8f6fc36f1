"""The front door: :func:`explain`, and :func:`run`, the one internal entry every caller with
prepared inputs uses (``SaliencyNet``, ``explain_dataset``).

``explain`` looks the method up (:mod:`xaikit.xai.registry`), checks its options, prepares the
inputs once (validated, on the model's device, in its layout), pins the explained classes once
(:func:`~xaikit.xai._engine.targets.pin`, as the method's record asks), and hands a
:class:`~xaikit.xai.registry.Call` to the method's runner inside the model's inference mode.
:func:`run` then checks the maps for degenerate values (:mod:`xaikit.xai.health`) on the host,
from what the call has read already.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.backend.outputs import check_output
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.targets import unstack
from xaikit.xai import health
from xaikit.xai._engine.inputs import Inputs, prepare
from xaikit.xai._engine.plan import DEFAULT_BUDGET, check_max_batch, check_memory_budget
from xaikit.xai._engine.progress import check_progress
from xaikit.xai._engine.seeds import check_seed
from xaikit.xai._engine.targets import Pinned, check_given, pin
from xaikit.xai.registry import Call, Explained, Method, get_method

__all__ = ["explain", "explain_with_delta", "fresh_seed", "prepared", "run"]


def fresh_seed() -> int:
    """A seed drawn from the operating system's entropy (``seed=None``: fresh randomness)."""
    return int(np.random.SeedSequence().entropy % (2**63))  # type: ignore[operator]


def prepared(model: Any, x: Any, framework: str | None, model_kwargs: Any) -> tuple[Inputs, bool]:
    """``(prepared inputs, several inputs?)`` of an ``explain`` call: ``x`` is one batch (key
    ``"x"``) or a list of them (keys ``"input_0"``, ...)."""
    bk = get_backend(model, framework)
    multi = isinstance(x, (list, tuple))
    if multi and any(isinstance(v, (list, tuple)) for v in x):
        raise XaikitTypeError(
            f"x: a list is read as one batch per model input (a model with several inputs); got a list "
            f"of {len(x)} whose items are Python lists, a nested list of numbers? Pass one batch as an "
            "array, np.asarray(x) (torch: torch.tensor(x)), and several inputs as a list of arrays"
        )
    values = list(x) if multi else [x]
    keys = [f"input_{i}" for i in range(len(values))] if multi else ["x"]
    return prepare(bk, model, values, keys, model_kwargs=model_kwargs), multi


def run(
    method: Method,
    inp: Inputs,
    pinned: Pinned,
    options: dict[str, Any],
    *,
    seed: int,
    max_batch: int | str = "auto",
    memory_budget: int | float = DEFAULT_BUDGET,
    output: int | str = 0,
    xla: bool = False,
    with_delta: bool = False,
    progress: bool | None = None,
    where: str = " in explain",
) -> tuple[Explained, np.ndarray]:
    """Run one method on prepared inputs and pinned classes (inside ``bk.inference(model)``),
    and check its maps: ``(explained, map status per sample)``.

    ``options`` are the method's own, checked and filled (:meth:`Method.split_options`).
    Inside :func:`xaikit.xai.health.deferred` the maps are not checked (the status is empty).
    """
    call = Call(
        inp, method, pinned.targets, seed, max_batch, memory_budget, output, xla,
        with_delta and method.delta, progress, pinned.spec, pinned.unchecked, check_given,
    )  # fmt: skip
    result = method.runner()(call, **options)
    call.check_classes()  # given classes an in_pass runner left unchecked: no map of a class the model lacks
    return result, _check(call, result, pinned, options, where)


def _check(call: Call, result: Explained, pinned: Pinned, options: dict[str, Any], where: str) -> np.ndarray:
    """The map status of each sample and, for degenerate maps, the warning; on the host, from
    the maps and the output already read (no model pass)."""
    if health.is_deferred():
        return np.zeros(0, dtype=str)
    bk, inp, method = call.bk, call.inp, call.method
    kind, _ = health.map_kind(method.name, options.get("magnitude"), options.get("nintegration"))
    spans = None
    if kind == "gradient":
        spans = [bk.to_numpy(bk.sample_max(x) - bk.sample_min(x)).reshape(-1) for x in inp.tensors]
    seen: Any = pinned.output
    targets = pinned.host_targets(bk)
    if result.scores is not None:  # the method read the explained scores itself
        seen, targets = result.scores, None
    return health.check_maps(
        result.values, method=method.name, model=inp.model, output=seen, targets=targets,
        magnitude=options.get("magnitude"), nintegration=options.get("nintegration"), spans=spans,
        where=where,
    )  # fmt: skip


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
        target: class per sample (or one class for all); None = the predicted class, pinned. The
            gradient sweep methods also take a target object of :mod:`xaikit.targets` (one for
            the whole batch): ``ClassRegion(k, mask)`` (segmentation), ``Output(index)``
            (regression), ``Similarity(reference)`` (embeddings), ``Box(box, k)`` (detection;
            ``box`` (B, T, 4): T boxes per image, maps (B, T, ...)) or a callable
            ``f(outputs) -> (rows,)`` (see ``docs/targets.md``).
        method: any registered method, by name, alias or title (the table in
            ``docs/methods.md`` lists each with its options, cost and what it answers):
            gradient methods (``"vanilla"``, ``"smoothgrad"``, ``"integrated"``, ``"smint"``,
            ``"vargrad"``, ``"input_x_gradient"``, ``"expected_gradients"``, ``"blur_ig"``,
            ``"guided_ig"``, ``"xrai"``), class-activation maps (``"gradcam"``,
            ``"gradcam++"``, ``"xgradcam"``, ``"layercam"``, ``"hirescam"``, ``"scorecam"``,
            ``"eigencam"``, ``"guided_gradcam"``; see ``docs/cam.md``), perturbation methods
            (``"occlusion"``, ``"rise"``; forward passes only) and rule-based methods (``"lrp"``
            with ``composite=``, ``"lrp_epsilon"``, ``"deeplift"``, ``"deepliftshap"``,
            ``"guided_backprop"``, ``"deconvnet"``; see ``docs/rules.md``). ``xk.xai.METHODS``
            names them.
        framework: ``"torch"`` or ``"tf"`` when the model is a plain function.
        seed: seed of noise and random baselines (default 0: reproducible; None: fresh).
        max_batch: rows per fused chunk, or ``"auto"``.
        memory_budget: what an ``"auto"`` chunk may use: bytes (int) or a fraction in (0, 1]
            (float) of the available RAM / free GPU memory; default 0.5.
        return_delta: also return the completeness delta (B,) of the methods that have one
            (``xk.xai.method_names(delta=True)``: Integrated Gradients and its relatives, Guided
            IG, DeepLIFT, DeepLiftShap); an error for a method without one.
        xla: compile the TensorFlow chunk step with XLA; ignored for torch.
        progress: progress of the slow methods (``"xrai"``, ``"guided_ig"``, ``"occlusion"``,
            ``"rise"``, ``"scorecam"``) on stderr: a tqdm bar on a terminal, else a line every
            10 s. None (default): shown once the call has run 5 s; True: from the start; False:
            never. The other methods run one fused sweep and report nothing.
        **options: the method's own options (an option it does not take is an error naming
            the ones it does; ``xk.xai.get_method(name).options`` lists them with their
            defaults), and for every method ``output`` (which model output to explain: an
            index, a dict key or an attribute name such as ``"logits"``; default 0, which also
            takes an output object's ``logits``) and ``model_kwargs`` (a dict of extra keyword
            arguments of the model's forward call; a tensor or array whose first axis is the
            batch size is per-sample, cut and repeated with the rows; anything else is passed
            unchanged).

    Returns:
        A numpy array with ``x``'s shape (a list for several inputs), or one (B, H, W) map per
        image for the map methods (CAMs, RISE, XRAI); with ``return_delta``,
        ``(attributions, delta)``; with ``raw=True`` (CAMs, XRAI) the method's full result
        (a ``CamResult``, an ``XraiResult``).

    Warns:
        DegenerateMapWarning: maps that hold NaN / inf, are all zero or constant, or account for
            a change of the explained score below its resolution (float32's, or a half-precision
            model's; a saturated or near-uniform softmax: explain the logits); once per (model,
            method, status), with the likely cause and fix. See :mod:`xaikit.xai.health` and ``docs/degenerate.md``.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(3, 2)
        >>> attr = explain(model, torch.ones(4, 3), target=1, method="vanilla")
        >>> bool(np.allclose(attr, model.weight[1].detach().numpy()))
        True
    """
    values, delta = _explain(
        model, x, target, method, framework, seed, max_batch, memory_budget, "asked" if return_delta else "no",
        xla, progress, options,
    )  # fmt: skip
    return (values, delta) if return_delta and delta is not None else values  # raw=True: the full result


def explain_with_delta(
    model: Any, x: Any, target: Any, method: str, *, framework: str | None, seed: int | None,
    max_batch: int | str, **options: Any,
) -> tuple[Any, np.ndarray | None]:  # fmt: skip
    """``explain(model, x, target, method, return_delta=True, ...)``, except that the delta is None
    (not an error) where the method has none, or none with these options (SmInt's default squared
    paths): for a caller that reports the delta of every method that has one, as
    :func:`xaikit.evaluate.compare` does, without making its user ask method by method."""
    return _explain(
        model, x, target, method, framework, seed, max_batch, DEFAULT_BUDGET, "if_any", False, None, options
    )


def _explain(
    model: Any,
    x: Any,
    target: Any,
    method: str,
    framework: str | None,
    seed: int | None,
    max_batch: int | str,
    memory_budget: int | float,
    delta_mode: str,
    xla: bool,
    progress: bool | None,
    options: dict[str, Any],
) -> tuple[Any, np.ndarray | None]:
    """The body of :func:`explain`: ``(values, delta)``; with ``raw=True`` ``(full result, None)``.

    ``delta_mode``: ``"no"`` (delta None), ``"asked"`` (the caller's ``return_delta=True``: a
    method without one is an error) or ``"if_any"`` (the delta where the method gives one with
    these options, else None)."""
    record = get_method(method)  # an unknown name is refused here, with the list of every method
    progress = check_progress(progress)
    seed = check_seed(seed)
    shared, own = record.split_options(options)
    output = check_output(shared.get("output", 0))
    return_delta = delta_mode == "asked" or (delta_mode == "if_any" and record.delta)
    if delta_mode == "asked" and not record.delta:
        raise XaikitValueError(
            f"return_delta is the completeness delta of the methods that have one "
            f"({', '.join(m for m in _delta_methods())}); method {record.name!r} has none: call "
            "explain without return_delta"
        )
    max_batch = check_max_batch(max_batch)
    memory_budget = check_memory_budget(memory_budget)
    inp, multi = prepared(model, x, framework, shared.get("model_kwargs"))
    bk = inp.bk
    inp, target, stacked = expanded(inp, target)
    with bk.inference(model):
        pinned = pin(
            inp,
            target,
            output,
            predict=False,
            in_pass=record.targets == "in_pass",
            objects=record.target_objects,
        )
        result, _ = run(
            record, inp, pinned, own, seed=fresh_seed() if seed is None else seed, max_batch=max_batch,
            memory_budget=memory_budget, output=output, xla=xla, with_delta=return_delta, progress=progress,
        )  # fmt: skip
    if delta_mode == "asked" and result.delta is None:  # never a silent None where a delta was asked for
        raise XaikitValueError(
            f"return_delta: {record.title} ({record.name}) has no completeness delta with these options: "
            "with magnitude=True (the default of SmInt, and of Guided IG with nsamples > 1) each path's "
            "attributions are squared, "
            "so they do not add up to f(x) - f(baseline). Pass magnitude=False to get the delta"
        )
    if result.detail is not None:  # raw=True: the method's full result, which has no delta of its own
        return (regrouped_detail(result.detail, stacked, inp.batch) if stacked else result.detail), None
    values: Any = result.values if multi and record.result == "input" else result.values[0]
    delta = result.delta
    if stacked:  # (B*T, ...) logical samples -> (B, T, ...), T = 1 included
        regroup = lambda a: np.asarray(a).reshape(-1, stacked, *np.shape(a)[1:])  # noqa: E731
        values = [regroup(v) for v in values] if isinstance(values, list) else regroup(values)
        delta = None if delta is None else regroup(delta)
    return values, delta


def regrouped_detail(detail: Any, per_image: int, rows: int) -> Any:
    """A method's full result (``raw=True``: a ``CamResult``, an ``XraiResult``, a
    ``LimeResult``) of ``rows`` = B*T stacked logical samples, with every per-row field regrouped
    per image: an array whose first axis is ``rows`` becomes (B, T, ...), a list of ``rows``
    items a list of B lists of T; other fields are kept.

    Example:
        >>> from typing import NamedTuple
        >>> class R(NamedTuple):
        ...     maps: np.ndarray
        ...     layer: str
        >>> out = regrouped_detail(R(np.zeros((6, 2, 2)), "conv"), 3, 6)
        >>> out.maps.shape, out.layer
        ((2, 3, 2, 2), 'conv')
    """

    def regroup(v: Any) -> Any:
        if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == rows:
            return v.reshape(-1, per_image, *v.shape[1:])
        if isinstance(v, list) and len(v) == rows:
            return [v[i : i + per_image] for i in range(0, rows, per_image)]
        return v

    if dataclasses.is_dataclass(detail) and not isinstance(detail, type):
        fields = {f.name: regroup(getattr(detail, f.name)) for f in dataclasses.fields(detail)}
        return dataclasses.replace(detail, **fields)
    if isinstance(detail, tuple) and hasattr(detail, "_replace"):
        return detail._replace(**{k: regroup(v) for k, v in detail._asdict().items()})  # type: ignore[attr-defined]
    return detail


def expanded(inp: Inputs, target: Any) -> tuple[Inputs, Any, int]:
    """``(inputs, target, T)``: a stacked target (T targets per image, :func:`xaikit.targets.unstack`)
    becomes B*T logical samples, each image repeated T times, so one call explains them all in
    large chunks; the inputs declare the groups (``Inputs.repeats = T``), so that a method can run
    the part of its work that does not depend on the target once per image (the gradient CAMs run
    the layers below their layer on the B images only). Any other target passes as it is (T = 0:
    nothing to regroup)."""
    split = unstack(target, inp.batch)
    if split is None:
        return inp, target, 0
    if inp.kwargs:
        raise XaikitValueError(
            "target=Box(boxes (B, T, 4), ...): stacked targets do not take model_kwargs yet; loop over "
            "the T boxes (one Box per call) instead"
        )
    flat, n = split
    idx = inp.bk.index(np.repeat(np.arange(inp.batch), n), getattr(inp.tensors[0], "device", None))
    tensors = [inp.bk.gather(t, idx) for t in inp.tensors]
    return dataclasses.replace(inp, tensors=tensors, repeats=n), flat, n


def _delta_methods() -> list[str]:
    from xaikit.xai.registry import method_names

    return list(method_names(delta=True))
