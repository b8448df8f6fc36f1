"""``explain_dataset(engine="ray")``: shards explained by Ray actors.

Each worker is an actor that builds the model once (from the :class:`~xaikit.xai.dataset.spec.ModelSpec`:
the model object shipped by pickle, a factory, ``package.module:factory`` or a model file),
checks that its weights have the run's fingerprint, and explains the shards it is handed, writing
each into the store itself (the store's folder must be on a file system every worker sees) and
committing it with its completion record. The driver hands out shards one at a time per worker,
counts rows as shards come back, and re-queues the shard of a worker that died (a new actor
takes its place); a shard that the dead worker had already committed is not redone. The first
shard of a new store runs alone, because it fixes the shape of the ``attributions`` array.

Without ``address`` a local Ray cluster is started (``num_cpus=workers``) and shut down at the
end; with ``address`` (``"auto"``, ``"ray://host:port"``) the run joins that cluster. A Ray
session already started by the caller (``ray.init``) is used as it is and left running.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from typing import Any

from xaikit.backend.serialized import to_accelerator
from xaikit.errors import XaikitError, XaikitValueError
from xaikit.xai.dataset._shard import explain_shard
from xaikit.xai.dataset._sources import Source
from xaikit.xai.dataset._store import Store

#: the most worker deaths a run survives (beyond one per shard it is a crash loop, not bad luck)
MAX_DEATHS_PER_WORKER = 3


class ShardWorker:
    """A Ray actor's state: the model, the data source, the settings and the store."""

    def __init__(self, spec: Any, source: Source, settings: Any, path: str) -> None:
        import ray

        self.model = spec.build()
        found = spec.fingerprint(self.model)
        if found != settings.fingerprint:
            raise XaikitValueError(
                f"model_or_factory: a Ray worker built a model with other weights ({found}) than the "
                f"driver ({settings.fingerprint}); a factory must build the same weights every call "
                "(seed it, or load saved weights)"
            )
        if ray.get_gpu_ids():
            self.model = to_accelerator(self.model)
        self.source, self.settings, self.store = source, settings, Store(path)
        self.name = f"ray:{socket.gethostname()}:{os.getpid()}"

    def pid(self) -> int:
        return os.getpid()

    def run(self, k: int, create: bool) -> int:
        """Explain, write and commit shard ``k``; returns its row count."""
        result = explain_shard(self.model, self.source, self.settings, k)
        if create and result.attributions is not None:
            self.store.ensure_attributions(result.attributions.shape[1:])
        self.store.write_shard(result, self.name)
        return result.stop - result.start


def start_ray(workers: int | None, address: str | None) -> bool:
    """Start or join a Ray cluster unless one is up; True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    return True


def _init_error(exc: BaseException) -> XaikitError:
    text = str(exc)
    for line in reversed(text.splitlines()):
        if "Xaikit" in line and "Error:" in line:
            return XaikitValueError(line.split("Error:", 1)[1].strip())
    return XaikitValueError(f"a Ray worker could not start: {text[-1500:]}")


def run_ray(
    spec: Any,
    source: Source,
    settings: Any,
    store: Store,
    todo: list[int],
    bar: Any,
    workers: int | None,
    address: str | None,
    num_gpus: float | None,
) -> None:
    """Explain the shards ``todo`` on Ray workers (see the module)."""
    if type(source).__name__ == "TFDataSource":
        raise XaikitValueError(
            "data: a tf.data.Dataset cannot be shipped to Ray workers; pass a folder of images, a numpy "
            "array, a NumpyDataset or a torch Dataset, or use engine='local'"
        )
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    started = start_ray(workers, address)
    try:
        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0))
        per_gpu = (1.0 if gpus >= 1 else 0.0) if num_gpus is None else float(num_gpus)
        if workers is None:
            workers = int(gpus // per_gpu) if per_gpu else int(resources.get("CPU", 1))
        workers = max(1, min(workers, len(todo) or 1))
        actor = ray.remote(num_cpus=1, num_gpus=per_gpu, max_restarts=0, max_task_retries=0)(ShardWorker)
        source_ref = ray.put(source)

        def spawn() -> Any:
            return actor.remote(spec, source_ref, settings, str(store.path))

        def ready(handles: list[Any]) -> list[Any]:
            try:
                ray.get([h.pid.remote() for h in handles])
            except RayActorError as exc:
                raise _init_error(exc) from None
            return handles

        idle = deque(ready([spawn() for _ in range(workers)]))
        queue = deque(todo)
        shaped = store.manifest().get("map_shape") is not None
        pending: dict[Any, tuple[Any, int]] = {}
        deaths = 0
        while queue or pending:
            while queue and idle and (shaped or not pending):
                handle, k = idle.popleft(), queue.popleft()
                pending[handle.run.remote(k, not shaped)] = (handle, k)
                if not shaped:
                    break  # the first shard alone: it creates the attributions array
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                handle, k = pending.pop(ref)
                try:
                    rows = ray.get(ref)
                except RayTaskError as exc:  # the shard failed for a reason of its own: stop
                    raise exc.as_instanceof_cause() from None
                except RayActorError:
                    deaths += 1
                    if deaths > MAX_DEATHS_PER_WORKER * workers:
                        raise XaikitError(
                            f"{deaths} Ray workers died during the run; stopping (the committed shards "
                            "are kept: run again to resume)"
                        ) from None
                    ray.kill(handle, no_restart=True)
                    record = store.records().get(k)
                    if record is not None and store.verify(record):  # committed before it died
                        shaped = store.manifest().get("map_shape") is not None
                        bar.update(int(record["stop"]) - int(record["start"]))
                    else:
                        queue.appendleft(k)
                    idle.extend(ready([spawn()]))
                    continue
                # (a first shard of unreadable files only gives no map shape: the next runs alone)
                shaped = store.manifest().get("map_shape") is not None
                bar.update(rows)
                idle.append(handle)
        for handle in idle:
            ray.kill(handle, no_restart=True)
    finally:
        if started:
            ray.shutdown()
