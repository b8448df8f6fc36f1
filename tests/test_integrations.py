"""The trace adapters: a plain torch loop (TorchTraceRunner) and Keras fit (TraceCallback)."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.integrations import TraceRunner
from xaikit.schedule import RepeatScheduler
from xaikit.trace.base import Trace
from xaikit.trace.metric import Accuracy
from xaikit.trace.xai import InstanceTracker, LabelTracker, Saliency


def blobs(n=48, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = rng.random((n, 1, 4, 4), dtype=np.float32) * 0.3
    x[np.arange(n), 0, y, y] += 1.0  # the class lights one pixel
    return x, y


class Recorder(Trace):
    def __init__(self):
        super().__init__(inputs="y_pred", mode=None)
        self.seen = []

    def on_epoch_begin(self, data):
        self.seen.append(("epoch", self.system.mode, self.system.epoch_idx))

    def on_batch_end(self, data):
        self.seen.append(("batch", self.system.mode, self.system.global_step, type(data["y_pred"]).__name__))


def test_runner_counts_and_order_without_framework():
    rec = Recorder()
    runner = TraceRunner([rec])
    runner.on_begin()
    for _ in range(2):
        runner.on_epoch_begin("train")
        runner.on_batch_end({"x": np.zeros(2)}, {"y_pred": np.zeros((2, 3))})
        runner.on_epoch_end()
        runner.on_epoch_begin("eval")
        runner.on_batch_end({"x": np.zeros(2)}, {"y_pred": np.zeros((2, 3))})
        runner.on_epoch_end()
    runner.on_end()
    assert rec.seen == [
        ("epoch", "train", 1),
        ("batch", "train", 1, "ndarray"),
        ("epoch", "eval", 1),
        ("batch", "eval", 1, "ndarray"),
        ("epoch", "train", 2),
        ("batch", "train", 2, "ndarray"),
        ("epoch", "eval", 2),
        ("batch", "eval", 2, "ndarray"),
    ]


def test_runner_errors():
    runner = TraceRunner([Recorder()])
    runner.on_begin()
    with pytest.raises(XaikitValueError, match="on_batch_end must come between on_epoch_begin"):
        runner.on_batch_end({}, {})
    with pytest.raises(XaikitValueError, match="mode must be one of"):
        runner.on_epoch_begin("training")
    runner.on_epoch_begin("eval")
    with pytest.raises(XaikitTypeError, match="batch must be a dict"):
        runner.on_batch_end(np.zeros(3), {})
    with pytest.raises(XaikitTypeError, match="traces must be a Trace"):
        TraceRunner("accuracy")
    with pytest.raises(XaikitTypeError, match=r"traces\[0\] must be a Trace"):
        TraceRunner([3])


def test_plain_torch_loop():
    import torch

    from xaikit.integrations.torch import TorchTraceRunner

    torch.manual_seed(0)
    x, y = blobs()
    xv, yv = blobs(24, seed=1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(32, 3)
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sal = Saliency(model, "x", "y_pred", class_key="y", samples=4, smoothing=2, integrating=0)
    tracker = InstanceTracker("index", "sample_ce", n_max_to_keep=1, n_min_to_keep=1, list_to_keep=[5])
    runner = TorchTraceRunner(
        [Accuracy(true_key="y", pred_key="y_pred"), RepeatScheduler([None, sal]), tracker],
        batch_keys=("x", "y", "index"),
        total_epochs=2,
    )
    runner.on_begin()
    accs = []
    for _ in range(2):
        model.train()
        runner.on_epoch_begin("train")
        for s in range(0, 48, 16):
            xb, yb = torch.as_tensor(x[s : s + 16]), torch.as_tensor(y[s : s + 16])
            out = model(xb)
            loss = torch.nn.functional.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            runner.on_batch_end((xb, yb), {"y_pred": out, "ce": loss})
        runner.on_epoch_end()
        model.eval()
        runner.on_epoch_begin("eval")
        preds = []
        with torch.no_grad():
            for s in range(0, 24, 8):
                xb, yb = torch.as_tensor(xv[s : s + 8]), torch.as_tensor(yv[s : s + 8])
                out = model(xb)
                preds.append(out.numpy().argmax(-1))
                ce = torch.nn.functional.cross_entropy(out, yb, reduction="none")
                runner.on_batch_end((xb, yb, torch.arange(s, s + 8)), {"y_pred": out, "sample_ce": ce})
        logs = runner.on_epoch_end()
        accs.append(logs["accuracy"])
        assert logs["accuracy"] == pytest.approx(np.mean(np.concatenate(preds) == yv))
    assert "saliency" in runner.outputs or sal.images is not None  # epoch 2 ran Saliency
    img = sal.images
    assert img.columns[:4] == ["y", "y_pred", "x", "x saliency"]
    assert np.asarray(img["x"][0]).shape[0] == 4
    outputs = runner.on_end()
    summaries = outputs["sample_ce_by_index"]
    assert 5 in [s.name for s in summaries] and len(summaries) == 3
    assert sorted(summaries[0].history["eval"]["sample_ce"]) == [3, 6]  # global steps of the eval epochs
    assert accs[-1] > 0.6


def test_keras_fit_callback():
    import keras

    from xaikit.integrations.keras import TraceCallback, sample_cross_entropy

    keras.utils.set_random_seed(0)
    x, y = blobs()
    xv, yv = blobs(24, seed=1)
    x, xv = np.moveaxis(x, 1, -1), np.moveaxis(xv, 1, -1)
    model = keras.Sequential(
        [keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(3, activation="softmax")]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    labels = LabelTracker("y", "sample_ce", bounds=None)
    seen_loss = []

    class LossWatcher(Trace):
        def __init__(self):
            super().__init__(inputs="loss", mode="train")

        def on_batch_end(self, data):
            seen_loss.append(float(data["loss"]))

    sal = Saliency(model, "x", "y_pred", class_key="y", samples=3, smoothing=2, integrating=(3, 2))
    cb = TraceCallback(
        [Accuracy(true_key="y", pred_key="y_pred"), labels, LossWatcher(), RepeatScheduler([None, sal])],
        validation_data=(xv, yv),
        batch_size=10,
    )
    hist = model.fit(x, y, epochs=2, batch_size=16, callbacks=[cb], verbose=0)
    assert len(seen_loss) == 6  # 3 batches x 2 epochs, from the training logs
    p = np.asarray(model(xv))
    assert cb.history["val_accuracy"][-1] == pytest.approx(np.mean(p.argmax(-1) == yv))
    assert hist.history["val_accuracy"] == cb.history["val_accuracy"]
    assert sal.images.columns[-1] == "SmInt saliency"  # ran in the eval epoch 2, inside fit
    np.testing.assert_allclose(np.asarray(sal.images["x"][0]), xv[:3, ..., 0])  # grey images, (B, H, W)
    summaries = cb.outputs["sample_ce_by_y"]
    assert [s.name for s in summaries] == [0, 1, 2]
    ce = sample_cross_entropy(p, yv)
    assert summaries[1].history["eval"]["sample_ce"][6] == pytest.approx(ce[yv == 1].mean(), rel=1e-5)


def test_keras_callback_errors():
    from xaikit.integrations.keras import TraceCallback, sample_cross_entropy

    with pytest.raises(XaikitTypeError, match=r"validation_data must be \(x, y\)"):
        TraceCallback([], validation_data=np.zeros(3))
    with pytest.raises(XaikitValueError, match="validation_data arrays must have one length"):
        TraceCallback([], validation_data=(np.zeros((3, 2)), np.zeros(2)))
    with pytest.raises(XaikitValueError, match=r"no key\(s\) \['y'\]"):
        TraceCallback([], validation_data={"x": np.zeros(2)})
    np.testing.assert_allclose(
        sample_cross_entropy(np.array([[0.0, 0.0]]), np.array([1]), from_logits=True), [np.log(2)]
    )
