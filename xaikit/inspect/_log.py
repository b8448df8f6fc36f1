"""Storage of the module tracker: a run folder with JSON-lines statistics and JSON side files.

Layout of a run folder::

    <log_dir>/
        stats.jsonl   one JSON object per line: one tensor statistic record (see ModuleTracker)
        tree.json     the module tree
        meta.json     framework, model class, settings, start time

``stats.jsonl`` is strict JSON (no NaN / Infinity: non-finite numbers are written as ``null``) and
is only ever appended to, one ``write`` + ``flush`` of complete lines at a time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.files import write_error
from xaikit.files import write_json as _write_json_file

STATS_FILE = "stats.jsonl"
TREE_FILE = "tree.json"
META_FILE = "meta.json"

#: leading columns of the DataFrames, in this order (others follow in order of appearance)
COLUMNS = ("step", "call", "module", "class", "kind", "tname", "shape", "dtype")
#: trailing columns, last in this order
TRAILING = ("flags", "time")


def make_run_dir(log_dir: str | Path | None, model: Any) -> Path:
    """The run folder, created if needed (an existing folder is appended to).

    None gives ``./runs/inspect/<ModelClass>_<YYYYmmdd-HHMMSS>`` (with ``_1``, ``_2``... when
    that exists already).
    """
    if log_dir is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path("runs") / "inspect" / f"{type(model).__name__}_{stamp}"
        path, i = base, 1
        while path.exists():
            path, i = base.with_name(f"{base.name}_{i}"), i + 1
    elif isinstance(log_dir, (str, Path)):
        path = Path(log_dir)
    else:
        raise XaikitTypeError(f"log_dir must be a str, a Path or None; got {describe(log_dir)}")
    if path.exists() and not path.is_dir():
        raise XaikitValueError(f"log_dir must be a folder; {str(path)!r} is a file")
    path.mkdir(parents=True, exist_ok=True)
    return path


def clean(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None (recursively), ready for strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def append_lines(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append rows as JSON lines with one write and one flush. A last line that a crash cut
    short (no newline after it: a write that never finished, which :func:`read_log` ignores) is
    cut off first, so that the rows do not run on from it into a line no reader can parse."""
    text = "".join(json.dumps(row, allow_nan=False, separators=(",", ":")) + "\n" for row in rows)
    if not text:
        return
    try:
        drop_partial_line(path)
        with path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
    except OSError as exc:  # a full disk leaves at most a partial last line, cut off next time
        raise write_error(path, exc) from exc


def drop_partial_line(path: Path) -> None:
    """Truncate ``path`` after its last newline when it does not end with one."""
    try:
        f = path.open("r+b")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, 2)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        keep, pos, block = 0, end, 65536
        while pos > 0:  # back, a block at a time, to the last newline
            start = max(0, pos - block)
            f.seek(start)
            cut = f.read(pos - start).rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            pos = start
        f.truncate(keep)


def write_json(path: Path, obj: Any) -> None:
    """Write a strict JSON file atomically (see :mod:`xaikit.files`)."""
    _write_json_file(path, obj, allow_nan=False)


def frame(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of statistic rows with the leading columns first."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    lead = [c for c in COLUMNS if c in df.columns]
    tail = [c for c in TRAILING if c in df.columns]
    df = df[lead + [c for c in df.columns if c not in lead and c not in tail] + tail]
    if "call" in df.columns:
        df["call"] = df["call"].astype("Int64")
    return df


def read_log(path: str | os.PathLike[str]) -> Any:
    """Load the statistics of a tracker run into a pandas DataFrame.

    Args:
        path: a run folder (its ``stats.jsonl`` is read) or a JSON-lines file.

    Returns:
        One row per record, with the columns ``step, call, module, class, kind, tname, shape,
        dtype`` first, then the statistics (``mean, std, min, max, zero_frac, nonfinite, ...``),
        ``flags`` and ``time``. A last line cut short by a crash mid-write is ignored.

    Raises:
        XaikitValueError: the path does not exist, or a line other than the last is not JSON.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "stats.jsonl").write_text('{"step": 0, "kind": "output", "mean": 1.5}\\n')
        >>> read_log(d)["mean"].tolist()
        [1.5]
    """
    if not isinstance(path, (str, os.PathLike)):
        raise XaikitTypeError(f"path must be a str or path-like; got {describe(path)}")
    p = Path(path)
    if p.is_dir():
        p = p / STATS_FILE
    if not p.is_file():
        raise XaikitValueError(
            f"path must be a tracker run folder or a JSON-lines file; {str(p)!r} does not exist"
        )
    lines = p.read_text(encoding="utf-8").split("\n")
    rows: list[dict[str, Any]] = []
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == last:  # no newline after it: a write that never finished
                break
            raise XaikitValueError(f"line {i + 1} of {str(p)!r} is not a JSON object: {e}") from None
    return frame(rows)
