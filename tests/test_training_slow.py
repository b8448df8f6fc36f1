"""End to end: LeNet learns ``shapes`` with Pipeline + Network alone (no Estimator)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

import xaikit as xk
from xaikit.dataset.data import shapes
from xaikit.op.numpyop import Minmax
from xaikit.op.tensorop import CrossEntropy, ModelOp, UpdateOp

MAX_EPOCHS = 12  # 94 steps of 64 images each; reaching 0.9 takes about 6-10 epochs


@pytest.fixture
def one_torch_thread(framework: str) -> Iterator[None]:
    """One intra-op thread for torch: on a small shared CPU (and under ``pytest -n 2``) several
    spinning threads per process made steps up to 5x slower."""
    if framework != "torch":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_lenet_learns_shapes(framework: str) -> None:
    if framework == "torch":
        from xaikit.architecture.torch import LeNet
    else:
        from xaikit.architecture.tensorflow import LeNet
    train, evaluation = shapes.load_data(seed=0)
    pipe = xk.Pipeline(train_data=train, eval_data=evaluation, batch_size=64, ops=[Minmax("x", "x")], seed=0)
    model = xk.build(lambda: LeNet(input_shape=(32, 32, 3), classes=len(shapes.label_mapping)), "adam")
    net = xk.Network(
        [ModelOp(model, "x", "y_pred"), CrossEntropy(("y_pred", "y"), "ce"), UpdateOp(model, "ce")]
    )
    start, history = time.perf_counter(), []
    for epoch in range(1, MAX_EPOCHS + 1):
        net.load_epoch("train", epoch)
        for batch in pipe.get_loader("train", epoch):
            net.run_step(batch, "train")
        net.load_epoch("eval", epoch)
        correct = sum(
            int((net.run_step(b, "eval")["y_pred"].argmax(-1) == b["y"]).sum())
            for b in pipe.get_loader("eval", epoch)
        )
        history.append(correct / len(evaluation))
        if history[-1] >= 0.9:
            break
    net.unload_epoch()
    elapsed = time.perf_counter() - start
    print(f"{framework}: eval accuracy by epoch {np.round(history, 3).tolist()} in {elapsed:.0f} s")
    assert history[-1] >= 0.9, f"eval accuracy by epoch: {history}"
