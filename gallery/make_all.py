"""Regenerate every picture of the docs: each gallery script once, in its own process.

    python -m gallery.make_all                 # full sizes, into docs/img/
    python -m gallery.make_all --quick         # smallest sizes (seconds per script; for tests)
    python -m gallery.make_all --out-dir /tmp/pics --only saliency_methods

Each job runs ``python -m gallery.<script> --out <out-dir>/<picture> [options]`` from the
repository root. A new gallery script must be added to :data:`JOBS` (a test checks that every
``gallery/*.py`` script is listed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS_IMG = ROOT / "docs" / "img"


@dataclass(frozen=True)
class Job:
    """One run of one gallery script."""

    script: str  #: module name under ``gallery/``
    picture: str  #: file name of the picture it writes
    args: tuple[str, ...] = ()  #: options of the full-size run
    quick: tuple[str, ...] = ()  #: options of the ``--quick`` run (replace ``args``)
    frameworks: tuple[str, ...] = field(default=())  #: frameworks the job needs

    def argv(self, out_dir: Path, quick: bool, python: str = sys.executable) -> list[str]:
        opts = self.quick if quick else self.args
        return [python, "-m", f"gallery.{self.script}", "--out", str(out_dir / self.picture), *opts]


JOBS: tuple[Job, ...] = (
    Job("imgdata_grid", "imgdata_grid.png"),
    Job("history_plot", "history_plot.png"),
    Job(
        "inspect_stats",
        "inspect_stats.png",
        quick=("--steps", "9", "--every", "2"),
        frameworks=("torch",),
    ),
    Job(
        "saliency_methods",
        "saliency_methods_torch.png",
        args=("--framework", "torch"),
        quick=("--framework", "torch", "--epochs", "1", "--n-train", "256"),
        frameworks=("torch",),
    ),
    Job(
        "saliency_methods",
        "saliency_methods_tf.png",
        args=("--framework", "tf"),
        quick=("--framework", "tf", "--epochs", "1", "--n-train", "256"),
        frameworks=("tf",),
    ),
    Job(
        "evaluate_methods",
        "randomization_grid.png",
        quick=("--n-train", "64", "--epochs", "1", "--samples", "4", "--frameworks", "torch"),
        frameworks=("torch", "tf"),
    ),
)


def gallery_scripts() -> list[str]:
    """The runnable scripts of ``gallery/`` (not the helpers starting with ``_``, not this one)."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_") and p.stem != "make_all")


def environment() -> dict[str, str]:
    """The subprocesses' environment: headless matplotlib, quiet TF, this checkout first on the path."""
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(job: Job, out_dir: Path, quick: bool = False, timeout: float | None = None) -> float:
    """Run one job; returns its wall time in seconds. Raises ``CalledProcessError`` on failure."""
    start = time.perf_counter()
    subprocess.run(job.argv(out_dir, quick), cwd=ROOT, env=environment(), check=True, timeout=timeout)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes: fast, not for the docs")
    parser.add_argument("--out-dir", default=str(DOCS_IMG), help="folder of the pictures (default: docs/img)")
    parser.add_argument("--only", nargs="*", default=None, help="run only these scripts")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(args.only or ()) - {j.script for j in JOBS})
    if unknown:
        parser.error(f"unknown script(s) {unknown}; known: {sorted({j.script for j in JOBS})}")
    missing = sorted(set(gallery_scripts()) - {j.script for j in JOBS})
    if missing:
        print(f"make_all: gallery script(s) {missing} have no job in gallery/make_all.py", file=sys.stderr)
    total = time.perf_counter()
    failed = []
    for job in JOBS:
        if args.only is not None and job.script not in args.only:
            continue
        print(f"make_all: {job.script} -> {out_dir / job.picture}", flush=True)
        try:
            seconds = run(job, out_dir, quick=args.quick)
        except subprocess.CalledProcessError as err:
            print(f"make_all: {job.script} failed (exit {err.returncode})", file=sys.stderr, flush=True)
            failed.append(job.picture)
            continue
        print(f"make_all: {job.picture} done in {seconds:.1f} s", flush=True)
    print(f"make_all: {len(failed)} failed, total {time.perf_counter() - total:.1f} s", flush=True)
    if failed:
        print(f"make_all: failed: {failed}", file=sys.stderr)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
