"""The data side of training: datasets per mode, batching, shuffling and numpy ops.

A :class:`Pipeline` turns datasets into batches: dicts of numpy arrays whose first axis indexes
the samples. Images stay channel-last ``(B, H, W, C)`` as the datasets hold them; the ops decide
their dtype (``Minmax`` and ``Normalize`` give float32).

Accepted datasets (for each of ``train_data``, ``eval_data``, ``test_data``):

* a :class:`~xaikit.dataset.NumpyDataset` or a dict of equally long arrays: batches are
  gathered by index (fast);
* any indexable dataset with ``len`` whose items are dicts (a ``torch.utils.data.Dataset``):
  samples are read one by one and stacked (torch tensors become numpy arrays);
* a ``tf.data.Dataset`` of dicts: an unbatched one is read once into memory on first use and
  then treated like a dict of arrays; one that is already batched (leading ``None`` dimension)
  is iterated as it comes each epoch;
* a ``torch.utils.data.DataLoader`` (or any iterable of batch dicts): iterated as it comes each
  epoch; it does its own batching and shuffling, so ``batch_size``, ``shuffle`` and
  ``drop_last`` do not apply to it.

``eval_data`` and ``test_data`` may also be ``{ds_id: dataset}`` to evaluate on several
datasets by name.

Ops run on whole batches (see :mod:`xaikit.op.numpyop`), in order, after batching; ops may be
wrapped in schedulers (anything with ``get_current_value(epoch)``, such as
``xk.schedule.RepeatScheduler``), ``None`` meaning off for that epoch. Randomness (shuffling
and random ops) comes from generators seeded by ``seed``, the epoch, the mode and the dataset
id, so a pipeline with a seed gives the same batches every time it is asked for the same epoch,
and different shuffles in different epochs. Only training data is shuffled.

Example:
    >>> import numpy as np
    >>> from xaikit.op.numpyop import Minmax
    >>> pipe = Pipeline(train_data={"x": np.arange(10.0).reshape(5, 2), "y": np.arange(5)},
    ...                 batch_size=2, ops=[Minmax("x")], shuffle=False)
    >>> [b["y"].tolist() for b in pipe.get_loader("train", epoch=1)]
    [[0, 1], [2, 3], [4]]
    >>> pipe.get_results()["x"].round(3).tolist()
    [[0.0, 1.0], [0.0, 1.0]]
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from xaikit.backend import framework_of, to_number
from xaikit.checks import check_int
from xaikit.dataset.numpy_dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.op.op import all_values, resolve

__all__ = ["Pipeline"]

_MODES = ("train", "eval", "test")
_MODE_CODE = {"train": 1, "eval": 2, "test": 3, "infer": 4}


# ---- data sources --------------------------------------------------------------------------------
class _Source:
    """One dataset behind the pipeline: knows its size and yields raw batches."""

    rebatches = True  # whether the pipeline's batch size and shuffling apply

    def num_samples(self) -> int | None:
        return None

    def num_batches(self) -> int | None:
        return None

    def batches(self, batch_size: int, order: np.ndarray | None, drop_last: bool) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


def _spans(n: int, batch_size: int, drop_last: bool) -> Iterator[tuple[int, int]]:
    stop = (n // batch_size) * batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        yield start, min(start + batch_size, n)


class _ArraySource(_Source):
    def __init__(self, data: Mapping[str, np.ndarray]) -> None:
        self.data = dict(data)
        self.n = len(next(iter(self.data.values())))

    def num_samples(self) -> int:
        return self.n

    def batches(self, batch_size: int, order: np.ndarray | None, drop_last: bool) -> Iterator[dict[str, Any]]:
        for start, stop in _spans(self.n, batch_size, drop_last):
            if order is None:
                yield {k: v[start:stop].copy() for k, v in self.data.items()}
            else:
                idx = order[start:stop]
                yield {k: v[idx] for k, v in self.data.items()}


def _stack(samples: list[Any], where: str) -> dict[str, np.ndarray]:
    first = samples[0]
    if not isinstance(first, Mapping):
        raise XaikitTypeError(f"{where} must yield dicts of arrays (one per sample); got {describe(first)}")
    out = {}
    for key in first:
        try:
            out[key] = np.stack([to_number(s[key]) for s in samples])
        except (KeyError, ValueError) as exc:
            raise XaikitValueError(f"{where}: samples disagree on key {key!r} ({exc})") from None
    return out


class _IndexableSource(_Source):
    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def num_samples(self) -> int:
        return len(self.dataset)

    def batches(self, batch_size: int, order: np.ndarray | None, drop_last: bool) -> Iterator[dict[str, Any]]:
        n = len(self.dataset)
        for start, stop in _spans(n, batch_size, drop_last):
            idx = range(start, stop) if order is None else order[start:stop]
            yield _stack([self.dataset[int(i)] for i in idx], type(self.dataset).__name__)


class _IterableSource(_Source):
    rebatches = False

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def num_batches(self) -> int | None:
        try:
            return len(self.loader)
        except TypeError:
            return None

    def batches(self, batch_size: int, order: np.ndarray | None, drop_last: bool) -> Iterator[dict[str, Any]]:
        for batch in self.loader:
            if not isinstance(batch, Mapping):
                raise XaikitTypeError(f"{self.name} must yield dicts of arrays; got {describe(batch)}")
            yield {k: to_number(v) for k, v in batch.items()}


def _is_column(value: Any) -> bool:
    return isinstance(value, (np.ndarray, list, tuple)) or (
        hasattr(value, "shape") and hasattr(value, "dtype") and not hasattr(value, "as_numpy_iterator")
    )


def _is_data_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(_is_column(v) for v in value.values())


def _make_source(data: Any, what: str) -> _Source:
    if isinstance(data, NumpyDataset):
        return _ArraySource(data.data)
    if isinstance(data, Mapping):
        if not _is_data_dict(data):
            raise XaikitTypeError(
                f"{what} must be a dict of arrays (columns); got a dict with {describe(data)}"
            )
        return _ArraySource(NumpyDataset({k: to_number(v) for k, v in data.items()}).data)
    if framework_of(data) == "tf" and hasattr(data, "as_numpy_iterator"):
        return _tf_source(data, what)
    if hasattr(data, "dataset") and hasattr(data, "batch_size") and hasattr(data, "__iter__"):
        return _IterableSource(data, what)  # a torch DataLoader
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return _IndexableSource(data)
    if hasattr(data, "__iter__"):
        return _IterableSource(data, what)
    raise XaikitTypeError(
        f"{what} must be a NumpyDataset, a dict of arrays, a torch Dataset/DataLoader or a tf.data.Dataset; "
        f"got {describe(data)}"
    )


def _tf_source(ds: Any, what: str) -> _Source:
    spec = ds.element_spec
    if not isinstance(spec, Mapping):
        raise XaikitTypeError(f"{what} (a tf.data.Dataset) must yield dicts; its elements are {spec!r}")
    shapes = [getattr(s, "shape", None) for s in spec.values()]
    if shapes and all(s is not None and s.rank and s[0] is None for s in shapes):
        return _TFBatched(ds, what)
    samples = list(ds.as_numpy_iterator())
    if not samples:
        raise XaikitValueError(f"{what} (a tf.data.Dataset) is empty")
    return _ArraySource(_stack(samples, what))


class _TFBatched(_IterableSource):
    def batches(self, batch_size: int, order: np.ndarray | None, drop_last: bool) -> Iterator[dict[str, Any]]:
        for batch in self.loader.as_numpy_iterator():
            yield {k: np.asarray(v) for k, v in batch.items()}

    def num_batches(self) -> int | None:
        n = int(self.loader.cardinality())
        return n if n >= 0 else None


# ---- the pipeline --------------------------------------------------------------------------------
class _Loader:
    """One epoch of batches of one mode and dataset; iterable (each iteration starts over)."""

    def __init__(self, pipeline: Pipeline, mode: str, epoch: int, ds_id: str) -> None:
        self.pipeline, self.mode, self.epoch, self.ds_id = pipeline, mode, epoch, ds_id

    def __len__(self) -> int:
        n = self.pipeline.steps_per_epoch(self.mode, self.ds_id)
        if n is None:
            raise TypeError("this dataset does not know its number of batches")
        return n

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.pipeline._iterate(self.mode, self.epoch, self.ds_id)


class Pipeline:
    """Datasets per mode, turned into batches of numpy arrays with ops applied.

    Args:
        train_data: training dataset (see the module docstring for accepted kinds).
        eval_data: evaluation dataset, or ``{ds_id: dataset}``.
        test_data: test dataset, or ``{ds_id: dataset}``.
        batch_size: samples per batch, or ``{mode: batch_size}``.
        ops: numpy ops (or schedulers of them), applied in order to each batch.
        shuffle: shuffle the training data each epoch.
        seed: seed of shuffling and random ops (None: different every run).
        drop_last: drop the last, smaller batch of each epoch.

    Raises:
        XaikitTypeError: a dataset of an unknown kind, an op that is not a NumpyOp.
        XaikitValueError: no data at all, a bad batch size, a bad dataset id.
    """

    def __init__(
        self,
        train_data: Any = None,
        eval_data: Any = None,
        test_data: Any = None,
        batch_size: int | Mapping[str, int] = 32,
        ops: Iterable[Any] = (),
        shuffle: bool = True,
        seed: int | None = None,
        drop_last: bool = False,
    ) -> None:
        from xaikit.op.numpyop import NumpyOp

        self.data: dict[str, dict[str, _Source]] = {}
        for mode, data in zip(_MODES, (train_data, eval_data, test_data)):
            if data is None:
                continue
            if isinstance(data, Mapping) and not _is_data_dict(data):
                if mode == "train":
                    raise XaikitTypeError("train_data must be one dataset, not {ds_id: dataset}")
                if not data:
                    raise XaikitValueError(f"{mode}_data is an empty dict")
                for ds_id in data:
                    if not isinstance(ds_id, str) or not ds_id:
                        raise XaikitValueError(
                            f"{mode}_data dataset ids must be non-empty str; got {ds_id!r}"
                        )
                self.data[mode] = {k: _make_source(v, f"{mode}_data[{k!r}]") for k, v in data.items()}
            else:
                self.data[mode] = {"": _make_source(data, f"{mode}_data")}
        if not self.data:
            raise XaikitValueError("Pipeline needs at least one of train_data, eval_data, test_data")
        self.batch_size = batch_size
        self._batch_size("train")  # validate early
        self.ops = list(ops)
        for item in self.ops:
            for op in all_values(item):
                if not isinstance(op, NumpyOp):
                    raise XaikitTypeError(
                        f"Pipeline ops must be NumpyOps (or schedulers of them); got {describe(op)}"
                    )
        self.shuffle = bool(shuffle)
        self.seed = seed
        self._entropy = int(seed) if seed is not None else int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        self.drop_last = bool(drop_last)

    # ---- what is there -------------------------------------------------------------------------
    def get_modes(self) -> set[str]:
        """The modes that have data."""
        return set(self.data)

    def get_ds_ids(self, mode: str) -> list[str]:
        """Dataset ids of a mode (``[""]`` for a single unnamed dataset; ``[]`` for no data)."""
        return list(self.data.get(mode, {}))

    def _source(self, mode: str, ds_id: str) -> tuple[_Source, str]:
        if mode not in self.data:
            raise XaikitValueError(f"the pipeline has no {mode!r} data; modes with data: {sorted(self.data)}")
        sources = self.data[mode]
        if ds_id not in sources:
            if ds_id == "" and len(sources) == 1:
                ds_id = next(iter(sources))
            else:
                raise XaikitValueError(f"ds_id {ds_id!r} is not a {mode} dataset id; ids: {list(sources)}")
        return sources[ds_id], ds_id

    def _batch_size(self, mode: str) -> int:
        bs = self.batch_size
        if isinstance(bs, Mapping):
            if mode not in bs:
                raise XaikitValueError(f"batch_size has no entry for mode {mode!r}: {dict(bs)}")
            bs = bs[mode]
        return int(check_int(bs, "batch_size (or {mode: int})", 1))

    def steps_per_epoch(self, mode: str, ds_id: str = "") -> int | None:
        """Number of batches in one epoch of ``mode`` (None when the dataset does not know)."""
        source, _ = self._source(mode, ds_id)
        if not source.rebatches:
            return source.num_batches()
        n = source.num_samples()
        if n is None:
            return None
        bs = self._batch_size(mode)
        return n // bs if self.drop_last else -(-n // bs)

    # ---- batches --------------------------------------------------------------------------------
    def _rng(self, mode: str, epoch: int, ds_id: str, purpose: int) -> np.random.Generator:
        return np.random.default_rng(
            [self._entropy, int(epoch), _MODE_CODE[mode], zlib.crc32(ds_id.encode()), purpose]
        )

    def get_loader(self, mode: str, epoch: int = 1, ds_id: str = "") -> Iterable[dict[str, np.ndarray]]:
        """The batches of one epoch of ``mode`` (of the dataset ``ds_id``), ops applied.

        The returned object can be iterated (each iteration gives the same batches) and has a
        ``len`` when the dataset knows its size.
        """
        self._source(mode, ds_id)
        return _Loader(self, mode, check_int(epoch, "epoch", 1), ds_id)

    def _iterate(self, mode: str, epoch: int, ds_id: str) -> Iterator[dict[str, np.ndarray]]:
        source, real_id = self._source(mode, ds_id)
        ops = resolve(self.ops, mode, epoch)
        order = None
        if mode == "train" and self.shuffle and source.rebatches:
            n = source.num_samples()
            if n is not None:
                order = self._rng(mode, epoch, real_id, 0).permutation(n)
        op_rng = self._rng(mode, epoch, real_id, 1)
        bs = self._batch_size(mode) if source.rebatches else 0
        for batch in source.batches(bs, order, self.drop_last):
            yield _apply_ops(ops, batch, op_rng)

    def transform(
        self, data: Mapping[str, Any], mode: str = "infer", epoch: int = 1, batched: bool = False
    ) -> dict:
        """Apply the ops of ``mode`` to one sample (or to a batch with ``batched=True``).

        Example:
            >>> from xaikit.op.numpyop import ExpandDims
            >>> pipe = Pipeline(eval_data={"x": np.zeros((1, 2))}, ops=[ExpandDims("x")])
            >>> pipe.transform({"x": np.zeros(2)})["x"].shape
            (2, 1)
        """
        batch = {k: np.asarray(v) if batched else np.asarray(v)[None] for k, v in data.items()}
        out = _apply_ops(resolve(self.ops, mode, epoch), batch, np.random.default_rng())
        return out if batched else {k: v[0] for k, v in out.items()}

    def get_results(
        self, num_steps: int = 1, mode: str = "train", epoch: int = 1, ds_id: str = ""
    ) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
        """The first ``num_steps`` batches of an epoch, to look at what the model will get.

        Returns:
            One batch dict when ``num_steps == 1``, else a list of them.
        """
        if mode in self.data and ds_id == "" and "" not in self.data[mode]:
            ds_id = next(iter(self.data[mode]))
        out = []
        for i, batch in enumerate(self.get_loader(mode, epoch, ds_id)):
            if i >= num_steps:
                break
            out.append(batch)
        return out[0] if num_steps == 1 and out else out

    def __repr__(self) -> str:
        modes = {m: list(s) for m, s in self.data.items()}
        return f"Pipeline(data={modes}, batch_size={self.batch_size}, ops={len(self.ops)})"


def _apply_ops(
    ops: list[Any], batch: dict[str, np.ndarray], rng: np.random.Generator
) -> dict[str, np.ndarray]:
    for op in ops:
        missing = [k for k in op.inputs if k not in batch]
        if missing:
            raise XaikitValueError(
                f"{type(op).__name__} reads key {missing[0]!r}, which is not in the batch; "
                f"batch keys: {sorted(batch)}"
            )
        outs = op.forward_batch([batch[k] for k in op.inputs], rng)
        if len(outs) != len(op.outputs):
            raise XaikitValueError(
                f"{type(op).__name__} returned {len(outs)} values for its "
                f"{len(op.outputs)} outputs {op.outputs}"
            )
        for key, value in zip(op.outputs, outs):
            batch[key] = np.asarray(value)
    return batch
