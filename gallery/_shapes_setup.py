"""Shared set-up of the XAI tutorial scripts: shapes data, a torch LeNet and its network."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.backend import load_backend, reduce_mean
from xaikit.dataset.data import shapes
from xaikit.op.numpyop import Minmax
from xaikit.op.tensorop import CrossEntropy, LambdaOp, ModelOp, UpdateOp

label_mapping = shapes.label_mapping


def setup(n_train: int = 6000, n_eval: int = 500, seed: int = 0, index: bool = False):
    """``(train, eval, pipeline, model, network)``; the network writes ``sample_ce`` and ``ce``."""
    load_backend("torch").limit_threads(1)
    load_backend("torch").seed(seed)
    train_data, eval_data = shapes.load_data(n_train=n_train, n_eval=n_eval, seed=seed)
    if index:
        train_data["index"] = np.arange(len(train_data))
        eval_data["index"] = np.arange(len(eval_data))
    pipeline = xk.Pipeline(
        train_data=train_data,
        eval_data=eval_data,
        batch_size=32,
        ops=[Minmax(inputs="x", outputs="x")],
        seed=seed,
    )
    model = xk.build(model_fn=lambda: LeNet(input_shape=(32, 32, 3), classes=5), optimizer_fn="adam")
    network = xk.Network(
        ops=[
            ModelOp(model=model, inputs="x", outputs="y_pred"),
            CrossEntropy(inputs=("y_pred", "y"), outputs="sample_ce", average_loss=False),
            LambdaOp(inputs="sample_ce", outputs="ce", fn=reduce_mean),
            UpdateOp(model=model, loss_name="ce"),
        ]
    )
    return train_data, eval_data, pipeline, model, network


def tutorial_main(
    argv: list[str] | None,
    doc: str,
    paint: Callable[[Path, str, int], list[Path]],
    prefix: str,
    n_train_help: str = "training images",
) -> list[Path]:
    """The command line of a tutorial picture script: ``--out`` (a folder) and ``--n-train``;
    ``paint(out, save_dir, n_train)`` trains with its traces saving into a temporary folder."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", default="docs/img/tutorial_xai", help="the folder of the pictures")
    parser.add_argument("--n-train", type=int, default=6000, help=n_train_help)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=prefix) as save_dir:
        written = paint(out, save_dir, args.n_train)
    for path in written:
        print(f"wrote {path}")
    return written
