"""``digits``: scikit-learn's bundled 8x8 handwritten digits, the MNIST stand-in (no download).

Example:
    >>> from xaikit.dataset.data import digits
    >>> train, test = digits.load_data()
    >>> train["x"].shape[1:], train["x"].dtype.name, len(train) + len(test)
    ((28, 28, 1), 'uint8', 1797)
"""

from __future__ import annotations

import numpy as np

from xaikit.dataset.numpy_dataset import NumpyDataset
from xaikit.errors import XaikitValueError

__all__ = ["load_data"]


def load_data(
    image_size: int = 28, eval_fraction: float = 0.2, seed: int = 0, resample: str = "bilinear"
) -> tuple[NumpyDataset, NumpyDataset]:
    """Load the 1797 digits, scaled to ``image_size`` and split into train and eval.

    The 8x8 images (values 0..16) are resized to ``image_size`` x ``image_size`` and mapped to
    0..255 like MNIST.

    Args:
        image_size: output height and width (8 keeps the originals; 28 is MNIST's size).
        eval_fraction: fraction of the samples (drawn at random with ``seed``) that go to eval.
        seed: seed of the split.
        resample: ``"bilinear"`` (smooth, like MNIST strokes) or ``"nearest"`` (blocky).

    Returns:
        ``(train, eval)`` NumpyDatasets with ``x`` (N, H, W, 1) uint8 and ``y`` (N,) int64.

    Raises:
        XaikitValueError: a size below 8, a fraction outside (0, 1), an unknown resample mode.
    """
    if not isinstance(image_size, (int, np.integer)) or image_size < 8:
        raise XaikitValueError(f"image_size must be an int of at least 8; got {image_size!r}")
    if not isinstance(eval_fraction, (float, int)) or not 0.0 < float(eval_fraction) < 1.0:
        raise XaikitValueError(f"eval_fraction must lie in (0, 1); got {eval_fraction!r}")
    if resample not in ("bilinear", "nearest"):
        raise XaikitValueError(f"resample must be 'bilinear' or 'nearest'; got {resample!r}")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float64) / 16.0  # (N, 8, 8) in [0, 1]
    y = np.asarray(bunch.target, dtype=np.int64)
    if image_size != 8:
        m = _resize_matrix(8, int(image_size), resample)
        images = np.einsum("ij,njk,lk->nil", m, images, m)
    x = np.clip(np.rint(images * 255.0), 0, 255).astype(np.uint8)[..., None]
    order = np.random.default_rng(seed).permutation(len(y))
    n_eval = max(1, round(float(eval_fraction) * len(y)))
    ev, tr = np.sort(order[:n_eval]), np.sort(order[n_eval:])
    return NumpyDataset({"x": x[tr], "y": y[tr]}), NumpyDataset({"x": x[ev], "y": y[ev]})


def _resize_matrix(n_in: int, n_out: int, resample: str) -> np.ndarray:
    """(n_out, n_in) matrix that resizes one axis (pixel centres aligned, edges clamped)."""
    centres = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    m = np.zeros((n_out, n_in))
    if resample == "nearest":
        m[np.arange(n_out), np.clip(np.floor(centres + 0.5).astype(int), 0, n_in - 1)] = 1.0
        return m
    c = np.clip(centres, 0, n_in - 1)
    lo = np.floor(c).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    w = c - lo
    np.add.at(m, (np.arange(n_out), lo), 1.0 - w)
    np.add.at(m, (np.arange(n_out), hi), w)
    return m
