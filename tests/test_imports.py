"""Importing xaikit's modules loads no framework and no heavy library (one fresh interpreter each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what no module below may load at import (or on the attribute accesses listed with it)
HEAVY = ("torch", "tensorflow", "keras", "lightning", "matplotlib", "sklearn", "pandas", "zarr", "ray")

CASES = {
    "package": ("xaikit", "xaikit.backend", "xaikit.xai", "xaikit.errors"),
    "cli": ("xaikit.cli", "xaikit.demo"),
    "data": (
        "xaikit.pipeline",
        "xaikit.network",
        "xaikit.dataset.data",
        "xaikit.op.numpyop",
        "xaikit.op.tensorop",
        "xaikit.denormalize",
    ),
    "loop": (
        "xaikit.estimator",
        "xaikit.trace",
        "xaikit.trace.metric",
        "xaikit.trace.adapt",
        "xaikit.schedule",
    ),
    "traces": (
        "xaikit.trace.xai",
        "xaikit.trace.io",
        "xaikit.trace.inspect",
        "xaikit.evaluate",
        "xaikit.analyze",
    ),
    "inspect": ("xaikit.inspect",),
    "lazy names": ("xaikit", "xaikit.architecture", "xaikit.integrations"),
}
#: attribute accesses that must stay as light as the imports
ACCESSES = {
    "data": "xk.Pipeline, xk.Network, xk.build, xk.dataset.NumpyDataset, xk.op.numpyop.Minmax",
    "inspect": "xk.inspect.ModuleTracker, xk.inspect.read_log",
    "lazy names": "xk.Estimator, xk.trace.metric.Accuracy, xk.evaluate.deletion, xk.xai.explain, xk.xai.explain_dataset, xk.analyze.dataset",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_loads_no_framework(case: str) -> None:
    code = (
        "import sys, importlib\n"
        "import xaikit as xk\n"
        f"for name in {CASES[case]!r}:\n"
        "    importlib.import_module(name)\n"
        f"{ACCESSES.get(case, 'pass')}\n"
        f"bad = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_check_sees_a_heavy_import() -> None:
    """The subprocess check fails when a listed library is loaded (here matplotlib, by viz)."""
    code = f"import sys, xaikit.viz\nbad = [m for m in {HEAVY!r} if m in sys.modules]\nassert not bad, bad\n"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode != 0 and "matplotlib" in res.stderr
