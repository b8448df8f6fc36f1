"""PAIR ``saliency`` Guided IG as a peer: one image at a time through its ``call_model_function``,
and a rough timing of it against xaikit's fused ``guided_ig`` at equal settings.

PAIR ``saliency`` 0.2.1 calls ``np.quantile(..., interpolation='lower')``, a keyword numpy 2
removed; :func:`pair_numpy` runs PAIR with a stand-in for its module's ``numpy`` that renames
the keyword to ``method`` (the same quantile) and, optionally, replaces
``np.random.normal`` in PAIR's ``base`` module (``GetSmoothedMask``'s noise) with given draws.
The tests (``tests/xai/test_guided_ig.py``) use the same stand-in.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np


class _Numpy(types.ModuleType):
    """numpy, with ``quantile(interpolation=...)`` accepted and, when given, ``random.normal``
    returning the next of ``draws`` (each must have the requested shape)."""

    def __init__(self, draws: Sequence[np.ndarray] | None = None) -> None:
        super().__init__("numpy")
        self._draws = None if draws is None else list(draws)
        if self._draws is not None:
            self.random = types.SimpleNamespace(normal=self._normal)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def quantile(a: Any, q: Any, *args: Any, interpolation: str | None = None, **kw: Any) -> Any:
        if interpolation is not None:
            kw.setdefault("method", interpolation)
        return np.quantile(a, q, *args, **kw)

    def _normal(self, loc: float, scale: float, size: Any) -> np.ndarray:
        if not self._draws:
            raise RuntimeError("PAIR asked for more noise draws than were given")
        draw = np.asarray(self._draws.pop(0), dtype=np.float64)
        if draw.shape != tuple(np.atleast_1d(size)):
            raise RuntimeError(f"noise draw of shape {draw.shape}; PAIR asked for {size}")
        return draw


@contextlib.contextmanager
def pair_numpy(draws: Sequence[np.ndarray] | None = None) -> Iterator[Any]:
    """PAIR's Guided IG module runnable under numpy 2 inside the block (and, with ``draws``,
    ``GetSmoothedMask`` taking its noise from them, in order); yields ``saliency.core``."""
    import saliency.core as sc
    from saliency.core import base, guided_ig

    saved = guided_ig.np, base.np
    guided_ig.np = _Numpy()
    if draws is not None:
        base.np = _Numpy(draws)
    try:
        yield sc
    finally:
        guided_ig.np, base.np = saved


def torch_call_model(model: Any, device: Any = "cpu", dtype: Any = None) -> Callable[..., dict[str, Any]]:
    """A PAIR ``call_model_function`` for a torch classifier: the gradient of the score of
    ``call_model_args["target"]`` with respect to the input batch."""
    import saliency.core as sc
    import torch

    dtype = dtype or next(model.parameters()).dtype

    def call(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = torch.as_tensor(np.asarray(xb), device=device).to(dtype).requires_grad_(True)
        scores = model(t)[:, int(call_model_args["target"])]
        (grad,) = torch.autograd.grad(scores.sum(), t)
        return {sc.INPUT_OUTPUT_GRADIENTS: grad.detach().cpu().numpy()}

    return call


def pair_guided_ig(
    model: Any,
    x: np.ndarray,
    targets: Sequence[int],
    *,
    steps: int = 200,
    fraction: float = 0.25,
    max_dist: float = 0.02,
    baseline: np.ndarray | None = None,
    nsamples: int = 1,
    stdev_spread: float = 0.15,
    magnitude: bool = True,
    device: Any = "cpu",
) -> np.ndarray:
    """PAIR ``GuidedIG.GetMask`` of each image of ``x`` (the torch model's layout), one image at a
    time as PAIR works (``GetSmoothedMask`` with PAIR's own noise when ``nsamples`` > 1);
    returns the stacked (B, ...) attributions (float64)."""
    call = torch_call_model(model, device)
    out = []
    with pair_numpy() as sc:
        gig = sc.GuidedIG()
        for i in range(len(x)):
            kw = {
                "x_baseline": None if baseline is None else baseline[i],
                "x_steps": steps,
                "fraction": fraction,
                "max_dist": max_dist,
            }
            args = {"target": int(targets[i])}
            if nsamples > 1:
                mask = gig.GetSmoothedMask(
                    x[i], call, args, stdev_spread=stdev_spread, nsamples=nsamples, magnitude=magnitude, **kw
                )
            else:
                mask = gig.GetMask(x[i], call, args, **kw)
            out.append(np.asarray(mask, dtype=np.float64))
    return np.stack(out)


def time_pair_vs_xaikit(
    model: Any,
    x: np.ndarray,
    steps: int = 50,
    nsamples: int = 1,
    repeats: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Seconds of PAIR and of ``xk.xai.explain(method="guided_ig")`` on the same torch model,
    images (the model's layout) and settings (targets: the predicted classes; zeros baseline;
    ``nsamples`` noisy copies), the best of ``repeats`` each, their ratio, and the bound of the
    step-by-step structure: ``steps`` sweeps of the engine over B x nsamples rows of plain
    gradients (what Guided IG runs minus its host-side selection). Rough: one process, no
    isolation. ``clock=time.process_time`` counts this process's CPU seconds instead of wall
    time: steadier on a shared machine (with one torch thread, the two agree when it is quiet)."""
    import torch

    import xaikit as xk
    from xaikit.backend import get_backend
    from xaikit.xai._engine.inputs import prepare
    from xaikit.xai.gradient.sweep import attribute

    with torch.no_grad():
        targets = model(torch.as_tensor(x)).argmax(1).numpy()
    bk = get_backend(model)
    inp = prepare(bk, model, [np.concatenate([x] * nsamples)], ["x"])
    row_targets = bk.index(np.concatenate([targets] * nsamples), None)
    opts = {"method": "guided_ig", "steps": steps, "nsamples": nsamples}
    xk.xai.explain(model, x, targets, **{**opts, "steps": 2})  # warm-up: the chunk plan
    best = {"pair": np.inf, "xaikit": np.inf, "bound": np.inf}

    def timed(name: str, fn: Callable[[], Any]) -> None:
        t0 = clock()
        fn()
        best[name] = min(best[name], clock() - t0)

    def bound() -> None:
        with bk.inference(model):
            for _ in range(steps):
                attribute(inp, row_targets, "vanilla")

    for _ in range(repeats):
        timed("pair", lambda: pair_guided_ig(model, x, targets, steps=steps, nsamples=nsamples))
        timed("xaikit", lambda: xk.xai.explain(model, x, targets, **opts))
        timed("bound", bound)
    best["speedup"] = best["pair"] / best["xaikit"]
    best["bound_speedup"] = best["pair"] / best["bound"]
    return best
