"""docs/own_models.md runs as written: every ``python`` block, in order, in one namespace.

Apart from tests/test_real_models.py because this checks the page, not float32 paths: it is not
a numerics file, so ``make test-numerics`` does not run its ~100 s again.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")
needs_tf = pytest.mark.skipif("tf" not in BACKENDS, reason="tf is not in XAIKIT_TEST_BACKENDS")


@needs_torch
@needs_tf
@pytest.mark.slow
def test_the_own_models_page_runs_as_written(tmp_path, monkeypatch) -> None:
    """Every ``python`` block of docs/own_models.md, in order, in one namespace."""
    import re
    from pathlib import Path

    pytest.importorskip("transformers")
    page = Path(__file__).resolve().parent.parent / "docs" / "own_models.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)  # the page writes a picture into the working folder
    namespace: dict[str, object] = {"__name__": "own_models_page"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    assert (tmp_path / "resnet18_smoothgrad.png").stat().st_size > 10_000
    assert np.all(np.abs(namespace["delta"] / namespace["gap"]) < 1e-3)  # the ViT's, at 32 steps
    grid = namespace["grid"]
    np.testing.assert_allclose(grid["x"][0], namespace["pixels"][:3] / 255.0, atol=2e-6)
