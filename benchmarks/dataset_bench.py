"""Throughput of ``xk.xai.explain_dataset``: ``engine="local"`` against Ray with 1 and 2 local
workers, for two shard sizes, and the driver's peak memory as the dataset grows.

Usage:
    python benchmarks/dataset_bench.py [--images 1024] [--nsamples 16] [--batch 32]
        [--shards 64,256] [--quick] [--json benchmarks/results/DATE-dataset.json]
        [--out docs/benchmarks.md]
    python benchmarks/dataset_bench.py --render benchmarks/results/DATE-dataset.json --out docs/benchmarks.md

Model: the LeNet of ``xaikit.architecture.torch`` (32x32x3, 10 classes, seeded weights), torch,
CPU. Data: a map-style dataset that draws image ``i`` from a generator seeded with ``i`` (so
the data itself takes no memory and the driver's memory shows only what explain_dataset keeps).
Method: SmoothGrad with ``--nsamples`` noise samples (that many gradient rows per image).

Lines, each one whole ``explain_dataset`` call into a fresh store (median of ``--reps``):

* ``local``: the calling process, torch with all cores;
* ``local, 1 thread``: the same with ``torch.set_num_threads(1)``: what one Ray worker (one CPU,
  one thread) computes, so ``ray 1 worker`` minus this line is Ray's overhead;
* ``ray N worker(s)``: ``engine="ray", workers=N`` on one local Ray session (started once, its
  start-up reported apart); each call starts its actors and builds their models.

Ray's overhead is ``t(ray 1 worker) - t(local, 1 thread)``; with two shard sizes a line through
the two splits it into a cost per call (actor start, model build) and one per shard (a task round
trip and the store write).
Memory: the driver's peak resident-set increase during a local run of N and of 4N images.
The section between the ``dataset`` markers of ``--out`` is replaced (added if absent).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from _measure import PeakRSS, machine, write_section  # noqa: E402

from xaikit.files import write_json  # noqa: E402

START = "<!-- dataset:start -->"
END = "<!-- dataset:end -->"


def lenet() -> Any:
    """The benchmark's model: the same weights in every process."""
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(0)
    return LeNet(input_shape=(3, 32, 32), classes=10).eval()


class Images:
    """Image ``i``: uniform noise from a generator seeded with ``i`` (3x32x32, float32)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.random.default_rng(i).random((3, 32, 32), dtype=np.float32)


def log(msg: str) -> None:
    print(msg, flush=True)


def one_run(
    n: int, shard: int, args: argparse.Namespace, engine: str, workers: int | None, sizes: dict | None = None
) -> float:
    """Seconds of one explain_dataset call into a fresh store; ``sizes`` gets the stored and the
    raw bytes of its attributions."""
    import xaikit as xk

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "x.zarr"
        t0 = time.perf_counter()
        res = xk.xai.explain_dataset(
            lenet, Images(n), method="smoothgrad", out=out, batch_size=args.batch,
            shard_size=shard, engine=engine, workers=workers, progress=False, nsamples=args.nsamples,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        if sizes is not None:
            sizes["stored"] = sum(f.stat().st_size for f in (out / "attributions").rglob("*") if f.is_file())
            sizes["raw"] = int(np.prod(res.attributions.shape)) * 4
        return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--nsamples", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--shards", default="64,256", help="shard sizes (samples)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="tiny settings: check that everything runs")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    p.add_argument(
        "--render", type=Path, default=None, help="re-render the section of a saved --json, measure nothing"
    )
    args = p.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        text = render(saved["rows"], saved["memory"], saved["meta"])
        print(text)
        if args.out:
            write_section(args.out, text, START, END)
        return 0
    if args.quick:
        args.images, args.nsamples, args.batch, args.shards, args.reps = 64, 2, 8, "16,32", 1
    shards = [int(s) for s in args.shards.split(",")]
    import ray
    import torch

    cores = os.cpu_count() or 1
    t_start, load_start = time.perf_counter(), [round(v, 2) for v in os.getloadavg()]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - t0
    log(f"ray.init: {ray_start:.1f} s")
    lines = [("local", "local", None, cores), ("local, 1 thread", "local", None, 1)]
    lines += [(f"ray {w} worker{'s' if w > 1 else ''}", "ray", w, cores) for w in (1, 2) if w <= cores]
    rows: list[dict[str, Any]] = []
    try:
        one_run(min(args.images, 2 * args.batch), shards[0], args, "local", None)  # warm-up
        for shard in shards:
            for name, engine, workers, threads in lines:
                torch.set_num_threads(threads)
                times = [one_run(args.images, shard, args, engine, workers) for _ in range(args.reps)]
                med = statistics.median(times)
                rows.append({
                    "line": name, "shard_size": shard, "shards": -(-args.images // shard), "times_s": times,
                    "median_s": med, "images_per_s": args.images / med,
                    "rows_per_s": args.images * args.nsamples / med,
                })  # fmt: skip
                log(f"shard {shard:4d} {name:16s} {med:7.2f} s  {args.images / med:8.1f} images/s")
        torch.set_num_threads(cores)
    finally:
        ray.shutdown()
    memory = []
    sizes: dict[str, int] = {}
    for n in (args.images, 4 * args.images):
        with PeakRSS() as peak:
            one_run(n, shards[-1], args, "local", None, sizes)
        memory.append({"images": n, "peak_rss_increase_mib": peak.increase / 2**20, **sizes})
        log(f"memory: {n} images: peak ΔRSS {peak.increase / 2**20:.1f} MiB; maps {sizes}")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    meta = {
        "command": "python benchmarks/dataset_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
        "machine": machine(), "load_start": load_start, "load_end": [round(v, 2) for v in os.getloadavg()],
        "seconds": time.perf_counter() - t_start, "ray_init_s": ray_start, "images": args.images,
        "nsamples": args.nsamples, "batch": args.batch, "reps": args.reps,
        "versions": f"torch {torch.__version__}, ray {ray.__version__}",
    }  # fmt: skip
    text = render(rows, memory, meta)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, {"meta": meta, "rows": rows, "memory": memory})
    if args.out:
        write_section(args.out, text, START, END)
    return 0


def render(rows: list[dict[str, Any]], memory: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    m = meta["machine"]
    out = [
        START,
        "## explain_dataset: local against Ray workers",
        "",
        f"Generated by `benchmarks/dataset_bench.py` on {meta['date']} (commit {meta['commit']}): "
        f"`{meta['command']}`; {m.get('cpu')}, {m.get('cores')} cores; load average {meta['load_start']} "
        f"at start, {meta['load_end']} at end; {meta['versions']}. LeNet 32x32x3 (torch, CPU), SmoothGrad "
        f"with {meta['nsamples']} noise samples ({meta['nsamples']} gradient rows per image), "
        f"{meta['images']} images, batches of {meta['batch']}, median of {meta['reps']} run(s); each "
        f"line is a whole `explain_dataset` call into a new store. `ray.init` (once, not in the lines): "
        f"{meta['ray_init_s']:.1f} s.",
        "",
        "| shard size | shards | line | median s | images/s | gradient rows/s | × local |",
        "|---|---|---|---|---|---|---|",
    ]
    for shard in sorted({r["shard_size"] for r in rows}):
        group = [r for r in rows if r["shard_size"] == shard]
        local = next(r for r in group if r["line"] == "local")
        for r in group:
            out.append(
                f"| {shard} | {r['shards']} | {r['line']} | {r['median_s']:.2f} | {r['images_per_s']:,.1f} | "
                f"{r['rows_per_s']:,.0f} | {local['median_s'] / r['median_s']:.2f} |"
            )
    out.append("")
    overheads = []
    for shard in sorted({r["shard_size"] for r in rows}):
        group = {r["line"]: r for r in rows if r["shard_size"] == shard}
        if "ray 1 worker" in group and "local, 1 thread" in group:
            extra = group["ray 1 worker"]["median_s"] - group["local, 1 thread"]["median_s"]
            overheads.append((shard, group["ray 1 worker"]["shards"], extra))
    if overheads:
        said = "; ".join(f"{e:.2f} s with shard size {s} ({k} shards)" for s, k, e in overheads)
        line = f"- Ray's overhead (ray 1 worker − local, 1 thread): {said}."
        if len(overheads) >= 2 and overheads[0][1] != overheads[-1][1]:
            (_, k1, e1), (_, k2, e2) = overheads[0], overheads[-1]
            per_shard = (e1 - e2) / (k1 - k2)
            line += (
                f" A line through the two: about {e1 - per_shard * k1:.1f} s per call (actor start, model "
                f"build) plus {1000 * per_shard:.0f} ms per shard (task round trip, store write)."
            )
        out.append(line)
    cores = m.get("cores") or 1
    if meta["load_start"] and meta["load_start"][0] > cores:
        out.append(
            f"- The machine was shared during this run (load average {meta['load_start'][0]} on {cores} "
            "cores): the timings are noisy, and the local line with all cores suffers most (its threads "
            "wait on each other); rerun on a quiet machine for figures to quote."
        )
    mem = ", ".join(f"{x['images']} images: {x['peak_rss_increase_mib']:.1f} MiB" for x in memory)
    big = memory[-1]
    out += [
        f"- Driver peak ΔRSS (local, the largest shard size): {mem}.",
        f"- Storage: {big['images']} maps of 3×32×32 float32 take {big['stored'] / 2**20:.2f} MiB on disk "
        f"for {big['raw'] / 2**20:.2f} MiB raw (zstd, Zarr's default): a ratio of "
        f"{big['raw'] / max(big['stored'], 1):.2f}.",
        "",
        END,
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
