"""Every rule-based method by name, everywhere a method name goes: the ``Saliency`` trace's
``methods=`` columns (equal to ``explain``), ``xk.evaluate`` (deletion by name == deletion of
the maps, ``compare``, ``randomization_test``) and ``explain_dataset`` (equal to ``explain``),
for torch and Keras models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.test_trace_xai_saliency import batches, run_epoch, tiny_model
from xaikit.trace.xai import Saliency
from xaikit.xai._engine.display import to_display

RULES = xk.xai.method_names("rules")
#: small options of the methods that take a baseline set
OPTIONS = {"deepliftshap": {"baselines": np.zeros((2, 8, 8, 3), np.float32)}}


def _feed(framework: str, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def _options(method: str, framework: str) -> dict[str, object]:
    opts = dict(OPTIONS.get(method, {}))
    if "baselines" in opts:
        opts["baselines"] = _feed(framework, opts["baselines"])  # type: ignore[arg-type]
    return opts


def test_the_rules_family_is_registered() -> None:
    assert {"lrp", "lrp_epsilon", "guided_backprop", "deconvnet"} <= set(RULES)
    assert xk.xai.get_method("LRP-epsilon").name == "lrp_epsilon"
    assert xk.xai.get_method("Guided Backprop").name == "guided_backprop"


@pytest.mark.parametrize("method", RULES)
def test_trace_columns_equal_explain(framework: str, method: str) -> None:
    model = tiny_model(framework)
    opts = _options(method, framework)
    trace = Saliency(model, "x", "y_pred", samples=3, smoothing=0, integrating=0, methods={method: opts})
    img = run_epoch(trace, batches(2))["saliency"]
    title = xk.xai.get_method(method).title
    x = np.concatenate([b["x"] for b in batches(2)])[:3]
    attr = xk.xai.explain(model, _feed(framework, x), method=method, seed=0, **opts)
    axis = 1 if framework == "torch" else 3
    want = to_display(attr, axis)
    want = want[:, 0] if framework == "torch" else want[..., 0]
    got = np.asarray(img[f"{title} saliency"][0]).reshape(want.shape)
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("method", RULES)
def test_evaluate_and_dataset_take_the_name(framework: str, method: str, tmp_path: Path) -> None:
    model = tiny_model(framework)
    x = _feed(framework, np.concatenate([b["x"] for b in batches(2)]))
    opts = _options(method, framework)
    maps = xk.xai.explain(model, x, target=0, method=method, **opts)
    by_name = xk.evaluate.deletion(model, x, method, target=0, steps=4, method_options=opts)
    by_maps = xk.evaluate.deletion(model, x, maps, target=0, steps=4)
    np.testing.assert_array_equal(by_name.scores, by_maps.scores)
    rt = xk.evaluate.randomization_test(model, x, target=0, method=method, **opts)
    assert rt.method == method and len(rt.table) == 2
    if "baselines" in opts:  # a reference set is an array option: explain_dataset stores names and numbers
        return
    res = xk.xai.explain_dataset(model, x, method=method, out=str(tmp_path / "store.zarr"), batch_size=3)
    np.testing.assert_allclose(res.attributions[:], xk.xai.explain(model, x, method=method), atol=1e-6)


def test_compare_ranks_rule_methods(framework: str) -> None:
    model = tiny_model(framework)
    x = _feed(framework, np.concatenate([b["x"] for b in batches(2)]))
    table = xk.evaluate.compare(
        model, x, ["vanilla", *(m for m in RULES if m not in OPTIONS)], metrics=["deletion_auc", "sparseness"]
    )
    assert set(table.table["method"]) >= {"vanilla", *(m for m in RULES if m not in OPTIONS)}
    assert np.isfinite(table.table[["deletion_auc", "sparseness"]].to_numpy(dtype=float)).all()
