"""The XAI tutorial's tracker figures (docs/tutorial_xai.md): per-class loss (LabelTracker) and
the hardest training samples (InstanceTracker) while LeNet learns ``shapes``.

Usage: python -m gallery.trackers [--out docs/img/tutorial_xai] [--n-train 6000]
(or python gallery/trackers.py ...); ``--out`` is a folder: the script writes three pictures.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._shapes_setup import label_mapping, setup, tutorial_main
from xaikit.trace.io import ImageSaver
from xaikit.trace.metric import Accuracy
from xaikit.trace.xai import InstanceTracker, LabelTracker


def main(argv: list[str] | None = None) -> list[Path]:
    return tutorial_main(
        argv, __doc__ or "", _paint, "trackers-", n_train_help="training images (at least 19)"
    )


def _paint(out: Path, save_dir: str, n_train: int) -> list[Path]:
    """Train with the trackers; returns the pictures written."""
    train_data, _, pipeline, _, network = setup(n_train=n_train, index=True)
    instances = InstanceTracker(
        index="index",
        metric="sample_ce",
        n_max_to_keep=5,
        n_min_to_keep=0,
        list_to_keep=[10, 18],
        outputs="ce_vs_idx",
        mode="train",
    )
    traces = [
        Accuracy(true_key="y", pred_key="y_pred"),
        LabelTracker(
            label="y",
            metric="sample_ce",
            label_mapping=label_mapping,
            outputs="ce_vs_y",
            bounds=None,
            mode="eval",
        ),
        instances,
        ImageSaver(inputs=["ce_vs_y", "ce_vs_idx"], save_dir=save_dir),  # the trackers write at the end
    ]
    estimator = xk.Estimator(pipeline=pipeline, network=network, epochs=5, traces=traces, log_steps=50)
    estimator.fit()
    written = []
    for key, name in (("ce_vs_y", "label_tracker.png"), ("ce_vs_idx", "instance_tracker.png")):
        (saved,) = Path(save_dir).glob(f"{key}_*_epoch_5.png")  # written at the end of training
        shutil.copyfile(saved, out / name)
        written.append(out / name)

    hardest = instances.summaries[0].name  # highest final loss first
    names = {v: k for k, v in label_mapping.items()}
    sample = train_data[hardest]
    images = xk.ImgData(y=[f"{names[int(sample['y'])]} (#{hardest})"], x=sample["x"][None])
    target = out / "hardest_sample.png"
    images.paint_figure(save_path=target, cell_size=2.4)
    written.append(target)
    return written


if __name__ == "__main__":
    main()
