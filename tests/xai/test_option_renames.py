"""RISE's mask count is ``nsamples``, as every other method's sample count: the old name
``n_masks`` is still taken, with a ``FutureWarning`` pointing at the caller's line, by every
door (``explain``, the ``Saliency`` trace, ``explain_dataset``, ``xk.evaluate``), and a dataset
store written with ``n_masks`` resumes a run given ``nsamples``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError
from xaikit.xai.registry import Method, get_method

torch = pytest.importorskip("torch")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(3 * 64, 2)
    ).eval()


def _x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(2, 1, 8, 8)).astype(np.float32)


def test_the_old_name_gives_the_same_map_with_a_warning_at_the_callers_line() -> None:
    model, x = _model(), _x()
    want = xk.xai.explain(model, x, method="rise", nsamples=24, cell=2, seed=3)
    with pytest.warns(
        FutureWarning, match=r"method='rise'\): n_masks is now nsamples.*write nsamples="
    ) as got:
        old = xk.xai.explain(model, x, method="rise", n_masks=24, cell=2, seed=3)
    np.testing.assert_array_equal(old, want)
    assert [Path(w.filename).name for w in got] == [Path(__file__).name]


def test_both_names_are_refused() -> None:
    with pytest.raises(XaikitTypeError, match=r"got n_masks and nsamples.*give nsamples= only"):
        xk.xai.explain(_model(), _x(), method="rise", n_masks=24, nsamples=24)


def test_another_method_given_the_old_name_says_whose_it_was() -> None:
    with pytest.raises(
        XaikitTypeError,
        match=r"unknown option\(s\) \['n_masks'\].*n_masks is the old name of rise's nsamples",
    ):
        xk.xai.explain(_model(), _x(), method="occlusion", n_masks=24)


def test_the_trace_and_evaluate_take_the_old_name_too() -> None:
    from xaikit.trace.xai import Saliency

    model, x = _model(), _x()
    with pytest.warns(FutureWarning, match="n_masks is now nsamples"):
        trace = Saliency(model, "x", "y_pred", methods={"rise": {"n_masks": 8}})
    assert trace.methods == {"rise": {"nsamples": 8, "cell": 8, "p": 0.5}}
    want = xk.evaluate.deletion(model, x, "rise", target=0, steps=4, method_options={"nsamples": 16})
    with pytest.warns(FutureWarning, match="n_masks is now nsamples"):
        old = xk.evaluate.deletion(model, x, "rise", target=0, steps=4, method_options={"n_masks": 16})
    np.testing.assert_array_equal(old.scores, want.scores)


def test_a_store_written_with_the_old_name_resumes(tmp_path: Path) -> None:
    model = _model()
    data = _x()
    out = tmp_path / "store"
    first = xk.xai.explain_dataset(model, data, method="rise", out=out, batch_size=2, nsamples=8, cell=2)
    manifest = out / "manifest.json"
    stored = json.loads(manifest.read_text())
    assert stored["options"]["nsamples"] == 8
    # a store of an earlier release: the same run, its option under the old name
    stored["options"] = {("n_masks" if k == "nsamples" else k): v for k, v in stored["options"].items()}
    manifest.write_text(json.dumps(stored))
    again = xk.xai.explain_dataset(
        model, data, method="rise", out=out, batch_size=2, resume=True, nsamples=8, cell=2
    )
    np.testing.assert_array_equal(again.attributions[:], first.attributions[:])
    with pytest.warns(FutureWarning, match="n_masks is now nsamples"):
        old = xk.xai.explain_dataset(
            model, data, method="rise", out=out, batch_size=2, resume=True, n_masks=8, cell=2
        )
    np.testing.assert_array_equal(old.attributions[:], first.attributions[:])


def test_a_record_checks_its_renames_and_pickles_them() -> None:
    rise = get_method("rise")
    assert pickle.loads(pickle.dumps(rise)).renamed == {"n_masks": "nsamples"}
    with pytest.raises(XaikitTypeError, match="renamed must map old option names"):
        Method("toy", "gradient", "Toy", "m:f", options={"k": 1}, renamed={"old": "missing"})
    with pytest.raises(XaikitTypeError, match="renamed must map old option names"):
        Method("toy", "gradient", "Toy", "m:f", options={"k": 1, "old": 2}, renamed={"old": "k"})
