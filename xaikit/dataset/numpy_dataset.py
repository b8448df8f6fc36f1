"""An in-memory dataset made of named numpy columns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["NumpyDataset"]


class NumpyDataset:
    """A dataset held as a dict of equally long numpy arrays ("columns").

    ``ds[i]`` is one sample (a dict of per-sample values), ``ds["key"]`` a whole column,
    ``ds[[3, 1]]`` or ``ds[2:5]`` a dict of stacked rows; ``len(ds)`` is the number of samples;
    ``ds["new_key"] = array`` adds (or replaces) a column of the same length.

    Args:
        data: column name -> array-like whose first axis indexes samples.

    Raises:
        XaikitValueError: no columns, a 0-d column, or columns of different lengths.

    Example:
        >>> ds = NumpyDataset({"x": np.arange(6).reshape(3, 2), "y": np.array([0, 1, 0])})
        >>> len(ds), ds[1]["x"].tolist(), int(ds[1]["y"])
        (3, [2, 3], 1)
        >>> ds["index"] = np.arange(3)
        >>> sorted(ds.keys())
        ['index', 'x', 'y']
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        if not isinstance(data, Mapping):
            raise XaikitTypeError(f"data must be a dict of arrays; got {describe(data)}")
        if not data:
            raise XaikitValueError("data must have at least one column; got an empty dict")
        self._data: dict[str, np.ndarray] = {}
        self._size: int | None = None
        for key, value in data.items():
            self[key] = value

    # ---- access ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._size or 0)

    def keys(self) -> list[str]:
        """The column names, in insertion order."""
        return list(self._data)

    @property
    def data(self) -> dict[str, np.ndarray]:
        """The columns (the arrays themselves, not copies)."""
        return self._data

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            if index not in self._data:
                raise XaikitValueError(
                    f"key {index!r} is not a column of this dataset; columns: {self.keys()}"
                )
            return self._data[index]
        if isinstance(index, (int, np.integer)):
            i = int(index)
            if not -len(self) <= i < len(self):
                raise XaikitValueError(f"index {i} is out of range for a dataset of {len(self)} samples")
            return {k: v[i] for k, v in self._data.items()}
        if isinstance(index, slice):
            return {k: v[index] for k, v in self._data.items()}
        idx = np.asarray(index)
        if idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise XaikitTypeError(
                "index must be an int, a str column name, a slice or a 1-D list of ints; "
                f"got {describe(index)}"
            )
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise XaikitValueError(
                f"indices must lie in [0, {len(self)}); got min {idx.min()}, max {idx.max()}"
            )
        return {k: v[idx] for k, v in self._data.items()}

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise XaikitTypeError(f"a new column needs a str name; got {describe(key)}")
        array = np.asarray(value)
        if array.ndim == 0:
            raise XaikitValueError(f"column {key!r} must have a sample axis; got {describe(array)}")
        replacing_only = self._size is not None and len(self._data) == 1 and key in self._data
        if self._size is not None and not replacing_only and array.shape[0] != self._size:
            raise XaikitValueError(
                f"column {key!r} must have {self._size} rows like the other columns; got {describe(array)}"
            )
        self._data[key] = array
        self._size = array.shape[0]

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.shape[1:]} {v.dtype}" for k, v in self._data.items())
        return f"NumpyDataset({len(self)} samples; {cols})"

    # ---- splitting ---------------------------------------------------------------------------------
    def split(self, *sizes: float | int | Iterable[int], seed: int | None = None) -> Any:
        """Move samples out of this dataset into new datasets.

        Each argument makes one new dataset: a float in (0, 1) takes that fraction of the
        *original* size (rounded down, at least one sample), an int that many samples (both drawn
        at random from what is still here, with ``seed``), and an iterable of ints (a ``range``,
        list or array) exactly those indices of the original dataset. The taken samples are
        removed from this dataset; the rest keep their order.

        Args:
            *sizes: one or more fractions, counts or index collections.
            seed: seed of the random draw for fractions and counts (None: fresh randomness).

        Returns:
            One dataset for one argument, else a list of datasets in argument order.

        Raises:
            XaikitValueError: no argument, a fraction outside (0, 1), fractions summing to more
                than 1, a count below 1, more samples asked for than there are, indices out of
                range, repeated, or asked for twice.

        Example:
            >>> ds = NumpyDataset({"y": np.arange(10)})
            >>> part = ds.split(range(3))
            >>> part["y"].tolist(), len(ds)
            ([0, 1, 2], 7)
        """
        if not sizes:
            raise XaikitValueError("split needs at least one fraction, count or index collection")
        n = len(self)
        taken = np.zeros(n, dtype=bool)
        explicit: list[np.ndarray | None] = []
        frac_total = 0.0
        for s in sizes:
            if isinstance(s, (bool, np.bool_)):
                raise XaikitTypeError(f"split sizes must be fractions, counts or indices; got {describe(s)}")
            if isinstance(s, (float, np.floating)):
                if not 0.0 < float(s) < 1.0:
                    raise XaikitValueError(f"a split fraction must lie in (0, 1); got {float(s)!r}")
                frac_total += float(s)
                explicit.append(None)
            elif isinstance(s, (int, np.integer)):
                if int(s) < 1:
                    raise XaikitValueError(f"a split count must be at least 1; got {int(s)}")
                explicit.append(None)
            else:
                try:
                    idx = np.asarray(list(s), dtype=np.int64)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    raise XaikitTypeError(
                        f"split sizes must be fractions, counts or iterables of ints; got {describe(s)}"
                    ) from None
                if idx.size and (idx.min() < 0 or idx.max() >= n):
                    raise XaikitValueError(
                        f"split indices must lie in [0, {n}); got min {idx.min()}, max {idx.max()}"
                    )
                if np.unique(idx).size != idx.size or taken[idx].any():
                    raise XaikitValueError("split indices must not repeat, within or across arguments")
                taken[idx] = True
                explicit.append(idx)
        if frac_total > 1.0 + 1e-9:
            raise XaikitValueError(f"split fractions must sum to at most 1; got {frac_total:g}")
        rng = np.random.default_rng(seed)
        free = np.flatnonzero(~taken)
        free = free[rng.permutation(free.size)]
        parts: list[np.ndarray] = []
        pos = 0
        for s, given in zip(sizes, explicit):
            if given is not None:
                idx = given
            else:
                count = max(1, int(float(s) * n)) if isinstance(s, (float, np.floating)) else int(s)  # type: ignore[arg-type]
                if pos + count > free.size:
                    raise XaikitValueError(
                        f"split asks for {count} more samples but only {free.size - pos} are left "
                        f"of the {n} in the dataset"
                    )
                idx = np.sort(free[pos : pos + count])
                pos += count
            parts.append(idx)
        removed = np.zeros(n, dtype=bool)
        for idx in parts:
            removed[idx] = True
        if removed.all():
            raise XaikitValueError(f"split would take all {n} samples and leave this dataset empty")
        out = [NumpyDataset({k: v[idx] for k, v in self._data.items()}) for idx in parts]
        keep = ~removed
        self._data = {k: v[keep] for k, v in self._data.items()}
        self._size = int(keep.sum())
        return out[0] if len(out) == 1 else out
