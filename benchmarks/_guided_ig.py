"""PAIR ``saliency`` Guided IG as a peer: one image at a time through its ``call_model_function``,
and a rough timing of it against xaikit's fused ``guided_ig`` at equal settings.

PAIR ``saliency`` 0.9.0 calls ``np.quantile(..., interpolation='lower')``, a keyword numpy 2
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
    device: Any = "cpu",
) -> np.ndarray:
    """PAIR ``GuidedIG.GetMask`` of each image of ``x`` (the torch model's layout), one image at a
    time as PAIR works; returns the stacked (B, ...) attributions (float64)."""
    call = torch_call_model(model, device)
    out = []
    with pair_numpy() as sc:
        gig = sc.GuidedIG()
        for i in range(len(x)):
            out.append(
                gig.GetMask(
                    x[i],
                    call,
                    {"target": int(targets[i])},
                    x_baseline=None if baseline is None else baseline[i],
                    x_steps=steps,
                    fraction=fraction,
                    max_dist=max_dist,
                )
            )
    return np.stack(out)


def time_pair_vs_xaikit(model: Any, x: np.ndarray, steps: int = 50, repeats: int = 1) -> dict[str, float]:
    """Seconds of PAIR and of ``xk.xai.explain(method="guided_ig")`` on the same torch model,
    images (the model's layout) and settings (targets: the predicted classes; zeros baseline),
    the best of ``repeats`` each, and their ratio. Rough: one process, no isolation."""
    import torch

    import xaikit as xk

    with torch.no_grad():
        targets = model(torch.as_tensor(x)).argmax(1).numpy()
    xk.xai.explain(model, x[:1], targets[:1], method="guided_ig", steps=2)  # warm-up
    best = {"pair": np.inf, "xaikit": np.inf}
    for _ in range(repeats):
        t0 = time.perf_counter()
        pair_guided_ig(model, x, targets, steps=steps)
        best["pair"] = min(best["pair"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        xk.xai.explain(model, x, targets, method="guided_ig", steps=steps)
        best["xaikit"] = min(best["xaikit"], time.perf_counter() - t0)
    best["speedup"] = best["pair"] / best["xaikit"]
    return best
