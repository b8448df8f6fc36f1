"""Data sources of ``explain_dataset``: one uniform view of many kinds of datasets.

A :class:`Source` has a length and ``get(start, stop)`` -> :class:`Rows` (a float32 batch as
the dataset gives it, labels or None, file names or None, the files skipped as unreadable
when the source skips them, and the values of the dataset keys it was asked to read with
:meth:`Source.read_keys`: a target's per-sample fields, e.g. ``Box(box="box", k="label")``). No framework is imported here:
torch datasets are read by index (``__len__`` + ``__getitem__``; their tensors become numpy
through ``__array__``), tf.data datasets through ``skip``/``take``/``as_numpy_iterator``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

#: image file suffixes read from a folder or a glob
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: label keys looked for in dict samples / NumpyDataset columns when no label_key is given
_LABEL_KEYS = ("y", "label", "labels", "target")
_FILE_KEYS = ("file", "filename", "path")


@dataclass
class Rows:
    """One range of n samples: ``x`` (n - len(skipped), ...) float32, the samples that could be
    read; ``labels`` (n,) int64 or None; ``files`` (n names) or None; ``skipped``: the offsets in
    the range of the samples that could not be read, each with the reason (only a source that
    skips unreadable files has any)."""

    x: np.ndarray
    labels: np.ndarray | None = None
    files: list[str] | None = None
    skipped: dict[int, str] = field(default_factory=dict)
    #: the values of the keys the source reads (:meth:`Source.read_keys`): ``{key: (n, ...)}``
    fields: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def read(self) -> np.ndarray:
        """(n,) bool: whether each sample of the range was read (False: skipped)."""
        n = len(self.x) + len(self.skipped)
        mask = np.ones(n, dtype=bool)
        mask[list(self.skipped)] = False
        return mask


class Source:
    """A dataset of known length read by ranges of indices."""

    kind = "source"
    #: the dataset keys read with every range (:meth:`read_keys`)
    keys: tuple[str, ...] = ()

    def read_keys(self, keys: tuple[str, ...], what: str) -> None:
        """Read the dataset keys ``keys`` with every range (into :attr:`Rows.fields`); a source
        without named fields refuses, naming ``what`` (the target field that asked)."""
        if keys:
            raise XaikitValueError(
                f"{what} names the dataset key {keys[0]!r}, and {self.kind} data has no named fields: pass "
                "a NumpyDataset or a dataset of dict samples, or give the values as an array with one "
                "value per sample"
            )

    def __len__(self) -> int:  # pragma: no cover - every source overrides it
        raise NotImplementedError

    def get(self, start: int, stop: int) -> Rows:  # pragma: no cover
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.kind} of {len(self)} samples"

    def settings(self) -> dict[str, Any] | None:
        """How the samples are read, where it changes their values (None: as the data gives
        them); stored in the manifest, so that a store is not resumed with other reading."""
        return None


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

    def read_keys(self, keys: tuple[str, ...], what: str) -> None:
        missing = [k for k in keys if k not in self.ds.keys()]
        if missing:
            raise XaikitValueError(
                f"{what} names the key {missing[0]!r}, which is not a column of the NumpyDataset; its "
                f"columns: {self.ds.keys()}"
            )
        self.keys = tuple(keys)

    def __len__(self) -> int:
        return len(self.ds)

    def get(self, start: int, stop: int) -> Rows:
        cols = self.ds.data
        labels = None if self.label_key is None else _labels(cols[self.label_key][start:stop], "labels")
        files = None if self.file_key is None else [str(f) for f in cols[self.file_key][start:stop]]
        rows = Rows(_float32(cols[self.x_key][start:stop], f"column {self.x_key!r}"), labels, files)
        rows.fields = {k: np.asarray(cols[k][start:stop]) for k in self.keys}
        return rows


def _split_sample(
    item: Any, x_key: str, label_key: str | None, where: str, keys: tuple[str, ...] = ()
) -> tuple[Any, Any]:
    """(input, label or None) of one sample: an array, an ``(x, y, ...)`` tuple or a dict."""
    if keys:
        missing = [k for k in keys if not isinstance(item, Mapping) or k not in item]
        if missing:
            got = f"dicts with keys {list(item)}" if isinstance(item, Mapping) else describe(item)
            raise XaikitValueError(
                f"target: the dataset key {missing[0]!r} (a per-sample target field) is not in the {where} "
                f"samples; they are {got}: give dict samples with that key, or the values as an array"
            )
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


def _fields(items: list[Any], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The values of ``keys`` of dict samples, stacked: ``{key: (n, ...)}`` (an object array of
    the values when their shapes differ, refused by the target's check)."""
    out: dict[str, np.ndarray] = {}
    for key in keys:
        values = [np.asarray(item[key]) for item in items]
        if len({v.shape for v in values}) == 1:
            out[key] = np.stack(values)
        else:
            out[key] = np.empty(len(values), dtype=object)
            out[key][:] = values
    return out


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

    def read_keys(self, keys: tuple[str, ...], what: str) -> None:
        self.keys = tuple(keys)  # checked on each sample (a dict with the keys)

    def get(self, start: int, stop: int) -> Rows:
        items = [self.ds[i] for i in range(start, stop)]
        pairs = [_split_sample(item, self.x_key, self.label_key, self.kind, self.keys) for item in items]
        rows = _stack([p[0] for p in pairs], [p[1] for p in pairs], self.kind)
        rows.fields = _fields(items, self.keys)
        return rows


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
        pairs = [_split_sample(item, self.x_key, self.label_key, self.kind, self.keys) for item in items]
        rows = _stack([p[0] for p in pairs], [p[1] for p in pairs], self.kind)
        rows.fields = _fields(items, self.keys)
        return rows

    def read_keys(self, keys: tuple[str, ...], what: str) -> None:
        self.keys = tuple(keys)  # checked on each sample (a dict with the keys)


#: Pillow modes read as one channel (16-bit and float modes are scaled by each image's maximum)
GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")
#: what Pillow raises for a file it cannot decode (truncated, corrupt, not an image, too large)
_DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, SyntaxError, ValueError, EOFError)


class UnreadableFile(XaikitValueError):
    """An image file that cannot be read: ``path`` and ``reason`` (what Pillow or the transform
    said). The message names the file and how to skip such files."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(
            f"data: cannot read the image file {path!r} ({reason}); fix or remove it, or pass "
            "skip_bad=True to skip unreadable files (the store lists them in skipped.json)"
        )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: the images of each ``channels=`` value
_NAMES = {1: "grayscale", 3: "RGB"}


def _channels_of(shape: tuple[int, ...]) -> str:
    c = shape[-1] if len(shape) == 3 else 1
    what = _NAMES.get(c)
    return f"{c} channel{'' if c == 1 else 's'}" + (f" ({what})" if what else "")


def read_image(path: str, resize: tuple[int, int] | None = None, channels: int | None = None) -> np.ndarray:
    """One image file as float32 (H, W, 1) grayscale or (H, W, 3) RGB in [0, 1] (8-bit images
    divided by 255; 16-bit and float grayscale by the image's maximum). ``resize``: (H, W),
    bilinear; ``channels``: 1 or 3 converts every image (RGB to grayscale by Pillow's ITU-R
    601-2 luma; grayscale to RGB by repeating it); None keeps each file's own.

    Raises:
        UnreadableFile: Pillow cannot decode the file (the message names it).

    Example:
        >>> import tempfile, os
        >>> from PIL import Image
        >>> path = os.path.join(tempfile.mkdtemp(), "g.png")
        >>> Image.fromarray(np.full((4, 6), 255, np.uint8)).save(path)
        >>> read_image(path).shape, read_image(path, resize=(2, 3), channels=3).shape
        ((4, 6, 1), (2, 3, 3))
    """
    from PIL import Image

    errors: tuple[type[BaseException], ...] = (*_DECODE_ERRORS, Image.DecompressionBombError)
    try:
        with Image.open(path) as img:
            gray = img.mode in GRAY_MODES
            if gray and img.mode not in ("1", "L", "LA", "La"):
                im, scale = img.convert("F"), None  # 16-bit / float: by the image's maximum
            elif gray or channels == 1:
                im, scale = img.convert("L"), 255.0
            else:
                im, scale = img.convert("RGB"), 255.0
            if resize is not None:
                im = im.resize((resize[1], resize[0]), Image.Resampling.BILINEAR)
            array = np.asarray(im, dtype=np.float32)
    except errors as exc:
        raise UnreadableFile(path, _reason(exc)) from exc
    array = array / (max(float(array.max()), 1.0) if scale is None else scale)
    if array.ndim == 2:
        array = array[..., None]
        if channels == 3:
            array = np.repeat(array, 3, axis=-1)
    return array


class ImageFilesSource(Source):
    """PNG/JPEG files, sorted by path, read by :func:`read_image` (float32 (H, W, 3) RGB in
    [0, 1], (H, W, 1) for grayscale; ``resize`` and ``channels`` as there), or with
    ``transform(path) -> array``. Every image must have the first one's shape: another size or
    channel count is refused with both files named (and the option that fixes it). With
    ``skip_bad`` a file that cannot be decoded is skipped (listed in the :class:`Rows`) rather
    than stopping the run."""

    kind = "image files"

    def __init__(
        self,
        files: list[str],
        transform: Callable[[str], Any] | None,
        root: str,
        *,
        resize: tuple[int, int] | None = None,
        channels: int | None = None,
        skip_bad: bool = False,
    ) -> None:
        # names as stored: relative to the folder, or as the glob matched them; paths as read:
        # absolute, so that a worker with another working directory (Ray) finds them
        self.names = [os.path.relpath(p, root) if root else p for p in files]
        self.files = [os.path.abspath(p) for p in files]
        self.transform = transform
        self.root = root
        self.resize, self.channels, self.skip_bad = resize, channels, skip_bad
        self.shape: tuple[int, ...] | None = None
        self.first: str | None = None

    def __len__(self) -> int:
        return len(self.files)

    def settings(self) -> dict[str, Any] | None:
        found = {"resize": None if self.resize is None else list(self.resize), "channels": self.channels}
        return {k: v for k, v in found.items() if v is not None} or None

    def _read(self, path: str) -> np.ndarray:
        if self.transform is None:
            return read_image(path, self.resize, self.channels)
        try:
            return np.asarray(self.transform(path))
        except _DECODE_ERRORS as exc:
            raise UnreadableFile(path, f"transform: {_reason(exc)}") from exc

    def _one(self, path: str) -> np.ndarray:
        array = self._read(path)
        shape = tuple(array.shape)
        if self.shape is None:
            self.shape, self.first = shape, path
        elif shape != self.shape:
            raise XaikitValueError(self._mismatch(path, shape))
        return array

    def _mismatch(self, path: str, shape: tuple[int, ...]) -> str:
        known = self.shape or ()
        if self.transform is not None:
            return (
                f"data: transform gave an array of shape {shape} for {path!r} but {known} for the first "
                f"image {self.first!r}; it must return one fixed shape"
            )
        if shape[:2] != known[:2]:
            return (
                f"data: the images have different sizes: {self.first!r} is {known[0]}x{known[1]} and "
                f"{path!r} is {shape[0]}x{shape[1]} (height x width); pass resize=(H, W) to resize every "
                "image as it is read"
            )
        want = 3 if 3 in (known[-1], shape[-1]) else known[-1]
        other = 1 if want == 3 else 3
        return (
            f"data: {path!r} has {_channels_of(shape)} and the first image {self.first!r} has "
            f"{_channels_of(known)}; pass channels={want} to read every image as "
            f"{_NAMES[want]} (or channels={other}: as {_NAMES[other]})"
        )

    def get(self, start: int, stop: int) -> Rows:
        samples: list[np.ndarray] = []
        skipped: dict[int, str] = {}
        for offset, path in enumerate(self.files[start:stop]):
            try:
                samples.append(self._one(path))
            except UnreadableFile as exc:
                if not self.skip_bad:
                    raise
                skipped[offset] = exc.reason
        if samples:
            rows = _stack(samples, [None] * len(samples), self.kind)
        else:
            rows = Rows(np.zeros((0, *(self.shape or ())), np.float32))
        rows.files, rows.skipped = self.names[start:stop], skipped
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


def _check_reading(
    resize: Any, channels: Any, skip_bad: Any, transform: Any
) -> tuple[tuple[int, int] | None, int | None]:
    if resize is not None:
        if isinstance(resize, (str, bytes)) or not hasattr(resize, "__len__") or len(resize) != 2:
            raise XaikitTypeError(
                f"resize must be None or a pair (H, W) of ints >= 1; got {describe(resize)}"
            )
        resize = (check_int(resize[0], "resize[0] (H)", 1), check_int(resize[1], "resize[1] (W)", 1))
    if channels is not None and (isinstance(channels, bool) or channels not in (1, 3)):
        raise XaikitValueError(
            f"channels must be None (each file's own), 1 (grayscale) or 3 (RGB); got {describe(channels)}"
        )
    if not isinstance(skip_bad, bool):
        raise XaikitTypeError(f"skip_bad must be True or False; got {describe(skip_bad)}")
    if transform is not None and (resize is not None or channels is not None):
        raise XaikitValueError(
            "resize= and channels= apply to the image files as xaikit reads them; with transform= the "
            "transform reads them: resize or convert there"
        )
    return resize, None if channels is None else int(channels)


def as_source(
    data: Any,
    x_key: str = "x",
    label_key: str | None = None,
    transform: Callable[[str], Any] | None = None,
    labels: Any = None,
    *,
    resize: tuple[int, int] | None = None,
    channels: int | None = None,
    skip_bad: bool = False,
) -> Source:
    """The :class:`Source` of a dataset given to ``explain_dataset``, or a clear error.
    ``resize``, ``channels`` and ``skip_bad`` are for image files (see
    :class:`ImageFilesSource`); they are refused for other data."""
    if isinstance(data, Source):
        return data
    if transform is not None and not callable(transform):
        raise XaikitTypeError(f"transform must be a function of an image path; got {describe(transform)}")
    resize, channels = _check_reading(resize, channels, skip_bad, transform)
    if isinstance(data, (str, os.PathLike)):
        files, root = _image_files(os.fspath(data))
        return ImageFilesSource(files, transform, root, resize=resize, channels=channels, skip_bad=skip_bad)
    given = [name for name, v in (("resize", resize), ("channels", channels), ("skip_bad", skip_bad)) if v]
    if given:
        raise XaikitValueError(
            f"data: {'= and '.join(given)}= {'is' if len(given) == 1 else 'are'} for a folder or glob of image "
            f"files; got {describe(data)} as data"
        )
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
