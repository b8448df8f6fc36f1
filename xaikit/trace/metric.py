"""Classification metric traces: Accuracy, Precision, Recall, F1Score, MCC.

Each collects true labels and predicted labels over an epoch (per dataset id) and computes the
metric with scikit-learn at the end of the epoch. With several datasets, each one's value is
also logged as ``"name|ds_id"``.

Labels: ``true_key`` holds class indices (any shape, flattened) or one-hot rows; ``pred_key``
holds class scores ``(N, C)`` (argmax is taken), a single probability column ``(N, 1)`` or
``(N,)`` floats (binary, threshold 0.5), or integer class indices.

Example:
    >>> import numpy as np
    >>> from xaikit.trace import Data, System
    >>> acc = Accuracy()
    >>> acc.system = System()
    >>> acc.system.mode = "eval"
    >>> acc.on_epoch_begin(Data())
    >>> acc.on_batch_end(Data({"y": np.array([0, 1, 1]), "y_pred": np.array([[.9, .1], [.2, .8], [.7, .3]])}))
    >>> d = Data()
    >>> acc.on_epoch_end(d)
    >>> round(d["accuracy"], 4)
    0.6667
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe, describe_name
from xaikit.trace.base import Data, DSData, Trace

__all__ = ["MCC", "Accuracy", "F1Score", "Precision", "Recall"]

_AVERAGES = ("auto", None, "binary", "micro", "macro", "weighted")


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    from xaikit.backend import to_number

    return np.asarray(to_number(value))


def true_labels(y: Any) -> np.ndarray:
    """Class indices from labels or one-hot rows (flattened)."""
    y = _to_numpy(y)
    if y.ndim >= 2 and y.shape[-1] > 1 and y.dtype.kind == "f":
        y = np.argmax(y, axis=-1)
    return np.asarray(y).reshape(-1).astype(np.int64)


def pred_labels(p: Any) -> tuple[np.ndarray, int | None]:
    """Predicted class indices and the number of score columns (0: one probability, None: labels)."""
    p = _to_numpy(p)
    if p.dtype.kind in "iub":
        return p.reshape(-1).astype(np.int64), None
    if p.ndim >= 2 and p.shape[-1] > 1:
        return np.argmax(p, axis=-1).reshape(-1).astype(np.int64), int(p.shape[-1])
    return (p.reshape(-1) >= 0.5).astype(np.int64), 0


class _Metric(Trace):
    """Shared collection logic; subclasses implement :meth:`compute`."""

    default_name = "metric"

    def __init__(
        self,
        true_key: str = "y",
        pred_key: str = "y_pred",
        mode: str | Iterable[str] | None = ("eval", "test"),
        ds_id: str | Iterable[str] | None = None,
        output_name: str | None = None,
    ) -> None:
        super().__init__(
            inputs=(true_key, pred_key), outputs=output_name or self.default_name, mode=mode, ds_id=ds_id
        )
        self.true_key = true_key
        self.pred_key = pred_key
        self.y_true: dict[str, list[np.ndarray]] = {}
        self.y_pred: dict[str, list[np.ndarray]] = {}
        self.n_classes: int | None = None
        self.binary = False

    def get_outputs(self, ds_ids: Iterable[str] | None = None) -> list[str]:
        ids = [d for d in ds_ids or [] if d]
        return self.outputs + [f"{self.outputs[0]}|{d}" for d in ids]

    def on_epoch_begin(self, data: Data) -> None:
        self.y_true, self.y_pred = {}, {}
        self.n_classes = None
        self.binary = False

    def on_batch_end(self, data: Data) -> None:
        y_true = true_labels(data[self.true_key])
        y_pred, n_classes = pred_labels(data[self.pred_key])
        if y_true.shape != y_pred.shape:
            raise XaikitValueError(
                f"{type(self).__name__}: {self.true_key!r} gives {y_true.size} labels but {self.pred_key!r} "
                f"gives {y_pred.size} predictions ({describe(data[self.true_key])} vs "
                f"{describe(data[self.pred_key])})"
            )
        if n_classes == 0:
            self.binary = True
        elif n_classes is not None:
            self.n_classes = max(self.n_classes or 0, n_classes)
        ds_id = self.system.ds_id
        self.y_true.setdefault(ds_id, []).append(y_true)
        self.y_pred.setdefault(ds_id, []).append(y_pred)

    def on_epoch_end(self, data: Data) -> None:
        if not self.y_true:
            return
        name = self.outputs[0]
        ids = list(self.y_true)
        if ids != [""]:
            for ds_id in ids:
                if ds_id:
                    y_true, y_pred = np.concatenate(self.y_true[ds_id]), np.concatenate(self.y_pred[ds_id])
                    DSData(ds_id, data).write_with_log(name, self.compute(y_true, y_pred))
        y_true = np.concatenate([a for ds in ids for a in self.y_true[ds]])
        y_pred = np.concatenate([a for ds in ids for a in self.y_pred[ds]])
        data.write_with_log(name, self.compute(y_true, y_pred))

    def _labels(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        n = max(self.n_classes or 0, int(y_true.max(initial=-1)) + 1, int(y_pred.max(initial=-1)) + 1)
        return np.arange(n)

    def compute(self, y_true: np.ndarray, y_pred: np.ndarray) -> Any:
        """The metric from flat arrays of true and predicted class indices."""
        raise NotImplementedError


class Accuracy(_Metric):
    """Fraction of correct predictions (output ``"accuracy"``).

    Args:
        true_key: Key of the true labels.
        pred_key: Key of the predictions (scores or labels).
        mode: Modes to run in (default evaluation and test).
        ds_id: Dataset ids to run on (default all).
        output_name: Key to write (default ``"accuracy"``).
    """

    default_name = "accuracy"

    def compute(self, y_true: np.ndarray, y_pred: np.ndarray) -> float:
        return float(np.mean(y_true == y_pred)) if y_true.size else float("nan")


class MCC(_Metric):
    """Matthews correlation coefficient, multi-class (output ``"mcc"``); same arguments as Accuracy."""

    default_name = "mcc"

    def compute(self, y_true: np.ndarray, y_pred: np.ndarray) -> float:
        # multi-class MCC from the confusion matrix; 0 when either side has a single class
        n = len(self._labels(y_true, y_pred))
        cm = np.zeros((n, n), dtype=np.float64)
        np.add.at(cm, (y_true, y_pred), 1.0)
        t, p = cm.sum(axis=1), cm.sum(axis=0)
        total, correct = cm.sum(), np.trace(cm)
        denom = np.sqrt((total**2 - p @ p) * (total**2 - t @ t))
        return float((correct * total - t @ p) / denom) if denom > 0 else 0.0


class _PerClass(_Metric):
    """Precision / recall / F1: one value per class by default."""

    def __init__(
        self,
        true_key: str = "y",
        pred_key: str = "y_pred",
        mode: str | Iterable[str] | None = ("eval", "test"),
        ds_id: str | Iterable[str] | None = None,
        output_name: str | None = None,
        average: str | None = "auto",
    ) -> None:
        if average is not None and (not isinstance(average, str) or average not in _AVERAGES):
            names = ", ".join(repr(a) for a in _AVERAGES if a is not None)
            raise XaikitValueError(f"average must be one of {names} or None; got {describe_name(average)}")
        super().__init__(true_key, pred_key, mode, ds_id, output_name)
        self.average = average

    def _sklearn(self) -> Any:
        raise NotImplementedError

    def compute(self, y_true: np.ndarray, y_pred: np.ndarray) -> Any:
        labels = self._labels(y_true, y_pred)
        average = self.average
        if average == "auto":
            average = "binary" if self.binary and len(labels) <= 2 else None
        if average == "binary":
            value = self._sklearn()(y_true, y_pred, average="binary", pos_label=1, zero_division=0)
            return float(value)
        if average is not None:  # averages over the classes that occur, like scikit-learn
            return float(self._sklearn()(y_true, y_pred, average=average, zero_division=0))
        value = self._sklearn()(y_true, y_pred, labels=labels, average=None, zero_division=0)
        return np.asarray(value, dtype=np.float64)


class Precision(_PerClass):
    """Precision per class (output ``"precision"``, a vector), or averaged.

    Args:
        true_key: Key of the true labels.
        pred_key: Key of the predictions (scores or labels).
        mode: Modes to run in (default evaluation and test).
        ds_id: Dataset ids to run on (default all).
        output_name: Key to write (default ``"precision"``).
        average: ``"auto"`` (default): one value per class, or a single value (for class 1) when
            the predictions are one probability column; ``None``: always per class; ``"binary"``,
            ``"micro"``, ``"macro"``, ``"weighted"``: one number, averaged as scikit-learn does.
            Classes with no predicted samples count as 0.
    """

    default_name = "precision"

    def _sklearn(self) -> Any:
        from sklearn.metrics import precision_score

        return precision_score


class Recall(_PerClass):
    """Recall per class (output ``"recall"``), or averaged; arguments as :class:`Precision`."""

    default_name = "recall"

    def _sklearn(self) -> Any:
        from sklearn.metrics import recall_score

        return recall_score


class F1Score(_PerClass):
    """F1 score per class (output ``"f1_score"``), or averaged; arguments as :class:`Precision`."""

    default_name = "f1_score"

    def _sklearn(self) -> Any:
        from sklearn.metrics import f1_score

        return f1_score
