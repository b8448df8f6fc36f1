"""Summary / ValWithError data classes and the history line plots."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.summary import Summary, ValWithError, average_summaries, merge_summaries
from xaikit.viz import plot_history


def _label_summaries() -> list[Summary]:
    out = []
    for label, offset in (("cat", 0.0), ("dog", 1.0)):
        s = Summary(label)
        for step in (10, 20, 30):
            mid = offset + 1.0 / step
            s.write("eval", "ce", step, ValWithError(mid - 0.1, mid, mid + 0.1))
        out.append(s)
    return out


def test_val_with_error_basics() -> None:
    v = ValWithError(0.1, 0.2, 0.3)
    assert v.as_tuple() == (0.1, 0.2, 0.3)
    assert (v.low, v.mid, v.high) == (0.1, 0.2, 0.3)
    assert str(v) == "(0.1, 0.2, 0.3)"
    assert float(v) == 0.2
    assert pickle.loads(pickle.dumps(v)) == v


def test_summary_pickles_and_merges() -> None:
    s = Summary("run")
    s.write("train", "loss", 1, 2.5)
    s.history["eval"]["acc"][5] = ValWithError(0.5, 0.6, 0.7)
    t = pickle.loads(pickle.dumps(s))
    assert t.name == "run"
    assert t.history == {"train": {"loss": {1: 2.5}}, "eval": {"acc": {5: ValWithError(0.5, 0.6, 0.7)}}}
    t.history["test"]["new"][1] = 1.0  # still a defaultdict after the round trip
    assert t.modes() == ["train", "eval", "test"]
    assert t.metrics() == ["loss", "acc", "new"] and t.metrics("eval") == ["acc"]
    other = Summary("other")
    other.write("train", "loss", 1, 9.0)
    other.write("train", "loss", 2, 8.0)
    s.merge(other)
    assert s.history["train"]["loss"] == {1: 9.0, 2: 8.0}
    merged = merge_summaries([Summary("a"), other], name="m")
    assert merged.name == "m" and merged.history["train"]["loss"] == {1: 9.0, 2: 8.0}
    with pytest.raises(XaikitTypeError, match="merge needs a Summary; got dict"):
        s.merge({})  # type: ignore[arg-type]


def test_average_summaries() -> None:
    a, b = Summary("a"), Summary("b")
    a.write("train", "loss", 1, 1.0)
    b.write("train", "loss", 1, 3.0)
    a.write("train", "note", 1, "text is skipped")
    b.write("eval", "acc", 2, ValWithError(0, 0.5, 1))
    avg = average_summaries("avg", [a, b])
    low, mid, high = avg.history["train"]["loss"][1]
    assert mid == 2.0 and high - mid == pytest.approx(np.std([1.0, 3.0], ddof=1)) == pytest.approx(mid - low)
    assert avg.history["eval"]["acc"][2] == ValWithError(0.5, 0.5, 0.5)
    assert "note" not in avg.history["train"]
    with pytest.raises(XaikitValueError, match="at least one Summary"):
        average_summaries("x", [])


def test_plot_history_lines_bands_legend_and_labels() -> None:
    fig = plot_history(_label_summaries(), title="ce by label")
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    assert ax.get_title() == "ce" and ax.get_xlabel() == "step" and ax.get_ylabel() == "ce"
    assert len(ax.get_lines()) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cat", "dog"]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    xs, ys = ax.get_lines()[1].get_data()
    assert list(xs) == [10, 20, 30]
    assert list(ys) == pytest.approx([1.1, 1.05, 1 + 1 / 30])
    assert fig.get_suptitle() == "ce by label"


def test_plot_history_modes_metrics_and_skips() -> None:
    s = Summary("run")
    for step in (3, 1, 2):  # unsorted steps are drawn in order
        s.write("train", "loss", step, float(step))
        s.write("eval", "loss", step, np.float32(step) / 2)
    s.write("eval", "acc", 3, np.array([0.9]))
    s.write("eval", "confusion", 3, np.eye(2))  # not a scalar: left out
    s.write("train", "lr_name", 1, "adam")
    fig = plot_history(s)
    assert [ax.get_title() for ax in fig.axes] == ["loss", "acc"]
    loss = fig.axes[0]
    assert [t.get_text() for t in loss.get_legend().get_texts()] == ["run (train)", "run (eval)"]
    assert [line.get_linestyle() for line in loss.get_lines()] == ["-", "--"]
    train, evaluation = loss.get_lines()
    assert list(train.get_xdata()) == [1, 2, 3] and list(train.get_ydata()) == [1.0, 2.0, 3.0]
    assert list(evaluation.get_xdata()) == [1, 2, 3] and list(evaluation.get_ydata()) == [0.5, 1.0, 1.5]
    assert list(fig.axes[1].get_lines()[0].get_ydata()) == pytest.approx([0.9])
    assert not [c for c in loss.collections if isinstance(c, PolyCollection)]
    fig = plot_history([s], metrics=["acc"], modes=["eval"])
    assert [ax.get_title() for ax in fig.axes] == ["acc"]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["run"]
    many = Summary(3)
    for k in range(5):
        many.write("eval", f"m{k}", 1, k)
    fig = plot_history(many)
    assert len(fig.axes) == 5
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "3"


def test_plot_history_saves_atomically(tmp_path: Path) -> None:
    path = tmp_path / "history.svg"
    plot_history(_label_summaries(), save_path=path, dpi=40)
    assert path.read_bytes().startswith(b"<?xml")
    assert os.listdir(tmp_path) == ["history.svg"]
    with pytest.raises(XaikitValueError, match="save_path must end in"):
        plot_history(_label_summaries(), save_path=tmp_path / "h.gif")


def test_plot_history_bad_inputs() -> None:
    with pytest.raises(XaikitValueError, match="needs at least one Summary"):
        plot_history([])
    with pytest.raises(XaikitTypeError, match="plot_history draws Summary objects; got dict"):
        plot_history([{}])  # type: ignore[list-item]
    with pytest.raises(XaikitValueError, match="hold no numeric values"):
        plot_history(Summary("empty"))
    with pytest.raises(
        XaikitValueError, match=r"metrics \['nope'\] have no numeric values.*available: \['ce'\]"
    ):
        plot_history(_label_summaries(), metrics=["nope"])
    with pytest.raises(XaikitTypeError, match="not a single string"):
        plot_history(_label_summaries(), metrics="ce")  # type: ignore[arg-type]
    with pytest.raises(XaikitValueError, match="dpi must be a positive number"):
        plot_history(_label_summaries(), dpi=0)


@pytest.mark.slow
def test_gallery_history_script(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "gallery" / "history_plot.py"
    spec = importlib.util.spec_from_file_location("history_plot", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--out", str(tmp_path / "h.pdf"), "--dpi", "30"])
    assert out.read_bytes().startswith(b"%PDF")
