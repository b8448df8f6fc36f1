"""Class-activation maps (the ``cam`` family): a weighted sum of one layer's activation maps.

Grad-CAM, Grad-CAM++, XGrad-CAM, LayerCAM, HiResCAM, Score-CAM, Eigen-CAM and Guided Grad-CAM,
one record each (:mod:`xaikit.xai.cam.records`). The backend facet (``bk.cam``) runs the fused
forward+backward of a chunk of rows and returns a layer's activations ``A`` and their
gradients ``dA`` channel-first for both frameworks; the formulas
(:mod:`xaikit.xai.cam.formulas`) run on the host in float64 on those (B, C, h, w) layer
tensors, which are small next to the inputs. The map at the input's size is the layer map
upsampled bilinearly with half-pixel centres (``align_corners=False``, as
``torch.nn.functional.interpolate(mode="bilinear")`` and captum's
``LayerAttribution.interpolate`` do), without any normalization.

* ``formulas.py``: the maps from ``A`` and ``dA``, Eigen-CAM's components
* ``layers.py``: the layer a map reads (``layer=``, ``reshape=``)
* ``maps.py``: one method's maps for a batch, chunked; Score-CAM; :func:`layer_activations`
* ``resize.py``: bilinear upsampling to the image
* ``guided.py``: guided backpropagation and Guided Grad-CAM
* ``records.py``: the records and their runner
"""

# the records register when imported (the order of tables and docs)
from xaikit.xai.cam import records  # noqa: F401
from xaikit.xai.cam.formulas import combine, eigen_components, eigen_projection
from xaikit.xai.cam.guided import guided_backprop, guided_gradcam
from xaikit.xai.cam.layers import find_layer, to_chw, token_grid
from xaikit.xai.cam.maps import CamResult, layer_activations, maps_and_scores
from xaikit.xai.cam.resize import upsample

__all__ = [
    "CamResult",
    "combine",
    "eigen_components",
    "eigen_projection",
    "find_layer",
    "guided_backprop",
    "guided_gradcam",
    "layer_activations",
    "maps_and_scores",
    "to_chw",
    "token_grid",
    "upsample",
]
