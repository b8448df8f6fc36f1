"""Compare ``xk.evaluate.sparseness`` / ``complexity`` with Quantus 0.6's ``Sparseness`` and
``Complexity`` on the same maps, and save Quantus's scores for the CI test.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus and
torch, this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_complexity.py

A seeded torch LeNet (3 channels, 5 classes, untrained) explains 6 ``shapes`` images with
vanilla gradients. Quantus flattens whatever attribution it gets, so it is given (a) the
(B, 3, H, W) attributions (our ``channels="flatten"``) and (b) their channel-summed
magnitudes as (B, 1, H, W) (our default ``channels="sum"``). Quantus's defaults
(``normalise=True``: divide by the batch's largest magnitude, ``abs=True``) are kept.

Writes ``tests/data/quantus_complexity.npz`` (inputs, maps, Quantus's scores, the model's
weight checksum) that ``tests/test_evaluate_complexity.py`` checks against without Quantus.
Timings (batch 32, median of 3): see the printout; the machine is shared, take them as rough.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = 6
OUT = ROOT / "tests" / "data" / "quantus_complexity.npz"


def setup(n: int) -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray, float]:
    """The seeded LeNet, n images (B, 3, 32, 32) in [0, 1], their classes, vanilla maps and
    the model's weight checksum."""
    torch.manual_seed(0)
    model = LeNet(input_shape=(3, 32, 32), classes=5).eval()
    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    _, test = shapes.load_data(n_train=0, n_eval=max(n, 8), seed=3)
    x = np.ascontiguousarray(test["x"][:n].astype(np.float32).transpose(0, 3, 1, 2) / 255.0)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    maps = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"), dtype=np.float32)
    return model, x, y, maps, checksum


def quantus_scores(
    model: torch.nn.Module, x: np.ndarray, y: np.ndarray, a: np.ndarray
) -> dict[str, np.ndarray]:
    kw = {"model": model, "x_batch": x, "y_batch": y, "a_batch": a, "channel_first": True, "device": "cpu"}
    return {
        "sparseness": np.asarray(quantus.Sparseness(disable_warnings=True)(**kw), dtype=np.float64),
        "complexity": np.asarray(quantus.Complexity(disable_warnings=True)(**kw), dtype=np.float64),
    }


def median_time(fn, reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    model, x, y, maps, checksum = setup(SAMPLES)
    summed = np.abs(maps).sum(axis=1, keepdims=True)
    q_flat = quantus_scores(model, x, y, maps.copy())
    q_sum = quantus_scores(model, x, y, summed.copy())
    ours = {
        ("sparseness", "flatten"): xk.evaluate.sparseness(maps, channels="flatten").scores,
        ("complexity", "flatten"): xk.evaluate.complexity(maps, channels="flatten").scores,
        ("sparseness", "sum"): xk.evaluate.sparseness(maps).scores,
        ("complexity", "sum"): xk.evaluate.complexity(maps).scores,
    }
    print(f"quantus {quantus.__version__}, torch {torch.__version__}, {SAMPLES} samples")
    print("| metric | channels | max abs difference |")
    print("|---|---|---:|")
    for (metric, channels), score in ours.items():
        theirs = (q_flat if channels == "flatten" else q_sum)[metric]
        print(f"| {metric} | {channels} | {np.abs(score - theirs).max():.2e} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        x=x,
        y=y,
        maps=maps,
        checksum=np.float64(checksum),
        sparseness_flatten=q_flat["sparseness"],
        complexity_flatten=q_flat["complexity"],
        sparseness_sum=q_sum["sparseness"],
        complexity_sum=q_sum["complexity"],
    )
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")

    # timings at batch 32 (maps given; Quantus's per-call overhead included, as a user sees it)
    model, x, y, maps, _ = setup(32)
    print("\n| metric, batch 32 | xaikit s | Quantus s | speed-up |")
    print("|---|---:|---:|---:|")
    for name, ours_fn, q_cls in (
        ("sparseness", xk.evaluate.sparseness, quantus.Sparseness),
        ("complexity", xk.evaluate.complexity, quantus.Complexity),
    ):
        metric = q_cls(disable_warnings=True)
        t_ours = median_time(lambda f=ours_fn: f(maps, channels="flatten"))
        t_q = median_time(
            lambda m=metric: m(
                model=model, x_batch=x, y_batch=y, a_batch=maps.copy(), channel_first=True, device="cpu"
            )
        )
        print(f"| {name} | {t_ours:.4f} | {t_q:.4f} | {t_q / t_ours:.1f}x |")


if __name__ == "__main__":
    main()
