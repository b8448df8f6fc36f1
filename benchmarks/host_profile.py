"""Where a forward-only call's wall time goes on the host (issue 26): cProfile over a few xaikit
calls of Score-CAM, RISE and occlusion on the methods bench's ResNet-18 (224x224, random weights),
after a warm-up call that fixes the chunk plan, beside the same calls timed plainly and the
model's bare forward over the same rows.

On a GPU the kernels run asynchronously, so a Python function's cumulative time there is the
host's own work plus the time it waits on the device (``.cpu()``, synchronize). Where the call
takes longer than its kernels, the functions with the largest cumulative time outside the
model's forward say what the device waited for.

    python benchmarks/host_profile.py --device cuda --calls 5 --top 30 > host_profile.txt
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _device
from _device import Device


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _device.add_argument(p)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--cases", default="occlusion,scorecam,rise")
    args = p.parse_args(argv)
    import torch

    import xaikit as xk
    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    dev = Device.pick(args.device)
    torch.manual_seed(0)
    model = ResNet18(classes=1000).eval()
    calibrate_batchnorm(model, torch.rand(16, 3, args.size, args.size))
    model = dev.to(model)
    x = dev.to(torch.rand(2, 3, args.size, args.size))
    with torch.inference_mode():
        targets = model(x).argmax(1).tolist()
    cases: dict[str, dict[str, Any]] = {
        "occlusion": {"method": "occlusion", "window": 28, "stride": 14},
        "scorecam": {"method": "scorecam", "layer": "layer4"},
        "rise": {"method": "rise", "nsamples": 1000, "cell": 8, "p": 0.5},
    }
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        kw = cases[case]

        def call(kw: dict[str, Any] = kw) -> Any:
            out = xk.xai.explain(model, x, target=targets, **kw)
            dev.sync()
            return out

        call()
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            call()
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)
        times.sort()
        print(
            f"===== {case}: plain calls {', '.join(f'{t * 1e3:.1f}' for t in times)} ms (median {times[len(times) // 2] * 1e3:.1f})"
        )
        print(buf.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
