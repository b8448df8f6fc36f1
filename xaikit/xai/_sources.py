"""Data sources of ``explain_dataset``: one uniform view of many kinds of datasets.

A :class:`Source` has a length and ``get(start, stop)`` -> :class:`Rows` (a float32 batch as
the dataset gives it, labels or None, file names or None). No framework is imported here:
torch datasets are read by index (``__len__`` + ``__getitem__``; their tensors become numpy
through ``__array__``), tf.data datasets through ``skip``/``take``/``as_numpy_iterator``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

#: image file suffixes read from a folder or a glob
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: label keys looked for in dict samples / NumpyDataset columns when no label_key is given
_LABEL_KEYS = ("y", "label", "labels", "target")
_FILE_KEYS = ("file", "filename", "path")


@dataclass
class Rows:
    """One range of samples: ``x`` (n, ...) float32, ``labels`` (n,) int64 or None, ``files``."""

    x: np.ndarray
    labels: np.ndarray | None = None
    files: list[str] | None = None


class Source:
    """A dataset of known length read by ranges of indices."""

    kind = "source"

    def __len__(self) -> int:  # pragma: no cover - every source overrides it
        raise NotImplementedError

    def get(self, start: int, stop: int) -> Rows:  # pragma: no cover
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.kind} of {len(self)} samples"


def _float32(x: Any, what: str) -> np.ndarray:
    array = np.asarray(x)
    if array.dtype.kind not in "fiub":
        raise XaikitTypeError(f"data: {what} must hold numbers; got {describe(array)}")
    return np.array(array, dtype=np.float32, order="C")  # a copy: writable even from a read-only memmap


def _labels(values: Any, what: str) -> np.ndarray | None:
    if values is None:
        return None
    array = np.asarray(values)
    if array.ndim == 2 and array.shape[1] > 1:  # one-hot labels
        array = array.argmax(axis=1)
    array = array.reshape(len(array), -1)[:, 0] if array.ndim > 1 else array
    if array.dtype.kind not in "iub" and not (array.dtype.kind == "f" and np.all(array == np.round(array))):
        raise XaikitTypeError(f"data: {what} must be integer class labels; got {describe(array)}")
    return array.astype(np.int64)


class ArraySource(Source):
    """A numpy array (or anything with ``__array__``), one sample per row."""

    kind = "array"

    def __init__(self, x: Any, labels: Any = None) -> None:
        self.x = x
        self.labels = None if labels is None else np.asarray(labels)
        if self.labels is not None and len(self.labels) != len(x):
            raise XaikitValueError(
                f"data: labels must have one entry per sample ({len(x)}); got {describe(self.labels)}"
            )

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def get(self, start: int, stop: int) -> Rows:
        labels = None if self.labels is None else _labels(self.labels[start:stop], "labels")
        return Rows(_float32(self.x[start:stop], "the input array"), labels)


class NumpyDatasetSource(Source):
    """An :class:`~xaikit.dataset.NumpyDataset`: input column ``x_key``, labels from ``label_key``
    (default: the first of ``y``, ``label``, ``labels``, ``target``), files from ``file``."""

    kind = "NumpyDataset"

    def __init__(self, ds: NumpyDataset, x_key: str, label_key: str | None) -> None:
        keys = ds.keys()
        if x_key not in keys:
            raise XaikitValueError(
                f"x_key: the input column {x_key!r} is not in the NumpyDataset; its columns: {keys}"
            )
        if label_key is not None and label_key not in keys:
            raise XaikitValueError(
                f"label_key: column {label_key!r} is not in the NumpyDataset; its columns: {keys}"
            )
        self.ds = ds
        self.x_key = x_key
        self.label_key = label_key or next((k for k in _LABEL_KEYS if k in keys), None)
        self.file_key = next((k for k in _FILE_KEYS if k in keys), None)

    def __len__(self) -> int:
        return len(self.ds)

    def get(self, start: int, stop: int) -> Rows:
        cols = self.ds.data
        labels = None if self.label_key is None else _labels(cols[self.label_key][start:stop], "labels")
        files = None if self.file_key is None else [str(f) for f in cols[self.file_key][start:stop]]
        return Rows(_float32(cols[self.x_key][start:stop], f"column {self.x_key!r}"), labels, files)


def _split_sample(item: Any, x_key: str, label_key: str | None, where: str) -> tuple[Any, Any]:
    """(input, label or None) of one sample: an array, an ``(x, y, ...)`` tuple or a dict."""
    if isinstance(item, Mapping):
        if x_key not in item:
            raise XaikitValueError(
                f"x_key: {where} samples are dicts without the input key {x_key!r}; keys: {list(item)}"
            )
        key = label_key or next((k for k in _LABEL_KEYS if k in item), None)
        return item[x_key], (item[key] if key is not None else None)
    if isinstance(item, (tuple, list)):
        if not item:
            raise XaikitValueError(f"data: {where} gave an empty sample")
        return item[0], (item[1] if len(item) > 1 else None)
    return item, None


def _stack(samples: list[Any], labels: list[Any], where: str) -> Rows:
    shapes = {np.shape(s) for s in samples}
    if len(shapes) > 1:
        raise XaikitValueError(f"data: {where} samples have different shapes {sorted(shapes)}; resize them")
    has = [lab is not None for lab in labels]
    label_array = _labels([np.asarray(lab) for lab in labels], "labels") if all(has) and has else None
    return Rows(_float32(np.stack([np.asarray(s) for s in samples]), f"{where} samples"), label_array)


class IndexedSource(Source):
    """A map-style dataset (torch ``Dataset`` or anything with ``__len__`` and ``__getitem__``),
    read sample by sample; a sample is an array, an ``(x, y)`` tuple or a dict."""

    kind = "indexed dataset"

    def __init__(self, ds: Any, x_key: str, label_key: str | None, kind: str) -> None:
        self.ds = ds
        self.x_key = x_key
        self.label_key = label_key
        self.kind = kind

    def __len__(self) -> int:
        return len(self.ds)

    def get(self, start: int, stop: int) -> Rows:
        pairs = [_split_sample(self.ds[i], self.x_key, self.label_key, self.kind) for i in range(start, stop)]
        return _stack([p[0] for p in pairs], [p[1] for p in pairs], self.kind)


class TFDataSource(Source):
    """A ``tf.data.Dataset`` of single samples with a known cardinality, read per range with
    ``skip(start).take(n)`` (a skip reads and drops ``start`` elements)."""

    kind = "tf.data.Dataset"

    def __init__(self, ds: Any, x_key: str, label_key: str | None) -> None:
        n = int(ds.cardinality())
        if n < 0:
            raise XaikitValueError(
                "data: the tf.data.Dataset has an unknown or infinite cardinality "
                f"({n}); explain_dataset needs its length: drop .repeat(), or add "
                ".apply(tf.data.experimental.assert_cardinality(N))"
            )
        spec = ds.element_spec
        first = spec[x_key] if isinstance(spec, Mapping) and x_key in spec else spec
        if isinstance(first, (tuple, list)):
            first = first[0]
        shape = getattr(first, "shape", None)
        if shape is not None and len(shape) >= 1 and shape[0] is None:
            raise XaikitValueError(
                f"data: the tf.data.Dataset gives batches (element shape {shape}); explain_dataset "
                "batches by itself: pass ds.unbatch()"
            )
        self.ds = ds
        self.n = n
        self.x_key = x_key
        self.label_key = label_key

    def __len__(self) -> int:
        return self.n

    def get(self, start: int, stop: int) -> Rows:
        items = list(self.ds.skip(start).take(stop - start).as_numpy_iterator())
        if len(items) != stop - start:
            raise XaikitValueError(
                f"data: the tf.data.Dataset gave {len(items)} samples for indices {start}..{stop - 1}; "
                f"its cardinality says {self.n}"
            )
        pairs = [_split_sample(item, self.x_key, self.label_key, self.kind) for item in items]
        return _stack([p[0] for p in pairs], [p[1] for p in pairs], self.kind)


def _read_image(path: str) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as img:
        if img.mode in ("L", "I", "I;16", "F"):
            array = np.asarray(img.convert("F"), dtype=np.float32)[..., None]
            return array / (255.0 if img.mode == "L" else max(float(array.max()), 1.0))
        return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0


class ImageFilesSource(Source):
    """PNG/JPEG files, sorted by path, read with Pillow as float32 (H, W, 3) RGB in [0, 1]
    ((H, W, 1) for grayscale), or with ``transform(path) -> array``. Images of different sizes
    are refused unless a ``transform`` makes them equal."""

    kind = "image files"

    def __init__(self, files: list[str], transform: Callable[[str], Any] | None, root: str) -> None:
        # names as stored: relative to the folder, or as the glob matched them; paths as read:
        # absolute, so that a worker with another working directory (Ray) finds them
        self.names = [os.path.relpath(p, root) if root else p for p in files]
        self.files = [os.path.abspath(p) for p in files]
        self.transform = transform
        self.root = root
        self.size: tuple[int, int] | None = None
        self.first: str | None = None

    def __len__(self) -> int:
        return len(self.files)

    def _one(self, path: str) -> np.ndarray:
        if self.transform is not None:
            return np.asarray(self.transform(path))
        from PIL import Image

        with Image.open(path) as img:
            size = img.size
        if self.size is None:
            self.size, self.first = size, path
        elif size != self.size:
            raise XaikitValueError(
                f"data: the images have different sizes: {self.first!r} is {self.size[0]}x{self.size[1]}, "
                f"{path!r} is {size[0]}x{size[1]}; resize them, or pass transform= (a function of the "
                "path that returns an array of one fixed shape)"
            )
        return _read_image(path)

    def get(self, start: int, stop: int) -> Rows:
        samples = [self._one(p) for p in self.files[start:stop]]
        rows = _stack(samples, [None] * len(samples), self.kind)
        rows.files = self.names[start:stop]
        return rows


def _image_files(spec: str) -> tuple[list[str], str]:
    if os.path.isdir(spec):
        root = spec
        found = [
            os.path.join(dirpath, name)
            for dirpath, _, names in os.walk(spec)
            for name in names
            if name.lower().endswith(IMAGE_SUFFIXES)
        ]
    else:
        root = ""
        found = [p for p in glob.glob(spec, recursive=True) if p.lower().endswith(IMAGE_SUFFIXES)]
    if not found:
        what = "folder" if os.path.isdir(spec) else "glob"
        raise XaikitValueError(
            f"data: the {what} {spec!r} holds no image files ({', '.join(IMAGE_SUFFIXES)})"
            + ("" if os.path.isdir(spec) or any(c in spec for c in "*?[") else "; no such folder")
        )
    return sorted(found), root


def as_source(
    data: Any,
    x_key: str = "x",
    label_key: str | None = None,
    transform: Callable[[str], Any] | None = None,
    labels: Any = None,
) -> Source:
    """The :class:`Source` of a dataset given to ``explain_dataset``, or a clear error."""
    if isinstance(data, Source):
        return data
    if transform is not None and not callable(transform):
        raise XaikitTypeError(f"transform must be a function of an image path; got {describe(transform)}")
    if isinstance(data, (str, os.PathLike)):
        files, root = _image_files(os.fspath(data))
        return ImageFilesSource(files, transform, root)
    if isinstance(data, NumpyDataset):
        return NumpyDatasetSource(data, x_key, label_key)
    if isinstance(data, np.ndarray):
        if data.ndim < 2 or data.shape[0] == 0:
            raise XaikitValueError(f"data: an array must be a non-empty batch (N, ...); got {describe(data)}")
        return ArraySource(data, labels)
    if labels is not None:
        raise XaikitValueError("labels= is for a numpy array; the other datasets carry their own labels")
    if all(hasattr(data, a) for a in ("cardinality", "skip", "take", "as_numpy_iterator")):
        return TFDataSource(data, x_key, label_key)
    loader = getattr(data, "dataset", None)
    if loader is not None and hasattr(data, "batch_size") and hasattr(data, "__iter__"):
        if not (hasattr(loader, "__len__") and hasattr(loader, "__getitem__")):
            raise XaikitTypeError(
                f"data: the DataLoader's dataset ({describe(loader)}) has no __len__ and __getitem__ "
                "(an iterable-style dataset): explain_dataset reads samples by index"
            )
        return IndexedSource(loader, x_key, label_key, "DataLoader's dataset")
    if hasattr(data, "__len__") and hasattr(data, "__getitem__") and not isinstance(data, (Mapping, bytes)):
        if isinstance(data, (list, tuple)):
            raise XaikitTypeError(
                f"data: a {type(data).__name__} is not a dataset; pass np.stack(...) of the samples or a "
                "NumpyDataset"
            )
        return IndexedSource(data, x_key, label_key, f"{type(data).__name__}")
    raise XaikitTypeError(
        "data must be a numpy array, a NumpyDataset, a torch Dataset or DataLoader, a tf.data.Dataset, "
        f"or a folder or glob of PNG/JPEG files; got {describe(data)}"
    )
