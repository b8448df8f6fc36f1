"""The completeness check of Integrated Gradients and SmInt (without ``magnitude``): their
attributions should add up to ``f(x) - f(baseline)``, and a sum that misses by more than that
change itself says that the path integral is not converged at the call's steps.

The path integral is a quadrature over ``nsamples`` (SmInt: ``nintegration``) points. Where the
model's gradient changes fast along the path (deep ReLU networks, ReLU6 and depthwise stacks,
random or badly calibrated weights), the quadrature's error is not small, and the delta
``sum(attributions) - (f(x) - f(baseline))`` is its sum over the input: a sample whose ``|delta|``
exceeds :data:`PATH_TOL` times ``|f(x) - f(baseline)|`` (plus
:data:`~xaikit.xai.health.ROUNDING_FLOOR` of ``sum |attributions| + |f(x)| + |f(baseline)|``)
misses by more than the change it explains. Measured (float32, zero baseline, 4 pictures): a
Keras MobileNetV2 with random weights and BatchNorm calibrated on 16 pictures missed by 1.0 to
2.8 times the change at 25 steps, and its maps had a cosine similarity of 0.50 to 0.53 with
400-step maps (0.83 to 0.85 at 100 steps): pictures of quadrature error, not of the model. A
torch ResNet-18 calibrated the same way missed by 0.04 to 1.5 times, a random LeNet and a small
ViT by less than 0.08 times.

:func:`check_path` then gives one :class:`~xaikit.errors.IncompleteMapWarning` per model and
method in a process. The check costs one forward pass of the inputs and their baselines (2B
rows, against the sweep's ``B x steps`` forward and backward rows: about 1-3 %), which
``return_delta=True`` pays anyway; it is skipped inside :func:`xaikit.xai.health.deferred` (the
randomization checks' scrambled models) and where ``magnitude=True`` squares each path's
attributions (SmInt's default: they do not add up to the change).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.errors import IncompleteMapWarning
from xaikit.xai.health import completeness_misses, warn_once
from xaikit.xai.registry import title

__all__ = ["CHECKED", "PATH_TOL", "check_path"]

#: the sweep methods whose completeness every call checks (without ``magnitude``): a quadrature
#: of the path integral. Expected Gradients is left out (its delta is Monte Carlo noise of its
#: random path points, large at a few draws by design), Blur IG too (not measured yet).
CHECKED = ("integrated", "smint")
#: a sample misses when its ``|delta|`` exceeds this many times ``|f(x) - f(baseline)|``: more
#: than the change the attributions explain
PATH_TOL = 1.0


def check_path(
    model: Any,
    method: str,
    delta: np.ndarray,
    f_x: np.ndarray,
    f_ref: np.ndarray,
    mass: np.ndarray,
    steps: tuple[str, int],
) -> bool:
    """Warn (:class:`~xaikit.errors.IncompleteMapWarning`, once per model and method) when some
    samples' attributions miss ``f(x) - f(baseline)`` by more than :data:`PATH_TOL` times that
    change (see the module).

    Args:
        model: the explained model (the key of the once-per-model rule).
        method: ``"integrated"`` or ``"smint"``.
        delta: (B,) the completeness delta of each sample.
        f_x: (B,) the explained score (a mean over noisy copies for SmInt).
        f_ref: (B,) the baseline's score (the same mean).
        mass: (B,) ``sum |attributions|`` of each sample.
        steps: the path's steps as ``(option name, value)``, e.g. ``("nsamples", 25)``.

    Returns:
        Whether any sample missed.
    """
    missed, how = completeness_misses(delta, f_x, f_ref, mass, PATH_TOL, "f(x) - f(baseline)")
    if not missed.any():
        return False
    option, value = steps
    message = (
        f"{title(method)} ({method}): the attributions do not add up to f(x) - f(baseline) for "
        f"{int(missed.sum())} of {len(delta)} samples ({how}: they miss by more than the change they "
        f"explain). Likely cause: the path integral is not converged at {option}={value} steps: the "
        "model's gradient changes fast along the path (deep ReLU networks, ReLU6 and depthwise "
        "stacks, random or badly calibrated weights), and such a map can differ from the converged "
        f"one as much as it differs from zero. Fix: raise {option} (the error falls about as "
        f"1/steps: try {option}={4 * value}) until the delta is small; return_delta=True gives each "
        "sample's delta. (Shown once per model and method; silence it with "
        "warnings.filterwarnings('ignore', category=xaikit.IncompleteMapWarning).)"
    )
    return warn_once(message, IncompleteMapWarning, method=method, model=model, status="incomplete")
