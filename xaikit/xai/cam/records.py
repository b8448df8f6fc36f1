"""The records of the class-activation maps (the ``cam`` family) and their runner: each gradient
CAM carries its formula (:mod:`xaikit.xai.cam.formulas`); Score-CAM and Eigen-CAM read the
layer's activations alone; Guided Grad-CAM runs :mod:`xaikit.xai.cam.guided`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, describe
from xaikit.xai.cam.formulas import gradcam, gradcampp, hirescam, layercam, xgradcam
from xaikit.xai.cam.guided import run_guided_gradcam
from xaikit.xai.cam.layers import check_reshape
from xaikit.xai.cam.maps import CamResult, maps_and_scores
from xaikit.xai.cam.resize import image_size, upsample
from xaikit.xai.registry import Call, Explained, Method, register_method


def _check_cam(options: dict[str, Any]) -> None:
    check_reshape(options.get("reshape"))
    if not isinstance(options.get("raw", False), (bool, np.bool_)):
        raise XaikitTypeError(f"raw must be True or False; got {describe(options['raw'])}")


def run_cam(call: Call, *, layer: Any = None, reshape: Any = None, raw: bool = False) -> Explained:
    """The runner of the class-activation maps but Guided Grad-CAM: the (B, H, W) map at the
    input's size (bilinear), or with ``raw`` the layer-resolution :class:`CamResult`."""
    inp = call.inp
    result, scores = maps_and_scores(
        inp, call.targets, call.method.name, call.settings(),
        layer=layer, reshape=check_reshape(reshape), check_classes=call.check_classes,
    )  # fmt: skip
    if raw:
        maps = result.maps.astype(np.float32)
        return Explained([maps], scores=scores, detail=CamResult(maps, result.layer))
    _, size = image_size(inp)
    return Explained([upsample(result.maps, size).astype(np.float32)], scores=scores)


_CAM_OPTIONS = {"layer": None, "reshape": None, "raw": False}


def _record(name: str, title: str, **facts: Any) -> None:
    facts.setdefault("run", run_cam)
    # every CAM scores a bound target object but Eigen-CAM (class-agnostic: no score, no target);
    # with targets="in_pass" an object is pinned all the same (it needs the clean pass)
    facts.setdefault("target_objects", True)
    register_method(
        Method(
            name,
            "cam",
            title,
            options=_CAM_OPTIONS,
            result=facts.pop("result", "map"),
            layer=True,
            check=_check_cam,
            **facts,
        )
    )


_GRADCAM = "Selvaraju et al., 2017, https://arxiv.org/abs/1610.02391"
_record(
    "gradcam", "Grad-CAM", targets="in_pass", formula=gradcam, reference=_GRADCAM,
    summary="a layer's channels weighted by their mean gradient: where the evidence for the class sits",
)  # fmt: skip
_record(
    "gradcam++", "Grad-CAM++", aliases=("gradcampp", "gradcam_plus_plus"), targets="in_pass",
    formula=gradcampp, summary="Grad-CAM with per-pixel weights of positive gradients: several objects",
    reference="Chattopadhyay et al., 2018, https://arxiv.org/abs/1710.11063",
)  # fmt: skip
_record(
    "xgradcam", "XGrad-CAM", targets="in_pass", formula=xgradcam,
    summary="channels weighted by gradient times activation, normalised: an axiom-based Grad-CAM",
    reference="Fu et al., 2020, https://arxiv.org/abs/2008.02312",
)  # fmt: skip
_record(
    "layercam", "LayerCAM", targets="in_pass", formula=layercam,
    summary="positive gradients times activations, pixel by pixel: finer maps from earlier layers",
    reference="Jiang et al., 2021, https://doi.org/10.1109/TIP.2021.3089943",
)  # fmt: skip
_record(
    "hirescam", "HiResCAM", targets="in_pass", formula=hirescam,
    summary="gradients times activations summed over channels: faithful to the layer's own pixels",
    reference="Draelos & Carin, 2020, https://arxiv.org/abs/2011.08891",
)  # fmt: skip
_record(
    "scorecam", "Score-CAM", gradients=False, slow=True, units="none",
    summary="channels weighted by the score of the image masked by each: no gradients",
    reference="Wang et al., 2020, https://arxiv.org/abs/1910.01279",
)  # fmt: skip
_record(
    "eigencam", "Eigen-CAM", gradients=False, targets="in_pass", target_objects=False, units="none",
    summary="the first principal component of a layer's activations: class-agnostic",
    reference="Muhammad & Yeasin, 2020, https://arxiv.org/abs/2008.00299",
)  # fmt: skip
_record(
    "guided_gradcam", "Guided Grad-CAM", aliases=("guidedgradcam",), run=run_guided_gradcam,
    result="input", units="none",
    summary="guided backpropagation times the Grad-CAM map: fine detail where the class is",
    reference=_GRADCAM,
)  # fmt: skip
