"""Shared pieces of the metrics that re-run a method under changed conditions (the random-logit
test, eMPRT, sMPRT and ``compare``'s randomization scores): the checked arguments, one call of
the method, the maps of the model with its weights re-drawn, and per-sample model arguments
stacked with stacked rows."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from xaikit.backend import Backend, get_backend
from xaikit.backend.outputs import check_output
from xaikit.checks import check_int
from xaikit.evaluate._common import check_method_options, fixed_object, host, input_layout
from xaikit.evaluate._conventions import check_method
from xaikit.evaluate._options import RunSettings
from xaikit.evaluate.randomization import layer_rng, select_layers
from xaikit.xai.internal import check_max_batch, explain, health, pin, prepare

__all__ = ["MethodRun", "explain_rows", "randomized_maps", "start", "tile_kwargs"]


@dataclass(frozen=True, kw_only=True)
class MethodRun(RunSettings):
    """How a metric re-runs the method: its canonical name and the run settings of each call of
    :func:`xaikit.xai.explain` (``options``: the method's own options, checked from
    ``method_options``)."""

    method: str
    options: dict[str, Any]

    @classmethod
    def of_settings(cls, run: RunSettings, method: str, options: dict[str, Any]) -> MethodRun:
        """The re-run of ``method`` (a canonical name) with the settings ``run``."""
        return cls(
            method=method, options=options, **{f.name: getattr(run, f.name) for f in fields(RunSettings)}
        )


def start(
    model: Any, x: Any, method: Any, *, target: Any, run: RunSettings
) -> tuple[Backend, MethodRun, Any, int]:
    """Checked arguments: ``(backend, the method's run, targets, class count)``: the targets are
    the classes (B,) or, for a target object of :mod:`xaikit.targets`, the object every re-run
    explains (:func:`~xaikit.evaluate._common.fixed_object`: a ``ClassRegion(mask=None)`` keeps
    the region the original model predicts; the class count is then 1)."""
    method = check_method(method)
    check_int(run.seed, "seed", 0)
    check_max_batch(run.max_batch)
    checked_output = check_output(run.output)
    options = check_method_options(run.method_options)
    bk = get_backend(model, run.framework)
    input_layout(x, bk)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=run.model_kwargs)
    with bk.inference(model):  # given classes: one row tells the class count
        pinned = pin(inp, target, checked_output, predict=False, objects=True)
    rerun = MethodRun.of_settings(run, method, options)
    if pinned.spec is not None:
        return bk, rerun, fixed_object(target, pinned.spec), 1
    return bk, rerun, pinned.host_targets(bk), int(pinned.n_classes or 1)  # type: ignore[return-value]


def explain_rows(model: Any, x: Any, targets: np.ndarray, run: MethodRun) -> np.ndarray:
    """The method's raw maps of the rows ``x`` for the classes ``targets`` (one call of
    :func:`xaikit.xai.explain`), as numpy."""
    kwargs = {"output": run.output, **run.options}
    if run.model_kwargs:
        kwargs["model_kwargs"] = run.model_kwargs
    return np.asarray(
        explain(
            model, x, target=targets, method=run.method, framework=run.framework, seed=run.seed,
            max_batch=run.max_batch, **kwargs,
        )
    )  # fmt: skip


def randomized_maps(
    bk: Backend,
    model: Any,
    x: Any,
    targets: np.ndarray,
    run: MethodRun,
    *,
    layers: Any,
    noise_seed: int | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The maps of the model with ``layers`` (None: every layer with weights) re-drawn, each by
    :func:`~xaikit.evaluate.randomization.layer_rng` (the recipe of every randomization check),
    and the names of those layers; the weights are restored bit for bit afterwards. ``run.seed``
    draws the weights and, unless ``noise_seed`` is given, the method's noise."""
    ops = bk.eval
    available = ops.weighted_layers(model)
    chosen = select_layers(available, layers)
    index = {name: i for i, (name, _) in enumerate(available)}
    saved = ops.snapshot(model)
    try:
        for name, layer in chosen:  # every layer's draw is its own, so the order is moot
            ops.randomize(layer, layer_rng(run.seed, index[name]))
        with health.deferred():  # a randomized model's degenerate maps are not the user's model's
            noise_run = run if noise_seed is None else replace(run, seed=noise_seed)
            maps = explain_rows(model, x, targets, noise_run)
    finally:
        ops.restore(saved)
    return maps, [n for n, _ in chosen]


def _tile_rows(value: Any, copies: int, batch: int) -> Any:
    """``copies`` stacked copies of a per-sample value (first axis = ``batch``); anything else as is."""
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) == 0 or int(shape[0]) != batch:
        return value
    values = host(value, "model_kwargs value")
    return np.concatenate([values] * copies, axis=0)


def tile_kwargs(model_kwargs: dict[str, Any] | None, copies: int, batch: int) -> dict[str, Any] | None:
    """The model's keyword arguments for ``copies`` stacked copies of the batch: each per-sample
    value (first axis = ``batch``) stacked as many times, the others as they are."""
    if not model_kwargs:
        return model_kwargs
    return {k: _tile_rows(v, copies, batch) for k, v in model_kwargs.items()}
