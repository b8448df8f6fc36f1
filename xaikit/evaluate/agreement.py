"""Do the metrics agree? The metric-of-metrics view of a comparison.

:meth:`xaikit.evaluate.CompareResult.metric_agreement` asks, for every pair of metrics of a
comparison, whether they rank the compared methods the same way: a (metrics x metrics) matrix of
rank correlations, **direction-adjusted** (a lower-is-better metric's scores are negated first,
so +1 always means "the two metrics order the methods the same way, best to worst", -1 "in
reverse").

Two ways to read "the methods' ranking" (``over``):

* ``"methods"`` (the default): the ranking of the methods by their *mean* scores, the ranking the
  comparison table, its ``rank <metric>`` columns and the verdicts show. The correlation rests on
  as many points as there are methods (3 to 6, usually), so it is coarse: over 4 methods a
  Spearman ρ can only be one of a handful of values (-1, -0.8, ..., 1 without ties) and even
  ρ = -1 happens by chance once in 24 orderings. Each cell therefore comes with the number of
  methods it rests on (``methods``) and an exact permutation p-value (``p_value``: the share of
  the orderings of the methods that correlate at least as strongly, either way).
* ``"samples"``: the correlation of the per-sample rankings, sample by sample, averaged over the
  samples where it is defined (``samples``), with its spread (``spread``, the standard deviation
  over those samples). It asks "do the two metrics agree on each image?", a stricter question
  than the table's: per-sample scores are noisy (a pointing game is 0 or 1 on each image, often
  the same for every method, and then undefined), so its mean is pulled towards 0 by noise that
  the means average out. It is not the default because it does not describe the table the user
  reads.

A correlation is NaN where it is undefined: fewer than ``min_methods`` methods (default
:data:`MIN_METHODS`) have a finite score on both metrics (a path-only metric such as
``completeness_delta`` has one), or one of the two metrics gives every such method the same score
(no ranking to compare). ``kind="kendall"`` uses Kendall's τ-b (ties accounted for) instead of
Spearman's ρ (the Pearson correlation of the average ranks).

The verdict (:attr:`MetricAgreement.lines`) names every pair of metrics of the **same family**
that ranks the methods oppositely (correlation < 0): "deletion_auc and road disagree on this
model: rho = -0.6 over 4 methods (p = 0.42)".
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.checks import check_choice
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import ranks
from xaikit.evaluate.registry import FAMILIES, Metric

__all__ = ["KINDS", "MIN_METHODS", "OVER", "MetricAgreement", "metric_agreement", "rank_correlation"]

#: the rank correlations offered
KINDS = ("spearman", "kendall")
#: what is ranked: the methods' mean scores (the table), or each sample's scores
OVER = ("methods", "samples")
#: the fewest methods with a finite score on both metrics for a correlation (below: NaN)
MIN_METHODS = 3
#: permutation p-values are exact (every ordering) up to this many methods, sampled above
EXACT_UP_TO = 8
_DRAWS = 20_000
_SYMBOL = {"spearman": "rho", "kendall": "tau"}


def rank_correlation(a: np.ndarray, b: np.ndarray, kind: str = "spearman") -> np.ndarray:
    """The rank correlation of ``a`` with each row of ``b``.

    Args:
        a: (n,) finite scores.
        b: (n,) or (P, n) finite scores.
        kind: ``"spearman"`` (Pearson correlation of the average ranks) or ``"kendall"`` (τ-b).

    Returns:
        () or (P,) correlations; NaN where ``a`` or a row of ``b`` is constant.

    Example:
        >>> float(rank_correlation(np.array([1.0, 2, 3, 4]), np.array([10.0, 30, 20, 40])))
        0.8
        >>> round(float(rank_correlation(np.array([1.0, 2, 3]), np.array([3.0, 3, 1]), "kendall")), 4)
        -0.8165
    """
    a = np.asarray(a, dtype=np.float64)
    bb = np.asarray(b, dtype=np.float64)
    rows = np.atleast_2d(bb)
    out = _rowwise(np.broadcast_to(a, rows.shape), rows, kind)
    return out if bb.ndim == 2 else out[0]


def _rowwise(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """(S,) the rank correlation of each row of ``a`` (S, n) with the same row of ``b``."""
    if kind == "spearman":
        return _pearson(ranks(a), ranks(b))
    return _cosine(_signs(a), _signs(b))


def _signs(values: np.ndarray) -> np.ndarray:
    """(S, n (n - 1) / 2) sign(v_i - v_j) of every pair i < j of each row (Kendall's pairs)."""
    i, j = np.triu_indices(values.shape[-1], k=1)
    return np.sign(values[..., i] - values[..., j])


def _pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(S,) the Pearson correlation of each row pair; NaN for a constant row."""
    return _cosine(a - a.mean(axis=-1, keepdims=True), b - b.mean(axis=-1, keepdims=True))


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(S,) sum(a b) / sqrt(sum(a²) sum(b²)) of each row pair (Pearson of centred rows, Kendall's
    τ-b of sign rows); NaN where either row is all zero."""
    num = (a * b).sum(axis=-1)
    den = np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    out = np.full(num.shape, np.nan)
    ok = den > 0
    out[ok] = np.clip(num[ok] / den[ok], -1.0, 1.0)
    return out


def _p_value(a: np.ndarray, b: np.ndarray, r: float, kind: str) -> float:
    """Two-sided permutation p-value of ``r``: the share of the orderings of ``b`` against ``a``
    whose correlation is at least ``|r|`` in size (every ordering up to :data:`EXACT_UP_TO` values;
    above, :data:`_DRAWS` seeded random orderings, counted as ``(1 + hits) / (1 + draws)``)."""
    ra, rb = ranks(a[None])[0], ranks(b[None])[0]
    null = _null(kind, tuple(np.sort(ra)), tuple(np.sort(rb)))
    hits = int(null.size - np.searchsorted(null, abs(r) - 1e-12, side="left"))
    return hits / null.size if a.shape[0] <= EXACT_UP_TO else (1 + hits) / (1 + null.size)


@functools.lru_cache(maxsize=256)
def _null(kind: str, ra: tuple[float, ...], rb: tuple[float, ...]) -> np.ndarray:
    """The sorted |correlations| of ``ra`` with every ordering of ``rb`` (or :data:`_DRAWS`
    seeded ones). Over all orderings they depend only on the two sets of ranks (their ties), not
    on their order, so one distribution serves every pair of metrics with the same ties."""
    n = len(ra)
    if n <= EXACT_UP_TO:
        orders = _orderings(n)
    else:
        orders = np.argsort(np.random.default_rng(0).random((_DRAWS, n)), axis=1)
    a, b = np.asarray(ra), np.asarray(rb)
    if kind == "spearman":
        null = _pearson(np.broadcast_to(a, orders.shape), b[orders])
    else:
        i, j = np.triu_indices(n, k=1)
        null = _cosine(
            np.broadcast_to(_signs(a), (len(orders), len(i))), np.sign(b[orders[:, i]] - b[orders[:, j]])
        )
    return np.sort(np.abs(null))


@functools.lru_cache(maxsize=EXACT_UP_TO)
def _orderings(n: int) -> np.ndarray:
    """(n!, n) every ordering of ``n`` values."""
    return np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)


def _family_order(metrics: Sequence[Metric]) -> list[Metric]:
    """The metrics grouped by family (in the order of :data:`FAMILIES`), each family's metrics
    in their given order."""
    at = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(metrics, key=lambda m: at.get(m.family, len(FAMILIES)))


@dataclass
class MetricAgreement:
    """Whether the metrics of a comparison rank its methods the same way.

    Attributes:
        matrix: a pandas DataFrame (metrics x metrics, by name, grouped by family): the
            direction-adjusted rank correlation of each pair (+1: same ranking of the methods,
            -1: reversed); NaN where undefined (module docstring).
        methods: DataFrame of ints: the methods with a finite score on both metrics (the points a
            correlation over methods rests on; over samples: the most on any one sample).
        samples: DataFrame of ints: over ``"samples"``, the samples whose correlation is defined
            and averaged; over ``"methods"``, 0.
        spread: DataFrame: over ``"samples"``, the standard deviation of the per-sample
            correlations; NaN over ``"methods"``.
        p_value: DataFrame: over ``"methods"``, the two-sided permutation p-value of each
            correlation (exact up to :data:`EXACT_UP_TO` methods); NaN over ``"samples"``.
        metrics: the :class:`~xaikit.evaluate.registry.Metric` objects, in the matrix's order.
        kind: ``"spearman"`` or ``"kendall"``.
        over: ``"methods"`` or ``"samples"``.
        method_names: the methods compared.
        lines: the verdict, one line per pair of metrics of the same family that rank the
            methods oppositely (correlation < 0), most opposed first.
        skipped: metric name -> why it has no correlation with any other metric.
    """

    matrix: Any
    methods: Any
    samples: Any
    spread: Any
    p_value: Any
    metrics: list[Metric]
    kind: str
    over: str
    method_names: list[str]
    lines: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def symbol(self) -> str:
        """``"rho"`` (Spearman) or ``"tau"`` (Kendall)."""
        return _SYMBOL[self.kind]

    @property
    def note(self) -> str:
        """The verdict as one text: the disagreeing pairs (or that there are none), then the
        metrics left out and why."""
        out = list(self.lines)
        if not out:
            out.append(
                "no two metrics of the same family rank the methods oppositely"
                if np.isfinite(self.matrix.to_numpy(dtype=np.float64)).any()
                else "no correlation is defined (too few methods with scores)"
            )
        out += [f"{name} not compared: {why}" for name, why in self.skipped.items()]
        return "\n".join(out)

    @property
    def pairs(self) -> Any:
        """A long DataFrame, one row per pair of different metrics (each pair once): ``metric_a``,
        ``metric_b``, ``family_a``, ``family_b``, the correlation (column ``rho`` or ``tau``),
        ``methods``, ``samples``, ``spread``, ``p_value``."""
        import pandas as pd

        rows = []
        names = [m.name for m in self.metrics]
        for i, j in itertools.combinations(range(len(names)), 2):
            a, b = names[i], names[j]
            rows.append(
                {
                    "metric_a": a,
                    "metric_b": b,
                    "family_a": self.metrics[i].family,
                    "family_b": self.metrics[j].family,
                    self.symbol: float(self.matrix.loc[a, b]),
                    "methods": int(self.methods.loc[a, b]),
                    "samples": int(self.samples.loc[a, b]),
                    "spread": float(self.spread.loc[a, b]),
                    "p_value": float(self.p_value.loc[a, b]),
                }
            )
        columns = ["metric_a", "metric_b", "family_a", "family_b", self.symbol]
        return pd.DataFrame(rows, columns=[*columns, "methods", "samples", "spread", "p_value"])

    def figure(self, path: str | os.PathLike[str] | None = None, dpi: float = 96) -> Any:
        """The matrix as a heatmap, metrics grouped by family (blue: same ranking, red: reversed,
        grey: undefined), each cell's value written in it
        (:func:`xaikit.viz.agreement_plot.paint_agreement`); the metrics without any correlation
        (:attr:`skipped`) are left out and named, with the reason, in the line under it. Written
        to ``path`` when given. Returns the figure."""
        from xaikit.viz.agreement_plot import paint_agreement

        counts = self.methods.to_numpy(dtype=np.int64)
        off = ~np.eye(len(self.metrics), dtype=bool) & np.isfinite(self.matrix.to_numpy(dtype=np.float64))
        rest = sorted({int(c) for c in counts[off]})
        if self.over == "methods":
            basis = f"the ranking of {len(self.method_names)} methods by mean score"
            if rest and rest != [len(self.method_names)]:
                basis += f" (a pair's methods with both scores: {', '.join(map(str, rest))})"
        else:
            most = int(self.samples.to_numpy(dtype=np.int64).max(initial=0))
            basis = f"each sample's ranking of the methods, averaged over up to {most} samples"
        legend = (
            f"{'Spearman ρ' if self.kind == 'spearman' else 'Kendall τ'} between metrics, over {basis}; "
            "lower-is-better metrics negated, so +1 = same order of the methods. Grey: undefined "
            f"(fewer than {MIN_METHODS} methods with scores, or a metric the same for all)."
        )
        shown = [i for i, m in enumerate(self.metrics) if m.name not in self.skipped]
        if self.skipped:
            left = [f"{m.label} ({self.skipped[m.name]})" for m in self.metrics if m.name in self.skipped]
            legend += f" Not shown: {'; '.join(left)}."
        return paint_agreement(
            self.matrix.to_numpy(dtype=np.float64)[np.ix_(shown, shown)],
            [self.metrics[i].label for i in shown],
            [self.metrics[i].family for i in shown],
            legend=legend,
            save_path=path,
            dpi=dpi,
        )

    def __repr__(self) -> str:
        return (
            f"MetricAgreement(kind={self.kind!r}, over={self.over!r}, methods={self.method_names})\n"
            f"{self.matrix.round(2)}\n{self.note}"
        )


def _scores_over_methods(result: Any, metrics: Sequence[Metric]) -> np.ndarray:
    """(metrics, methods, 1) the mean scores of the table, direction-adjusted."""
    table = result.table.set_index("method").loc[list(result.maps)]
    values = np.stack([table[m.name].to_numpy(dtype=np.float64) for m in metrics])
    return _adjust(values, metrics)[:, :, None]


def _scores_over_samples(result: Any, metrics: Sequence[Metric]) -> np.ndarray:
    """(metrics, methods, samples) the per-sample scores, direction-adjusted."""
    methods = list(result.maps)
    batch = len(result.targets)
    ps = result.per_sample
    wide = ps.pivot_table(index=["metric", "method"], columns="sample", values="score", dropna=False)
    out = np.full((len(metrics), len(methods), batch), np.nan)
    for i, m in enumerate(metrics):
        for j, method in enumerate(methods):
            if (m.name, method) in wide.index:
                row = wide.loc[(m.name, method)]
                out[i, j, row.index.to_numpy(dtype=np.int64)] = row.to_numpy(dtype=np.float64)
    return _adjust(out, metrics)


def _adjust(values: np.ndarray, metrics: Sequence[Metric]) -> np.ndarray:
    """Negate the lower-is-better metrics' scores (axis 0), so higher is better for all."""
    sign = np.array([1.0 if m.higher_is_better else -1.0 for m in metrics])
    return values * sign.reshape(-1, *([1] * (values.ndim - 1)))


def _fmt(value: float) -> str:
    """Two significant digits at most (a correlation over a handful of methods has no more)."""
    return f"{value:.2g}" if value != 0 else "0"


def metric_agreement(
    result: Any, kind: str = "spearman", over: str = "methods", min_methods: int = MIN_METHODS
) -> MetricAgreement:
    """Whether the metrics of a comparison rank its methods the same way (the module docstring).

    Args:
        result: a :class:`~xaikit.evaluate.CompareResult`.
        kind: ``"spearman"`` (default) or ``"kendall"`` (τ-b).
        over: ``"methods"`` (default: the ranking of the methods by mean score, as in the table)
            or ``"samples"`` (each sample's ranking, the correlations averaged over samples).
        min_methods: the fewest methods with a finite score on both metrics for a correlation
            (at least 3: two points always correlate at ±1).

    Returns:
        A :class:`MetricAgreement`.
    """
    import pandas as pd

    check_choice(kind, "kind", KINDS)
    check_choice(over, "over", OVER)
    if isinstance(min_methods, bool) or not isinstance(min_methods, (int, np.integer)):
        raise XaikitTypeError(f"min_methods must be an int >= 3; got {describe(min_methods)}")
    if min_methods < 3:
        raise XaikitValueError(
            f"min_methods must be >= 3 (two methods always correlate at +1 or -1); got {min_methods}"
        )
    metrics = _family_order(result.metrics)
    methods = list(result.maps)
    scores = (_scores_over_methods if over == "methods" else _scores_over_samples)(result, metrics)
    k, _, batch = scores.shape
    rho = np.full((k, k), np.nan)
    n_methods = np.zeros((k, k), dtype=np.int64)
    n_samples = np.zeros((k, k), dtype=np.int64)
    spread = np.full((k, k), np.nan)
    p = np.full((k, k), np.nan)
    finite = np.isfinite(scores)
    for i, j in itertools.combinations_with_replacement(range(k), 2):
        ok = finite[i] & finite[j]  # (methods, samples)
        n_methods[i, j] = n_methods[j, i] = int(ok.sum(axis=0).max(initial=0))
        values = np.full(batch, np.nan)
        for pattern in np.unique(ok, axis=1).T:  # the samples sharing one set of methods at once
            if pattern.sum() < min_methods:
                continue
            cols = np.flatnonzero((ok == pattern[:, None]).all(axis=0))
            a, b = scores[i][np.ix_(pattern, cols)].T, scores[j][np.ix_(pattern, cols)].T
            values[cols] = _rowwise(a, b, kind)
            if over == "methods" and i != j and np.isfinite(values[0]):
                p[i, j] = p[j, i] = _p_value(a[0], b[0], float(values[0]), kind)
        defined = values[np.isfinite(values)]
        if defined.size:
            rho[i, j] = rho[j, i] = float(defined.mean())
            if over == "samples":
                n_samples[i, j] = n_samples[j, i] = defined.size
                if defined.size > 1:
                    spread[i, j] = spread[j, i] = float(defined.std(ddof=1))
    names = [m.name for m in metrics]

    def frame(values: np.ndarray) -> Any:
        return pd.DataFrame(values, index=pd.Index(names, name="metric"), columns=names)

    skipped = {}
    for i, m in enumerate(metrics):
        if np.isfinite(rho[i]).any():
            continue
        finite = np.isfinite(scores[i]).any(axis=1) if over == "samples" else np.isfinite(scores[i, :, 0])
        count = int(finite.sum())
        if count < min_methods:
            skipped[m.name] = f"a score for {count} of {len(methods)} methods (fewer than {min_methods})"
        else:
            skipped[m.name] = "the same score for every method" + (
                " on every sample" if over == "samples" else ""
            )
    symbol = _SYMBOL[kind]
    lines = []
    found = [
        (rho[i, j], i, j)
        for i, j in itertools.combinations(range(k), 2)
        if metrics[i].family == metrics[j].family and rho[i, j] < 0
    ]
    for r, i, j in sorted(found):
        head = f"{names[i]} and {names[j]} disagree on this model: "
        if over == "methods":
            n = int(n_methods[i, j])
            pairs = f"{n * (n - 1) // 2} pairs of methods, " if kind == "kendall" else ""
            lines.append(f"{head}{symbol} = {_fmt(r)} over {n} methods ({pairs}p = {_fmt(p[i, j])})")
        else:
            lines.append(
                f"{head}mean per-sample {symbol} = {_fmt(r)} over {n_samples[i, j]} samples of up to "
                f"{n_methods[i, j]} methods (spread {_fmt(spread[i, j]) if np.isfinite(spread[i, j]) else 'n/a'})"
            )
    return MetricAgreement(
        frame(rho), frame(n_methods), frame(n_samples), frame(spread), frame(p), metrics, kind, over,
        methods, lines, skipped,
    )  # fmt: skip
