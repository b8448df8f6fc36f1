"""Agreement with tf-keras-vis (PyPI ``tf-keras-vis`` 0.8.7) on Keras, raw layer-resolution maps.

tf-keras-vis is called with ``penultimate_layer=<name>``, ``seek_penultimate_conv_layer=False``,
``expand_cam=False`` and ``normalize_cam=False``: its maps are then ``relu(cam)`` at the layer's
resolution, as ``raw=True`` gives them here. Grad-CAM and LayerCAM are the same definitions and
are compared directly. It has no HiResCAM, XGrad-CAM or Eigen-CAM.

Definition differences (read in its 0.8.7 source):

* Grad-CAM++ (``gradcam_plus_plus.py``) follows the authors' code, not the closed form
  pytorch-grad-cam and xaikit use: its ``alpha = dA^2 / (2 dA^2 + sum_ij A_c dA^3)`` (no 1e-6;
  0 where dA = 0) is divided by its per-channel sum ``sum_ij alpha_cij``, and the weights carry
  the factor ``exp(y_t)``: ``w_c = exp(y_t) sum_ij alpha_cij relu(dA_cij) / sum_ij alpha_cij``.
  The per-channel division changes the map's shape, so the two are not comparable; both are
  tested against their formula on the same ``A`` and ``dA``.
* Score-CAM (``scorecam.py``, ``max_N=None``: every channel) builds the same masks: the
  activations upsampled by ``scipy.ndimage.zoom(order=1)`` (linear, corners aligned, as
  xaikit's ``align_corners=True``) and min-max scaled per channel (``+ 1e-7`` in the
  denominator where xaikit has ``1e-8``). Its weight is the target's class-softmax probability of
  the masked input, ``w_c = softmax_k(y(x * M_c))_t``, where xaikit (as pytorch-grad-cam) takes a
  softmax over channels of the target logits, ``w = softmax_c(y_t(x * M_c))``. The test model has
  an extra output unit that is identically 0, so a score function ``p_t / p_zero = exp(y_t)``
  makes its weights ``exp(y_t(x * M_c))``: xaikit's weights times the per-sample constant
  ``sum_c exp(y_t(x * M_c))``; the maps are compared after dividing each by its maximum. Its
  stock ``CategoricalScore`` is tested against its formula.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import cnn, cnn_weights, images
from xaikit.xai.cam import upsample

tf = pytest.importorskip("tensorflow")
with warnings.catch_warnings():
    # 0.8.7 imports zoom from scipy.ndimage.interpolation (deprecated namespace)
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip(
        "tf_keras_vis",
        reason="tf-keras-vis is not installed (pip install 'tf-keras-vis>=0.8.7', in the dev extra)",
    )
    from tf_keras_vis.gradcam import Gradcam
    from tf_keras_vis.gradcam_plus_plus import GradcamPlusPlus
    from tf_keras_vis.layercam import Layercam
    from tf_keras_vis.scorecam import Scorecam
    from tf_keras_vis.utils.scores import CategoricalScore

TARGETS = [0, 1, 2, 3]
SIZE = 16
_ROWS = [[i, t] for i, t in enumerate(TARGETS)]  # (sample, target) pairs for tf.gather_nd
RAW = {"seek_penultimate_conv_layer": False, "expand_cam": False, "normalize_cam": False}


@pytest.fixture(scope="module")
def case() -> tuple[Any, str, np.ndarray]:
    """(model, name of its last conv layer, images): the tests' small ReLU CNN (two 3x3 convs,
    flatten, two dense layers, linear output) on 16x16 images, 5x5 at the last conv, with a
    fifth output unit whose weights and bias are 0 (its logit is 0 for every input)."""
    import keras

    w = cnn_weights(seed=1, classes=len(TARGETS) + 1, size=SIZE)
    w["d2"][-1] = 0.0
    w["e2"][-1] = 0.0
    model = cnn("tf", w)
    layer = [la for la in model.layers if isinstance(la, keras.layers.Conv2D)][-1].name
    x = images(np.random.default_rng(3), batch=len(TARGETS), size=SIZE)
    return model, layer, x


def _ours(case: tuple[Any, str, np.ndarray], method: str) -> np.ndarray:
    model, layer, x = case
    return xk.xai.explain(model, x, target=TARGETS, method=method, layer=layer, raw=True).maps


def _acts_grads(case: tuple[Any, str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The last conv's activations A, dA = d y_t / dA (B, h, w, C) and the scores y_t, float64."""
    import keras

    model, layer, x = case
    both = keras.Model(model.inputs, [model.outputs[0], model.get_layer(layer).output])
    with tf.GradientTape() as tape:
        y, a = both(tf.constant(x))
        score = tf.gather_nd(y, _ROWS)
    g = tape.gradient(score, a)
    return (np.asarray(a, np.float64), np.asarray(g, np.float64), np.asarray(score, np.float64))


def _check(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Asserts agreement to 1e-5 of the largest value, maps not all zero; the max abs diff."""
    theirs = np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape == (len(TARGETS), 5, 5)
    assert (theirs.max(axis=(1, 2)) > 0).all(), "a map is all zero: the comparison says nothing"
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
    return float(np.abs(ours - theirs).max())


@pytest.mark.parametrize(("method", "cls"), [("gradcam", Gradcam), ("layercam", Layercam)])
def test_matches_tf_keras_vis(case: tuple[Any, str, np.ndarray], method: str, cls: Any) -> None:
    model, layer, x = case
    theirs = cls(model, clone=False)(CategoricalScore(TARGETS), x, penultimate_layer=layer, **RAW)
    _check(_ours(case, method), theirs)


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0)


def test_gradcam_plus_plus_each_to_its_formula(case: tuple[Any, str, np.ndarray]) -> None:
    """Same alpha, relu(dA) and A on both sides; tf-keras-vis divides alpha by its per-channel
    sum and scales by exp(y_t), xaikit does neither (and adds 1e-6 to alpha's denominator)."""
    model, layer, x = case
    a, g, y = _acts_grads(case)
    s = a.sum(axis=(1, 2), keepdims=True)
    g2, g3 = g**2, g**3

    def weights(eps: float, by_sum: bool) -> np.ndarray:
        alpha = np.where(g != 0, g2 / (2 * g2 + s * g3 + eps), 0.0)
        w = (alpha * _relu(g)).sum(axis=(1, 2))
        return w / np.where(alpha.sum(axis=(1, 2)) == 0, 1.0, alpha.sum(axis=(1, 2))) if by_sum else w

    theirs = GradcamPlusPlus(model, clone=False)(CategoricalScore(TARGETS), x, penultimate_layer=layer, **RAW)
    w_theirs = np.exp(y)[:, None] * weights(0.0, by_sum=True)
    _check(_relu(np.einsum("bc,bhwc->bhw", w_theirs, a)), theirs)
    _check(_ours(case, "gradcam++"), _relu(np.einsum("bc,bhwc->bhw", weights(1e-6, by_sum=False), a)))


class _ExpLogit:
    """A tf-keras-vis score of the class-softmax output p: p_t / p_zero = exp(y_t - 0), the
    exponential of the target logit (the model's last logit is 0)."""

    def __call__(self, p: Any) -> Any:
        return tf.gather_nd(p, _ROWS) / p[:, -1]


def test_scorecam_matches_up_to_its_per_sample_scale(case: tuple[Any, str, np.ndarray]) -> None:
    """With weights exp(y_t(x * M_c)) tf-keras-vis's map is xaikit's (softmax over channels of
    the same scores) times sum_c exp(y_t(x * M_c)): equal after each is divided by its max."""
    model, layer, x = case
    theirs = np.asarray(
        Scorecam(model, clone=False)(_ExpLogit(), x, penultimate_layer=layer, max_N=None, **RAW), np.float64
    )
    ours = _ours(case, "scorecam")
    _check(ours / ours.max(axis=(1, 2), keepdims=True), theirs / theirs.max(axis=(1, 2), keepdims=True))


def test_scorecam_stock_score_is_the_class_probability(case: tuple[Any, str, np.ndarray]) -> None:
    """tf-keras-vis's own definition with CategoricalScore: w_c = softmax_k(y(x * M_c))_t, with
    the masks xaikit builds (corners-aligned bilinear upsampling, min-max scaling)."""
    model, layer, x = case
    a, _, _ = _acts_grads(case)
    acts = np.transpose(a, (0, 3, 1, 2))  # (B, C, h, w)
    up = upsample(acts, (SIZE, SIZE), align_corners=True)
    lo, hi = up.min(axis=(2, 3), keepdims=True), up.max(axis=(2, 3), keepdims=True)
    masks = (up - lo) / (hi - lo + 1e-7)  # (B, C, H, W)
    b, c = masks.shape[:2]
    masked = (x[:, None] * masks[..., None]).reshape(b * c, SIZE, SIZE, 3).astype(np.float32)
    p = np.asarray(tf.nn.softmax(model(masked)), np.float64).reshape(b, c, -1)
    w = np.stack([p[i, :, t] for i, t in enumerate(TARGETS)])  # (B, C)
    theirs = Scorecam(model, clone=False)(
        CategoricalScore(TARGETS), x, penultimate_layer=layer, max_N=None, **RAW
    )
    _check(_relu(np.einsum("bc,bhwc->bhw", w, a)), theirs)
