"""The results of ``explain_dataset`` read back from its store: :class:`DatasetExplanation` (the
maps as a lazy Zarr array, the table of predictions, scores, deltas and map status, the class
names, the skipped files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.files import write_text
from xaikit.xai.dataset._store import Store
from xaikit.xai.dataset.targets import per_sample_fields, target_from

__all__ = ["DatasetExplanation"]


def _status_column(record: dict[str, Any]) -> np.ndarray:
    """The ``map_status`` of a shard's samples from its record's sparse ``{index: status}``."""
    start, stop = int(record["start"]), int(record["stop"])
    column = np.full(stop - start, "", dtype=object)
    for index, status in (record.get("map_status") or {}).items():
        if start <= int(index) < stop:
            column[int(index) - start] = str(status)
    return column


class DatasetExplanation:
    """The results of :func:`explain_dataset`, read from its store (nothing held in memory).

    Args:
        path: the store folder.

    Example:
        >>> import tempfile, numpy as np, torch, xaikit as xk
        >>> model = torch.nn.Linear(4, 2)
        >>> out = tempfile.mkdtemp() + "/x.zarr"
        >>> _ = xk.xai.explain_dataset(model, np.ones((6, 4), np.float32), method="vanilla", out=out, progress=False)
        >>> res = xk.xai.DatasetExplanation.open(out)
        >>> res.manifest["method"], res.table["prediction"].shape
        ('vanilla', (6,))
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.store = Store(path)
        self.path = str(path)
        #: the shards that the :func:`explain_dataset` call that returned this handle found
        #: committed and kept (a resumed run), and those it explained; empty for a handle of
        #: :meth:`open`
        self.resumed: list[int] = []
        self.explained: list[int] = []

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DatasetExplanation:
        """Open an existing store (refused with a clear error when ``path`` is not one)."""
        handle = cls(path)
        handle.manifest  # noqa: B018 - raises for a folder that is not a store
        return handle

    @property
    def manifest(self) -> dict[str, Any]:
        """The store's manifest: format, model fingerprint, method, options, length, shard size,
        map shape, ..."""
        return self.store.manifest()

    @property
    def attributions(self) -> Any:
        """The (N, *map shape) float32 maps as a lazy, read-only Zarr array (NaN where a shard is
        not committed); index it to read, e.g. ``res.attributions[100:200]``."""
        return self.store.group(writable=False)["attributions"]

    @property
    def committed(self) -> list[int]:
        """The committed shards (by their completion records), in order."""
        return sorted(self.store.records())

    @property
    def complete(self) -> bool:
        """Whether every shard is committed."""
        m = self.manifest
        return len(self.committed) == -(-int(m["length"]) // int(m["shard_size"]))

    @property
    def classes(self) -> list[str] | None:
        """The class names of the run (``classes=``, or the model's own), or None."""
        names = self.manifest.get("classes")
        return None if names is None else [str(n) for n in names]

    @property
    def target(self) -> Any:
        """What the maps explain: None (each sample's predicted class), ``"label"``, or the
        target object of the run (:mod:`xaikit.targets`, rebuilt from the manifest); with an
        object, :attr:`table`'s ``score`` is its clean score and ``prediction`` -1. A target
        with per-sample fields comes with every sample's values read from the store (for a few
        samples, :meth:`targets_of` reads only theirs)."""
        described = self.manifest.get("target")
        if not per_sample_fields(described):
            return target_from(described)
        return self.targets_of(np.arange(int(self.manifest["length"])))

    @property
    def per_sample_target(self) -> bool:
        """Whether the run's target object has per-sample fields (one value per sample, given as
        an array or read from a dataset key), stored as ``target_<field>`` arrays."""
        return bool(per_sample_fields(self.manifest.get("target")))

    def targets_of(self, indices: Any) -> Any:
        """The target object of the samples ``indices`` (ints, in any order): its per-sample
        fields hold those samples' values (read from the store), the fixed ones as stored. It is
        what ``xk.xai.explain(model, x[indices], target=...)`` takes to give their maps; None or
        ``"label"`` for a run without a target object.

        Example:
            >>> import tempfile, numpy as np, torch, xaikit as xk
            >>> out = tempfile.mkdtemp() + "/x.zarr"
            >>> res = xk.xai.explain_dataset(torch.nn.Linear(4, 3), np.ones((5, 4), np.float32), method="vanilla",
            ...     out=out, target=xk.targets.Class(np.array([0, 1, 2, 1, 0])), progress=False)
            >>> res.targets_of([4, 1]).k.tolist()
            [0, 1]
        """
        described = self.manifest.get("target")
        fields = per_sample_fields(described)
        if not fields:
            return target_from(described)
        n = int(self.manifest["length"])
        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= n)):
            raise XaikitValueError(
                f"indices must be a 1-D sequence of sample indices in [0, {n - 1}]; got {describe(indices)}"
            )
        root = self.store.group(writable=False)
        values = {name: np.asarray(root[f"target_{name}"].oindex[idx.astype(np.int64)]) for name in fields}
        return target_from(described, values)

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """The samples skipped as unreadable files (``skip_bad=True``), by index: ``{"index",
        "file", "error"}`` each; they are not in :attr:`table` and their maps are NaN."""
        return self.store.skipped()

    @property
    def table(self) -> Any:
        """A pandas DataFrame of the committed samples (the skipped ones left out): ``index``,
        ``label`` (-1: none), ``prediction`` (-1 for a target object), ``score`` (the probability
        of the prediction; a target object's clean score, see :attr:`target`),
        ``delta`` (completeness delta; NaN for methods without one), ``file`` ("" for none) and
        ``map_status`` ("" for a sound map, else ``"non-finite"``, ``"zero"``, ``"constant"`` or
        ``"underflow"``: see :mod:`xaikit.xai.health`); with class names (:attr:`classes`) also
        ``label_name`` ("" for no label) and ``prediction_name``."""
        import pandas as pd

        root = self.store.group(writable=False)
        parts = []
        for rec in sorted(self.store.records().values(), key=lambda r: int(r["start"])):
            sl = slice(int(rec["start"]), int(rec["stop"]))
            cols = {name: root[name][sl] for name in ("index", "label", "prediction", "score", "delta")}
            cols["file"] = np.asarray([str(f) for f in root["file"][sl]], dtype=object)
            cols["map_status"] = _status_column(rec)
            part = pd.DataFrame(cols)
            gone = [int(item["index"]) for item in rec.get("skipped") or ()]
            parts.append(part[~part["index"].isin(gone)] if gone else part)
        if not parts:
            table = pd.DataFrame(
                {
                    "index": np.zeros(0, np.int64),
                    "label": np.zeros(0, np.int64),
                    "prediction": np.zeros(0, np.int64),
                    "score": np.zeros(0, np.float32),
                    "delta": np.zeros(0, np.float32),
                    "file": np.zeros(0, object),
                    "map_status": np.zeros(0, object),
                }
            )
        else:
            table = pd.concat(parts, ignore_index=True)
        names = self.classes
        if names is not None:
            table["label_name"] = _names_of(table["label"].to_numpy(), names)
            table["prediction_name"] = _names_of(table["prediction"].to_numpy(), names)
        return table

    def write_table(self, path: str | os.PathLike[str] | None = None, table: Any = None) -> Path:
        """Write :attr:`table` (or ``table``, when the caller has read it already) as CSV,
        atomically, to ``path`` (default: ``<store>/table.csv``, where ``xaikit report`` looks):
        ``index, file, label[, label_name], prediction[, prediction_name], score, delta``, then
        any other column of the table. Returns the path."""
        frame = self.table if table is None else table
        first = ("index", "file", "label", "label_name", "prediction", "prediction_name", "score", "delta")
        order = [c for c in first if c in frame.columns] + [c for c in frame.columns if c not in first]
        dest = Path(self.path) / "table.csv" if path is None else Path(path)
        return write_text(dest, frame[order].to_csv(index=False))

    def map_status_counts(self) -> dict[str, int]:
        """How many committed samples have each degenerate map status (from the shard records,
        without reading the table); empty when every map is sound.

        Example:
            >>> import tempfile, numpy as np, torch, xaikit as xk
            >>> out = tempfile.mkdtemp() + "/x.zarr"
            >>> res = xk.xai.explain_dataset(torch.nn.Linear(4, 2), np.ones((3, 4), np.float32), method="vanilla", out=out, progress=False)
            >>> res.map_status_counts()
            {}
        """
        counts: dict[str, int] = {}
        for rec in self.store.records().values():
            for status in (rec.get("map_status") or {}).values():
                counts[str(status)] = counts.get(str(status), 0) + 1
        return counts

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"DatasetExplanation({self.path!r}: {m['method']}, {m['length']} samples, "
            f"{len(self.committed)}/{-(-int(m['length']) // int(m['shard_size']))} shards)"
        )


def _names_of(indices: np.ndarray, names: list[str]) -> np.ndarray:
    """The class name of each index ("" for -1 or an index past the names)."""
    table = np.asarray([*names, ""], dtype=object)
    return table[np.where((indices >= 0) & (indices < len(names)), indices, len(names))]
