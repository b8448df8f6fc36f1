"""What the model-agnostic methods share: their common options, the option checks, the seeded
per-feature-count draws, the runner wrapper and the facts of their records
(:func:`register_agnostic`).

Every method's draws depend only on (seed, method, F_b): a sample gets the same coalitions in any
batch and any chunking, and samples with the same number of features share them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai._engine.baselines import FIXED_BASELINES, check_baseline
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai.agnostic.features import FEATURE_KINDS
from xaikit.xai.registry import Method, Runner, register_method

__all__ = ["COMMON", "FACTS", "check_common", "per_count", "register_agnostic", "rng_for"]

#: the options every model-agnostic method takes: which features, how many the automatic ones
#: aim at, and what a switched-off feature becomes
COMMON: dict[str, Any] = {"features": None, "segments": 64, "baseline": 0.0}

#: what every model-agnostic method is: forward passes only, target objects taken, progress reported
FACTS: dict[str, Any] = {"gradients": False, "target_objects": True, "slow": True}

#: stream keys of the methods' draws (with the seed and F_b)
STREAMS = {"shapley_sampling": 41, "kernel_shap": 42, "lime": 43, "sobol": 44, "hsic": 45}


def rng_for(seed: int, method: str, features: int) -> np.random.Generator:
    """The generator of one method's draws for samples with ``features`` features."""
    return np.random.default_rng(stream_seed(seed, STREAMS[method], features))


def check_common(options: dict[str, Any], fewest: int = 1) -> None:
    """Checks ``features``, ``segments``, ``baseline`` and ``nsamples`` (an int >= ``fewest``, or
    None) before any model runs."""
    feats = options.get("features")
    if isinstance(feats, str) and feats not in FEATURE_KINDS:
        raise XaikitValueError(
            f"features must be one of {FEATURE_KINDS}, None or an integer array of feature ids; got {feats!r}"
        )
    if "segments" in options:
        check_int(options["segments"], "segments", 1, kind=XaikitTypeError)
    base = options.get("baseline")
    if isinstance(base, str):
        check_baseline(base, FIXED_BASELINES)
    if options.get("nsamples") is not None:
        check_int(options["nsamples"], "nsamples", fewest, kind=XaikitTypeError)


def per_count(
    counts: np.ndarray, width: int, n: int, draw: Callable[[int], np.ndarray], fill: float = 1.0
) -> np.ndarray:
    """(n, B, width) coalitions: ``draw(F_b)`` gives the (n, F_b) coalitions of every sample with
    F_b features (called once per distinct F_b); the columns past F_b are ``fill``."""
    out = np.full((n, len(counts), width), fill, dtype=np.float64)
    for f in np.unique(counts):
        rows = draw(int(f))
        out[:, counts == f, : int(f)] = rows[:, None, :]
    return out


def register_agnostic(name: str, title: str, run: Runner, options: dict[str, Any], **facts: Any) -> Method:
    """Register a model-agnostic method: family ``"agnostic"``, the options of :data:`COMMON`
    and its own ``options``, the family's :data:`FACTS`, and its own ``facts`` (check, summary,
    reference, ...). It draws random coalitions (``noise=True``) unless ``facts`` says otherwise."""
    facts.setdefault("noise", True)
    return register_method(Method(name, "agnostic", title, run, {**COMMON, **options}, **FACTS, **facts))
