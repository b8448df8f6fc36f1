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
2. *Randomization*: a fully randomized model whose maps keep a Spearman ρ of at least
   :data:`RANDOMIZATION_FAIL` (0.9) with the trained model's maps "fails the randomization
   check (maps barely change when the weights are destroyed: rho 0.93)"; below, it "passes"
   with its ρ. ρ does not fall to 0 for any method (maps share the image's edges: see
   :func:`~xaikit.evaluate.randomization_test`'s baseline), so read small differences with care.
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
from xaikit.evaluate._common import check_method_options, host, input_layout, spatial_shape
from xaikit.evaluate.completeness import PATH_METHODS
from xaikit.evaluate.registry import FAMILIES, METRICS, Metric, MetricContext
from xaikit.xai._engine import check_max_batch
from xaikit.xai.methods import pin_targets, prepare
from xaikit.xai.names import ALL_METHODS, canonical

__all__ = ["COMPLETENESS_GAP", "RANDOMIZATION_FAIL", "CompareResult", "compare", "verdicts"]

#: a fully randomized model's maps at least this similar (Spearman ρ of |maps|) fail the check
RANDOMIZATION_FAIL = 0.9
#: mean |sum(attributions) - (f(x) - f(baseline))| above this is called incomplete
COMPLETENESS_GAP = 0.05

_RESERVED = {
    "target": "compare's target argument",
    "method": "the methods argument",
    "seed": "compare's seed argument",
    "max_batch": "compare's max_batch argument",
    "framework": "compare's framework argument",
    "return_delta": "nothing (compare asks for it for path methods)",
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
        """Methods side by side on the first ``samples_in_figure`` samples, each map titled with
        its scores on that sample; written to ``path`` when given. Returns the figure."""
        from xaikit.viz.compare_plot import paint_comparison

        n = min(self.samples_in_figure, len(self.targets))
        image = self.x if self.channel_axis is None else np.moveaxis(self.x, self.channel_axis, -1)
        per = self.per_sample
        titles: dict[str, list[str]] = {}
        for method in self.maps:
            rows = []
            for i in range(n):
                part = per[(per["method"] == method) & (per["sample"] == i)]
                bits = [
                    f"{_short(m)} {v:.2f}" for m, v in zip(part["metric"], part["score"]) if np.isfinite(v)
                ]
                rows.append("\n".join(" ".join(bits[k : k + 3]) for k in range(0, len(bits), 3)))
            titles[method] = rows
        return paint_comparison(
            image[:n], {m: d[:n] for m, d in self.display.items()}, titles, save_path=path, dpi=dpi,
            cell_size=cell_size,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"CompareResult(methods={list(self.maps)}, metrics={[m.name for m in self.metrics]})\n{self.table}"


_SHORT = {
    "deletion_auc": "del",
    "insertion_auc": "ins",
    "completeness_delta": "|Δ|",
    "sparseness": "gini",
    "complexity": "H",
    "randomization": "ρ",
    "localization_energy": "E",
    "pointing_game": "pg",
    "road": "road",
    "infidelity": "infd",
    "faithfulness_correlation": "fcor",
    "max_sensitivity": "maxS",
    "avg_sensitivity": "avgS",
    "local_lipschitz": "lip",
    "random_logit": "rlog",
    "efficient_mprt": "eMPRT",
    "smooth_mprt": "sMPRT",
    "relevance_rank_accuracy": "rra",
}


def _readable(metric: str) -> str:
    """``deletion_auc`` -> ``deletion AUC``."""
    return " ".join("AUC" if w == "auc" else w for w in metric.split("_"))


def _short(metric: str) -> str:
    return _SHORT.get(metric, metric[:6])


def _methods(methods: Any) -> list[tuple[str, str | None, Any]]:
    """(label, canonical method or None, custom maps or None) per entry."""
    if isinstance(methods, str):
        methods = [methods]
    if isinstance(methods, Mapping):
        items = list(methods.items())
    elif isinstance(methods, Sequence):
        items = [(m, m) for m in methods]
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
                    f"methods: unknown method {value!r}; the methods are {', '.join(ALL_METHODS)} "
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
    for key, opts in method_options.items():
        hits = [label for label, name in named.items() if key in (label, name)]
        if not hits:
            raise XaikitValueError(
                f"method_options: {key!r} is not one of the compared methods {list(named)}"
            )
        for label in hits:
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


def verdicts(table: Any, metrics: Sequence[Metric], custom: Sequence[str] = ()) -> dict[str, str]:
    """One plain-language line per method from a comparison table (rules: the module docstring).

    Args:
        table: the ``table`` of a :class:`CompareResult`.
        metrics: its metrics.
        custom: the labels of methods given as maps.

    Returns:
        method -> verdict line.

    Example:
        >>> import pandas as pd
        >>> from xaikit.evaluate.registry import METRICS
        >>> t = pd.DataFrame({"method": ["a", "b"], "deletion_auc": [0.1, 0.3], "randomization": [0.95, 0.2]})
        >>> v = verdicts(t, [METRICS["deletion_auc"], METRICS["randomization"]])
        >>> v["a"]
        'most faithful by deletion AUC; fails the randomization check (maps barely change when the weights are destroyed: rho 0.95)'
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
                    best[m].append(metric.name)
                elif v == low:
                    worst[m].append(metric.name)
        good, bad = _WORDS[family]
        for m in methods:
            if best[m]:
                parts[m].append(f"{good} by {', '.join(map(_readable, best[m]))}")
            if worst[m]:
                parts[m].append(f"{bad} by {', '.join(map(_readable, worst[m]))}")
    names = {m.name for m in metrics}
    for i, m in enumerate(methods):
        if "randomization" in names:
            rho = float(table["randomization"].iloc[i])
            if np.isfinite(rho):
                if rho >= RANDOMIZATION_FAIL:
                    parts[m].append(
                        f"fails the randomization check (maps barely change when the weights are destroyed: rho {rho:.2f})"
                    )
                else:
                    parts[m].append(
                        f"passes the randomization check (rho {rho:.2f} once the weights are destroyed)"
                    )
        if "completeness_delta" in names:
            gap = float(table["completeness_delta"].iloc[i])
            if np.isfinite(gap) and gap > COMPLETENESS_GAP:
                parts[m].append(f"incomplete (attributions miss f(x) - f(baseline) by {gap:.3f} on average)")
        if m in custom and any(x.re_explains for x in metrics):
            parts[m].append("custom maps: no re-explaining metric")
    return {m: "; ".join(p) if p else "in the middle on every metric" for m, p in parts.items()}


def compare(
    model: Any,
    x: Any,
    methods: Any = ("vanilla", "integrated"),
    metrics: Any = None,
    mask: Any = None,
    target: Any = None,
    *,
    seed: int = 0,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    max_batch: int | str = "auto",
    framework: str | None = None,
    samples_in_figure: int = 4,
) -> CompareResult:
    """Score several explanation methods with every metric, in one call.

    Args:
        model: a torch or Keras model returning (batch, classes) scores.
        x: the input batch, in the model's layout (numpy or tensor).
        methods: method names (any :func:`xaikit.xai.explain` takes), or a dict label -> method
            name or custom maps (``{"random": np.random.rand(B, H, W)}``: scored by every metric
            of maps; NaN for the ones that re-explain).
        metrics: metric names of :data:`~xaikit.evaluate.registry.METRICS` (or
            :class:`~xaikit.evaluate.registry.Metric` objects); None = every cheap metric
            without a mask, plus the mask metrics when ``mask`` is given.
        mask: ground-truth object masks (B, H, W) (booleans or 0/1), for the localization metrics.
        target: the classes to explain and score (None = the model's predictions, pinned once
            for every method).
        seed: the methods' noise and the metrics' draws.
        method_options: method (label or name) -> its options, e.g.
            ``{"integrated": {"nsamples": 32, "baseline": "black"}}``.
        max_batch: rows per forward pass, or ``"auto"``.
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        samples_in_figure: samples painted by :meth:`CompareResult.figure`.

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

    from xaikit.xai import _display
    from xaikit.xai import saliency as _saliency

    entries = _methods(methods)
    chosen = _metrics(metrics, mask)
    options = _options(method_options, entries)
    samples_in_figure = check_int(samples_in_figure, "samples_in_figure", 1)
    seed = check_int(seed, "seed", 0)
    max_batch = check_max_batch(max_batch)
    bk = get_backend(model, framework)
    shape, caxis = input_layout(x, bk)
    batch = shape[0]
    spatial = spatial_shape(shape, caxis)
    channels = shape[caxis] if caxis is not None else None
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
        pinned, _ = pin_targets(inp, target, 0)
    targets = bk.to_numpy(pinned).astype(np.int64)
    x_host = host(x, "x")

    maps: dict[str, np.ndarray] = {}
    display: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    scores: dict[str, dict[str, np.ndarray]] = {}
    for label, name, custom in entries:
        opts = options.get(label, {})
        delta = None
        t0 = time.perf_counter()
        if name is None:
            raw = host(custom, f"methods[{label!r}]")
        else:
            out = _saliency.explain(
                model, x, target=targets, method=name, framework=framework, seed=seed, max_batch=max_batch,
                return_delta=name in PATH_METHODS, **opts,
            )  # fmt: skip
            raw, delta = out if name in PATH_METHODS else (out, None)
            raw = np.asarray(raw)
        seconds[label] = time.perf_counter() - t0
        ctx = MetricContext(
            model, x, name, label, raw, targets, spatial, channels, masks, seed, max_batch, framework,
            dict(opts), None if delta is None else np.asarray(delta),
        )  # fmt: skip
        try:
            mags = ctx.magnitudes
        except XaikitValueError as exc:
            raise XaikitValueError(f"methods[{label!r}]: {exc}") from None
        maps[label] = raw
        display[label] = _display.to_display(mags, None)
        scores[label] = {}
        for metric in chosen:
            s = np.asarray(metric.score(ctx), dtype=np.float64).reshape(-1)
            if s.shape != (batch,):
                raise XaikitValueError(
                    f"metric {metric.name!r} returned {s.shape[0]} scores for {batch} samples"
                )
            scores[label][metric.name] = s

    labels = [label for label, _, _ in entries]
    table = pd.DataFrame({"method": labels})
    for metric in chosen:
        col = np.array([_nanmean(scores[label][metric.name]) for label in labels])
        table[metric.name] = col
    for metric in chosen:
        table[f"rank {metric.name}"] = _ranks(
            np.asarray(table[metric.name], dtype=np.float64), metric.higher_is_better
        )
    rank_cols = table[[f"rank {m.name}" for m in chosen]].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        table["mean rank"] = [_nanmean(r) for r in rank_cols]
    table["seconds"] = [seconds[label] for label in labels]
    per_sample = pd.DataFrame(
        [
            {"method": label, "metric": metric.name, "sample": i, "score": float(v)}
            for label in labels
            for metric in chosen
            for i, v in enumerate(scores[label][metric.name])
        ],
        columns=["method", "metric", "sample", "score"],
    )
    custom_labels = [label for label, name, _ in entries if name is None]
    lines = verdicts(table, chosen, custom_labels)
    return CompareResult(
        table, per_sample, lines, maps, targets, chosen, x_host, caxis, display, samples_in_figure
    )


def _nanmean(values: np.ndarray) -> float:
    ok = np.asarray(values, dtype=np.float64)
    ok = ok[np.isfinite(ok)]
    return float(ok.mean()) if ok.size else float("nan")
