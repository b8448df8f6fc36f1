"""The results store of ``explain_dataset``: a Zarr v3 group on a (shared) file system.

Layout of ``<out>/``::

    zarr.json          the root group; its attributes hold a copy of the manifest
    manifest.json      format version, model fingerprint, method, options, length, shard size, ...
    attributions/      (N, *map shape) float32, one chunk per shard along axis 0
    index/ label/ prediction/ score/ delta/ file/    (N,) columns, one chunk per shard
    target_<field>/    (N, ...) the per-sample fields of the run's target object (e.g.
                       target_box (N, 4), target_mask (N, H, W)), one chunk per shard, written
                       with the shard and under its checksum
    shards/<k>.json    the completion record of shard k (written last, atomically); it lists
                       the samples of the shard that were skipped as unreadable and, under
                       ``map_status``, its degenerate maps by dataset index
    skipped.json       every skipped sample of the committed shards (rewritten at the end of a run)
    .lock              the pid and host of the run that writes the store

A shard is committed by one atomic write (temp file + ``os.replace``) of its completion record
after all of its data: a crash leaves a shard either committed or not. The record holds a
SHA-256 of the shard's stored values; on resume a committed shard is read back and its checksum
verified, so a partial or corrupted chunk is found and the shard redone.

A store whose run stopped before it committed any shard holds nothing worth keeping: a run with
other settings starts it over rather than refusing it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitError, XaikitValueError, XaikitWriteError
from xaikit.files import TEMP_PREFIX, write_error, write_json

#: version of the store layout; a store of another version is refused
FORMAT = 1
#: the manifest keys whose values must match for a run to resume a store
SETTINGS = (
    "format",
    "fingerprint",
    "method",
    "options",
    "length",
    "shard_size",
    "batch_size",
    "seed",
    "target",
    "data",
)
#: per-sample columns: name -> (dtype, fill value)
COLUMNS: dict[str, tuple[Any, Any]] = {
    "index": ("int64", -1),
    "label": ("int64", -1),
    "prediction": ("int64", -1),
    "score": ("float32", float("nan")),
    "delta": ("float32", float("nan")),
}


def _current_names(manifest: dict[str, Any]) -> dict[str, Any]:
    """A stored manifest with its method options under their names now (a store written with
    RISE's ``n_masks`` resumes a run given ``nsamples``; see ``Method.renamed``)."""
    from xaikit.xai.registry import get_method

    options = manifest.get("options")
    try:
        record = get_method(str(manifest.get("method", "")))
    except XaikitError:  # a method not registered in this process: compared as stored
        return manifest
    if not isinstance(options, dict) or not record.renamed:
        return manifest
    return {**manifest, "options": record.current_names(options, warn=False)}


class StoreLockedError(XaikitError):
    """Another run is writing the store (``xk.xai.StoreLockedError``): the message names its pid,
    host and lock file."""


@dataclass
class ShardResult:
    """What one shard gives: the per-sample values of samples ``start`` .. ``stop - 1``.
    ``attributions`` is None when no sample of the shard could be read; ``skipped`` lists the
    samples that could not (``{"index", "file", "error"}``), whose maps are NaN."""

    shard: int
    start: int
    stop: int
    attributions: np.ndarray | None
    label: np.ndarray
    prediction: np.ndarray
    score: np.ndarray
    delta: np.ndarray
    files: list[str] | None
    seconds: float = 0.0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    #: per sample: "" for a sound map, else its status (:mod:`xaikit.xai.health`)
    map_status: np.ndarray | None = None
    #: the per-sample fields of the target object: ``{field: (stop - start, ...)}``
    targets: dict[str, np.ndarray] = field(default_factory=dict)

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "index": np.arange(self.start, self.stop, dtype=np.int64),
            "label": self.label.astype(np.int64),
            "prediction": self.prediction.astype(np.int64),
            "score": self.score.astype(np.float32),
            "delta": self.delta.astype(np.float32),
        }


def target_columns(manifest: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The store arrays of the target's per-sample fields: ``{"target_<field>": (one sample's
    shape, dtype)}`` (see :mod:`xaikit.xai.dataset.targets`), by name."""
    described = manifest.get("target")
    if not isinstance(described, Mapping):
        return {}
    return {
        f"target_{name}": (tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
        for name, entry in sorted(described.items())
        if isinstance(entry, Mapping) and "per_sample" in entry
    }


def checksum(
    attributions: np.ndarray | None,
    columns: Mapping[str, np.ndarray],
    files: list[str],
    targets: Mapping[str, np.ndarray] | None = None,
) -> str:
    """SHA-256 of a shard's values as stored (float32 maps, unless None: a shard with no maps,
    the columns in ``COLUMNS`` order, the file names joined by newlines, then the target's
    per-sample fields by name, ``targets``: ``{"target_<field>": values}``)."""
    digest = hashlib.sha256()
    if attributions is not None:
        digest.update(np.ascontiguousarray(attributions, dtype=np.float32).tobytes())
    for name, (dtype, _) in COLUMNS.items():
        digest.update(np.ascontiguousarray(columns[name], dtype=dtype).tobytes())
    digest.update("\n".join(files).encode("utf-8"))
    for name in sorted(targets or {}):
        digest.update(name.encode("utf-8"))
        digest.update(np.ascontiguousarray((targets or {})[name]).tobytes())
    return digest.hexdigest()


def _difference(key: str, old: Any, new: Any) -> str:
    """How a setting differs, for a message; a target object's fields are named one by one."""
    if (
        key == "target"
        and isinstance(old, Mapping)
        and isinstance(new, Mapping)
        and old.get("kind") == new.get("kind")
    ):
        fields = [f for f in sorted(set(old) | set(new)) if old.get(f) != new.get(f)]
        return "; ".join(
            f"target field {f!r}{' (per sample)' if _per_sample(old.get(f)) or _per_sample(new.get(f)) else ''}: "
            f"stored {json.dumps(old.get(f))[:160]}, now {json.dumps(new.get(f))[:160]}"
            for f in fields
        )
    return f"{key}: stored {json.dumps(old)[:120]}, now {json.dumps(new)[:120]}"


def _per_sample(entry: Any) -> bool:
    return isinstance(entry, Mapping) and "per_sample" in entry


def jsonable(value: Any) -> Any:
    """A JSON value standing for ``value`` in the manifest: arrays by shape, dtype and SHA-256,
    tuples as lists, other objects by their type and repr."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        array = np.ascontiguousarray(np.asarray(value))
        return {
            "array": list(array.shape),
            "dtype": array.dtype.str,
            "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
        }
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}", "repr": repr(value)[:200]}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """A results store at ``path`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    # ---- paths and the manifest ----------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def manifest(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.manifest_path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise XaikitValueError(
                f"{str(self.path)!r} is not an explain_dataset store (no manifest.json)"
            ) from None

    def update_manifest(self, changes: Mapping[str, Any]) -> None:
        """Set keys of the manifest that are not settings (e.g. the class names); call it
        holding the lock."""
        manifest = self.manifest()
        if all(manifest.get(k) == v for k, v in changes.items()):
            return
        manifest.update(changes)
        self.group().attrs["xaikit_manifest"] = manifest
        write_json(self.manifest_path, manifest)

    def record_path(self, shard: int) -> Path:
        return self.path / "shards" / f"{shard}.json"

    def group(self, writable: bool = True) -> Any:
        import zarr

        return zarr.open_group(str(self.path), mode="r+" if writable else "r")

    # ---- write errors --------------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """An OS error of writing the store in the block (a full disk, a read-only or missing
        place, a file where its folder should be) as :class:`~xaikit.XaikitWriteError` naming
        the store and saying that the committed shards are kept; other errors (the data's, the
        model's) pass unchanged."""
        hint = (
            "any shards committed so far are kept: fix that and run again (resume=True, the default) "
            "to go on where it stopped"
        )
        try:
            yield
        except XaikitWriteError as exc:
            raise XaikitWriteError(f"out: {exc}; {hint}") from exc
        except XaikitError:
            raise
        except OSError as exc:
            if not self._is_own(exc):
                raise
            raise XaikitWriteError(f"out: {write_error(self.path, exc, hint)}") from exc

    def _is_own(self, exc: OSError) -> bool:
        """Whether ``exc`` came from writing this store: no space or quota, a read-only file
        system, or a path of the store or of a folder above it."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            return True
        for name in (exc.filename, exc.filename2):
            if name is None:
                continue
            p = Path(os.path.abspath(os.fsdecode(name)))
            if p == self.path or self.path in p.parents or p in self.path.parents:
                return True
        return False

    # ---- the lock ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold ``<out>/.lock`` for the block: a second writer is refused; a lock left by a dead
        process of this host is taken over."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / ".lock"
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        for _ in range(3):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    held = json.loads(lock.read_text(encoding="utf-8") or "{}")
                except (OSError, ValueError):
                    held = {}
                pid, host = held.get("pid"), held.get("host")
                if host == me["host"] and isinstance(pid, int) and not _pid_alive(pid):
                    stale = lock.with_name(f".lock.stale-{os.getpid()}")
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(lock, stale)
                        stale.unlink()
                    continue
                if not held:  # being written this instant by its owner
                    time.sleep(0.05)
                    continue
                raise StoreLockedError(
                    f"out: the store {str(self.path)!r} is being written by another run (pid {pid} on "
                    f"host {host!r}, lock file {str(lock)!r}); wait for it, or delete the lock file if "
                    "that run is gone"
                ) from None
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(me))
            break
        else:
            raise StoreLockedError(f"out: could not take the lock {str(lock)!r} of the store")
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()

    # ---- creating / opening --------------------------------------------------------------------
    def prepare(self, manifest: dict[str, Any], resume: bool) -> None:
        """Create the store for ``manifest``, or check that the existing one has the same
        settings (``resume``) or clear it (not ``resume``). Call it holding the lock."""
        if self.exists():
            old = _current_names(self.manifest())
            differ = [k for k in SETTINGS if old.get(k) != manifest.get(k)]
            if not resume or (differ and not self.records()):
                self._clear()  # (a run that committed nothing left nothing to keep)
            else:
                if differ:
                    lines = "; ".join(_difference(k, old.get(k), manifest.get(k)) for k in differ)
                    raise XaikitValueError(
                        f"out: the store {str(self.path)!r} was written with other settings ({lines}); "
                        "pass another out=, or resume=False to overwrite it"
                    )
                return
        elif self.path.is_dir() and any(p.name != ".lock" for p in self.path.iterdir()):
            raise XaikitValueError(
                f"out: {str(self.path)!r} exists and is not an explain_dataset store (no manifest.json); "
                "pass a new or empty folder"
            )
        import zarr

        n, size = int(manifest["length"]), int(manifest["shard_size"])
        root = zarr.open_group(str(self.path), mode="a")  # "w" would delete the lock
        for name, (dtype, fill) in COLUMNS.items():
            root.create_array(name, shape=(n,), chunks=(size,), dtype=dtype, fill_value=fill)
        root.create_array("file", shape=(n,), chunks=(size,), dtype=str)
        for name, (shape, kind) in target_columns(manifest).items():
            zero = False if np.dtype(kind) == bool else 0
            root.create_array(name, shape=(n, *shape), chunks=(size, *shape), dtype=kind, fill_value=zero)
        root.attrs["xaikit_manifest"] = manifest
        (self.path / "shards").mkdir(exist_ok=True)
        write_json(self.manifest_path, manifest)

    def _clear(self) -> None:
        for child in self.path.iterdir():
            if child.name == ".lock":
                continue
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()

    def ensure_attributions(self, map_shape: tuple[int, ...]) -> None:
        """Create the ``attributions`` array on the first shard's map shape (and record the shape
        in the manifest), or check the shape against the one there."""
        manifest = self.manifest()
        known = manifest.get("map_shape")
        if known is not None:
            if tuple(known) != tuple(map_shape):
                raise XaikitValueError(
                    f"the method gave maps of shape {tuple(map_shape)} for this shard but {tuple(known)} "
                    "for the earlier ones; every sample of a dataset must have one shape"
                )
            return
        root = self.group()
        n, size = int(manifest["length"]), int(manifest["shard_size"])
        root.create_array(
            "attributions",
            shape=(n, *map_shape),
            chunks=(size, *map_shape),
            dtype="float32",
            fill_value=float("nan"),
            overwrite=True,
        )
        manifest["map_shape"] = [int(d) for d in map_shape]
        root.attrs["xaikit_manifest"] = manifest
        write_json(self.manifest_path, manifest)

    # ---- shards --------------------------------------------------------------------------------
    def write_shard(self, result: ShardResult, worker: str = "local") -> dict[str, Any]:
        """Write a shard's values, then commit it (its completion record); returns the record.
        A shard without maps (every sample skipped) writes NaN maps when the store has its
        ``attributions`` array already, else none (the array's fill value is NaN)."""
        root = self.group()
        cols = result.columns()
        files = result.files if result.files is not None else [""] * (result.stop - result.start)
        sl = slice(result.start, result.stop)
        maps = result.attributions
        if maps is None and "attributions" in root:
            maps = np.full((result.stop - result.start, *root["attributions"].shape[1:]), np.nan, np.float32)
        if maps is not None:
            root["attributions"][sl] = maps.astype(np.float32, copy=False)
        for name in COLUMNS:
            root[name][sl] = cols[name]
        root["file"][sl] = np.array(files, dtype=object)
        targets = {f"target_{name}": values for name, values in result.targets.items()}
        for name, values in targets.items():
            root[name][sl] = values
        record = {
            "shard": result.shard,
            "start": result.start,
            "stop": result.stop,
            "sha256": checksum(maps, cols, files, targets),
            "seconds": round(result.seconds, 4),
            "worker": worker,
            "host": socket.gethostname(),
            "committed": time.time(),
            "skipped": result.skipped,
        }
        if maps is None:
            record["maps"] = False
        if result.map_status is not None:  # sparse: {dataset index: status} of degenerate maps
            record["map_status"] = {
                str(result.start + int(i)): str(result.map_status[i])
                for i in np.flatnonzero(result.map_status != "")
            }
        write_json(self.record_path(result.shard), record)
        return record

    def records(self) -> dict[int, dict[str, Any]]:
        """The completion records found (unverified), by shard."""
        out: dict[int, dict[str, Any]] = {}
        folder = self.path / "shards"
        if not folder.is_dir():
            return out
        for p in folder.glob("*.json"):
            if p.name.startswith(TEMP_PREFIX):
                continue  # a record being written (or left by a killed writer): not a commit
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
                out[int(rec["shard"])] = rec
            except (OSError, ValueError, KeyError, TypeError):
                continue  # an unreadable record is no commit
        return out

    def verify(self, record: Mapping[str, Any]) -> bool:
        """Whether the stored values of a committed shard still have its checksum."""
        try:
            root = self.group(writable=False)
            sl = slice(int(record["start"]), int(record["stop"]))
            attributions = root["attributions"][sl] if record.get("maps", True) else None
            cols = {name: root[name][sl] for name in COLUMNS}
            files = [str(f) for f in root["file"][sl]]
            targets = {name: root[name][sl] for name in target_columns(self.manifest())}
        except Exception:  # a chunk that does not decode: not committed
            return False
        return bool(checksum(attributions, cols, files, targets) == record.get("sha256"))

    def committed(self, n_shards: int, shard_range: Any) -> set[int]:
        """The shards whose records exist, match their ranges and verify; a record that fails is
        removed (its shard is redone)."""
        done = set()
        shaped = self.manifest().get("map_shape") is not None
        for k, rec in self.records().items():
            ok = 0 <= k < n_shards and (int(rec.get("start", -1)), int(rec.get("stop", -1))) == shard_range(k)
            if ok and (shaped or rec.get("maps") is False) and self.verify(rec):
                done.add(k)
            else:
                with contextlib.suppress(FileNotFoundError):
                    self.record_path(k).unlink()
        return done

    # ---- skipped samples -----------------------------------------------------------------------
    def skipped(self) -> list[dict[str, Any]]:
        """The samples the committed shards skipped as unreadable (``{"index", "file",
        "error"}``), by index, from the shards' completion records."""
        found = [item for rec in self.records().values() for item in rec.get("skipped") or ()]
        return sorted(found, key=lambda item: int(item["index"]))

    def write_skipped(self) -> Path:
        """Write ``skipped.json`` (atomically): ``{"skipped": [...]}`` as :meth:`skipped` gives
        it; returns its path."""
        return write_json(self.path / "skipped.json", {"skipped": self.skipped()})
