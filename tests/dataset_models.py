"""Tiny models and data sources of the explain_dataset tests (imported by name from subprocesses
and Ray workers too, so they live beside the tests rather than inside a test file)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: the shape of one sample of the tests' images (channel-first)
SHAPE = (3, 8, 8)


def tiny_cnn() -> Any:
    """A seeded 3x8x8 -> 5 classes CNN: the same weights on every call."""
    import torch

    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 5),
    )
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


def unseeded_cnn() -> Any:
    """A factory that builds other weights on every call (what a worker must refuse)."""
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(SHAPE)), 5))


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)


class SlowData:
    """A map-style dataset of :func:`images` that sleeps ``delay`` seconds at the first sample of
    each shard (every ``every`` samples), so that a run can be killed between commits. Labels:
    ``index % 5``."""

    def __init__(self, n: int, every: int, delay: float, seed: int = 0) -> None:
        self.x = images(n, seed)
        self.y = np.arange(n) % 5
        self.every, self.delay = every, delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        if i % self.every == 0 and self.delay:
            time.sleep(self.delay)
        return self.x[i], int(self.y[i])


def run(out: str, n: int, every: int, delay: float, method: str = "smoothgrad", **kw: Any) -> None:
    """What the killed subprocess runs."""
    import xaikit as xk

    xk.xai.explain_dataset(
        tiny_cnn(),
        SlowData(n, every, delay),
        method=method,
        out=out,
        batch_size=4,
        shard_size=every,
        progress=False,
        nsamples=3,
        **kw,
    )


if __name__ == "__main__":
    import sys

    run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
