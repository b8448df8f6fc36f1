"""CompareResult.metric_agreement: which metrics rank the methods alike. Exact values on
hand-built score tables (known correlations, ties, NaNs, a constant metric), direction
adjustment, exact permutation p-values, the per-sample view, the verdict lines, the heatmap,
and the comparison saved into the run report."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, spearmanr

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.agreement import metric_agreement, rank_correlation
from xaikit.evaluate.compare import CompareResult
from xaikit.evaluate.registry import METRICS, Metric


def _result(table: dict[str, list[float]], per_sample: dict[str, np.ndarray] | None = None, metrics=None):
    """A CompareResult from a hand-built table (method -> mean scores by metric name) and,
    optionally, per-sample scores (metric name -> (methods, samples))."""
    methods = table.pop("method")
    metrics = metrics or [METRICS[name] for name in table]
    frame = pd.DataFrame({"method": methods, **table})
    batch = next(iter(per_sample.values())).shape[1] if per_sample else 1
    rows = [
        {"method": m, "metric": name, "sample": s, "score": float(scores[i, s])}
        for name, scores in (per_sample or {}).items()
        for i, m in enumerate(methods)
        for s in range(batch)
    ]
    ps = pd.DataFrame(rows, columns=["method", "metric", "sample", "score"])
    maps = {m: np.zeros((batch, 2, 2)) for m in methods}
    return CompareResult(
        frame, ps, {}, maps, np.zeros(batch, dtype=np.int64), metrics, np.zeros((batch, 2, 2))
    )


FIVE = ["a", "b", "c", "d", "e"]


def test_known_correlations_direction_adjusted_spearman_and_kendall():
    # deletion_auc and road are lower-is-better: deletion_auc [1..5] ranks a first, like the
    # higher-is-better insertion_auc [5..1]; road reverses them; sparseness swaps d and e
    res = _result(
        {
            "method": FIVE,
            "deletion_auc": [1.0, 2, 3, 4, 5],
            "insertion_auc": [5.0, 4, 3, 2, 1],
            "road": [5.0, 4, 3, 2, 1],
            "sparseness": [5.0, 4, 3, 1, 2],
        }
    )
    rho = res.metric_agreement().matrix
    assert rho.loc["deletion_auc", "insertion_auc"] == 1.0
    assert rho.loc["deletion_auc", "road"] == -1.0
    assert rho.loc["insertion_auc", "sparseness"] == pytest.approx(1 - 6 * 2 / (5 * 24))  # 0.9
    assert rho.loc["road", "sparseness"] == pytest.approx(-0.9)
    np.testing.assert_array_equal(np.diag(rho.to_numpy()), 1.0)
    np.testing.assert_array_equal(rho.to_numpy(), rho.to_numpy().T)
    tau = res.metric_agreement(kind="kendall").matrix
    assert tau.loc["insertion_auc", "sparseness"] == pytest.approx((9 - 1) / 10)  # one discordant pair of 10
    assert tau.loc["deletion_auc", "road"] == -1.0
    a = res.metric_agreement()
    assert (a.methods.to_numpy() == 5).all() and (a.samples.to_numpy() == 0).all()
    assert np.isnan(a.spread.to_numpy()).all()


def test_ties_equal_scipy_spearman_and_kendall_tau_b():
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.integers(0, 3, 6).astype(float)  # many ties
        b = rng.integers(0, 4, 6).astype(float)
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            continue
        assert float(rank_correlation(a, b)) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
        assert float(rank_correlation(a, b, "kendall")) == pytest.approx(
            kendalltau(a, b).statistic, abs=1e-12
        )
    res = _result({"method": FIVE, "insertion_auc": [1.0, 1, 2, 3, 3], "sparseness": [1.0, 2, 3, 4, 5]})
    assert res.metric_agreement().matrix.loc["insertion_auc", "sparseness"] == pytest.approx(
        spearmanr([1, 1, 2, 3, 3], [1, 2, 3, 4, 5]).statistic, abs=1e-12
    )
    assert res.metric_agreement(kind="kendall").matrix.loc["insertion_auc", "sparseness"] == pytest.approx(
        kendalltau([1, 1, 2, 3, 3], [1, 2, 3, 4, 5]).statistic, abs=1e-12
    )


def test_nans_constant_metric_and_too_few_methods():
    nan = np.nan
    res = _result(
        {
            "method": FIVE,
            "insertion_auc": [5.0, 4, 3, 2, 1],
            "sparseness": [nan, 1.0, 3, 2, 4],  # NaN for one method: over the other four
            "complexity": [0.5] * 5,  # the same for every method: no ranking
            "completeness_delta": [nan, nan, 0.1, nan, 0.2],  # two methods: never enough
            "localization_energy": [1.0, nan, nan, 2, 3],  # three with insertion, two with sparseness
        }
    )
    a = res.metric_agreement()
    m = a.matrix
    assert m.loc["insertion_auc", "sparseness"] == pytest.approx(
        spearmanr([4, 3, 2, 1], [1, 3, 2, 4]).statistic
    )
    assert a.methods.loc["insertion_auc", "sparseness"] == 4
    assert (
        m.loc["insertion_auc", "localization_energy"] == -1.0
        and a.methods.loc["insertion_auc", "localization_energy"] == 3
    )
    assert (
        np.isnan(m.loc["sparseness", "localization_energy"])
        and a.methods.loc["sparseness", "localization_energy"] == 2
    )
    assert np.isnan(m.loc["complexity"]).all() and np.isnan(m["complexity"]).all()
    assert np.isnan(m.loc["completeness_delta"]).all()
    assert a.skipped == {
        "completeness_delta": "a score for 2 of 5 methods (fewer than 3)",
        "complexity": "the same score for every method",
    }
    assert "complexity not compared: the same score for every method" in a.note
    # min_methods=4: the pair over three methods is no longer enough
    assert np.isnan(res.metric_agreement(min_methods=4).matrix.loc["insertion_auc", "localization_energy"])


def test_exact_permutation_p_values():
    # over 4 methods, |rho| >= 0.8 for 8 of the 24 orderings, rho = +-1 for 2 of them
    res = _result(
        {
            "method": FIVE[:4],
            "insertion_auc": [4.0, 3, 2, 1],
            "sparseness": [1.0, 3, 2, 4],
            "road": [1.0, 2, 4, 3],
        }
    )
    a = res.metric_agreement()
    assert a.matrix.loc["insertion_auc", "sparseness"] == pytest.approx(-0.8)
    assert a.p_value.loc["insertion_auc", "sparseness"] == pytest.approx(8 / 24)
    assert a.matrix.loc["insertion_auc", "road"] == pytest.approx(0.8)  # road negated: 4, 3, 1, 2 -> 0.8
    assert np.isnan(a.p_value.loc["road", "road"])
    # independently: every ordering through scipy
    x, y = np.array([4.0, 3, 2, 1]), np.array([1.0, 3, 2, 4])
    null = [spearmanr(x, y[list(p)]).statistic for p in itertools.permutations(range(4))]
    assert a.p_value.loc["insertion_auc", "sparseness"] == pytest.approx(np.mean(np.abs(null) >= 0.8 - 1e-12))
    # kendall over 5 methods with ties, against scipy on every ordering
    res = _result({"method": FIVE, "insertion_auc": [1.0, 1, 2, 3, 3], "sparseness": [2.0, 1, 3, 5, 4]})
    k = res.metric_agreement(kind="kendall")
    xs, ys = np.array([1.0, 1, 2, 3, 3]), np.array([2.0, 1, 3, 5, 4])
    t = kendalltau(xs, ys).statistic
    null = [kendalltau(xs, ys[list(p)]).statistic for p in itertools.permutations(range(5))]
    assert k.p_value.loc["insertion_auc", "sparseness"] == pytest.approx(
        np.mean(np.abs(null) >= abs(t) - 1e-12)
    )


def test_p_values_of_three_methods_and_sampled_beyond_eight():
    three = _result({"method": FIVE[:3], "insertion_auc": [3.0, 2, 1], "sparseness": [3.0, 2, 1]})
    assert three.metric_agreement().p_value.loc["insertion_auc", "sparseness"] == pytest.approx(2 / 6)
    nine = [f"m{i}" for i in range(9)]
    res = _result({"method": nine, "insertion_auc": [float(i) for i in range(9)], "sparseness": [float(i) for i in range(9)],
                   "road": [0.0, 1, 2, 3, 8, 5, 6, 7, 4]})  # fmt: skip
    a = res.metric_agreement()
    # +-1 over 9 methods: 2 of 362880 orderings; 20000 seeded draws see it about 0.1 times
    assert 1 / 20001 <= a.p_value.loc["insertion_auc", "sparseness"] <= 2 / 20001
    assert a.p_value.equals(res.metric_agreement().p_value)  # seeded: the same draws every call
    rho = a.matrix.loc["insertion_auc", "road"]  # road negated: 4 and 8 swapped, reversed order
    assert rho == pytest.approx(spearmanr(range(9), -np.array([0.0, 1, 2, 3, 8, 5, 6, 7, 4])).statistic)
    x, y = np.arange(9.0), -np.array([0.0, 1, 2, 3, 8, 5, 6, 7, 4])
    null = np.abs(rank_correlation(x, y[np.argsort(np.random.default_rng(5).random((20000, 9)), axis=1)]))
    assert a.p_value.loc["insertion_auc", "road"] == pytest.approx(
        np.mean(null >= abs(rho) - 1e-12), abs=0.015
    )


def test_verdict_names_same_family_pairs_that_rank_oppositely():
    res = _result(
        {
            "method": FIVE[:4],
            "deletion_auc": [0.1, 0.2, 0.3, 0.4],  # a best
            "road": [0.4, 0.3, 0.1, 0.2],  # c best, a worst: rho = -0.8
            "insertion_auc": [0.9, 0.8, 0.7, 0.6],  # agrees with deletion
            "sparseness": [0.1, 0.2, 0.3, 0.4],  # d best: opposite to deletion, another family
        }
    )
    a = res.metric_agreement()
    assert a.lines == [
        "deletion_auc and road disagree on this model: rho = -0.8 over 4 methods (p = 0.33)",
        "road and insertion_auc disagree on this model: rho = -0.8 over 4 methods (p = 0.33)",
    ]
    assert a.matrix.loc["deletion_auc", "sparseness"] == -1.0  # not named: different families
    assert not any("sparseness" in line for line in a.lines)
    assert (
        "tau = -0.67 over 4 methods (6 pairs of methods, p = 0.33)"
        in res.metric_agreement(kind="kendall").lines[0]
    )
    agree = _result({"method": FIVE[:3], "deletion_auc": [0.1, 0.2, 0.3], "road": [0.1, 0.3, 0.2]})
    assert agree.metric_agreement().note == "no two metrics of the same family rank the methods oppositely"


def test_per_sample_view_averages_the_per_sample_correlations():
    rng = np.random.default_rng(0)
    dele = rng.random((4, 6))
    road = rng.random((4, 6))
    road[:, 2] = 0.5  # constant on sample 2: undefined there, left out
    road[0, 4] = np.nan  # one method missing on sample 4: over 3 methods
    dele[:2, 5] = np.nan  # two missing on sample 5: too few methods
    res = _result(
        {"method": FIVE[:4], "deletion_auc": list(dele.mean(1)), "road": list(road.mean(1))},
        {"deletion_auc": dele, "road": road},
    )
    a = res.metric_agreement(over="samples")
    expected = []
    for s in (0, 1, 3, 4):
        ok = np.isfinite(dele[:, s]) & np.isfinite(road[:, s])
        expected.append(spearmanr(-dele[ok, s], -road[ok, s]).statistic)
    assert a.matrix.loc["deletion_auc", "road"] == pytest.approx(np.mean(expected), abs=1e-12)
    assert a.samples.loc["deletion_auc", "road"] == 4
    assert a.spread.loc["deletion_auc", "road"] == pytest.approx(np.std(expected, ddof=1), abs=1e-12)
    assert a.methods.loc["deletion_auc", "road"] == 4
    assert np.isnan(a.p_value.to_numpy()).all()
    assert a.samples.loc["road", "road"] == 5  # sample 2 is constant for road itself
    assert a.lines == [
        f"deletion_auc and road disagree on this model: mean per-sample rho = {np.mean(expected):.2g} over 4 "
        f"samples of up to 4 methods (spread {np.std(expected, ddof=1):.2g})"
    ]
    assert a.lines[0].endswith("rho = -0.15 over 4 samples of up to 4 methods (spread 0.79)")


def test_matrix_grouped_by_family_and_every_registered_metric_taken():
    rng = np.random.default_rng(1)
    names = list(METRICS)[::-1]  # deliberately out of family order
    table = {"method": FIVE, **{n: list(rng.random(5)) for n in names}}
    res = _result(dict(table))
    a = res.metric_agreement()
    families = [m.family for m in a.metrics]
    assert families == sorted(families, key=list(xk.evaluate.registry.FAMILIES).index)
    assert set(a.matrix.index) == set(METRICS) and list(a.matrix.columns) == list(a.matrix.index)
    for x, y in itertools.combinations(a.metrics, 2):
        sx = np.array(table[x.name]) * (1 if x.higher_is_better else -1)
        sy = np.array(table[y.name]) * (1 if y.higher_is_better else -1)
        assert a.matrix.loc[x.name, y.name] == pytest.approx(spearmanr(sx, sy).statistic, abs=1e-12)
    assert len(a.pairs) == len(METRICS) * (len(METRICS) - 1) // 2
    # a metric registered by the user joins like any other
    mine = Metric("mine", "complexity", False, False, False, "?", lambda ctx: ctx.nan())
    res = _result({"method": FIVE, "sparseness": [1.0, 2, 3, 4, 5], "mine": [1.0, 2, 3, 4, 5]},
                  metrics=[METRICS["sparseness"], mine])  # fmt: skip
    a = res.metric_agreement()
    assert a.matrix.loc["sparseness", "mine"] == -1.0
    assert a.lines == ["sparseness and mine disagree on this model: rho = -1 over 5 methods (p = 0.017)"]


def test_bad_options_are_refused_by_name():
    res = _result({"method": FIVE[:3], "sparseness": [1.0, 2, 3]})
    with pytest.raises(XaikitValueError, match=r"kind must be one of 'spearman', 'kendall'; got 'pearson'"):
        res.metric_agreement(kind="pearson")
    with pytest.raises(XaikitValueError, match=r"over must be one of 'methods', 'samples'; got 'images'"):
        res.metric_agreement(over="images")
    with pytest.raises(XaikitValueError, match=r"kind must be one of .*; got ndarray"):
        res.metric_agreement(kind=np.array(["spearman", "kendall"]))  # was numpy's 'ambiguous' error
    with pytest.raises(XaikitValueError, match=r"min_methods must be >= 3 .*; got 2"):
        res.metric_agreement(min_methods=2)
    with pytest.raises(XaikitTypeError, match="min_methods must be an int >= 3; got"):
        metric_agreement(res, min_methods="3")


def test_figure_is_a_grouped_heatmap(tmp_path):
    res = _result(
        {"method": FIVE[:4], "deletion_auc": [0.1, 0.2, 0.3, 0.4], "road": [0.4, 0.3, 0.1, 0.2],
         "sparseness": [0.1, 0.2, 0.3, 0.4], "complexity": [1.0] * 4}
    )  # fmt: skip
    fig = res.metric_agreement().figure(tmp_path / "agree.png", dpi=60)
    assert (tmp_path / "agree.png").read_bytes()[:4] == b"\x89PNG"
    ax = fig.axes[0]
    # complexity is the same for every method: left out, and named under the matrix
    assert [t.get_text() for t in ax.get_yticklabels()] == ["deletion AUC", "ROAD", "sparseness"]
    cells = [t.get_text() for t in ax.texts]
    assert cells[:9] == ["1.0", "-0.8", "-1.0", "-0.8", "1.0", "0.8", "-1.0", "0.8", "1.0"]
    assert cells[9:] == ["faithfulness", "complex."]  # the family band (a one-metric family abbreviated)
    assert len(ax.lines) == 2  # one line across, one down, between the two families
    assert "over the ranking of 4 methods by mean score" in ax.get_xlabel()
    assert "Not shown: complexity (the same score for every method)." in ax.get_xlabel()


def test_compare_saved_with_its_agreement_into_the_report(tmp_path):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 3))
    x = torch.rand(4, 3, 4, 4)
    methods = {
        "vanilla": "vanilla",
        "ixg": "input_x_gradient",
        "random": np.random.default_rng(0).random((4, 4, 4)),
    }
    res = xk.evaluate.compare(
        model, x, methods, metrics=["deletion_auc", "insertion_auc", "sparseness", "complexity"]
    )
    a = res.metric_agreement()
    for m in ("deletion_auc", "insertion_auc", "sparseness", "complexity"):
        for n in ("deletion_auc", "insertion_auc", "sparseness", "complexity"):
            sx = res.table[m].to_numpy() * (1 if METRICS[m].higher_is_better else -1)
            sy = res.table[n].to_numpy() * (1 if METRICS[n].higher_is_better else -1)
            want = spearmanr(sx, sy).statistic if np.ptp(sx) and np.ptp(sy) else np.nan
            np.testing.assert_allclose(a.matrix.loc[m, n], want, atol=1e-12)
    path = xk.evaluate.save_evaluation(res, tmp_path / "run", "methods")
    doc = json.loads(path.read_text())
    assert doc["images"] == ["methods.png", "methods_agreement.png"]
    assert (tmp_path / "run" / "evaluation" / "methods_agreement.png").stat().st_size > 1000
    assert doc["agreement"] == a.note.splitlines()
    assert doc["tables"][-1]["columns"][:5] == ["metric_a", "metric_b", "family_a", "family_b", "rho"]
    html = xk.viz.report(tmp_path / "run").read_text(encoding="utf-8")
    assert "Do the metrics agree?" in html and a.note.splitlines()[0] in html
    # two methods: no correlation to draw, and the page says why
    two = xk.evaluate.compare(model, x, ["vanilla", "input_x_gradient"], metrics=["sparseness"])
    doc = json.loads(xk.evaluate.save_evaluation(two, tmp_path / "run2", "m").read_text())
    assert doc["images"] == ["m.png"]
    assert doc["agreement"] == ["not measured: 2 methods (a rank correlation needs at least 3)"]
