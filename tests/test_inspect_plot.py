"""plot_module_stats: lines per module (and per call), log axis choice, saving, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.viz.inspect_plot import plot_module_stats


def _row(step: int, call: int | None, module: str, kind: str, tname: str, **stats: float) -> dict:
    return {"step": step, "call": call, "module": module, "kind": kind, "tname": tname, **stats}


def _log() -> pd.DataFrame:
    rows = []
    for step in range(0, 10, 2):
        rows.append(_row(step, 0, "m.conv", "output", "out", std=1.0 + step))
        for call in (0, 1):
            rows.append(_row(step, call, "m.pool", "output", "out", std=0.5 * (call + 1)))
        rows.append(_row(step, None, "m.conv", "grad", "weight", norm=10.0**-step))
        rows.append(_row(step, None, "m.conv", "grad", "bias", norm=1.0))
    return pd.DataFrame(rows)


def test_lines_per_module_and_call() -> None:
    fig = plot_module_stats(_log())
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["m.conv", "m.pool #0", "m.pool #1"]
    np.testing.assert_array_equal(lines[0].get_xdata(), [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(lines[0].get_ydata(), [1, 3, 5, 7, 9])
    np.testing.assert_array_equal(lines[2].get_ydata(), [1.0] * 5)
    assert ax.get_yscale() == "linear" and ax.get_title() == "std of module outputs"


def test_grad_norms_use_a_log_axis_and_name_the_tensor(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "g.png"
    fig = plot_module_stats(_log(), "norm", "grad", save_path=out)
    ax = fig.axes[0]
    assert [ln.get_label() for ln in ax.get_lines()] == ["m.conv (weight)"]
    assert ax.get_yscale() == "log"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plot_module_stats(_log(), "norm", "grad", tname="bias", logy=False)
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["m.conv"]


def test_reads_a_run_folder(tmp_path: Path) -> None:
    _log().to_json(tmp_path / "stats.jsonl", orient="records", lines=True)
    fig = plot_module_stats(tmp_path, modules=["m.pool"])
    assert len(fig.axes[0].get_lines()) == 2


def test_bad_arguments() -> None:
    with pytest.raises(XaikitValueError, match="stat must be a column of the log"):
        plot_module_stats(_log(), "variance")
    with pytest.raises(XaikitValueError, match="kind 'input' has no records"):
        plot_module_stats(_log(), kind="input")
    with pytest.raises(XaikitValueError, match=r"modules \['m.fc'\] have no 'output' records"):
        plot_module_stats(_log(), modules=["m.fc"])
    with pytest.raises(XaikitTypeError, match="log must be a DataFrame"):
        plot_module_stats([1, 2])
    with pytest.raises(XaikitValueError, match="save_path must end in"):
        plot_module_stats(_log(), save_path="x.jpg")


@pytest.mark.slow
def test_gallery_script_runs(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).parents[1] / "gallery" / "inspect_stats.py"
    spec = importlib.util.spec_from_file_location("inspect_stats_gallery", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(
        ["--out", str(tmp_path / "s.png"), "--steps", "6", "--every", "2", "--log-dir", str(tmp_path)]
    )
    assert out.read_bytes()[:4] == b"\x89PNG"
    from xaikit.inspect import read_log

    df = read_log(tmp_path)
    assert sorted(set(df["step"])) == [0, 2, 4] and set(df["kind"]) == {"output", "grad"}
