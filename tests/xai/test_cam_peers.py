"""Agreement with pytorch-grad-cam (PyPI ``grad-cam`` 1.5.x) on raw, layer-resolution maps.

Its package ``__init__`` imports every method and torchvision (whose wheel may not import beside
the installed torch), so the test loads only the modules it compares, with a stub ``torchvision``
of the three names they import at import time, put in ``sys.modules`` for the import only. Its
``scale_cam_image`` (min-max scaling and resize) is replaced by the identity, so its maps are
``relu(cam)`` at the layer's resolution, as ``raw=True`` gives them here.

Definition differences: Eigen-CAM's SVD sign is arbitrary; pytorch-grad-cam keeps whatever sign
``numpy.linalg.svd`` returns, xaikit picks the sign that correlates with the mean activation, so
the projections are compared up to sign (and the map to ``relu`` of the matching sign).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for

torch = pytest.importorskip("torch")
if importlib.util.find_spec("pytorch_grad_cam") is None or importlib.util.find_spec("ttach") is None:
    pytest.skip(
        "pytorch-grad-cam is not installed (pip install --no-deps grad-cam ttach, as make test does)",
        allow_module_level=True,
    )

CLASSES = {
    "gradcam": ("grad_cam", "GradCAM"),
    "hirescam": ("hirescam", "HiResCAM"),
    "xgradcam": ("xgrad_cam", "XGradCAM"),
    "gradcam++": ("grad_cam_plusplus", "GradCAMPlusPlus"),
    "layercam": ("layer_cam", "LayerCAM"),
    "scorecam": ("score_cam", "ScoreCAM"),
    "eigencam": ("eigen_cam", "EigenCAM"),
}


@pytest.fixture(scope="module")
def gradcam_modules() -> dict[str, Any]:
    spec = importlib.util.find_spec("pytorch_grad_cam")
    assert spec is not None and spec.submodule_search_locations is not None
    stubs: dict[str, types.ModuleType] = {}
    tv = types.ModuleType("torchvision")
    tr = types.ModuleType("torchvision.transforms")
    fn = types.ModuleType("torchvision.transforms.functional")
    for name in ("Compose", "Normalize", "ToTensor"):
        setattr(tr, name, object)
    fn.resize = None  # type: ignore[attr-defined]
    tv.transforms = tr  # type: ignore[attr-defined]
    tr.functional = fn  # type: ignore[attr-defined]
    pkg = types.ModuleType("pytorch_grad_cam")
    pkg.__path__ = list(spec.submodule_search_locations)
    stubs = {"torchvision": tv, "torchvision.transforms": tr, "torchvision.transforms.functional": fn}
    saved = {k: sys.modules.get(k) for k in [*stubs, "pytorch_grad_cam"]}
    sys.modules.update(stubs)
    sys.modules["pytorch_grad_cam"] = pkg
    try:
        mods = {m: importlib.import_module(f"pytorch_grad_cam.{CLASSES[m][0]}") for m in CLASSES}
        mods["_base"] = importlib.import_module("pytorch_grad_cam.base_cam")
        mods["_svd"] = importlib.import_module("pytorch_grad_cam.utils.svd_on_activations")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mods


class _Target:
    """ClassifierOutputTarget: the score of one class."""

    def __init__(self, category: int) -> None:
        self.category = category

    def __call__(self, out: Any) -> Any:
        return out[self.category]


@pytest.mark.parametrize("method", list(CLASSES))
def test_matches_pytorch_grad_cam(
    gradcam_modules: dict[str, Any], method: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, layout = model_for("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=4)))
    targets = [0, 1, 2, 3]
    ours = xk.xai.explain(model, x, target=targets, method=method, layer="4", raw=True).maps
    monkeypatch.setattr(gradcam_modules["_base"], "scale_cam_image", lambda cam, target_size=None: cam)
    cls = getattr(gradcam_modules[method], CLASSES[method][1])
    with cls(model=model, target_layers=[model[4]]) as cam:
        theirs = cam(input_tensor=x, targets=[_Target(t) for t in targets])
    if method == "eigencam":
        from xaikit.xai.cam import eigen_projection

        acts = model[:5](x).detach().numpy().astype(np.float64)
        proj = gradcam_modules["_svd"].get_2d_projection(acts.copy())
        ours_p = eigen_projection(acts)
        sign = np.sign((ours_p * proj).sum(axis=(1, 2)))[:, None, None]
        np.testing.assert_allclose(ours_p, sign * proj, rtol=1e-4, atol=1e-5)
        theirs = np.maximum(sign * proj, 0)
    assert np.abs(theirs).max() > 0
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
