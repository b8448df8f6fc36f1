"""Every explanation method by name: families, aliases and display titles.

``xaikit.xai.explain``, the evaluation functions and the traces take a method by name; this
module is the one place that knows the names. Three families:

* gradient methods (:mod:`xaikit.xai.methods`): input-shaped attributions;
* class-activation maps (:mod:`xaikit.xai.cam`): one (B, H, W) map per image, from a layer;
* perturbation methods (:mod:`xaikit.xai.perturb`): model calls on masked copies, no gradients.

Example:
    >>> canonical("ig"), canonical("Grad-CAM"), family("rise")
    ('integrated', 'gradcam', 'perturbation')
    >>> title("gradcam++")
    'Grad-CAM++'
"""

from __future__ import annotations

from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = [
    "ALL_METHODS",
    "CAM_METHODS",
    "GRADIENT_METHODS",
    "PERTURBATION_METHODS",
    "canonical",
    "family",
    "title",
]

GRADIENT_METHODS = ("vanilla", "smoothgrad", "integrated", "smint")
CAM_METHODS = (
    "gradcam",
    "gradcam++",
    "xgradcam",
    "layercam",
    "hirescam",
    "scorecam",
    "eigencam",
    "guided_gradcam",
)
PERTURBATION_METHODS = ("occlusion", "rise")
ALL_METHODS = GRADIENT_METHODS + CAM_METHODS + PERTURBATION_METHODS

_TITLES = {
    "vanilla": "Vanilla",
    "smoothgrad": "Smoothed",
    "integrated": "Integrated",
    "smint": "SmInt",
    "gradcam": "Grad-CAM",
    "gradcam++": "Grad-CAM++",
    "xgradcam": "XGrad-CAM",
    "layercam": "LayerCAM",
    "hirescam": "HiResCAM",
    "scorecam": "Score-CAM",
    "eigencam": "Eigen-CAM",
    "guided_gradcam": "Guided Grad-CAM",
    "occlusion": "Occlusion",
    "rise": "RISE",
}

_ALIASES = {
    "gradient": "vanilla",
    "gradients": "vanilla",
    "saliency": "vanilla",
    "ig": "integrated",
    "integrated_gradients": "integrated",
    "smoothgrad_ig": "smint",
    "gradcampp": "gradcam++",
    "gradcam_plus_plus": "gradcam++",
    "guidedgradcam": "guided_gradcam",
}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace(" ", "_").replace("_cam", "cam")


_LOOKUP = {_key(n): n for n in ALL_METHODS} | {_key(a): n for a, n in _ALIASES.items()}
_LOOKUP |= {_key(t): n for n, t in _TITLES.items() if n not in GRADIENT_METHODS}


def canonical(method: Any, name: str = "method") -> str:
    """The canonical name of any method (``"ig"`` -> ``"integrated"``, ``"Grad-CAM"`` ->
    ``"gradcam"``), or an error that lists them all."""
    if not isinstance(method, str):
        raise XaikitTypeError(f"{name} must be a method name (str); got {describe(method)}")
    found = _LOOKUP.get(_key(method))
    if found is None:
        raise XaikitValueError(f"{name} must be one of {', '.join(map(repr, ALL_METHODS))}; got {method!r}")
    return found


def family(method: str) -> str:
    """``"gradient"``, ``"cam"`` or ``"perturbation"`` for a (possibly aliased) method name."""
    m = canonical(method)
    if m in GRADIENT_METHODS:
        return "gradient"
    return "cam" if m in CAM_METHODS else "perturbation"


def title(method: str) -> str:
    """The display title of a method (a column or a legend)."""
    return _TITLES[canonical(method)]
