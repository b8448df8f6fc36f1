"""The XAI tutorial's tracker figures (docs/tutorial_xai.md): per-class loss (LabelTracker) and
the hardest training samples (InstanceTracker) while LeNet learns ``shapes``.

Usage: python gallery/trackers.py [--out docs/img/tutorial_xai]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _shapes_setup import label_mapping, setup

import xaikit as xk
from xaikit.trace.io import ImageSaver
from xaikit.trace.metric import Accuracy
from xaikit.trace.xai import InstanceTracker, LabelTracker


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/tutorial_xai")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_dir = tempfile.mkdtemp()

    train_data, _, pipeline, _, network = setup(index=True)
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
        shutil.copyfile(Path(save_dir) / f"{key}_train_epoch_5.png", out / name)
        written.append(out / name)

    hardest = instances.summaries[0].name  # highest final loss first
    names = {v: k for k, v in label_mapping.items()}
    sample = train_data[hardest]
    images = xk.ImgData(y=[f"{names[int(sample['y'])]} (#{hardest})"], x=sample["x"][None])
    target = out / "hardest_sample.png"
    images.paint_figure(save_path=target, cell_size=2.4)
    written.append(target)
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    main()
