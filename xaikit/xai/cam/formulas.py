"""The class-activation formulas: each map is a weighted sum of one layer's activation maps.

For a layer with activations ``A`` (B, C, h, w) and the gradient ``dA = d y_t / d A`` of the
target score ``y_t`` (the model's output for the target class, before any softmax the user did
not put in the model), every method is ``relu(sum_c w_c * A_c)`` or a pixel-wise variant:

* Grad-CAM — Selvaraju et al., 2017, https://arxiv.org/abs/1610.02391:
  ``w_c = mean_ij dA_cij``.
* HiResCAM — Draelos & Carin, 2020, https://arxiv.org/abs/2011.08891:
  ``relu(sum_c dA_c * A_c)`` (pixel-wise).
* XGrad-CAM — Fu et al., 2020, https://arxiv.org/abs/2008.02312:
  ``w_c = sum_ij dA_cij * A_cij / (sum_ij A_cij + 1e-7)``.
* Grad-CAM++ — Chattopadhyay et al., 2018, https://arxiv.org/abs/1710.11063, in the closed
  form for an exponential output (the one pytorch-grad-cam uses):
  ``alpha = dA^2 / (2 dA^2 + sum_ij A_c * dA^3 + 1e-6)`` (0 where dA = 0),
  ``w_c = sum_ij alpha_cij * relu(dA_cij)``.
* LayerCAM — Jiang et al., 2021, https://doi.org/10.1109/TIP.2021.3089943:
  ``relu(sum_c relu(dA_c) * A_c)`` (pixel-wise).
* Eigen-CAM — Muhammad & Yeasin, 2020, https://arxiv.org/abs/2008.00299: the projection of
  the (h*w, C) activations, centred per channel, on their first right-singular vector (no
  gradient, no target); the sign is chosen so that the map correlates positively with the
  channel-mean activation (an SVD's sign is arbitrary).
* Score-CAM — Wang et al., 2020, https://arxiv.org/abs/1910.01279: ``w = softmax_c(y_t(x * M_c))``
  with ``M_c`` the activation map ``A_c`` upsampled to the input (bilinear, corners aligned, as
  pytorch-grad-cam does) and scaled to [0, 1]; B x C masked forward passes, chunked.

The formulas run on the host in float64 on the (B, C, h, w) layer tensors (channel-first for
both frameworks), which are small next to the inputs.
"""

from __future__ import annotations

import numpy as np

from xaikit.errors import XaikitValueError
from xaikit.xai.registry import all_methods, get_method


def relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0)


def gradcam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    w = g.mean(axis=(2, 3), keepdims=True)
    return relu((w * a).sum(axis=1))


def hirescam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    return relu((g * a).sum(axis=1))


def layercam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    return relu((relu(g) * a).sum(axis=1))


def xgradcam(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    w = (g * a).sum(axis=(2, 3), keepdims=True) / (a.sum(axis=(2, 3), keepdims=True) + 1e-7)
    return relu((w * a).sum(axis=1))


def gradcampp(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    g2 = g * g
    g3 = g2 * g
    alpha = g2 / (2 * g2 + a.sum(axis=(2, 3), keepdims=True) * g3 + 1e-6)
    alpha = np.where(g != 0, alpha, 0.0)
    w = (alpha * relu(g)).sum(axis=(2, 3), keepdims=True)
    return relu((w * a).sum(axis=1))


def combine(method: str, a: np.ndarray, da: np.ndarray | None) -> np.ndarray:
    """The (B, h, w) map of a gradient CAM method (its record's ``formula``) from ``A`` and
    ``dA`` (B, C, h, w), float64; Eigen-CAM from ``A`` alone.

    Example:
        >>> a = np.ones((1, 2, 2, 2)); da = np.stack([np.full((2, 2), 0.5), -np.ones((2, 2))])[None]
        >>> combine("gradcam", a, da)[0]  # 0.5 * 1 - 1 * 1 < 0: relu
        array([[0., 0.],
               [0., 0.]])
        >>> combine("layercam", a, da)[0]
        array([[0.5, 0.5],
               [0.5, 0.5]])
    """
    a = np.asarray(a, dtype=np.float64)
    record = get_method(method)
    if record.name == "eigencam":
        return relu(eigen_projection(a))
    if record.formula is None:
        raise XaikitValueError(
            f"method {record.name!r} is not a gradient class-activation map (one formula of a "
            f"layer's activations and gradients); those are {', '.join(gradient_cams())}"
        )
    return record.formula(a, np.asarray(da, dtype=np.float64))


def gradient_cams() -> tuple[str, ...]:
    """The CAM methods computed from a layer's activations and their gradients alone."""
    return tuple(m.name for m in all_methods("cam") if m.formula is not None)


def eigen_components(a: np.ndarray, n: int = 1) -> list[np.ndarray]:
    """Per sample: the (h*w, C) activations, centred per channel, projected on their first
    ``n`` right-singular vectors: ``n`` arrays (B, h, w), the first component first. Each
    component's sign (arbitrary in an SVD) is chosen so that it correlates positively with the
    channel-mean activation; a sample with fewer than ``n`` components gets zeros for the rest.

    Example:
        >>> a = np.zeros((1, 2, 2, 2)); a[0, 0] = [[1, 0], [0, 0]]; a[0, 1] = [[0, 0], [0, 3]]
        >>> first, second = eigen_components(a, 2)
        >>> bool(first[0, 1, 1] > 0), first.shape, second.shape
        (True, (1, 2, 2), (1, 2, 2))
    """
    b, c, h, w = a.shape
    out = [np.zeros((b, h, w)) for _ in range(n)]
    for i in range(b):
        m = np.nan_to_num(a[i]).reshape(c, -1).T  # (h*w, C)
        m = m - m.mean(axis=0)
        _, _, vt = np.linalg.svd(m, full_matrices=False)
        mean_act = a[i].mean(axis=0).reshape(-1)
        for k in range(min(n, vt.shape[0])):
            p = m @ vt[k]
            if float(p @ mean_act) < 0:
                p = -p
            out[k][i] = p.reshape(h, w)
    return out


def eigen_projection(a: np.ndarray) -> np.ndarray:
    """Per sample: the (h*w, C) activations, centred per channel, projected on their first
    right-singular vector, (B, h, w); the sign makes the map correlate positively with the
    channel-mean activation (the first of :func:`eigen_components`)."""
    return eigen_components(a, 1)[0]
