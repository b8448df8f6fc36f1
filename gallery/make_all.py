"""Regenerate every picture of the docs: each gallery script once, in its own process.

    python -m gallery.make_all                 # full sizes, into docs/img/
    python -m gallery.make_all --quick         # smallest sizes, into a temporary folder (a check)
    python -m gallery.make_all --out-dir /tmp/pics --only saliency_methods

Each job runs ``python -m gallery.<script> --out <out-dir>/<picture or folder> [options]`` from
the repository root. A new gallery script must be added to :data:`JOBS` (or, if it paints
nothing, to :data:`NOT_PICTURES`); a test checks that every ``gallery/*.py`` script is listed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS_IMG = ROOT / "docs" / "img"


@dataclass(frozen=True)
class Job:
    """One run of one gallery script.

    The script gets ``--out <out_dir>/<out>``: a picture's path, or a folder for a script that
    writes several (``pictures`` lists what it writes, relative to ``out_dir``).
    """

    script: str  #: module name under ``gallery/``
    out: str  #: what ``--out`` names, relative to the pictures' folder
    args: tuple[str, ...] = ()  #: options of the full-size run
    quick: tuple[str, ...] = ()  #: options of the ``--quick`` run (replace ``args``)
    frameworks: tuple[str, ...] = field(default=())  #: frameworks the job needs
    pictures: tuple[str, ...] = ()  #: the pictures written (default: ``(out,)``)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.pictures or (self.out,)

    def argv(self, out_dir: Path, quick: bool, python: str = sys.executable) -> list[str]:
        opts = self.quick if quick else self.args
        return [python, "-m", f"gallery.{self.script}", "--out", str(out_dir / self.out), *opts]


_TUTORIAL = (
    "saliency_epoch_1.png",
    "saliency_epoch_3.png",
    "saliency_epoch_5.png",
    "gradcam_epoch_5.png",
    "smint_without_traces.png",
)

JOBS: tuple[Job, ...] = (
    Job("imgdata_grid", "imgdata_grid.png"),
    Job("imgdata_contour", "imgdata_contour.png"),
    Job("degenerate_maps", "degenerate_maps.png", frameworks=("torch",)),
    Job(
        "ig_convergence",
        "ig_convergence.png",
        quick=("--size", "64", "--steps", "2", "8", "32", "--images", "1"),
        frameworks=("torch",),
    ),
    Job("history_plot", "history_plot.png"),
    Job("inspect_stats", "inspect_stats.png", quick=("--steps", "9", "--every", "2"), frameworks=("torch",)),
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
        "cam_methods",
        "cam_methods.png",
        args=("--framework", "torch"),
        quick=("--framework", "torch", "--epochs", "1", "--n-train", "256"),
        frameworks=("torch",),
    ),
    Job(
        "saliency_epochs",
        "tutorial_xai",
        quick=("--n-train", "64"),
        frameworks=("torch",),
        pictures=tuple(f"tutorial_xai/{name}" for name in _TUTORIAL),
    ),
    Job(
        "trackers",
        "tutorial_xai",
        quick=("--n-train", "64"),
        frameworks=("torch",),
        pictures=tuple(
            f"tutorial_xai/{name}"
            for name in ("label_tracker.png", "instance_tracker.png", "hardest_sample.png")
        ),
    ),
    Job(
        "own_models",
        ".",  # writes its pictures straight into the pictures' folder
        quick=("--n", "2", "--smooth", "2", "--steps", "2"),
        frameworks=("torch", "tf"),
        pictures=("own_models_resnet18.png", "own_models_mobilenetv2.png", "own_models_vit.png"),
    ),
    Job(
        "perturbation",
        "perturbation.png",
        quick=("--epochs", "1", "--n-train", "256", "--masks", "50"),
        frameworks=("torch",),
    ),
    Job(
        "gradient_family",
        "gradient_family.png",
        quick=("--epochs", "1", "--n-train", "256", "--steps", "3"),
        frameworks=("torch",),
    ),
    Job(
        "methods_side_by_side",
        ".",  # writes its pictures straight into the pictures' folder
        args=("--part", "shapes"),
        quick=(
            "--part",
            "shapes",
            "--n-train",
            "64",
            "--epochs",
            "1",
            "--samples",
            "3",
            "--show",
            "2",
            "--n-masks",
            "16",
            "--light",
        ),
        frameworks=("torch",),
        pictures=("methods_side_by_side_shapes.png",),
    ),
    Job(
        "methods_side_by_side",
        ".",
        args=("--part", "resnet"),
        quick=("--part", "resnet", "--big", "1", "--scale", "2", "--n-masks", "16", "--light"),
        frameworks=("torch",),
        pictures=("methods_side_by_side_resnet18.png",),
    ),
    Job(
        "compare_methods",
        "compare.png",
        quick=("--n-train", "64", "--epochs", "1", "--samples", "4", "--resnet-samples", "0"),
        frameworks=("torch",),
    ),
    Job(
        "metric_agreement",
        "metric_agreement.png",
        quick=("--n-train", "64", "--epochs", "1", "--samples", "4"),
        frameworks=("torch",),
    ),
    Job(
        "evaluate_methods",
        "randomization_grid.png",
        quick=("--n-train", "64", "--epochs", "1", "--samples", "4", "--frameworks", "torch"),
        frameworks=("torch", "tf"),
    ),
    Job(
        "rules_methods",
        ".",  # writes its pictures straight into the pictures' folder
        quick=("--epochs", "1", "--n-train", "256", "--size", "32"),
        frameworks=("torch",),
        pictures=("rules_shapes.png", "rules_resnet18.png"),
    ),
    Job(
        "agnostic_methods",
        ".",  # writes its pictures straight into the pictures' folder
        quick=("--epochs", "1", "--n-train", "256", "--size", "64", "--segments", "16", "--light"),
        frameworks=("torch",),
        pictures=("agnostic_shapes.png", "agnostic_resnet18.png"),
    ),
    Job(
        "agnostic_convergence",
        "agnostic_convergence.png",
        quick=("--epochs", "1", "--n-train", "256", "--images", "2", "--seeds", "1", "--max-evals", "101"),
        frameworks=("torch",),
    ),
    Job(
        "pointing_game_protocol",
        "pointing_game.png",
        quick=("--n-train", "64", "--epochs", "1", "--n-eval", "8", "--masks", "8", "--boot", "20"),
        frameworks=("torch",),
    ),
    Job(
        "planted_shortcut",
        ".",  # writes its pictures straight into the pictures' folder
        quick=("--n-train", "1500", "--n-eval", "300", "--epochs", "2", "--compare", "8"),
        frameworks=("torch",),
        pictures=(
            "planted_shortcut_clusters.png",
            "planted_shortcut_concepts.png",
            "planted_shortcut_accuracy.png",
            "planted_shortcut_clusters_label.png",
        ),
    ),
    Job(
        "explain_dataset",
        "dataset_grids.png",
        quick=("--epochs", "1", "--n-train", "256", "--n", "16", "--show", "3", "--nsamples", "2"),
        frameworks=("torch",),
    ),
    Job("tasks", "tasks_box.png", frameworks=("torch",)),
    Job("tasks_segmentation", "tasks_segmentation.png", frameworks=("torch",)),
    Job("vit_attention", "transformers_vit.png", quick=("--quick",), frameworks=("torch",)),
)

#: gallery scripts that paint nothing, and why
#: docs pictures that a test takes instead of a gallery job, and the command that renews them
TEST_PICTURES: dict[str, str] = {
    "report.png": "XAIKIT_UPDATE_DOCS_IMG=1 pytest tests/test_report_browser.py -k screenshot "
    "(a screenshot of the report page in headless Chromium, structurally checked by the test)",
    "dataset_explorer.png": "XAIKIT_UPDATE_DOCS_IMG=1 pytest tests/test_report_explorer_browser.py -k 10000 "
    "(the Dataset explorer of a synthetic 10,000-sample store in headless Chromium)",
}

NOT_PICTURES: dict[str, str] = {
    "tutorial_traces": "prints the logs quoted in docs/tutorial_traces.md; paints nothing",
}


def gallery_scripts() -> list[str]:
    """The runnable scripts of ``gallery/`` (not the helpers starting with ``_``, not this one)."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_") and p.stem != "make_all")


def environment() -> dict[str, str]:
    """The subprocesses' environment: headless matplotlib, quiet TF, this checkout first on the path.

    ``OMP_NUM_THREADS`` defaults to 1 (set it to override): LeNet's small kernels gain little from
    more threads, and on a shared, busy CPU one thread is several times faster.
    """
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(
    job: Job,
    out_dir: Path,
    quick: bool = False,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> float:
    """Run one job; returns its wall time in seconds. Raises ``CalledProcessError`` on failure.

    ``env`` adds to (or overrides) the environment of :func:`environment`.
    """
    start = time.perf_counter()
    full_env = {**environment(), **(env or {})}
    subprocess.run(job.argv(out_dir, quick), cwd=ROOT, env=full_env, check=True, timeout=timeout)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes: fast, not for the docs")
    parser.add_argument(
        "--out-dir",
        default=None,
        help="folder of the pictures (default: docs/img; with --quick, a temporary folder)",
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these scripts")
    args = parser.parse_args(argv)
    if args.out_dir is not None:
        out_dir = Path(args.out_dir).resolve()
    else:  # small-model pictures never overwrite the docs' ones by accident
        out_dir = Path(tempfile.gettempdir()) / "xaikit-gallery-quick" if args.quick else DOCS_IMG
    out_dir.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(args.only or ()) - {j.script for j in JOBS})
    if unknown:
        parser.error(f"unknown script(s) {unknown}; known: {sorted({j.script for j in JOBS})}")
    missing = sorted(set(gallery_scripts()) - {j.script for j in JOBS} - set(NOT_PICTURES))
    if missing:
        print(f"make_all: gallery script(s) {missing} have no job in gallery/make_all.py", file=sys.stderr)
    total = time.perf_counter()
    failed = []
    for job in JOBS:
        if args.only is not None and job.script not in args.only:
            continue
        print(f"make_all: {job.script} -> {out_dir / job.out}", flush=True)
        try:
            seconds = run(job, out_dir, quick=args.quick)
        except subprocess.CalledProcessError as err:
            print(f"make_all: {job.script} failed (exit {err.returncode})", file=sys.stderr, flush=True)
            failed.append(job.out)
            continue
        print(f"make_all: {job.out} done in {seconds:.1f} s", flush=True)
    print(f"make_all: {len(failed)} failed, total {time.perf_counter() - total:.1f} s", flush=True)
    if failed:
        print(f"make_all: failed: {failed}", file=sys.stderr)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
