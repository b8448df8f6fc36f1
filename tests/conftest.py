"""Shared fixtures: the frameworks under test, seeded generators, markers.

``XAIKIT_TEST_BACKENDS`` (default ``torch,tf``) names the frameworks this run tests. A framework
that is asked for and does not import is a failure, not a skip: a broken install must not turn
into a green run of skipped tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

BACKENDS = [b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()]

# Helper modules that sit beside the tests (fakes, tiny models) import by their plain name.
sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MPLBACKEND", "Agg")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is present on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=BACKENDS)
def framework(request: pytest.FixtureRequest) -> str:
    """Each framework this run tests: ``"torch"`` or ``"tf"`` (its import must succeed)."""
    name = request.param
    if name == "torch":
        import torch

        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif name == "tf":
        import tensorflow as tf

        tf.random.set_seed(0)
    else:
        raise ValueError(f"unknown backend {name!r} in XAIKIT_TEST_BACKENDS")
    return name


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
