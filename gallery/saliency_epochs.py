"""The XAI tutorial's saliency figures (docs/tutorial_xai.md): Saliency in a RepeatScheduler while
LeNet learns ``shapes`` (grids at epochs 1, 3, 5) with a GradCAM trace beside it (epoch 5), then
SmInt masks without a trace.

Usage: python -m gallery.saliency_epochs [--out docs/img/tutorial_xai] [--n-train 6000]
(or python gallery/saliency_epochs.py ...); ``--out`` is a folder: the script writes five pictures.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._shapes_setup import label_mapping, setup, tutorial_main
from xaikit.backend import to_number
from xaikit.schedule import RepeatScheduler
from xaikit.trace.io import ImageSaver
from xaikit.trace.metric import Accuracy
from xaikit.trace.xai import GradCAM, Saliency


def main(argv: list[str] | None = None) -> list[Path]:
    return tutorial_main(argv, __doc__ or "", _paint, "saliency-epochs-")


def _paint(out: Path, save_dir: str, n_train: int) -> list[Path]:
    """Train with the Saliency trace, then explain without it; returns the pictures written."""
    # --- with traces ---------------------------------------------------------------------------
    _, _, pipeline, model, network = setup(n_train=n_train)
    traces = [
        Accuracy(true_key="y", pred_key="y_pred"),
        RepeatScheduler(
            [
                Saliency(
                    model=model,
                    model_inputs="x",
                    model_outputs="y_pred",
                    class_key="y",
                    samples=5,
                    label_mapping=label_mapping,
                ),
                None,
            ]
        ),
        RepeatScheduler(
            [
                GradCAM(
                    images="x",
                    model=model,
                    labels="y",
                    label_mapping=label_mapping,
                    n_samples=5,
                    method="layercam",
                    layer="conv2",
                    mode="eval",
                ),
                None,
            ]
        ),
        ImageSaver(inputs=["saliency", "gradcam"], save_dir=save_dir, dpi=96),
    ]
    estimator = xk.Estimator(pipeline=pipeline, network=network, epochs=5, traces=traces, log_steps=50)
    estimator.fit()
    written = []
    for epoch in (1, 3, 5):
        target = out / f"saliency_epoch_{epoch}.png"
        shutil.copyfile(Path(save_dir) / f"saliency_eval_epoch_{epoch}.png", target)
        written.append(target)
    target = out / "gradcam_epoch_5.png"
    shutil.copyfile(Path(save_dir) / "gradcam_eval_epoch_5.png", target)
    written.append(target)

    # --- without traces ------------------------------------------------------------------------
    batch = pipeline.get_results(num_steps=2, mode="eval")[1]  # images the trace did not show
    batch = {k: v[:6] for k, v in batch.items()}
    x = np.moveaxis(batch["x"], -1, 1)  # the torch LeNet takes channel-first images
    net = xk.xai.SaliencyNet(model=model, model_inputs="x", model_outputs="y_pred", seed=0)
    res = net.get_smoothed_masks({"x": x}, nsamples=6, nintegration=100)
    names = {v: k for k, v in label_mapping.items()}
    y = [names[int(c)] for c in to_number(batch["y"])]
    y_pred = [names[int(c)] for c in to_number(res["y_pred"])]
    images = xk.ImgData(
        colormap="inferno", y=y, y_pred=y_pred, x=batch["x"], saliency=res["saliency"], object=batch["mask"]
    )
    target = out / "smint_without_traces.png"
    images.paint_figure(save_path=target)
    written.append(target)
    return written


if __name__ == "__main__":
    main()
