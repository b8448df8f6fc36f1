"""``compare``: which explanation can you trust? Several methods, every metric, one call.

Each method's maps are computed once (:func:`xaikit.xai.explain`, for the same pinned target
classes) and handed to every metric of :data:`~xaikit.evaluate.registry.METRICS` that scores
maps; the metrics that re-explain (randomization) explain again under their own conditions.
The result is a table (one row per method: the mean score of each metric, its rank, the mean
rank, the seconds the maps took), the per-sample scores, one verdict line per method, and a
figure of the methods side by side.

Verdict rules (:func:`verdicts`), in this order, joined by "; ":

1. *Best / worst by family*: for each family of metrics (faithfulness, robustness, complexity,
   localization) and each metric in it with a finite mean for at least two methods and not
   the same for all, the method ranked first is "most faithful by deletion AUC", the last
   "least faithful by ..." (ties share the words); the metrics of one family and direction
   are listed together.
2. *Randomization*, judged against the method's own chance level: ρ, the Spearman correlation
   of the trained model's |maps| with those of the model with every weight re-drawn (the
   ``randomization`` column), never falls to 0, because the maps of *any* network share the
   image's edges; ``randomization baseline`` measures how far it can fall: ρ between the maps of
   two copies of the model with every weight re-drawn (seeds ``seed + 1`` and ``seed + 2``: the
   baseline of :func:`~xaikit.evaluate.randomization_test` with the same seed, bit for bit).
   The method "passes the randomization check" when ρ <= baseline + tolerance: its maps are no
   closer to a random model's than two random models' maps are to each other, so what the
   trained weights added is gone. The tolerance is :data:`RANDOMIZATION_MARGIN` (0.05), or twice
   the standard error of the per-sample ρ - baseline when that is larger (few or noisy
   samples: a difference they cannot tell apart is no difference). Above it, or at ρ >=
   :data:`RANDOMIZATION_FAIL` (0.9) whatever the baseline, the method "fails the randomization
   check" (the line gives both numbers). Without a baseline (a model without weights) it is not
   judged.
3. *Completeness*: a path method whose attributions miss f(x) - f(baseline) by more than
   :data:`COMPLETENESS_GAP` (0.05 in the model's output units) on average "is incomplete".
4. Custom maps: "custom maps: no re-explaining metric". A method with none of the above is
   "in the middle on every metric".
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    check_method_options,
    finite_mean,
    fixed_object,
    host,
    input_layout,
    pin_scored,
    spatial_shape,
    spearman,
    to_spatial,
)
from xaikit.evaluate._conventions import public
from xaikit.evaluate._rerun import randomized_maps
from xaikit.evaluate.agreement import MIN_METHODS, MetricAgreement, metric_agreement
from xaikit.evaluate.registry import FAMILIES, METRICS, Metric, MetricContext, _has_weights
from xaikit.xai.internal import check_max_batch, prepare
from xaikit.xai.registry import canonical, method_names

__all__ = [
    "BASELINE_COLUMN",
    "COMPLETENESS_GAP",
    "RANDOMIZATION_FAIL",
    "RANDOMIZATION_MARGIN",
    "CompareResult",
    "compare",
    "verdicts",
]

#: a fully randomized model's maps at least this similar (Spearman ρ of |maps|) fail the check
RANDOMIZATION_FAIL = 0.9
#: the least tolerance of ρ above the random-model baseline that still passes (the per-sample
#: spread can make it larger: see :func:`verdicts` and docs/evaluate.md, "Reading the verdicts")
RANDOMIZATION_MARGIN = 0.05
#: the table's column of the randomization check's chance level (not a metric: not ranked)
BASELINE_COLUMN = "randomization baseline"
#: mean |sum(attributions) - (f(x) - f(baseline))| above this is called incomplete
COMPLETENESS_GAP = 0.05

_RESERVED = {
    "target": "compare's target argument",
    "method": "the methods argument",
    "seed": "compare's seed argument",
    "max_batch": "compare's max_batch argument",
    "framework": "compare's framework argument",
    "return_delta": "nothing (compare reports the delta of every method that has one)",
}
_WORDS = {
    "faithfulness": ("most faithful", "least faithful"),
    "robustness": ("most robust", "least robust"),
    "complexity": ("most concise", "least concise"),
    "localization": ("best localized", "worst localized"),
}


@dataclass
class CompareResult:
    """What :func:`compare` measured.

    Attributes:
        table: a pandas DataFrame, one row per method: ``method``, the mean score of each metric
            (NaN-aware), ``rank <metric>`` (1 = best, by the metric's direction; ties share the
            lower rank), ``mean rank`` and ``seconds`` (the wall time of the method's maps).
        per_sample: a long DataFrame (``method``, ``metric``, ``sample``, ``score``).
        verdicts: method -> one plain-language line (see the module docstring for the rules).
        maps: method -> its raw maps.
        targets: (B,) the classes explained and scored.
        metrics: the :class:`~xaikit.evaluate.registry.Metric` objects, in table order.
    """

    table: Any
    per_sample: Any
    verdicts: dict[str, str]
    maps: dict[str, np.ndarray]
    targets: np.ndarray
    metrics: list[Metric]
    x: np.ndarray = field(repr=False)
    channel_axis: int | None = None
    display: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    samples_in_figure: int = 4

    @property
    def note(self) -> str:
        """The verdicts as one text, a line per method."""
        return "\n".join(f"{method}: {line}" for method, line in self.verdicts.items())

    def figure(
        self, path: str | os.PathLike[str] | None = None, dpi: float = 96, cell_size: float = 1.7
    ) -> Any:
        """Methods side by side on the first ``samples_in_figure`` samples (with a colour bar),
        and under them a table of every metric's mean score per method, each cell coloured by
        the method's rank (:func:`xaikit.viz.compare_plot.paint_comparison`); written to
        ``path`` when given. Returns the figure."""
        from xaikit.viz.compare_plot import ScoreTable, paint_comparison

        n = min(self.samples_in_figure, len(self.targets))
        image = self.x if self.channel_axis is None else np.moveaxis(self.x, self.channel_axis, -1)
        methods = list(self.maps)
        t = self.table.set_index("method").loc[methods]
        rows = [f"{m.label} {'↑' if m.higher_is_better else '↓'}" for m in self.metrics]
        values = [t[m.name].to_numpy(dtype=np.float64) for m in self.metrics]
        ranks = [t[f"rank {m.name}"].to_numpy(dtype=np.float64) for m in self.metrics]
        rows.append("mean rank ↓")
        values.append(t["mean rank"].to_numpy(dtype=np.float64))
        ranks.append(_ranks(values[-1], higher_is_better=False))
        samples = len(self.targets)
        scores = ScoreTable(
            rows, methods, np.array(values), np.array(ranks),
            legend=f"↑ higher is better, ↓ lower is better. Each cell: the method's mean score over "
            f"{samples} sample{'s' if samples != 1 else ''}; its colour: the method's rank on that row "
            "(1 = best); grey: no score.",
        )  # fmt: skip
        return paint_comparison(
            image[:n], {m: d[:n] for m, d in self.display.items()}, save_path=path, dpi=dpi,
            cell_size=cell_size, scores=scores,
            row_titles=[f"#{i}" + (f", class {int(c)}" if c >= 0 else "") for i, c in enumerate(self.targets[:n])],
            map_label="|map|, scaled per sample (1 = its 99th percentile)",
        )  # fmt: skip

    def metric_agreement(
        self, kind: str = "spearman", over: str = "methods", min_methods: int = MIN_METHODS
    ) -> MetricAgreement:
        """Do the metrics agree? The (metrics x metrics) matrix of rank correlations between the
        metrics' rankings of the methods, direction-adjusted (+1: the same order of the methods),
        with the methods (and samples) each rests on and a verdict naming the metrics of one
        family that rank the methods oppositely (:mod:`xaikit.evaluate.agreement`).

        Args:
            kind: ``"spearman"`` or ``"kendall"`` (τ-b).
            over: ``"methods"`` (default: the methods ranked by mean score, the ranking the table
                shows; coarse with few methods, so each cell has its count and an exact
                permutation p-value) or ``"samples"`` (each sample's ranking, averaged).
            min_methods: the fewest methods with both scores for a correlation (>= 3).

        Returns:
            A :class:`~xaikit.evaluate.agreement.MetricAgreement`: ``.matrix``, ``.methods``,
            ``.p_value``, ``.lines``, ``.figure()``.
        """
        return metric_agreement(self, kind=kind, over=over, min_methods=min_methods)

    def __repr__(self) -> str:
        return f"CompareResult(methods={list(self.maps)}, metrics={[m.name for m in self.metrics]})\n{self.table}"


def _methods(methods: Any) -> list[tuple[str, str | None, Any]]:
    """(label, canonical method or None, custom maps or None) per entry."""
    if isinstance(methods, str):
        methods = [methods]
    if isinstance(methods, Mapping):
        items = list(methods.items())
    elif isinstance(methods, Sequence):  # names, and {label: maps or name} dicts among them
        items = [kv for m in methods for kv in (m.items() if isinstance(m, Mapping) else [(m, m)])]
    else:
        raise XaikitTypeError(
            f"methods must be a list of method names or a dict label -> method name or maps; got {describe(methods)}"
        )
    if not items:
        raise XaikitValueError("methods must name at least one method")
    out: list[tuple[str, str | None, Any]] = []
    for label, value in items:
        if not isinstance(label, str):
            raise XaikitTypeError(f"method labels must be strings; got {describe(label)}")
        if isinstance(value, str):
            try:
                name = canonical(value)
            except XaikitValueError:
                raise XaikitValueError(
                    f"methods: unknown method {value!r}; the methods are {', '.join(method_names())} "
                    "(or give maps as {label: array})"
                ) from None
            out.append((label, name, None))
        else:
            out.append((label, None, value))
    labels = [label for label, _, _ in out]
    if len(set(labels)) != len(labels):
        raise XaikitValueError(f"methods must not repeat a label; got {labels}")
    return out


def _metrics(metrics: Any, mask: Any) -> list[Metric]:
    if metrics is None:
        return [m for m in METRICS.values() if m.cheap and (not m.needs_mask or mask is not None)]
    if isinstance(metrics, (str, Metric)):
        metrics = [metrics]
    if not isinstance(metrics, Sequence) or not metrics:
        raise XaikitTypeError(
            f"metrics must be None or a non-empty list of metric names; got {describe(metrics)}"
        )
    out = []
    for m in metrics:
        if isinstance(m, Metric):
            out.append(m)
        elif isinstance(m, str) and m in METRICS:
            out.append(METRICS[m])
        else:
            raise XaikitValueError(f"metrics: unknown metric {m!r}; the metrics are {', '.join(METRICS)}")
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise XaikitValueError(f"metrics must not repeat a name; got {names}")
    masked = [m.name for m in out if m.needs_mask]
    if masked and mask is None:
        raise XaikitValueError(
            f"metrics {masked} need ground-truth masks: pass mask= (B, H, W) booleans, or leave them out"
        )
    return out


def _options(method_options: Any, entries: list[tuple[str, str | None, Any]]) -> dict[str, dict[str, Any]]:
    if method_options is None:
        return {}
    if not isinstance(method_options, Mapping):
        raise XaikitTypeError(
            f"method_options must be a dict method -> options; got {describe(method_options)}"
        )
    named = {label: name for label, name, _ in entries if name is not None}
    out: dict[str, dict[str, Any]] = {}
    given_by: dict[str, Any] = {}  # label -> the method_options key its options came from
    for key, opts in method_options.items():
        if key in named:  # a label: that method alone
            hits = [key]
            unkeyed = [
                lb for lb, name in named.items() if name == key and lb != key and lb not in method_options
            ]
            if unkeyed:
                raise XaikitValueError(
                    f"method_options: {key!r} is the label of one method and the method name of {unkeyed}: "
                    "give each of those its own entry under its label (an empty dict for no options)"
                )
        else:  # a method name: every label of that method
            hits = [label for label, name in named.items() if key == name]
        if not hits:
            raise XaikitValueError(
                f"method_options: {key!r} is not one of the compared methods {list(named)}"
            )
        for label in hits:
            if label in given_by:
                raise XaikitValueError(
                    f"method_options: {given_by[label]!r} and {key!r} both give the options of method "
                    f"{label!r} ({named[label]}); give them under one key"
                )
            given_by[label] = key
            out[label] = check_method_options(opts, _RESERVED)
    return out


def _ranks(values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Rank 1 = best among the finite values (ties share the lower rank); NaN stays NaN."""
    out = np.full(values.shape, np.nan)
    ok = np.isfinite(values)
    if ok.any():
        v = values[ok] * (-1.0 if higher_is_better else 1.0)
        out[ok] = [1 + int(np.sum(v < a)) for a in v]
    return out


def verdicts(
    table: Any, metrics: Sequence[Metric], custom: Sequence[str] = (), per_sample: Any = None
) -> dict[str, str]:
    """One plain-language line per method from a comparison table (rules: the module docstring).

    Args:
        table: the ``table`` of a :class:`CompareResult`.
        metrics: its metrics.
        custom: the labels of methods given as maps.
        per_sample: its ``per_sample`` (for the randomization check's tolerance: twice the
            standard error of the per-sample ρ - baseline, at least :data:`RANDOMIZATION_MARGIN`);
            None: the margin alone.

    Returns:
        method -> verdict line.

    Example:
        >>> import pandas as pd
        >>> from xaikit.evaluate.registry import METRICS
        >>> t = pd.DataFrame({"method": ["a", "b"], "deletion_auc": [0.1, 0.3], "randomization": [0.87, 0.2],
        ...                   "randomization baseline": [0.77, 0.25]})
        >>> v = verdicts(t, [METRICS["deletion_auc"], METRICS["randomization"]])
        >>> v["a"]
        'most faithful by deletion AUC; fails the randomization check (rho 0.87 once the weights are destroyed, above the 0.77 of two random models by more than 0.05)'
        >>> v["b"]
        'least faithful by deletion AUC; passes the randomization check (rho 0.20 once the weights are destroyed; two random models: 0.25)'
    """
    methods = list(table["method"])
    parts: dict[str, list[str]] = {m: [] for m in methods}
    for family in FAMILIES:
        if family not in _WORDS:
            continue
        best: dict[str, list[str]] = {m: [] for m in methods}
        worst: dict[str, list[str]] = {m: [] for m in methods}
        for metric in (m for m in metrics if m.family == family):
            values = np.asarray(table[metric.name], dtype=np.float64)
            ok = np.isfinite(values)
            if ok.sum() < 2 or np.ptp(values[ok]) == 0:
                continue
            top = np.nanmax(values) if metric.higher_is_better else np.nanmin(values)
            low = np.nanmin(values) if metric.higher_is_better else np.nanmax(values)
            for m, v in zip(methods, values):
                if v == top:
                    best[m].append(metric.label)
                elif v == low:
                    worst[m].append(metric.label)
        good, bad = _WORDS[family]
        for m in methods:
            if best[m]:
                parts[m].append(f"{good} by {', '.join(best[m])}")
            if worst[m]:
                parts[m].append(f"{bad} by {', '.join(worst[m])}")
    names = {m.name for m in metrics}
    for i, m in enumerate(methods):
        if "randomization" in names:
            rho = float(table["randomization"].iloc[i])
            base = float(table[BASELINE_COLUMN].iloc[i]) if BASELINE_COLUMN in table else float("nan")
            line = _randomization_verdict(rho, base, _tolerance(per_sample, m))
            if line:
                parts[m].append(line)
        if "completeness_delta" in names:
            gap = float(table["completeness_delta"].iloc[i])
            if np.isfinite(gap) and gap > COMPLETENESS_GAP:
                parts[m].append(f"incomplete (attributions miss f(x) - f(baseline) by {gap:.3f} on average)")
        if m in custom and any(x.re_explains for x in metrics):
            parts[m].append("custom maps: no re-explaining metric")
    return {m: "; ".join(p) if p else "in the middle on every metric" for m, p in parts.items()}


def _randomization_verdict(rho: float, base: float, tolerance: float = RANDOMIZATION_MARGIN) -> str:
    """The randomization part of a verdict line (rule 2 of the module docstring); "" without ρ."""
    if not np.isfinite(rho):
        return ""
    random = f"two random models: {base:.2f}" if np.isfinite(base) else "no random-model baseline"
    if rho >= RANDOMIZATION_FAIL:
        return f"fails the randomization check (maps barely change when the weights are destroyed: rho {rho:.2f}; {random})"
    if not np.isfinite(base):
        return f"randomization not judged (rho {rho:.2f} once the weights are destroyed; no random-model baseline)"
    if rho > base + tolerance:
        return (
            f"fails the randomization check (rho {rho:.2f} once the weights are destroyed, above the "
            f"{base:.2f} of two random models by more than {tolerance:.2f})"
        )
    return f"passes the randomization check (rho {rho:.2f} once the weights are destroyed; {random})"


def _tolerance(per_sample: Any, method: str) -> float:
    """How far ρ may pass the baseline: :data:`RANDOMIZATION_MARGIN`, or twice the standard error
    of the method's per-sample ρ - baseline when that is larger (few or noisy samples)."""
    if per_sample is None:
        return RANDOMIZATION_MARGIN
    rows = per_sample[per_sample["method"] == method]
    rho = rows[rows["metric"] == "randomization"].set_index("sample")["score"]
    base = rows[rows["metric"] == BASELINE_COLUMN].set_index("sample")["score"]
    diff = (rho - base).to_numpy(dtype=np.float64)
    diff = diff[np.isfinite(diff)]
    if diff.size < 2:
        return RANDOMIZATION_MARGIN
    return max(RANDOMIZATION_MARGIN, 2.0 * float(diff.std(ddof=1)) / float(np.sqrt(diff.size)))


def _random_baseline(ctx: MetricContext) -> np.ndarray:
    """(B,) Spearman ρ of |maps| between two copies of the model with every layer re-drawn
    (seeds ``seed + 1`` and ``seed + 2``, the method's noise seeded by ``seed``): the baseline of
    :func:`~xaikit.evaluate.randomization_test`; NaN for custom maps and weightless models."""
    if ctx.method is None or not _has_weights(ctx):
        return ctx.nan()
    bk = get_backend(ctx.model, ctx.framework)
    copies = [
        randomized_maps(
            bk, ctx.model, ctx.x, ctx.target, ctx.method_run(ctx.seed + k), layers=None, noise_seed=ctx.seed
        )[0]
        for k in (1, 2)
    ]
    spatial = [to_spatial(c, ctx.spatial, ctx.batch, channels=ctx.channels) for c in copies]
    return spearman(spatial[0], spatial[1])


@public(old_order=("model", "x", "methods", "metrics", "mask", "target"))
def compare(
    model: Any,
    x: Any,
    methods: Any = ("vanilla", "integrated"),
    *,
    metrics: Any = None,
    mask: Any = None,
    target: Any = None,
    samples_in_figure: int = 4,
    seed: int = 0,
    max_batch: int | str = "auto",
    framework: str | None = None,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> CompareResult:
    """Score several explanation methods with every metric, in one call.

    Args:
        model: a torch or Keras model returning (batch, classes) scores.
        x: the input batch, in the model's layout (numpy or tensor).
        methods: method names (any :func:`xaikit.xai.explain` takes), or a dict label -> method
            name or custom maps (``{"random": np.random.rand(B, H, W)}``: scored by every metric
            of maps; NaN for the ones that re-explain); a list may hold such dicts among the
            names (``["vanilla", {"random": maps}]``).
        metrics: metric names of :data:`~xaikit.evaluate.registry.METRICS` (or
            :class:`~xaikit.evaluate.registry.Metric` objects); None = every cheap metric
            without a mask, plus the mask metrics when ``mask`` is given.
        mask: ground-truth object masks (B, H, W) (booleans or 0/1), for the localization metrics.
        target: the classes to explain and score (None = the model's predictions, pinned once
            for every method).
        samples_in_figure: samples painted by :meth:`CompareResult.figure`.
        seed: the methods' noise and the metrics' draws.
        max_batch: rows per forward pass, or ``"auto"``.
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        method_options: the options of the methods, by method (label or name), e.g.
            ``{"integrated": {"nsamples": 32, "baseline": "black"}}`` (several methods, so one
            dict each; a single metric's ``method_options`` is the inner dict). A key that is a
            label gives that method's options; any other key is a method name and gives the
            options of every method of that name. One method's options under both its label and
            its method name are refused (neither silently wins), and so is a label that is also
            the method name of other labels without an entry of their own.

    Returns:
        A :class:`CompareResult`: ``.table``, ``.per_sample``, ``.verdicts``, ``.maps``,
        ``.figure()``.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 3))
        >>> r = compare(model, torch.rand(2, 3, 4, 4), ["vanilla", "input_x_gradient"],
        ...             metrics=["deletion_auc", "sparseness"])
        >>> list(r.table.columns)
        ['method', 'deletion_auc', 'sparseness', 'rank deletion_auc', 'rank sparseness', 'mean rank', 'seconds']
    """
    import pandas as pd

    from xaikit.xai.internal import explain_with_delta, to_display

    entries = _methods(methods)
    chosen = _metrics(metrics, mask)
    options = _options(method_options, entries)
    samples_in_figure = check_int(samples_in_figure, "samples_in_figure", 1)
    seed = check_int(seed, "seed", 0)
    max_batch = check_max_batch(max_batch)
    bk = get_backend(model, framework)
    shape, channel_axis = input_layout(x, bk)
    batch = shape[0]
    spatial = spatial_shape(shape, channel_axis)
    channels = shape[channel_axis] if channel_axis is not None else None
    masks = None
    if mask is not None:
        from xaikit.evaluate.localization import _masks

        masks = _masks(mask, batch)
        if masks.shape != (batch, *spatial):
            raise XaikitValueError(
                f"mask must have one mask per sample of the inputs' spatial shape {(batch, *spatial)}; "
                f"got {describe(mask)}"
            )
    inp = prepare(bk, model, [x], ["x"])
    with bk.inference(model):
        _, spec, targets = pin_scored(inp, target, 0)
    # a target object: every method and metric explains and scores what it resolved to here
    explained = None if spec is None else fixed_object(target, spec)
    x_host = host(x, "x")

    maps: dict[str, np.ndarray] = {}
    display: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    scores: dict[str, dict[str, np.ndarray]] = {}
    baselines: dict[str, np.ndarray] = {}
    for label, name, custom in entries:
        opts = options.get(label, {})
        delta = None
        t0 = time.perf_counter()
        if name is None:
            raw = host(custom, f"methods[{label!r}]")
        else:
            raw, delta = explain_with_delta(
                model, x, targets if explained is None else explained, name, framework=framework, seed=seed,
                max_batch=max_batch, **opts,
            )  # fmt: skip
            raw = np.asarray(raw)
        seconds[label] = time.perf_counter() - t0
        ctx = MetricContext(
            model, x, name, label, raw, targets, spatial, channels, masks, seed, max_batch, framework,
            dict(opts), None if delta is None else np.asarray(delta), explained,
        )  # fmt: skip
        try:
            magnitudes = ctx.magnitudes
        except XaikitValueError as exc:
            raise XaikitValueError(f"methods[{label!r}]: {exc}") from None
        maps[label] = raw
        display[label] = to_display(magnitudes, None)
        scores[label] = {}
        for metric in chosen:
            s = np.asarray(metric.score(ctx), dtype=np.float64).reshape(-1)
            if s.shape != (batch,):
                raise XaikitValueError(
                    f"metric {metric.name!r} returned {s.shape[0]} scores for {batch} samples"
                )
            scores[label][metric.name] = s
        if any(m.name == "randomization" for m in chosen):
            baselines[label] = _random_baseline(ctx)

    labels = [label for label, _, _ in entries]
    table = pd.DataFrame({"method": labels})
    for metric in chosen:
        col = np.array([finite_mean(scores[label][metric.name]) for label in labels])
        table[metric.name] = col
    for metric in chosen:
        table[f"rank {metric.name}"] = _ranks(
            np.asarray(table[metric.name], dtype=np.float64), metric.higher_is_better
        )
    if baselines:
        at = list(table.columns).index("randomization") + 1
        table.insert(at, BASELINE_COLUMN, [finite_mean(baselines[label]) for label in labels])
    rank_cols = table[[f"rank {m.name}" for m in chosen]].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        table["mean rank"] = [finite_mean(r) for r in rank_cols]
    table["seconds"] = [seconds[label] for label in labels]
    for label in baselines:  # the chance level beside the scores (not a metric: never ranked)
        scores[label][BASELINE_COLUMN] = baselines[label]
    per_sample = pd.DataFrame(
        [
            {"method": label, "metric": name, "sample": i, "score": float(v)}
            for label in labels
            for name in scores[label]
            for i, v in enumerate(scores[label][name])
        ],
        columns=["method", "metric", "sample", "score"],
    )
    custom_labels = [label for label, name, _ in entries if name is None]
    lines = verdicts(table, chosen, custom_labels, per_sample)
    return CompareResult(
        table, per_sample, lines, maps, targets, chosen, x_host, channel_axis, display, samples_in_figure
    )
