"""Every explanation method by name: families, aliases and display titles.

``xaikit.xai.explain``, the evaluation functions and the traces take a method by name; this
module is the one place that knows the names. Three families:

* gradient methods: input-shaped attributions from the fused sweep (:mod:`xaikit.xai.methods`:
  vanilla, SmoothGrad, VarGrad, Input x Gradient, Integrated / Expected / Blur IG, SmInt), the
  adaptive path of Guided IG (:mod:`xaikit.xai.guided_ig`) and XRAI's region map
  (:mod:`xaikit.xai.xrai`, one (B, H, W) map per image);
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
    "CORE_METHODS",
    "GRADIENT_METHODS",
    "PERTURBATION_METHODS",
    "SWEEP_METHODS",
    "canonical",
    "family",
    "title",
]

#: the methods of the fused sweep that ``SaliencyNet`` and the ``Saliency`` trace compute themselves
CORE_METHODS = ("vanilla", "smoothgrad", "integrated", "smint")
#: every sweep method (one pass over a precomputed row space, ``xaikit.xai.methods.attribute``)
SWEEP_METHODS = CORE_METHODS + ("vargrad", "input_x_gradient", "expected_gradients", "blur_ig")
GRADIENT_METHODS = SWEEP_METHODS + ("guided_ig", "xrai")
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
    "vargrad": "VarGrad",
    "input_x_gradient": "Input×Gradient",
    "expected_gradients": "Expected Gradients",
    "blur_ig": "Blur IG",
    "guided_ig": "Guided IG",
    "xrai": "XRAI",
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
    "var_grad": "vargrad",
    "inputxgradient": "input_x_gradient",
    "input_times_gradient": "input_x_gradient",
    "gradient_x_input": "input_x_gradient",
    "gradientxinput": "input_x_gradient",
    "expectedgradients": "expected_gradients",
    "gradientshap": "expected_gradients",
    "gradient_shap": "expected_gradients",
    "blurig": "blur_ig",
    "blur_integrated_gradients": "blur_ig",
    "guidedig": "guided_ig",
    "guided_integrated_gradients": "guided_ig",
    "gradcampp": "gradcam++",
    "gradcam_plus_plus": "gradcam++",
    "guidedgradcam": "guided_gradcam",
}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace(" ", "_").replace("_cam", "cam")


_LOOKUP = {_key(n): n for n in ALL_METHODS} | {_key(a): n for a, n in _ALIASES.items()}
_LOOKUP |= {_key(t): n for n, t in _TITLES.items() if n not in CORE_METHODS}


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
