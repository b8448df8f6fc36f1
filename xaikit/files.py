"""Atomic file writes: the one way xaikit writes a file.

A file is written to a temporary file in the destination folder, then moved over the
destination with :func:`os.replace`: a reader never sees a half-written file, and a failure
leaves neither a partial file nor the temporary one behind. The temporary file's mode follows
the umask like any other new file (unlike :func:`tempfile.mkstemp`, which is always 0600).

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_text(folder / "a" / "note.txt", "hello")
    PosixPath('.../a/note.txt')
    >>> (folder / "a" / "note.txt").read_text(), sorted(p.name for p in (folder / "a").iterdir())
    ('hello', ['note.txt'])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xaikit.errors import XaikitError, XaikitWriteError

__all__ = ["TEMP_PREFIX", "atomic_path", "records_digest", "sha256_of_file", "write_json", "write_text"]

#: the name prefix of a file being written atomically (renamed into place when complete): a
#: reader of a folder skips such names (a writer killed before the rename leaves one behind)
TEMP_PREFIX = ".tmp-"


def _temp_name(path: Path) -> str:
    for _ in range(100):
        tmp = str(path.parent / f"{TEMP_PREFIX}{secrets.token_hex(6)}.{path.name}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {str(path)!r}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path to write to; it replaces ``path`` when the block ends without error.

    The temporary file keeps the destination's suffix (writers such as Keras' ``save_weights``
    choose the format from it). Missing parent folders are created.

    Example:
        >>> import tempfile, pathlib
        >>> dest = pathlib.Path(tempfile.mkdtemp()) / "x.bin"
        >>> with atomic_path(dest) as tmp:
        ...     _ = pathlib.Path(tmp).write_bytes(b"123")
        >>> dest.read_bytes()
        b'123'
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_name(dest)
    except OSError as exc:
        raise write_error(dest, exc) from exc
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, XaikitError) and exc.filename in (tmp, str(dest)):
            raise write_error(dest, exc) from exc  # named by the destination, not the temporary
        raise


def write_error(dest: Path, exc: OSError, hint: str = "") -> XaikitWriteError:
    """The error of a destination that cannot be written: its path and why, in words (and
    ``hint``, a sentence on what to do, where given)."""
    blocking = next((p for p in dest.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        why = f"{str(blocking)!r} is a file, not a folder"
    else:
        why = exc.strerror or str(exc)
    return XaikitWriteError(f"cannot write {str(dest)!r}: {why}" + (f"; {hint}" if hint else ""))


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike[str], obj: Any, **dump_options: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically (options go to :func:`json.dumps`)."""
    return write_text(path, json.dumps(obj, indent=2, **dump_options) + "\n")


def sha256_of_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a file's bytes, read in 1 MiB blocks.

    Example:
        >>> import tempfile
        >>> p = write_text(tempfile.mkdtemp() + "/a.txt", "")
        >>> sha256_of_file(p)[:12]
        'e3b0c44298fc'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def records_digest(records: Any) -> str:
    """The SHA-256 (hex) over an ``explain_dataset`` store's committed shards' checksums, in
    shard order (``f"{shard}:{sha256}\\n"`` each): it changes when a shard is committed, redone
    or removed. ``records`` maps shard numbers to their completion records. An analysis of the
    store (``xk.analyze``) records it, and the report compares it to tell a stale analysis.

    Example:
        >>> records_digest({}) == records_digest({})
        True
    """
    digest = hashlib.sha256()
    for k in sorted(records):
        digest.update(f"{k}:{records[k].get('sha256', '')}\n".encode())
    return digest.hexdigest()
