"""``save_evaluation``: an ``xk.evaluate`` result as ``evaluation/<name>.json`` for the run report.

The format (``xaikit-evaluation/1``: tables, curves and pictures) is defined beside the other
run data in :mod:`xaikit.viz.run_data`; this module knows the evaluation results, which the
painting layer must not import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import finite_mean
from xaikit.evaluate._conventions import public
from xaikit.evaluate.agreement import MIN_METHODS
from xaikit.evaluate.compare import CompareResult
from xaikit.evaluate.completeness import CompletenessResult
from xaikit.evaluate.perturbation import CurveResult
from xaikit.evaluate.randomization import RandomizationResult
from xaikit.files import write_json

__all__ = ["save_evaluation"]

#: the keys of a :func:`xaikit.evaluate.localization` result (before and after rank accuracy)
_LOCALIZATION_KEYS = ({"energy", "pointing"}, {"energy", "pointing", "rank_accuracy"})


def _curves(name: str, results: Mapping[str, Any]) -> dict[str, Any]:
    """Deletion / insertion results by method: an AUC table, per-sample AUCs and mean curves."""
    from xaikit.viz.run_data import table_doc

    kinds = {r.kind for r in results.values()}
    kind = kinds.pop() if len(kinds) == 1 else "perturbation"
    summary = {
        "method": list(results),
        "auc_mean": [r.auc_mean for r in results.values()],
        "samples": [int(r.scores.shape[0]) for r in results.values()],
        "steps": [len(r.fractions) - 1 for r in results.values()],
        "pixel order": [r.rank for r in results.values()],
    }
    per_sample: dict[str, Any] = {"sample": np.arange(next(iter(results.values())).auc.shape[0])}
    if len({r.auc.shape[0] for r in results.values()}) == 1:
        for method, r in results.items():
            per_sample[f"auc {method}"] = r.auc
    tables = [table_doc(f"{kind} AUC by method", summary)]
    if len(per_sample) > 1:
        tables.append(table_doc(f"{kind} AUC per sample", per_sample))
    x_label = "fraction of pixels " + ("deleted" if kind == "deletion" else "inserted")
    curve = {
        "title": f"mean {kind} curve",
        "x_label": x_label,
        "y_label": "score of the target class",
        "series": [{"name": m, "x": r.fractions, "y": r.curve_mean} for m, r in results.items()],
    }
    note = (
        "Lower deletion AUC (the score falls fast as the most salient pixels go) and higher "
        "insertion AUC mean a map that points at what the model uses. The AUC depends on the "
        "steps and on what a removed pixel becomes: compare it only with AUCs of the same settings "
        "(pixel order: signed = most positive attribution first, magnitude = largest |attribution| first)."
    )
    return {"kind": kind, "title": name, "note": note, "tables": tables, "curves": [curve], "images": []}


def _agreement(result: CompareResult, out_dir: Path, name: str, doc: dict[str, Any]) -> list[str]:
    """Whether the comparison's metrics agree (:meth:`CompareResult.metric_agreement`, over the
    methods' mean scores): with at least :data:`MIN_METHODS` methods, its heatmap joins ``doc``'s
    images as ``<name>_agreement.png`` and its pairs its tables. Returns its lines."""
    from xaikit.viz.run_data import table_doc

    if len(result.maps) < MIN_METHODS:
        return [f"not measured: {len(result.maps)} methods (a rank correlation needs at least {MIN_METHODS})"]
    agreement = result.metric_agreement()
    image = f"{name}_agreement.png"
    agreement.figure(out_dir / image, dpi=90)
    doc["images"].append(image)
    doc["tables"].append(
        table_doc("metric agreement (rank correlation over the methods, direction-adjusted)", agreement.pairs)
    )
    return agreement.note.splitlines()


@public(old_order=("result", "folder", "name", "title"))
def save_evaluation(
    result: Any, folder: str | os.PathLike[str], name: str, *, title: str | None = None
) -> Path:
    """Write an ``xk.evaluate`` result to ``<folder>/evaluation/<name>.json`` for the report.

    Args:
        result: a ``CompareResult`` (its table, the verdicts as the note, the per-sample scores
            and the figure painted to ``<name>.png``; with 3 methods or more, whether its metrics
            agree: the lines of :meth:`~xaikit.evaluate.CompareResult.metric_agreement`, its pairs
            table and heatmap ``<name>_agreement.png``), a ``RandomizationResult`` (its table, per-sample table, baseline and the grid
            painted to ``<name>.png``), a ``CurveResult`` or a dict ``{method: CurveResult}``
            (AUC tables and mean curves), a ``CompletenessResult``, the dict of
            :func:`~xaikit.evaluate.localization`, a pandas DataFrame, or a dict of
            equal-length columns (a plain table).
        folder: the run folder.
        name: the file name without extension (letters, digits, ``-``, ``_``, ``.``).
        title: the section title (default: ``name``).

    Returns:
        The path of the JSON file.
    """
    # imported here: the painting package loads matplotlib, which `import xaikit.evaluate` must not
    from xaikit.viz.run_data import EVALUATION_FORMAT, jsonable, table_doc

    if not isinstance(name, str) or not name or any(not (c.isalnum() or c in "-_.") for c in name):
        raise XaikitValueError(f"name must be a file name of letters, digits, '-', '_' or '.'; got {name!r}")
    out_dir = Path(folder) / "evaluation"
    title = title or name
    doc: dict[str, Any]
    if isinstance(result, CompareResult):
        image = f"{name}.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        result.figure(out_dir / image, dpi=90)
        doc = {
            "kind": "comparison",
            "note": result.note,
            "verdicts": [{"method": m, "text": line} for m, line in result.verdicts.items()],
            "metrics": [
                {
                    "name": m.name,
                    "label": m.label,
                    "family": m.family,
                    "higher_is_better": m.higher_is_better,
                    "question": m.question,
                }
                for m in result.metrics
            ],
            "tables": [
                table_doc("methods compared (mean score, rank: 1 = best)", result.table),
                table_doc("per sample", result.per_sample),
            ],
            "curves": [],
            "images": [image],
        }
        doc["agreement"] = _agreement(result, out_dir, name, doc)
    elif isinstance(result, RandomizationResult):
        image = f"{name}.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        result.paint_figure(save_path=out_dir / image, dpi=90)
        tables = [table_doc(f"randomization steps ({result.order}, {result.method})", result.table)]
        if result.baseline is not None:
            tables.append(
                table_doc(
                    "baseline: two randomized copies", {k: [v] for k, v in result.baseline.mean.items()}
                )
            )
        tables.append(table_doc("per sample", result.per_sample))
        doc = {
            "kind": "randomization",
            "note": result.caption,
            "tables": tables,
            "curves": [],
            "images": [image],
        }
    elif isinstance(result, CurveResult) or (
        isinstance(result, Mapping) and result and all(isinstance(r, CurveResult) for r in result.values())
    ):
        results = {result.kind: result} if isinstance(result, CurveResult) else dict(result)
        doc = _curves(title, results)
    elif isinstance(result, CompletenessResult):
        tables = [
            table_doc("summary", {k: [v] for k, v in result.summary.items()}),
            table_doc(
                "per sample",
                {
                    "sample": np.arange(len(result.delta)),
                    "delta": result.delta,
                    "gap": result.gap,
                    "total": result.total,
                    "relative": result.relative,
                },
            ),
        ]
        doc = {"kind": "completeness", "note": "sum(attributions) - (f(x) - f(baseline)) per sample.",
               "tables": tables, "curves": [], "images": []}  # fmt: skip
    elif isinstance(result, Mapping) and set(result) in _LOCALIZATION_KEYS:
        energy, pointing = np.asarray(result["energy"]), np.asarray(result["pointing"])
        summary = {"energy_mean": [finite_mean(energy)], "pointing_rate": [float(pointing.mean())]}
        per_sample = {"sample": np.arange(len(energy)), "energy": energy, "pointing": pointing}
        if "rank_accuracy" in result:
            rank = np.asarray(result["rank_accuracy"], dtype=np.float64)
            summary["rank_accuracy_mean"] = [finite_mean(rank)]
            per_sample["rank_accuracy"] = rank
        tables = [table_doc("summary", summary), table_doc("per sample", per_sample)]
        doc = {"kind": "localization", "note": "Share of the map inside the object mask, and whether its peak is in it.",
               "tables": tables, "curves": [], "images": []}  # fmt: skip
    elif isinstance(result, Mapping) or (hasattr(result, "to_dict") and hasattr(result, "columns")):
        doc = {
            "kind": "table",
            "note": None,
            "tables": [table_doc(title, result)],
            "curves": [],
            "images": [],
        }
    else:
        raise XaikitTypeError(
            "result must be a RandomizationResult, CurveResult (or a dict of them by method), CompareResult, "
            f"CompletenessResult, localization dict, DataFrame or dict of columns; got {describe(result)}"
        )
    doc = {"format": EVALUATION_FORMAT, "title": title, **doc}
    return write_json(out_dir / f"{name}.json", jsonable(doc))
