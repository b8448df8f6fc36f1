"""pytorch-grad-cam (PyPI ``grad-cam`` 1.5.x) classes, loaded without importing torchvision.

The package's ``__init__`` imports every method, and two of its modules import torchvision at
import time, whose wheel may not import beside the installed torch. So only
the modules needed are loaded (here and in ``tests/xai/test_cam_peers.py``, which imports this), under a bare package
object and with a stub ``torchvision`` of the three names imported at import time; the stubs are
in ``sys.modules`` for the import only. Nothing of torchvision is used by the CAM classes'
calls (``scale_cam_image`` resizes with OpenCV).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

#: xaikit method name -> (pytorch_grad_cam module, class)
CLASSES = {
    "gradcam": ("grad_cam", "GradCAM"),
    "gradcam++": ("grad_cam_plusplus", "GradCAMPlusPlus"),
    "xgradcam": ("xgrad_cam", "XGradCAM"),
    "layercam": ("layer_cam", "LayerCAM"),
    "hirescam": ("hirescam", "HiResCAM"),
    "scorecam": ("score_cam", "ScoreCAM"),
    "eigencam": ("eigen_cam", "EigenCAM"),
}


def available() -> bool:
    """Whether pytorch-grad-cam and its ``ttach`` and OpenCV dependencies are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("pytorch_grad_cam", "ttach", "cv2"))


def load_modules(modules: list[str]) -> dict[str, Any]:
    """The named modules of pytorch-grad-cam (``"grad_cam"``, ``"base_cam"``,
    ``"utils.svd_on_activations"``, ...), imported under a bare package object and a stub
    ``torchvision`` that are in ``sys.modules`` for the import only."""
    spec = importlib.util.find_spec("pytorch_grad_cam")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("pytorch-grad-cam is not installed (pip install --no-deps grad-cam ttach)")
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
        return {m: importlib.import_module(f"pytorch_grad_cam.{m}") for m in modules}
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def load_classes(methods: list[str] | None = None) -> dict[str, Any]:
    """The pytorch-grad-cam class of each xaikit method name (all of :data:`CLASSES` by default)."""
    wanted = list(CLASSES) if methods is None else [m for m in methods if m in CLASSES]
    mods = load_modules([CLASSES[m][0] for m in wanted])
    return {m: getattr(mods[CLASSES[m][0]], CLASSES[m][1]) for m in wanted}


def class_target(category: int) -> Any:
    """pytorch-grad-cam's own ``ClassifierOutputTarget`` for ``category`` (the score of one
    class), loaded under the same stub as the CAM classes."""
    return load_modules(["utils.model_targets"])["utils.model_targets"].ClassifierOutputTarget(category)
