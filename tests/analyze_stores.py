"""Hand-made ``explain_dataset`` stores for the analysis tests: maps written through the store's own
writer (``Store.prepare`` / ``write_shard``), so that every value is known, with no model run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from xaikit.xai.dataset._store import FORMAT, ShardResult, Store


def write_store(
    path: str | Path,
    maps: np.ndarray,
    prediction: np.ndarray,
    label: np.ndarray | None = None,
    shard_size: int = 8,
    target: str | None = None,
    classes: list[str] | None = None,
    shards: list[int] | None = None,
    model: Any = None,
) -> Path:
    """A store of ``maps`` (N, *shape) with the given columns, cut into shards of ``shard_size``;
    only the shards listed in ``shards`` are committed (default: all). ``model``: the model the
    store says it explains (its fingerprint; default a made-up one)."""
    n = len(maps)
    fingerprint = "f" * 8
    if model is not None:
        from xaikit.xai import ModelSpec

        spec = ModelSpec.of(model)
        fingerprint = spec.fingerprint(spec.build())
    store = Store(path)
    manifest: dict[str, Any] = {
        "format": FORMAT, "xaikit": "test", "fingerprint": fingerprint, "model": "hand-made", "method": "vanilla",
        "options": {}, "length": n, "shard_size": shard_size, "batch_size": shard_size, "seed": 0,
        "target": target, "data": None, "created": 0.0, "classes": classes,
    }  # fmt: skip
    labels = np.full(n, -1, np.int64) if label is None else np.asarray(label, np.int64)
    with store.lock():
        store.prepare(manifest, resume=False)
        store.ensure_attributions(tuple(maps.shape[1:]))
        for k in range(-(-n // shard_size)):
            if shards is not None and k not in shards:
                continue
            s0, s1 = k * shard_size, min(n, (k + 1) * shard_size)
            result = ShardResult(
                k, s0, s1, np.asarray(maps[s0:s1], np.float32), labels[s0:s1], np.asarray(prediction[s0:s1], np.int64),
                np.ones(s1 - s0, np.float32), np.full(s1 - s0, np.nan, np.float32), None,
            )  # fmt: skip
            store.write_shard(result)
    return Path(path)


def commit_shard(path: str | Path, maps: np.ndarray, prediction: np.ndarray, k: int, shard_size: int) -> None:
    """Commit shard ``k`` of a store :func:`write_store` made (with the given full arrays)."""
    n = len(maps)
    s0, s1 = k * shard_size, min(n, (k + 1) * shard_size)
    result = ShardResult(
        k, s0, s1, np.asarray(maps[s0:s1], np.float32), np.full(s1 - s0, -1, np.int64), np.asarray(prediction[s0:s1]),
        np.ones(s1 - s0, np.float32), np.full(s1 - s0, np.nan, np.float32), None,
    )  # fmt: skip
    store = Store(path)
    with store.lock():
        store.write_shard(result)


def planted(
    n: int, kinds: list[int], side: int = 16, seed: int = 0, noise: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """(n, side, side) non-negative maps of known strategies, ``kinds`` cycled: 0 energy in the
    left half, 1 in the top-left corner (a quarter of the side), 2 in the bottom-right corner;
    plus uniform noise. Returns the maps and each one's kind."""
    rng = np.random.default_rng(seed)
    q = side // 4
    maps = rng.random((n, side, side)) * noise
    kind = np.asarray([kinds[i % len(kinds)] for i in range(n)])
    maps[kind == 0, :, : side // 2] += 1.0
    maps[kind == 1, :q, :q] += 3.0
    maps[kind == 2, -q:, -q:] += 3.0
    return maps.astype(np.float32), kind


def corner_model() -> Any:
    """A torch model whose output depends only on the top-left 2 x 2 pixels of a (1, 8, 8) image:
    logits ``(0, 10 (corner mean - 0.5))``: class 1 when the corner is bright."""
    import torch

    class Corner(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            c = x[:, 0, :2, :2].mean(dim=(1, 2))
            return torch.stack([torch.zeros_like(c), 10.0 * (c - 0.5)], dim=1)

    return Corner().eval()


def corner_data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 1, 8, 8) images in [0, 0.3) whose top-left 2 x 2 corner is 1 in every odd one, their
    labels (1 for a bright corner) and their maps: the corner for class 1, the centre for class 0."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 1, 8, 8)) * 0.3).astype(np.float32)
    y = np.arange(n) % 2
    x[y == 1, 0, :2, :2] = 1.0
    maps = (rng.random((n, 1, 8, 8)) * 0.01).astype(np.float32)
    maps[y == 1, 0, :2, :2] += 1.0
    maps[y == 0, 0, 3:5, 3:5] += 1.0
    return x, y, maps


def corner_model_keras() -> Any:
    """:func:`corner_model` as a Keras model of (8, 8, 1) channel-last images: the 2 x 2 corner
    cropped, averaged, and mapped to ``(0, 10 (mean - 0.5))`` by a fixed dense layer."""
    import keras

    inp = keras.Input((8, 8, 1))
    corner = keras.layers.GlobalAveragePooling2D()(keras.layers.Cropping2D(((0, 6), (0, 6)))(inp))
    dense = keras.layers.Dense(2)
    model = keras.Model(inp, dense(corner))
    dense.set_weights([np.array([[0.0, 10.0]], np.float32), np.array([0.0, -5.0], np.float32)])
    return model
