"""How the removal curves order pixels by a map: the rank options (``rank=``), each position's
rank with seeded ties, and the pixel count after each step. Shared by deletion/insertion
(:mod:`~xaikit.evaluate.perturbation`), the removal metrics of
:mod:`~xaikit.evaluate.faithfulness` and the region curves of :mod:`~xaikit.evaluate.curves`."""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.checks import check_choice

__all__ = ["RANKS", "check_rank", "pixel_counts", "rank_positions", "resolve_rank"]

RANKS = ("auto", "signed", "magnitude")


def pixel_counts(n_pixels: int, steps: int) -> np.ndarray:
    """How many pixels are deleted (inserted) after each step: round(k * n / steps), k = 0..steps.

    Example:
        >>> pixel_counts(10, 4).tolist()
        [0, 3, 5, 8, 10]
    """
    k = np.arange(steps + 1, dtype=np.int64)
    return (2 * k * n_pixels + steps) // (2 * steps)  # round half up, exact integers


def rank_positions(smap: np.ndarray, seed: int) -> np.ndarray:
    """Per sample, the rank of each position (0 = most salient), ties in a seeded random order."""
    b, n = smap.shape[0], int(np.prod(smap.shape[1:]))
    flat = smap.reshape(b, n)
    rng = np.random.default_rng(seed)
    out = np.empty((b, n), dtype=np.int64)
    for i in range(b):
        perm = rng.permutation(n)
        order = perm[np.argsort(-flat[i, perm], kind="stable")]
        out[i, order] = np.arange(n)
    return out.reshape(smap.shape)


def check_rank(rank: Any) -> str:
    """``rank`` if it is one of :data:`RANKS`, else an error naming them."""
    return check_choice(rank, "rank", RANKS)


def resolve_rank(rank: str, saliency: np.ndarray) -> str:
    """``"auto"`` -> ``"signed"`` when the map holds a negative value, else ``"magnitude"``."""
    if rank != "auto":
        return rank
    return "signed" if bool(np.any(saliency < 0)) else "magnitude"
