"""Guided backpropagation and Guided Grad-CAM (Selvaraju et al., 2017,
https://arxiv.org/abs/1610.02391): the guided gradients of the target scores w.r.t. the inputs
(the backend's ``bk.cam.guided_step``: ReLUs pass only positive gradients), times the Grad-CAM
map upsampled to the image.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.backend import Rows, T
from xaikit.errors import XaikitValueError
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai.cam.layers import Reshape, check_reshape
from xaikit.xai.cam.maps import CamResult, maps_and_scores, per_input
from xaikit.xai.cam.resize import image_size, upsample
from xaikit.xai.registry import Call, CallSettings, Explained


def guided_backprop(inp: Inputs, targets: T, settings: CallSettings) -> list[np.ndarray]:
    """Guided-backprop gradients of the target scores w.r.t. each input, in the model's layout
    (see :meth:`~xaikit.backend.facets.CamFacet.guided_step`), chunked like the other methods
    (the settings' ``max_batch``); the settings' ``target``: a bound target object
    (``targets`` then sample indices)."""
    bk, output, target = inp.bk, settings.output, settings.target

    def step(rows: list[T], tg: T, kw: dict[str, Any] | None) -> list[T]:
        return bk.cam.guided_step(Rows(inp.model, rows, tg, output, kw, target))

    return per_input(inp, targets, settings.max_batch, step)


def guided_gradcam(
    inp: Inputs, targets: T, settings: CallSettings, *, layer: Any = None, reshape: Reshape = None
) -> tuple[list[np.ndarray], CamResult]:
    """Guided Grad-CAM: guided backprop times the Grad-CAM map upsampled (bilinear) to the image,
    per input in the model's layout (inputs that are not the image keep their guided gradients
    unscaled), and the Grad-CAM result; the settings' ``target``: a bound target object scoring
    both."""
    cam, _ = maps_and_scores(inp, targets, "gradcam", settings, layer=layer, reshape=reshape)
    which, size = image_size(inp)
    up = upsample(cam.maps, size)
    grads = guided_backprop(inp, targets, settings)
    g = grads[which]
    if g.ndim == 4:
        up = up[:, None] if inp.channel_axes[which] == 1 else up[..., None]
    grads[which] = (g * up).astype(np.float32)
    return grads, cam


def run_guided_gradcam(call: Call, *, layer: Any = None, reshape: Any = None, raw: bool = False) -> Explained:
    """The runner of Guided Grad-CAM: attributions with each input's shape (the caller's layout)."""
    if raw:
        raise XaikitValueError(
            "raw=True gives a layer-resolution map, which guided_gradcam (input-resolution "
            "attributions) does not have: use method='gradcam' with raw=True for its Grad-CAM part"
        )
    inp = call.inp
    grads, _ = guided_gradcam(inp, call.targets, call.settings(), layer=layer, reshape=check_reshape(reshape))  # type: ignore[arg-type]
    return Explained(inp.to_user(grads))
