"""The model-agnostic methods on Keras: the maps of a torch CNN with the same weights (same seed,
same features), and the same maps from every form of the Keras model: Sequential, Functional,
a ``.keras`` file loaded, and the exported SavedModel read back with ``keras.layers.TFSMLayer``
(the methods only call the model: nothing inside it is read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from tests.xai.models import cnn, cnn_weights, from_layout, images, to_channel_first  # noqa: E402

METHODS = ("feature_ablation", "shapley_sampling", "kernel_shap", "lime", "sobol", "hsic")
#: small settings: at most a few hundred rows per sample
FAST: dict[str, dict[str, Any]] = {
    "shapley_sampling": {"nsamples": 4, "antithetic": True},
    "kernel_shap": {"nsamples": 96},
    "lime": {"nsamples": 96},
    "sobol": {"nsamples": 16},
    "hsic": {"nsamples": 96},
}
TARGET = [0, 3, 4]


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    """Channel-last (3, 12, 12, 3) images in [0, 1]: four flat colour quadrants (something for
    SLIC to find) plus noise."""
    rng = np.random.default_rng(7)
    quads = rng.random((3, 2, 2, 3)).repeat(6, axis=1).repeat(6, axis=2)
    return (0.8 * quads + 0.2 * images(rng, batch=3)).astype(np.float32)


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return cnn_weights(seed=2)


@pytest.fixture(scope="module")
def pair(weights: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """(torch CNN, Keras CNN) with the same weights, built once (Keras traces per model)."""
    return cnn("torch", weights), cnn("tf", weights)


def _mask() -> np.ndarray:
    """Per-sample (3, 12, 12) masks with 9, 6 and 12 features: rows of bands and columns."""
    r, c = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    return np.stack([(r // 4) * 3 + c // 4, (r // 6) * 3 + c // 4, (r // 3) * 3 + c // 4])


CASES = {
    "patches": {"features": "patches", "segments": 16},
    "mask_blur": {"features": _mask(), "baseline": "blur"},
    "slic_mean": {"features": "slic", "segments": 4, "baseline": "mean"},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", METHODS)
def test_torch_equals_keras_on_the_same_weights(
    method: str, case: str, x: np.ndarray, pair: tuple[Any, Any]
) -> None:
    tm, km = pair
    kw = {
        "target": TARGET,
        "method": method,
        "seed": 3,
        "max_batch": 64,
        **CASES[case],
        **FAST.get(method, {}),
    }
    t = from_layout("torch", xk.xai.explain(tm, to_channel_first(x), **kw))
    k = xk.xai.explain(km, x, **kw)
    assert k.shape == x.shape
    scale = float(np.abs(k).max())
    assert scale > 0
    for b in range(len(x)):
        assert np.abs(k[b]).max() > 0, f"sample {b} is all zero"
    np.testing.assert_allclose(t, k, rtol=1e-4, atol=1e-4 * scale)


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory, weights: dict[str, np.ndarray]) -> dict[str, Any]:
    root: Path = tmp_path_factory.mktemp("agnostic_forms")
    seq = cnn("tf", weights)
    functional = keras.Model(seq.inputs, seq.outputs)
    assert not isinstance(functional, keras.Sequential)
    seq.save(root / "seq.keras")
    functional.save(root / "fun.keras")
    seq.export(str(root / "exported"), verbose=False)
    return {
        "sequential": seq,
        "functional": functional,
        "functional_loaded": keras.models.load_model(root / "fun.keras"),
        "sequential_loaded": keras.models.load_model(root / "seq.keras"),
        "tfsm_layer": keras.layers.TFSMLayer(str(root / "exported"), call_endpoint="serve"),
    }


def test_every_form_gives_the_in_memory_maps(forms: dict[str, Any], x: np.ndarray) -> None:
    ref_scores = np.asarray(forms["sequential"](x))
    for name, model in forms.items():
        np.testing.assert_allclose(np.asarray(model(x)), ref_scores, rtol=1e-5, atol=1e-6, err_msg=name)
    for method in METHODS:
        kw = {
            "target": TARGET,
            "method": method,
            "seed": 1,
            "segments": 9,
            "max_batch": 64,
            **FAST.get(method, {}),
        }
        ref = xk.xai.explain(forms["sequential"], x, **kw)
        assert np.abs(ref).max() > 0
        for name, model in forms.items():
            got = xk.xai.explain(model, x, **kw)
            np.testing.assert_allclose(
                got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()), err_msg=f"{method} on {name}"
            )
