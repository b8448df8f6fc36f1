"""The region-ablation check of a strategy cluster: does the model rely on the region its maps
point at?

The region is the top ``fraction`` of the pixels of the cluster's mean map, upsampled (area
resampling) to the images' size; ties are broken by pixel order. Each member's image (a seeded
sample of at most :data:`~xaikit.analyze.run.ABLATION_SAMPLES`) gets the region filled with its
own mean colour (per channel, over the whole image). The members go through the model before and
after (forward only, chunked: :func:`xaikit.xai.internal.forward_scores`) and the cluster gets
``{"fraction", "n", "accuracy_before", "accuracy_after", "score_before", "score_after",
"accuracy_random", "score_random"}``: the accuracy against the labels (None without labels) and
the mean output of the explained class (the model's output as it is: a probability for a model
that ends in a softmax). The ``*_random`` figures are the control: the same number of pixels,
chosen at random (seeded, one draw per cluster), filled the same way. Any image loses something
when a tenth of it is painted over; a drop well beyond the control's is what says the model
relies on *this* region. Reliance is not wrongness: the region may be the object itself.

Example:
    >>> region_mask(np.array([[0.0, 1.0], [3.0, 2.0]]), (2, 2), 0.5).astype(int).tolist()
    [[0, 0], [1, 1]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xaikit.analyze.images import read_images
from xaikit.analyze.maps import MapTable, area_weights, spatial_layout

__all__ = ["ablate_clusters", "fill_region", "random_mask", "region_mask", "scores"]


def region_mask(mean: np.ndarray, spatial: tuple[int, int], fraction: float) -> np.ndarray:
    """(H, W) bool: the top ``fraction`` of the pixels (at least one) of the (s, s) ``mean`` map
    upsampled to ``spatial``."""
    h, w = spatial
    up = area_weights(mean.shape[0], h) @ mean.astype(np.float64) @ area_weights(mean.shape[1], w).T
    count = max(1, math.ceil(fraction * h * w))
    flat = np.zeros(h * w, dtype=bool)
    flat[np.argsort(-up.ravel(), kind="stable")[:count]] = True
    return flat.reshape(h, w)


def random_mask(spatial: tuple[int, int], count: int, rng: np.random.Generator) -> np.ndarray:
    """(H, W) bool: ``count`` pixels chosen at random (the control region of the check).

    Example:
        >>> int(random_mask((4, 4), 3, np.random.default_rng(0)).sum())
        3
    """
    h, w = spatial
    flat = np.zeros(h * w, dtype=bool)
    flat[rng.choice(h * w, size=min(count, h * w), replace=False)] = True
    return flat.reshape(h, w)


def fill_region(images: np.ndarray, mask: np.ndarray, spatial: tuple[int, int]) -> np.ndarray:
    """A copy of ``images`` (n, ...) with the pixels of ``mask`` (H, W) set to each image's mean
    colour (per channel, over the whole image).

    Example:
        >>> x = np.arange(12.0).reshape(1, 2, 2, 3)  # (n, H, W, C)
        >>> fill_region(x, np.array([[True, False], [False, False]]), (2, 2))[0, 0, 0].tolist()
        [4.5, 5.5, 6.5]
    """
    axis, _ = spatial_layout(tuple(images.shape[1:]), spatial)
    out = np.array(images, dtype=np.float32, copy=True)
    if axis is None:
        means = out.mean(axis=(1, 2))
        out[:, mask] = means[:, None]
    elif axis == 0:
        means = out.mean(axis=(2, 3))  # (n, C)
        out[:, :, mask] = means[:, :, None]
    else:
        means = out.mean(axis=(1, 2))  # (n, C)
        out[:, mask, :] = means[:, None, :]
    return out


def scores(
    model: Any, x: np.ndarray, classes: np.ndarray, batch_size: int, framework: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, predictions)``: the output of ``classes`` (n,) and the predicted class of each
    image of ``x``, in forward passes of ``batch_size`` images."""
    from xaikit.backend import get_backend
    from xaikit.xai.internal import forward_scores, prepare

    bk = get_backend(model, framework)
    inp = prepare(bk, model, [x], ["x"])
    device = bk.model_device(model)
    xt = inp.tensors[0]
    targets = bk.index(np.asarray(classes, np.int64), device)
    n = len(x)

    def rows_fn(r0: int, r1: int) -> tuple[list[Any], Any]:
        idx = bk.index(np.arange(r0, r1), device)
        return [bk.gather(xt, idx)], bk.gather(targets, idx)

    predicted: list[np.ndarray] = []
    with bk.inference(model):
        flat = forward_scores(bk, model, rows_fn, n, max(1, min(batch_size, n)), batch=n, predicted=predicted)
    return np.asarray(bk.to_numpy(flat), np.float64), np.concatenate(predicted)


def ablate_clusters(
    model: Any, source: Any, table: MapTable, cluster: np.ndarray, entries: list[dict[str, Any]],
    means: list[np.ndarray], fraction: float, seed: int, batch_size: int, framework: str | None,
    limit: int = 256,
) -> None:  # fmt: skip
    """Run the check for every cluster of ``entries`` (its ``"ablation"`` is set in place)."""
    rng = np.random.default_rng(seed)
    labels = dict(zip(table.index.tolist(), table.label.tolist()))
    for entry in entries:
        for c in entry["clusters"]:
            members = table.index[cluster == c["id"]]
            if len(members) > limit:
                members = rng.choice(members, size=limit, replace=False)
            parts = list(read_images(source, np.sort(members), batch_size))
            if not parts:
                continue
            idx = np.concatenate([i for i, _ in parts])
            x = np.concatenate([xb for _, xb in parts])
            _, spatial = spatial_layout(tuple(x.shape[1:]), table.spatial)
            mask = region_mask(means[c["id"]], spatial, fraction)
            klass = np.full(len(x), entry["klass"], np.int64)
            s0, p0 = scores(model, x, klass, batch_size, framework)
            s1, p1 = scores(model, fill_region(x, mask, table.spatial), klass, batch_size, framework)
            control = random_mask(spatial, int(mask.sum()), rng)
            s2, p2 = scores(model, fill_region(x, control, table.spatial), klass, batch_size, framework)
            lab = np.asarray([labels[int(i)] for i in idx], np.int64)
            has = lab >= 0
            c["ablation"] = {
                "fraction": float(fraction),
                "n": len(x),
                "accuracy_before": float((p0[has] == lab[has]).mean()) if has.any() else None,
                "accuracy_after": float((p1[has] == lab[has]).mean()) if has.any() else None,
                "score_before": float(s0.mean()),
                "score_after": float(s1.mean()),
                "accuracy_random": float((p2[has] == lab[has]).mean()) if has.any() else None,
                "score_random": float(s2.mean()),
            }
