"""Shared pieces of the gallery scripts: a LeNet trained on the bundled ``shapes`` data."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

import xaikit as xk
from xaikit.dataset.data import shapes
from xaikit.op.numpyop import Minmax
from xaikit.op.tensorop import CrossEntropy, ModelOp, UpdateOp

DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
CLASS_NAMES = {v: k for k, v in shapes.label_mapping.items()}


def parser(description: str, default_out: str) -> argparse.ArgumentParser:
    """The shared options; ``{framework}`` in ``default_out`` becomes the chosen framework."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--out",
        default=None,
        help=f"where the figure is written (default: docs/img/{default_out})",
    )
    p.add_argument("--framework", choices=["torch", "tf"], default="torch")
    p.add_argument("--epochs", type=int, default=6, help="training epochs of the LeNet")
    p.add_argument("--n-train", type=int, default=6000, help="training images")
    p.add_argument("--dpi", type=int, default=110)
    return p


def out_path(args: argparse.Namespace, default_out: str) -> str:
    """``--out`` as given, or the default picture of the docs for the chosen framework."""
    if args.out:
        return str(args.out)
    return str(DOCS_IMG / default_out.format(framework=getattr(args, "framework", "torch")))


def train_lenet(
    framework: str,
    epochs: int = 6,
    n_train: int = 6000,
    seed: int = 0,
    batch_size: int = 64,
    logits: bool = False,
) -> tuple[Any, Any]:
    """A LeNet trained on ``shapes`` with the Estimator; returns (model, eval dataset in [0, 1]).
    ``logits``: the model returns logits (the loss applies the softmax), as relevance methods want."""
    if framework == "torch":
        import torch

        from xaikit.architecture.torch import LeNet

        torch.manual_seed(seed)
    else:
        import tensorflow as tf

        from xaikit.architecture.tensorflow import LeNet

        tf.keras.utils.set_random_seed(seed)
    train, evaluation = shapes.load_data(n_train=n_train, n_eval=500, seed=seed)
    pipeline = xk.Pipeline(
        train_data=train, eval_data=evaluation, batch_size=batch_size, ops=[Minmax("x", "x")], seed=seed
    )
    classes = len(shapes.label_mapping)
    model = xk.build(lambda: LeNet(input_shape=(32, 32, 3), classes=classes, softmax=not logits), "adam")
    network = xk.Network(
        [
            ModelOp(model, "x", "y_pred"),
            CrossEntropy(("y_pred", "y"), "ce", from_logits=logits),
            UpdateOp(model, "ce"),
        ]
    )
    xk.Estimator(
        pipeline, network, epochs=epochs, traces=[xk.trace.metric.Accuracy("y", "y_pred")], log_steps=None
    ).fit()
    x = evaluation["x"].astype(np.float32) / 255.0
    return model, {"x": x, "y": evaluation["y"], "mask": evaluation["mask"]}


def model_layout(framework: str, x: np.ndarray) -> np.ndarray:
    """Channel-last images as the model takes them (torch LeNet is channel-first)."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def pick_samples(data: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Indices of ``n`` samples cycling through the classes."""
    picked: list[int] = []
    classes = sorted(set(data["y"].tolist()))
    for k in range(n):
        label = classes[k % len(classes)]
        candidates = [i for i in np.flatnonzero(data["y"] == label) if i not in picked]
        picked.append(int(candidates[0]))
    return np.array(picked)
