"""Per-call time of short TensorFlow explanations, where the work around the compiled chunk
step (the clean prediction pass, building rows, Python) is a large part of a call.

Each case is called five times (their times printed: the first pays plan tuning and the step's
trace; the fourth, since 2026-11-28, the compiled prediction pass's trace), then ``--reps``
times; the median and minimum of those are reported. Pass ``--root`` to time another checkout of
xaikit (e.g. a ``git worktree`` of an older commit) with the same script:

    python benchmarks/tf_call_overhead.py                      # this checkout
    git worktree add /tmp/before <rev>
    python benchmarks/tf_call_overhead.py --root /tmp/before   # the older one

Models: the benchmark LeNet (32x32x3, ``_models.tf_model("lenet")``) and
``keras.applications.ResNet50(weights=None)`` at 64x64x3 with 10 classes (random weights).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="xaikit checkout")
    parser.add_argument("--reps", type=int, default=12, help="timed calls per case after the first five")
    parser.add_argument("--threads", type=int, default=0, help="TF intra-op threads (0: TF's default)")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import keras
    import numpy as np
    import tensorflow as tf
    from _models import tf_model

    import xaikit as xk

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    print(f"xaikit from {xk.__file__}")
    lenet = tf_model("lenet")
    r50 = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    rng = np.random.default_rng(0)
    x16 = rng.random((16, 32, 32, 3), dtype=np.float32)
    x6 = rng.random((6, 32, 32, 3), dtype=np.float32)
    r16 = rng.random((16, 64, 64, 3), dtype=np.float32)
    net = xk.xai.SaliencyNet(lenet, "x", "y_pred", seed=0)
    cases: list[tuple[str, Any]] = [
        ("LeNet B=16 vanilla", lambda: xk.xai.explain(lenet, x16, method="vanilla")),
        ("LeNet B=16 SmoothGrad S=16", lambda: xk.xai.explain(lenet, x16, method="smoothgrad", nsamples=16)),
        ("LeNet B=16 Grad-CAM", lambda: xk.xai.explain(lenet, x16, method="gradcam")),
        (
            "LeNet B=6 reference call S=6 M=100",
            lambda: net.get_smoothed_masks({"x": x6}, nsamples=6, nintegration=100),
        ),
        ("ResNet-50 64x64 B=16 vanilla", lambda: xk.xai.explain(r50, r16, method="vanilla")),
    ]
    print("| case | first five calls (s) | median ms | min ms |")
    print("|---|---|---|---|")
    for name, fn in cases:
        first, timed = [], []
        for i in range(5 + args.reps):
            t = time.perf_counter()
            fn()
            (first if i < 5 else timed).append(time.perf_counter() - t)
        print(
            f"| {name} | {' / '.join(f'{v:.3f}' for v in first)} | "
            f"{statistics.median(timed) * 1e3:.1f} | {min(timed) * 1e3:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
