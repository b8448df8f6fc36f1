"""SmoothGrad and vanilla chunks on TensorFlow: one compiled call per chunk (the engine's
``noise_chunk``: noisy copies drawn, differentiated and summed inside the call) against the
eager build, the compiled gradient step and the eager fold, alternated in one process.

    python benchmarks/tf_noise_chunk.py [--reps 12]

Each case runs three warm-up rounds (the plan, the traces) and then ``--reps`` rounds, each
calling the eager and the fused version once; the medians and the largest difference of their
maps (relative to the largest value) are printed, then one compiled forward + backward pass of
the same rows (the bound) and the time of drawing the noise inside a graph.
Model: the benchmark LeNet (32x32x3, ``_models.tf_model("lenet")``), B=16.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]


def _median_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=12, help="timed rounds per case")
    args = parser.parse_args()
    import numpy as np
    import tensorflow as tf
    from _models import tf_model

    import xaikit as xk
    import xaikit.xai._engine.sweep as sweep

    lenet = tf_model("lenet")
    x = np.random.default_rng(0).random((16, 32, 32, 3), dtype=np.float32)
    fusable = sweep.noise_fusable
    modes = {"eager": lambda job: False, "fused": fusable}
    cases = {
        "vanilla B=16": {"method": "vanilla"},
        "SmoothGrad B=16 S=16": {"method": "smoothgrad", "nsamples": 16},
        "SmoothGrad B=16 S=64": {"method": "smoothgrad", "nsamples": 64},
    }
    try:
        for name, opts in cases.items():
            times: dict[str, list[float]] = {m: [] for m in modes}
            maps: dict[str, Any] = {}
            for rnd in range(3 + args.reps):
                for mode, rule in modes.items():
                    sweep.noise_fusable = rule  # type: ignore[assignment]
                    t0 = time.perf_counter()
                    maps[mode] = np.asarray(xk.xai.explain(lenet, x, seed=0, **opts))
                    if rnd >= 3:
                        times[mode].append(time.perf_counter() - t0)
            eager, fused = (statistics.median(times[m]) * 1e3 for m in modes)
            diff = float(np.abs(maps["eager"] - maps["fused"]).max() / np.abs(maps["eager"]).max())
            print(
                f"{name}: eager {eager:.1f} ms, fused {fused:.1f} ms ({eager / fused:.2f}x); maps differ by {diff:.1e}"
            )
    finally:
        sweep.noise_fusable = fusable

    rows = tf.constant(np.random.default_rng(1).random((256, 32, 32, 3), dtype=np.float32))
    targets = tf.zeros(256, dtype=tf.int32)

    @tf.function
    def step(r: Any, t: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(r)
            score = tf.gather(lenet(r, training=False), t, batch_dims=1)
        return tape.gradient(score, r)

    @tf.function
    def noise(seeds: Any) -> Any:
        return [tf.random.stateless_normal((16, 32, 32, 3), seed=seeds[j]) for j in range(16)]

    seeds = tf.constant([[j, 0] for j in range(16)], dtype=tf.int32)
    for _ in range(3):
        step(rows, targets), noise(seeds)
    print(
        f"bound: one compiled forward + backward of 256 rows: {_median_ms(lambda: step(rows, targets).numpy(), args.reps):.1f} ms"
    )
    print(
        f"16 noise draws (16, 32, 32, 3) inside a graph: {_median_ms(lambda: noise(seeds)[0].numpy(), args.reps):.1f} ms"
    )


if __name__ == "__main__":
    main()
