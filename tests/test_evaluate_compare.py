"""xk.evaluate.compare: the table equals the standalone metrics, ranks follow each metric's
direction, verdicts, the figure, saving into the report, the Compare trace, the model left
unchanged, and bad inputs named."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import (
    CHANNELS,
    SIZE,
    contributions,
    layout,
    linear,
    square_mask,
    square_weights,
    weights_of,
)
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.registry import METRICS


def _square_case(framework: str, batch: int = 4):
    """A linear model whose class 0 looks only at a square, inputs, and the exact contributions."""
    rng = np.random.default_rng(0)
    w = square_weights(rng)
    x = rng.uniform(0.2, 1.0, size=(batch, SIZE, SIZE, CHANNELS)).astype(np.float32)
    return linear(framework, w), layout(framework, x), contributions(w, x, 0), rng


def _lenet(seed: int = 0):
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(seed)
    return LeNet(input_shape=(3, 32, 32), classes=5).eval()


def test_table_matches_the_standalone_metrics_and_ranks_the_exact_map_first():
    model, x, exact, rng = _square_case("torch")
    random_map = rng.random(exact.shape)
    mask = square_mask(len(exact))
    res = xk.evaluate.compare(
        model, x, {"exact": exact, "random": random_map, "ixg": "input_x_gradient"},
        metrics=["deletion_auc", "insertion_auc", "sparseness", "complexity", "localization_energy",
                 "pointing_game"],
        mask=mask, target=0,
    )  # fmt: skip
    t = res.table.set_index("method")
    assert list(t.index) == ["exact", "random", "ixg"]
    names = [
        "deletion_auc",
        "insertion_auc",
        "sparseness",
        "complexity",
        "localization_energy",
        "pointing_game",
    ]
    assert list(res.table.columns) == [
        "method",
        *names,
        *[f"rank {n}" for n in names],
        "mean rank",
        "seconds",
    ]
    # every cell is the mean of the standalone metric on the same maps
    for label, maps in (("exact", exact), ("random", random_map)):
        d = xk.evaluate.deletion(model, x, maps, target=0, steps=20, baseline="black")
        i = xk.evaluate.insertion(model, x, maps, target=0, steps=20, baseline="blur")
        loc = xk.evaluate.localization(maps, mask)
        assert t.loc[label, "deletion_auc"] == pytest.approx(d.auc_mean, abs=1e-12)
        assert t.loc[label, "insertion_auc"] == pytest.approx(i.auc_mean, abs=1e-12)
        assert t.loc[label, "sparseness"] == pytest.approx(xk.evaluate.sparseness(maps).mean, abs=1e-12)
        assert t.loc[label, "complexity"] == pytest.approx(xk.evaluate.complexity(maps).mean, abs=1e-12)
        assert t.loc[label, "localization_energy"] == pytest.approx(np.nanmean(loc["energy"]), abs=1e-12)
        assert t.loc[label, "pointing_game"] == pytest.approx(loc["pointing"].mean(), abs=1e-12)
    # the exact map and input x gradient (the same map for a bias-free linear model) tie first;
    # the random map is last on faithfulness and localization
    assert t.loc["ixg", "deletion_auc"] == pytest.approx(t.loc["exact", "deletion_auc"], abs=1e-6)
    for name in ("deletion_auc", "insertion_auc", "localization_energy", "pointing_game", "sparseness"):
        assert t.loc["random", f"rank {name}"] == 3, name
        assert t.loc["exact", f"rank {name}"] == 1, name
    assert t.loc["exact", "localization_energy"] == 1.0
    assert t.loc["random", "rank complexity"] == 3  # the random map is the most spread out
    assert t.loc["random", "mean rank"] == 3.0
    assert set(res.per_sample.columns) == {"method", "metric", "sample", "score"}
    assert len(res.per_sample) == 3 * len(names) * len(exact)
    assert res.maps["exact"] is not None and res.maps["ixg"].shape == x.shape
    assert res.targets.tolist() == [0] * len(exact)
    assert "least faithful by deletion AUC, insertion AUC" in res.verdicts["random"]
    assert "most faithful by deletion AUC" in res.verdicts["exact"]
    assert "worst localized" in res.verdicts["random"]


def test_a_metric_of_ones_own_joins_the_table():
    from xaikit.evaluate.registry import Metric

    model, x, exact, _ = _square_case("torch", batch=2)
    peak = Metric(
        "peak_share", "complexity", True, False, False, "What share of the mass is in the top pixel?",
        lambda c: c.magnitudes.reshape(c.batch, -1).max(axis=1) / c.magnitudes.reshape(c.batch, -1).sum(axis=1),
    )  # fmt: skip
    res = xk.evaluate.compare(model, x, {"exact": exact}, metrics=[peak, "sparseness"], target=0)
    flat = np.abs(exact).reshape(2, -1)
    assert res.table["peak_share"].iloc[0] == pytest.approx((flat.max(1) / flat.sum(1)).mean())
    with pytest.raises(XaikitValueError, match="family must be one of"):
        Metric("x", "speed", True, False, False, "?", lambda c: c.nan())
    bad = Metric("short", "complexity", True, False, False, "?", lambda c: np.zeros(1))
    with pytest.raises(XaikitValueError, match="returned 1 scores for 2 samples"):
        xk.evaluate.compare(model, x, ["vanilla"], metrics=[bad])


def test_ranks_follow_direction_and_share_ties():
    from xaikit.evaluate.compare import _ranks

    v = np.array([0.3, 0.1, np.nan, 0.3])
    assert _ranks(v, True).tolist()[:2] == [1.0, 3.0] and np.isnan(_ranks(v, True)[2])
    assert _ranks(v, False)[[0, 1, 3]].tolist() == [2.0, 1.0, 2.0]


def test_lenet_default_metrics_randomization_and_completeness(tmp_path):
    import torch

    model = _lenet()
    before = [t.detach().clone() for t in list(model.parameters()) + list(model.buffers())]
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    opts = {"integrated": {"nsamples": 8, "baseline": "black"}}
    res = xk.evaluate.compare(model, x, ["vanilla", "integrated"], method_options=opts, seed=3)
    assert [m.name for m in res.metrics] == [m.name for m in METRICS.values() if m.cheap and not m.needs_mask]
    after = list(model.parameters()) + list(model.buffers())
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    # randomization: the last cascading step of randomization_test (every layer re-drawn), and its
    # chance level: randomization_test's baseline (two random copies, seeds 4 and 5), bit for bit
    t = res.table.set_index("method")
    assert (
        list(res.table.columns).index("randomization baseline")
        == list(res.table.columns).index("randomization") + 1
    )
    for method, o in (("vanilla", {}), ("integrated", opts["integrated"])):
        rt = xk.evaluate.randomization_test(model, x, target=res.targets, method=method, seed=3, **o)
        last = rt.per_sample[rt.per_sample["step"] == rt.per_sample["step"].max()]["spearman_abs"].to_numpy()
        ours = res.per_sample.query("method == @method and metric == 'randomization'")["score"].to_numpy()
        np.testing.assert_allclose(ours, last, atol=1e-12)
        assert rt.baseline is not None
        floor = res.per_sample.query("method == @method and metric == 'randomization baseline'")["score"]
        np.testing.assert_allclose(floor.to_numpy(), rt.baseline.per_sample["spearman_abs"], atol=1e-12)
        assert t.loc[method, "randomization baseline"] == pytest.approx(
            rt.baseline.mean["spearman_abs"], abs=1e-12
        )
    # eMPRT: the standalone function's scores, from the maps and randomized maps compare shares
    for method, o in (("vanilla", {}), ("integrated", opts["integrated"])):
        em = xk.evaluate.efficient_mprt(model, x, method, target=res.targets, seed=3, method_options=o)
        ours = res.per_sample.query("method == @method and metric == 'efficient_mprt'")["score"].to_numpy()
        np.testing.assert_allclose(ours, em.scores, atol=1e-12)
    # completeness: |delta| of the path method, NaN for the others
    c = xk.evaluate.completeness(
        model, x, method="integrated", target=res.targets, seed=3, method_options=opts["integrated"]
    )
    comp = res.per_sample.query("metric == 'completeness_delta'")
    np.testing.assert_allclose(comp[comp["method"] == "integrated"]["score"], np.abs(c.delta), atol=1e-6)
    assert comp[comp["method"] == "vanilla"]["score"].isna().all()
    assert all("randomization check" in v for v in res.verdicts.values())
    # seeded: the same call gives the same table
    again = xk.evaluate.compare(model, x, ["vanilla", "integrated"], method_options=opts, seed=3)
    cols = [c for c in res.table.columns if c != "seconds"]
    assert res.table[cols].equals(again.table[cols])
    # the figure, and a run folder whose report shows the table and the verdicts
    fig = res.figure(tmp_path / "compare.png")
    assert (tmp_path / "compare.png").stat().st_size > 1000
    assert len(fig.axes) == 3 * 3 + 3  # 3 samples x (input, 2 methods), the table, 2 colour bars
    path = xk.evaluate.save_evaluation(res, tmp_path / "run", "methods")
    doc = json.loads(path.read_text())
    assert doc["kind"] == "comparison" and doc["images"] == ["methods.png"]
    assert doc["tables"][0]["columns"][:3] == ["method", "deletion_auc", "insertion_auc"]
    assert [r[0] for r in doc["tables"][0]["rows"]] == ["vanilla", "integrated"]
    html = xk.viz.report(tmp_path / "run").read_text(encoding="utf-8")
    assert "mean rank" in html and "rank deletion_auc" in html and "randomization check" in html
    assert "randomization baseline" not in [m.name for m in res.metrics]  # a column, not a metric


def test_randomization_verdict_is_judged_against_two_random_models():
    import pandas as pd

    from xaikit.evaluate.compare import verdicts

    metrics = [METRICS["randomization"]]
    table = pd.DataFrame(
        {
            "method": ["edges", "close", "destroyed", "same", "unjudged", "noisy"],
            "randomization": [0.87, 0.80, 0.30, 0.95, 0.40, 0.30],
            "randomization baseline": [0.77, 0.78, 0.35, 0.96, np.nan, 0.10],
        }
    )
    # per-sample values: "noisy" is 0.2 above its baseline on average, but over 4 samples whose
    # differences spread -0.1 .. 0.5 (standard error 0.147), which cannot tell that from 0
    rows = [("noisy", "randomization", i, v) for i, v in enumerate([0.0, 0.6, 0.1, 0.5])]
    rows += [("noisy", "randomization baseline", i, v) for i, v in enumerate([0.1, 0.1, 0.1, 0.1])]
    per_sample = pd.DataFrame(rows, columns=["method", "metric", "sample", "score"])
    v = verdicts(table, metrics, per_sample=per_sample)
    assert v["edges"] == (  # the demo's case: 0.87 when two random LeNets agree at 0.77 is no pass
        "fails the randomization check (rho 0.87 once the weights are destroyed, above the 0.77 of "
        "two random models by more than 0.05)"
    )
    assert (
        v["close"]
        == "passes the randomization check (rho 0.80 once the weights are destroyed; two random models: 0.78)"
    )
    assert v["destroyed"].startswith("passes the randomization check (rho 0.30")
    assert (
        v["same"].startswith("fails the randomization check (maps barely change")
        and "two random models: 0.96" in v["same"]
    )
    assert (
        v["unjudged"]
        == "randomization not judged (rho 0.40 once the weights are destroyed; no random-model baseline)"
    )
    assert v["noisy"].startswith("passes")  # 0.20 <= 2 x 0.147
    assert verdicts(table, metrics)["noisy"].endswith("by more than 0.05)")  # without the samples: the margin


def test_figure_reads_without_a_magnifier(tmp_path):
    import re

    from matplotlib.text import Text

    from xaikit.viz.compare_plot import MIN_FONT

    model, x, _, _ = _square_case("torch", batch=3)
    res = xk.evaluate.compare(
        model,
        x,
        ["vanilla", "input_x_gradient"],
        target=0,
        metrics=["deletion_auc", "sparseness", "infidelity"],
    )
    fig = res.figure(tmp_path / "c.png", dpi=90)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT == 8  # 10 px at the report's 90 dpi
    number = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
    table = next(ax for ax in fig.axes if ax.texts)  # the score table: one text per cell
    cells = [t.get_text() for t in table.texts]
    assert len(cells) == 4 * 2 and all(len(number.findall(c)) <= 1 for c in cells), cells
    t = res.table.set_index("method")
    assert cells[:2] == [f"{t.loc[m, 'deletion_auc']:.3g}" for m in ("vanilla", "input_x_gradient")]
    rows = [label.get_text() for label in table.get_yticklabels()]
    assert rows == ["deletion AUC ↓", "sparseness ↑", "infidelity ↓", "mean rank ↓"]  # no abbreviation
    assert "higher is better" in table.get_xlabel() and "lower is better" in table.get_xlabel()
    bars = sorted(ax.get_ylabel() for ax in fig.axes if getattr(ax, "_colorbar", None) is not None)
    assert bars == ["rank (1 = best)", "|map|, scaled per sample (1 = its 99th percentile)"]
    maps = [ax for ax in fig.axes if ax.images and ax is not table and getattr(ax, "_colorbar", None) is None]
    assert len(maps) == 3 * 3 and all(not number.search(ax.get_title()) for ax in maps)  # names only


def test_custom_maps_score_nan_on_re_explaining_metrics():
    model, x, exact, _ = _square_case("torch", batch=2)
    res = xk.evaluate.compare(model, x, {"mine": exact}, metrics=["randomization", "sparseness"], target=0)
    every = xk.evaluate.compare(model, x, {"mine": exact}, mask=square_mask(2), target=0)
    assert {"localization_energy", "pointing_game", "deletion_auc"} <= set(every.table.columns)
    assert np.isnan(res.table["randomization"].iloc[0]) and np.isfinite(res.table["sparseness"].iloc[0])
    assert "custom maps" in res.verdicts["mine"]
    # the same maps among names in a list: the same scores as the dict form
    mixed = xk.evaluate.compare(model, x, ["vanilla", {"mine": exact}], metrics=["sparseness"], target=0)
    both = xk.evaluate.compare(
        model, x, {"vanilla": "vanilla", "mine": exact}, metrics=["sparseness"], target=0
    )
    assert list(mixed.table["method"]) == list(both.table["method"]) == ["vanilla", "mine"]
    np.testing.assert_array_equal(mixed.table["sparseness"], both.table["sparseness"])


def test_each_framework_agrees_with_torch_on_the_same_weights(framework):
    tables = {}
    for fw in dict.fromkeys(("torch", framework)):
        model, x, _, _ = _square_case(fw, batch=3)
        res = xk.evaluate.compare(
            model, x, ["vanilla", "input_x_gradient"], target=0,
            metrics=["deletion_auc", "insertion_auc", "sparseness", "randomization"],
        )  # fmt: skip
        tables[fw] = res.table.drop(columns=["seconds"])
        before = weights_of(fw, model)
        xk.evaluate.compare(model, x, ["vanilla"], metrics=["randomization"], target=0)
        assert all(np.array_equal(a, b) for a, b in zip(before, weights_of(fw, model)))
        fig = res.figure()  # channel-first (torch) or channel-last (Keras) inputs
        assert len(fig.axes) == 3 * 3 + 3 and fig.axes[0].images[0].get_array().shape == (
            SIZE,
            SIZE,
            CHANNELS,
        )
    for col in ("deletion_auc", "insertion_auc", "sparseness"):
        np.testing.assert_allclose(tables["torch"][col], tables[framework][col], atol=1e-5)
    assert tables["torch"]["rank deletion_auc"].tolist() == tables[framework]["rank deletion_auc"].tolist()


def test_compare_trace_logs_mean_ranks():
    from xaikit.trace.base import Data

    model, x, exact, _ = _square_case("torch", batch=3)
    trace = xk.evaluate.Compare(
        model, ["vanilla", "input_x_gradient"], class_key="y", mask_key="mask",
        metrics=["deletion_auc", "pointing_game"],
    )  # fmt: skip
    d = Data({"x": x, "y": np.zeros(3, dtype=np.int64), "mask": square_mask(3)})
    trace.on_batch_end(d)
    trace.on_epoch_end(d)
    logs = d.read_logs()
    assert sorted(logs) == ["compare_input_x_gradient_mean_rank", "compare_vanilla_mean_rank"]
    table = trace.results[0].table
    assert logs["compare_vanilla_mean_rank"] == table["mean rank"].iloc[0]
    assert trace.results[0].targets.tolist() == [0, 0, 0]
    with pytest.raises(XaikitValueError, match="need ground-truth masks"):
        xk.evaluate.Compare(model, ["vanilla"], metrics=["pointing_game"])
    with pytest.raises(XaikitTypeError, match="method names"):
        xk.evaluate.Compare(model, {"mine": exact})


def test_bad_inputs_are_named():
    model, x, _, _ = _square_case("torch", batch=2)
    with pytest.raises(XaikitValueError, match=r"unknown method 'nope'.*integrated"):
        xk.evaluate.compare(model, x, ["vanilla", "nope"])
    with pytest.raises(XaikitValueError, match=r"unknown metric 'speed'.*deletion_auc.*pointing_game"):
        xk.evaluate.compare(model, x, ["vanilla"], metrics=["speed"])
    with pytest.raises(
        XaikitValueError, match=r"\['localization_energy'\] need ground-truth masks: pass mask="
    ):
        xk.evaluate.compare(model, x, ["vanilla"], metrics=["localization_energy"])
    with pytest.raises(XaikitValueError, match="not one of the compared methods"):
        xk.evaluate.compare(model, x, ["vanilla"], method_options={"integrated": {"nsamples": 4}})
    with pytest.raises(XaikitValueError, match="set by the evaluation itself"):
        xk.evaluate.compare(model, x, ["vanilla"], method_options={"vanilla": {"target": 1}})
    with pytest.raises(XaikitValueError, match=r"methods\['bad'\]"):
        xk.evaluate.compare(model, x, {"bad": np.ones((2, 5, 5))})
    with pytest.raises(XaikitValueError, match="mask must have one mask per sample"):
        xk.evaluate.compare(model, x, ["vanilla"], mask=np.ones((2, 4, 4), bool))
    with pytest.raises(XaikitValueError, match="at least one method"):
        xk.evaluate.compare(model, x, [])
    with pytest.raises(XaikitValueError, match="repeat"):
        xk.evaluate.compare(model, x, ["vanilla"], metrics=["sparseness", "sparseness"])
    with pytest.raises(XaikitTypeError, match="methods must be"):
        xk.evaluate.compare(model, x, 3)


def test_every_method_with_a_delta_reports_it_and_smints_default_is_no_error(framework):
    """compare reports the completeness delta of every method whose record has one (the records,
    not a list of path methods): DeepLIFT's is float rounding; SmInt's default squares its paths,
    so it has none (NaN), and that is not an error the user has to dodge."""
    from tests.test_trace_xai_saliency import tiny_model

    model = tiny_model(framework)
    x = np.random.default_rng(2).random((3, 8, 8, 3), dtype=np.float32)
    x = x if framework == "tf" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    smint = {"nsamples": 2, "nintegration": 8}
    opts = {"smint": smint, "signed smint": {**smint, "magnitude": False}}
    methods = {"smint": "smint", "signed smint": "smint", "deeplift": "deeplift", "vanilla": "vanilla"}
    res = xk.evaluate.compare(model, x, methods, metrics=["completeness_delta"], method_options=opts, seed=1)
    delta = res.table.set_index("method")["completeness_delta"]
    assert np.isnan(delta["smint"]) and np.isnan(delta["vanilla"])
    assert 0 <= delta["deeplift"] < 1e-5
    for label, method in (("signed smint", "smint"), ("deeplift", "deeplift")):
        c = xk.evaluate.completeness(
            model, x, method, target=res.targets, seed=1, method_options=opts.get(label, {})
        )
        got = res.per_sample.query("method == @label and metric == 'completeness_delta'")["score"]
        np.testing.assert_allclose(got, np.abs(c.delta), rtol=1e-6, atol=1e-9)
    assert 0 < delta["signed smint"] < 1  # a Riemann sum over 8 steps of a ReLU net: small, not 0
