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

# torch.compile's on-disk kernel cache does not key on ATEN_CPU_CAPABILITY (torch 2.13): kernels
# built under one setting and loaded under another computed wrong maps (an inductor-compiled
# model's integrated gradients off by 4e4 times) or aborted the process, depending on the order
# of `make test` and `make test-numerics ATEN_ISA=avx2`. Each capability gets a cache of its own.
if os.environ.get("ATEN_CPU_CAPABILITY") and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import getpass
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(
        Path(tempfile.gettempdir())
        / f"torchinductor_{getpass.getuser()}_aten_{os.environ['ATEN_CPU_CAPABILITY']}"
    )


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


#: test files whose assertions compare float32 results computed along different paths (other
#: batch sizes and chunk plans, other implementations, float64 references): their tolerances must
#: hold whatever kernels the CPU picks, so `make test-numerics` (and CI) runs them a second time
#: under another CPU capability setting (ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA)
NUMERICS_FILES = frozenset(
    {
        "tests/test_analyze.py",
        "tests/test_attention_keras.py",
        "tests/test_analyze_concepts.py",
        "tests/test_evaluate_axiomatic.py",
        "tests/test_evaluate_complexity.py",
        "tests/test_evaluate_curves.py",
        "tests/test_evaluate_faithfulness_more.py",
        "tests/test_evaluate_localization_more.py",
        "tests/test_evaluate_stability.py",
        "tests/test_evaluate_faithfulness.py",
        "tests/test_evaluate_localization.py",
        "tests/test_evaluate_perturbation.py",
        "tests/test_evaluate_randomization.py",
        "tests/test_evaluate_randomization_more.py",
        "tests/test_evaluate_robustness.py",
        "tests/test_dataset_targets.py",
        "tests/test_explain_dataset.py",
        "tests/test_methods_everywhere.py",
        "tests/test_model_forms_keras.py",
        "tests/test_model_forms_torch.py",
        "tests/test_real_models.py",
        "tests/test_targets.py",
        "tests/test_targets_box.py",
        "tests/test_targets_cam.py",
        "tests/test_targets_metrics.py",
        "tests/test_targets_rules.py",
        "tests/test_targets_stack.py",
        "tests/test_targets_real.py",
        "tests/test_transformers.py",
        "tests/test_targets_agnostic.py",
        "tests/test_targets_frontends.py",
        "tests/agnostic/test_agnostic_inputs.py",
        "tests/agnostic/test_agnostic_keras.py",
        "tests/agnostic/test_captum_agnostic.py",
        "tests/agnostic/test_gsa.py",
        "tests/agnostic/test_shapley_exact.py",
        "tests/rules/test_attn_lrp.py",
        "tests/rules/test_deeplift.py",
        "tests/rules/test_lrp_torch.py",
        "tests/rules/test_lrp_torch_peers.py",
        "tests/rules/test_lrp_keras.py",
        "tests/rules/test_lrp_keras_models.py",
        "tests/rules/test_lrp_torch_keras.py",
        "tests/rules/test_modified_keras.py",
        "tests/rules/test_modified_torch.py",
        "tests/rules/test_rules_everywhere.py",
        "tests/xai/test_cam.py",
        "tests/xai/test_cam_peers.py",
        "tests/xai/test_cam_tfkerasvis.py",
        "tests/xai/test_compute_dtype.py",
        "tests/xai/test_exact.py",
        "tests/xai/test_gradient_family.py",
        "tests/xai/test_guided_ig.py",
        "tests/xai/test_invariants.py",
        "tests/xai/test_peers.py",
        "tests/xai/test_perturb.py",
        "tests/xai/test_xrai.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent.parent
    numerics = pytest.mark.numerics
    for item in items:
        try:
            name = item.path.relative_to(root).as_posix()
        except ValueError:
            continue
        if name in NUMERICS_FILES:
            item.add_marker(numerics)
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
