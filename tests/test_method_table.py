"""docs/methods.md: the table of every method is what the method records give (written by
``tools/method_table.py``, so it cannot drift), and the page's "Adding a method" example runs as
written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import xaikit as xk
from xaikit.xai import get_method, method_names, unregister_method

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "methods.md"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("method_table", ROOT / "tools" / "method_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_table_is_what_the_records_give() -> None:
    tool = _tool()
    page = PAGE.read_text(encoding="utf-8")
    assert tool.render(page, tool.table()) == page, (
        f"the method table of docs/methods.md is out of date: run {tool.REGENERATE}"
    )


def test_the_table_has_a_row_per_record_with_its_facts() -> None:
    tool = _tool()
    rows = [line for line in tool.table().splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `([^`]+)`", r).group(1) for r in rows] == list(method_names())  # type: ignore[union-attr]
    cells = {r.split(" | ")[0].split("`")[1]: r.strip("| ").split(" | ") for r in rows}
    assert cells["integrated"][1:] == [
        "gradient",
        get_method("integrated").summary,
        "`nsamples`, `magnitude`, `baseline`, `quadrature='gausslegendre'`",
        "gradients",
        "x's shape",
        "✓",
        "[Sundararajan et al., 2017](https://arxiv.org/abs/1703.01365)",
    ]
    assert cells["rise"][3:7] == ["`nsamples=1000`, `cell=8`, `p=0.5`", "forward only", "(B, H, W)", ""]
    assert cells["smint"][-1] == "—"  # no reference
    assert "<br>also `ig`, `integrated_gradients`" in cells["integrated"][0]


def test_a_stale_table_is_caught_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    page = tmp_path / "methods.md"
    page.write_text("intro\n<!-- method_table -->\n| old |\n<!-- /method_table -->\nend\n", encoding="utf-8")
    monkeypatch.setattr(tool, "PAGE", page)
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(
        "intro\n<!-- method_table -->\n<!-- written by tools/method_table.py"
    ) and text.endswith("|\n<!-- /method_table -->\nend\n")
    assert "| old |" not in text and tool.main(["--check"]) == 0
    page.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(
        SystemExit, match=r"expected one <!-- method_table --> \.\.\. <!-- /method_table --> pair"
    ):
        tool.main([])


def test_the_adding_a_method_example_runs_as_written() -> None:
    """Every ``python`` block of the page's "Adding a method" section, in order, in one namespace."""
    pytest.importorskip("torch")
    section = PAGE.read_text(encoding="utf-8").split("## Adding a method", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    namespace: dict[str, object] = {"__name__": "methods_page"}
    try:
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)
        x = namespace["x"]
        sign = np.asarray(namespace["sign"])
        vanilla = xk.xai.explain(namespace["model"], x, method="vanilla")
        np.testing.assert_array_equal(sign, 0.5 * np.sign(vanilla))
        assert list(namespace["result"].table["method"]) == ["vanilla", "gradient_sign"]  # type: ignore[attr-defined]
        assert [c.method.name for c in namespace["trace"].columns][-1] == "gradient_sign"  # type: ignore[attr-defined]
    finally:
        if "gradient_sign" in method_names():
            unregister_method("gradient_sign")
