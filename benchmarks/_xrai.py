"""XRAI against PAIR ``saliency`` at equal settings, on a torch model (a helper, not a test).

PAIR's ``XRAI.GetMaskWithDetails`` explains one image at a time: its Integrated Gradients call
the model through a ``call_model_function`` with ``batch_size`` path steps per call (here all
``steps`` of one baseline at once, PAIR's best case), then segment, dilate and rank on the host.
xaikit runs every image, baseline and step in one fused sweep and segments the images in a
thread pool. :func:`compare` times both on the same images, classes and settings and also times
xaikit's stages one by one (single-threaded), so a figure says where the time goes.

Usage::

    from benchmarks._models import torch_model
    from benchmarks._xrai import compare
    print(compare(torch_model("lenet"), batch=16, steps=50))
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def pair_call(model: Any) -> Any:
    """PAIR's ``call_model_function`` for a channel-first torch model fed channel-last images:
    the gradients of the class ``call_model_args["target"]``'s score w.r.t. the (N, H, W, C)
    batch, in the batch's dtype."""
    import saliency.core as sc
    import torch

    device = next(iter(model.parameters())).device
    dtype = next(iter(model.parameters())).dtype

    def call(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = torch.as_tensor(np.asarray(xb), dtype=dtype, device=device).permute(0, 3, 1, 2)
        t = t.detach().requires_grad_(True)
        scores = model(t)[:, int(call_model_args["target"])]
        (grad,) = torch.autograd.grad(scores.sum(), t)
        return {sc.INPUT_OUTPUT_GRADIENTS: grad.permute(0, 2, 3, 1).cpu().numpy()}

    return call


def pair_xrai(
    model: Any,
    x: np.ndarray,
    targets: np.ndarray,
    *,
    steps: int = 100,
    algorithm: str = "full",
    area_threshold: float = 1.0,
    min_pixel_diff: int = 50,
    batch_size: int | None = None,
) -> np.ndarray:
    """PAIR XRAI maps (B, H, W) of channel-first images ``x`` (B, C, H, W) for ``targets``, one
    image at a time; ``batch_size`` (default ``steps``) path steps per model call."""
    import saliency.core as sc

    xrai = sc.XRAI()
    call = pair_call(model)
    params = sc.XRAIParameters(steps=steps, area_threshold=area_threshold, algorithm=algorithm)
    params.experimental_params["min_pixel_diff"] = min_pixel_diff
    images = np.transpose(np.asarray(x), (0, 2, 3, 1))
    maps = [
        xrai.GetMaskWithDetails(
            images[i], call, {"target": int(targets[i])}, batch_size=batch_size or steps,
            extra_parameters=params,
        ).attribution_mask
        for i in range(len(images))
    ]  # fmt: skip
    return np.stack(maps).astype(np.float32)


def _seconds(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def stages(model: Any, x: Any, targets: Any, *, steps: int = 50, algorithm: str = "full") -> dict[str, float]:
    """Seconds of xaikit's XRAI stages run one after another on one thread: the fused IG sweep,
    the Felzenszwalb label maps (resize + six segmentations), the dilation of every label and the
    ranking, summed over the images."""
    import torch

    import xaikit.xai.gradient.xrai as xr
    from xaikit.backend import get_backend
    from xaikit.xai._engine.inputs import prepare

    bk = get_backend(model)
    inp = prepare(bk, model, [x], ["x"])
    tg = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    with bk.inference(model):
        t_ig, attr = _seconds(lambda: bk.to_numpy(xr.integrated_gradients(inp, tg, None, steps)))
    images = np.transpose(bk.to_numpy(inp.tensors[0]), (0, 2, 3, 1))
    t_seg, segs = _seconds(lambda: [xr.label_maps(im) for im in images])
    t_dil, masks = _seconds(lambda: [xr.dilated_masks(s) for s in segs])
    amax = attr.max(axis=1)
    t_rank, _ = _seconds(lambda: [xr.rank_regions(m, a, algorithm=algorithm) for m, a in zip(masks, amax)])
    return {"ig": t_ig, "segmentation": t_seg, "dilation": t_dil, "ranking": t_rank}


def compare(
    model: Any,
    *,
    batch: int = 16,
    steps: int = 50,
    algorithm: str = "full",
    seed: int = 0,
    x: np.ndarray | None = None,
) -> dict[str, Any]:
    """Time PAIR XRAI (one image at a time) and ``xk.xai.explain(method="xrai")`` on the same
    (B, 3, 32, 32) images (or ``x``, channel-first) and classes, and xaikit's stages.

    Returns:
        ``{"pair_s", "xaikit_s", "speedup", "max_abs_diff", "stages": {...}}``; the first calls
        (warm-up) are not timed.
    """
    import torch

    import xaikit as xk

    if x is None:
        x = np.random.default_rng(seed).random((batch, 3, 32, 32)).astype(np.float32)
    xt = torch.as_tensor(x)
    with torch.no_grad():
        targets = model(xt).argmax(1).numpy()
    kw: dict[str, Any] = {"steps": steps, "algorithm": algorithm}
    xk.xai.explain(model, xt[:2], targets[:2], method="xrai", **kw)  # warm-up (plan, imports)
    pair_xrai(model, x[:1], targets[:1], **kw)
    t_pair, theirs = _seconds(lambda: pair_xrai(model, x, targets, **kw))
    t_ours, ours = _seconds(lambda: xk.xai.explain(model, xt, targets, method="xrai", **kw))
    return {
        "pair_s": t_pair,
        "xaikit_s": t_ours,
        "speedup": t_pair / t_ours,
        "max_abs_diff": float(np.abs(np.asarray(ours) - theirs).max()),
        "stages": stages(model, xt, targets, steps=steps, algorithm=algorithm),
    }
