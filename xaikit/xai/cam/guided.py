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
from xaikit.xai._engine.plan import check_max_batch
from xaikit.xai.cam.layers import Reshape, check_reshape
from xaikit.xai.cam.maps import CamResult, cam_maps, chunked
from xaikit.xai.cam.resize import image_size, upsample
from xaikit.xai.registry import Call, Explained


def guided_backprop(
    inp: Inputs, targets: T, output: int | str = 0, max_batch: int | str = "auto", target: Any = None
) -> list[np.ndarray]:
    """Guided-backprop gradients of the target scores w.r.t. each input, in the model's layout
    (see :meth:`~xaikit.backend.facets.CamFacet.guided_step`), chunked like the other methods;
    ``target`` a bound target object (``targets`` then sample indices)."""
    bk = inp.bk
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in inp.tensors]

    def step(rows: list[T], tg: T, kw: dict[str, Any] | None) -> np.ndarray:
        grads = bk.cam.guided_step(Rows(inp.model, rows, tg, output, kw, target))
        n = int(tg.shape[0])
        return np.concatenate(
            [np.asarray(bk.to_numpy(g), dtype=np.float32).reshape(n, -1) for g in grads], axis=1
        )

    flat = chunked(inp, targets, max_batch, step)  # (B, sum of the inputs' sizes)
    ends = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    return [flat[:, ends[i] : ends[i + 1]].reshape(inp.batch, *shapes[i]) for i in range(len(shapes))]


def guided_gradcam(
    inp: Inputs,
    targets: T,
    layer: Any = None,
    output: int | str = 0,
    max_batch: int | str = "auto",
    reshape: Reshape = None,
    target: Any = None,
) -> tuple[list[np.ndarray], CamResult]:
    """Guided Grad-CAM: guided backprop times the Grad-CAM map upsampled (bilinear) to the image,
    per input in the model's layout (inputs that are not the image keep their guided gradients
    unscaled), and the Grad-CAM result; ``target`` a bound target object scoring both."""
    cam = cam_maps(inp, targets, "gradcam", layer, output, max_batch, reshape, target=target)
    which, size = image_size(inp)
    up = upsample(cam.maps, size)
    grads = guided_backprop(inp, targets, output, max_batch, target)
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
    grads, _ = guided_gradcam(
        inp,
        call.targets,
        layer,
        call.output,
        check_max_batch(call.max_batch),
        check_reshape(reshape),  # type: ignore[arg-type]
        call.spec,
    )
    return Explained(inp.to_user(grads))
