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

import contextlib
import importlib
import importlib.util
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from benchmarks._gradcam import CLASSES, class_target, load_modules
from tests.xai.models import images, model_for
from xaikit.errors import DegenerateMapWarning

torch = pytest.importorskip("torch")
if importlib.util.find_spec("pytorch_grad_cam") is None or importlib.util.find_spec("ttach") is None:
    pytest.skip(
        "pytorch-grad-cam is not installed (pip install --no-deps grad-cam ttach, as make test does)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def gradcam_modules() -> dict[str, Any]:
    mods = load_modules([CLASSES[m][0] for m in CLASSES] + ["base_cam", "utils.svd_on_activations"])
    out = {m: mods[CLASSES[m][0]] for m in CLASSES}
    out["_base"], out["_svd"] = mods["base_cam"], mods["utils.svd_on_activations"]
    return out


@pytest.mark.parametrize("method", list(CLASSES))
def test_matches_pytorch_grad_cam(
    gradcam_modules: dict[str, Any], method: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, layout = model_for("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=4)))
    targets = [0, 1, 2, 3]
    # Grad-CAM of one (image, class) pair of this random CNN is exactly 0 (no positive evidence)
    zero = method == "gradcam"
    expect = (
        pytest.warns(DegenerateMapWarning, match=r"1 of 4 maps are exactly 0")
        if zero
        else contextlib.nullcontext()
    )
    with expect:
        ours = xk.xai.explain(model, x, target=targets, method=method, layer="4", raw=True).maps
    monkeypatch.setattr(gradcam_modules["_base"], "scale_cam_image", lambda cam, target_size=None: cam)
    cls = getattr(gradcam_modules[method], CLASSES[method][1])
    with cls(model=model, target_layers=[model[4]]) as cam:
        theirs = cam(input_tensor=x, targets=[class_target(t) for t in targets])
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
