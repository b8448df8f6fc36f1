"""Tiny numpy stand-ins for Pipeline and Network with exactly the methods of LOOP_CONTRACT.md."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def blobs(n: int, classes: int = 3, dim: int = 4, seed: int = 0, spread: float = 0.6) -> dict:
    """Gaussian blobs around one-hot-ish centres: easy to learn, deterministic."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    centres = np.eye(classes, dim) * 3.0
    x = (centres[y] + spread * rng.standard_normal((n, dim))).astype(np.float32)
    return {"x": x, "y": y.astype(np.int64)}


class FakePipeline:
    """``data[mode]`` is a dict of arrays or ``{ds_id: dict of arrays}``; batches in order."""

    def __init__(self, batch_size: int = 8, **data):
        self.batch_size = batch_size
        self.data = {}
        for mode, value in data.items():
            if value is None:
                continue
            if "x" in value:
                value = {"": value}
            self.data[mode] = value
        self.loader_calls: list[tuple[str, int, str]] = []

    def get_modes(self) -> set[str]:
        return set(self.data)

    def get_ds_ids(self, mode: str) -> list[str]:
        return list(self.data[mode])

    def steps_per_epoch(self, mode: str, ds_id: str = "") -> int:
        n = len(next(iter(self.data[mode][ds_id].values())))
        return -(-n // self.batch_size)

    def get_loader(self, mode: str, epoch: int, ds_id: str = "") -> Iterator[dict[str, np.ndarray]]:
        self.loader_calls.append((mode, epoch, ds_id))
        arrays = self.data[mode][ds_id]
        n = len(next(iter(arrays.values())))
        for start in range(0, n, self.batch_size):
            yield {k: v[start : start + self.batch_size] for k, v in arrays.items()}


class FakeModel:
    def __init__(self, dim: int, classes: int, seed: int = 0, name: str = "fake"):
        rng = np.random.default_rng(seed)
        self.weights = {"W": 0.01 * rng.standard_normal((dim, classes)), "b": np.zeros(classes)}
        self.model_name = name
        self.optimizer = None
        self.lr = 0.5


class FakeNetwork:
    """Softmax regression trained by plain gradient descent; outputs ``y_pred`` and ``ce``."""

    def __init__(self, dim: int = 4, classes: int = 3, per_sample_loss: bool = False, seed: int = 0):
        self.model = FakeModel(dim, classes, seed)
        self.models = [self.model]
        self.per_sample_loss = per_sample_loss
        self.calls: list[tuple] = []

    def load_epoch(self, mode: str, epoch: int) -> None:
        self.calls.append(("load", mode, epoch))

    def unload_epoch(self) -> None:
        self.calls.append(("unload",))

    def get_loss_keys(self) -> set[str]:
        return {"ce"}

    def run_step(self, batch: dict[str, np.ndarray], mode: str) -> dict[str, np.ndarray]:
        w = self.model.weights
        x, y = batch["x"].astype(np.float64), batch["y"]
        logits = x @ w["W"] + w["b"]
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        ce = -np.log(p[np.arange(len(y)), y] + 1e-12)
        if mode == "train":
            g = p.copy()
            g[np.arange(len(y)), y] -= 1
            g /= len(y)
            w["W"] = w["W"] - self.model.lr * x.T @ g
            w["b"] = w["b"] - self.model.lr * g.sum(axis=0)
        self.calls.append(("step", mode))
        loss = ce.astype(np.float32) if self.per_sample_loss else np.float32(ce.mean())
        return {"y_pred": p.astype(np.float32), "ce": loss}
