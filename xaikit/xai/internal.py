"""What the layers above ``xai`` (``evaluate``, ``trace``, the CLI) may use of its internals: one
deliberate list, so that the engine's modules can move and change behind it.

The public API (``explain``, ``SaliencyNet``, ``explain_dataset``, the method records) is
``xaikit.xai`` itself; this module adds the pieces a metric or a trace needs to run the model the
way the methods do: prepared inputs, the pinned classes, chunked forward passes, baselines,
display normalisation, the CAM helpers and the dataset sources and grids. No module outside
``xaikit/xai/`` imports a private ``xaikit.xai._*`` module (``tests/test_layers.py`` checks it).
"""

from xaikit.xai import health
from xaikit.xai._engine.baselines import FIXED_BASELINES, baseline_values, check_baseline
from xaikit.xai._engine.chunks import forward_scores
from xaikit.xai._engine.display import to_display
from xaikit.xai._engine.inputs import Inputs, prepare
from xaikit.xai._engine.kwargs import check_model_kwargs, merge_model_kwargs
from xaikit.xai._engine.plan import DEFAULT_BUDGET, check_max_batch, default_rows
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai._engine.targets import Pinned, pin, pin_targets
from xaikit.xai.cam.formulas import combine, eigen_components
from xaikit.xai.cam.layers import find_layer, grid_size, to_chw
from xaikit.xai.cam.maps import chunked, layer_activations
from xaikit.xai.cam.resize import image_size, upsample
from xaikit.xai.dataset._grids import save_grids
from xaikit.xai.dataset._ray import start_ray
from xaikit.xai.dataset._sources import as_source
from xaikit.xai.explain import explain, explain_with_delta, fresh_seed, run
from xaikit.xai.gradient.sweep import DEFAULT_NSAMPLES

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_NSAMPLES",
    "FIXED_BASELINES",
    "Inputs",
    "Pinned",
    "as_source",
    "baseline_values",
    "check_baseline",
    "check_max_batch",
    "check_model_kwargs",
    "chunked",
    "combine",
    "default_rows",
    "eigen_components",
    "explain",
    "explain_with_delta",
    "find_layer",
    "forward_scores",
    "fresh_seed",
    "grid_size",
    "health",
    "image_size",
    "layer_activations",
    "merge_model_kwargs",
    "pin",
    "pin_targets",
    "prepare",
    "run",
    "save_grids",
    "start_ray",
    "stream_seed",
    "to_chw",
    "to_display",
    "upsample",
]
