"""``XaikitCallback``: xaikit traces inside ``lightning.Trainer.fit`` (CPU, LeNet on digits)."""

from __future__ import annotations

import copy
import importlib
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "lightning", reason="the Lightning callback needs lightning (pip install 'xaikit[lightning]')"
)

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import digits
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.integrations.lightning import XaikitCallback
from xaikit.trace.base import Trace
from xaikit.trace.io import ImageSaver, TensorBoard
from xaikit.trace.metric import Accuracy
from xaikit.trace.xai import InstanceTracker, LabelTracker, Saliency
from xaikit.xai import SaliencyNet

pytestmark = [
    # Lightning 2.6 on torch 2.13 (its own code, not ours)
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]
DOCS = Path(__file__).resolve().parents[1] / "docs"
N_TRAIN, N_VAL, BATCH = 64, 32, 16  # 4 training and 2 validation batches per epoch
F = torch.nn.functional


@pytest.fixture(scope="module")
def data():
    train, val = digits.load_data()

    def tensors(ds, n):
        x = torch.as_tensor(ds["x"][:n], dtype=torch.float32).permute(0, 3, 1, 2) / 255.0
        return x, torch.as_tensor(ds["y"][:n]).long()

    return tensors(train, N_TRAIN), tensors(val, N_VAL)


def loaders(data, with_index=True):
    (x, y), (xv, yv) = data
    extra = (torch.arange(N_TRAIN),) if with_index else ()
    extra_v = (torch.arange(N_VAL),) if with_index else ()
    train = DataLoader(TensorDataset(x, y, *extra), batch_size=BATCH, shuffle=True)
    val = DataLoader(TensorDataset(xv, yv, *extra_v), batch_size=BATCH)
    return train, val


class Digits(L.LightningModule):
    """LeNet on 28x28 digits; ``returns`` picks what the steps give back."""

    def __init__(self, returns="dict"):
        super().__init__()
        self.net = LeNet((1, 28, 28), classes=10, softmax=False)
        self.returns = returns

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        out = self(x)
        loss = F.cross_entropy(out, y)
        if self.returns == "dict":
            return {"loss": loss, "y_pred": out.detach()}
        if self.returns == "logits":
            return {"loss": loss, "logits": out.detach()}
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        out = self(x)
        if self.returns == "dict":
            return {"y_pred": out, "sample_ce": F.cross_entropy(out, y, reduction="none")}
        if self.returns == "logits":
            return {"logits": out}
        return F.cross_entropy(out, y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def trainer(callbacks=(), **kwargs):
    opts = {
        "max_epochs": 2,
        "accelerator": "cpu",
        "devices": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "logger": False,
    }
    opts.update(kwargs)
    return L.Trainer(callbacks=list(callbacks), **opts)


class Recorder(Trace):
    """Records the hooks' order and every batch's values, in every mode."""

    def __init__(self, module=None):
        super().__init__(mode=None)
        self.module = module
        self.events = []
        self.batches = {}

    def on_epoch_begin(self, data):
        self.events.append(("begin", self.system.mode, self.system.epoch_idx, self.system.batch_idx))

    def on_batch_end(self, data):
        s = self.system
        keys = ("y", "y_pred", "sample_ce", "index")
        self.batches.setdefault((s.mode, s.epoch_idx), []).append(
            {k: np.array(data[k]) for k in keys if k in data}
        )
        if self.module is not None:  # predict= gave the module back in its own mode
            assert self.module.training == (s.mode == "train")

    def on_epoch_end(self, data):
        s = self.system
        self.events.append(("end", s.mode, s.epoch_idx, s.global_step))

    def stacked(self, mode, epoch, key):
        return np.concatenate([b[key] for b in self.batches[(mode, epoch)]])


class GradSentinel(Trace):
    """Runs before Saliency at eval epoch ends: fills every ``.grad`` with a known value."""

    def __init__(self, module):
        super().__init__(mode="eval")
        self.module = module
        self.saved = None

    def on_epoch_end(self, data):
        self.saved = [p.grad for p in self.module.parameters()]
        for p in self.module.parameters():
            p.grad = torch.full_like(p, 0.25)


class AfterSaliency(Trace):
    """Runs after Saliency: keeps its grid and the weights it explained, checks grads and modes."""

    def __init__(self, module, sentinel):
        super().__init__(inputs="saliency", mode="eval")
        self.module, self.sentinel = module, sentinel
        self.grids, self.weights, self.grads_kept, self.flags = {}, {}, [], []

    def on_epoch_end(self, data):
        epoch = self.system.epoch_idx
        self.grids[epoch] = data["saliency"]
        self.weights[epoch] = copy.deepcopy(self.module.state_dict())
        self.grads_kept.append(all(bool((p.grad == 0.25).all()) for p in self.module.parameters()))
        self.flags.append({m.training for m in self.module.modules()})
        for p, g in zip(self.module.parameters(), self.sentinel.saved):
            p.grad = g  # as Lightning left them


def read_events(folder):
    """``({tag: {step: value}}, {tag: [steps]})`` of scalars and images in TensorBoard event
    files, read from their TFRecord frames (tensorboard's own reader would import TensorFlow)."""
    from tensorboardX.proto import event_pb2

    scalars, images = {}, {}
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        raw = path.read_bytes()
        pos = 0
        while pos < len(raw):
            (length,) = struct.unpack("<Q", raw[pos : pos + 8])
            event = event_pb2.Event.FromString(raw[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("image"):
                    images.setdefault(value.tag, []).append(event.step)
                else:
                    scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars, images


def column(img, name):
    return np.asarray(img[name][0])


def test_traces_in_fit_values_files_and_untouched_training(data, tmp_path):
    L.seed_everything(0, verbose=False)
    module = Digits()
    sentinel = GradSentinel(module)
    after = AfterSaliency(module, sentinel)
    rec = Recorder()
    sal = Saliency(module, "x", "y_pred", class_key="y", samples=2, smoothing=2, integrating=(3, 0))
    traces = [
        sentinel,
        Accuracy(true_key="y", pred_key="y_pred", mode=("train", "eval")),
        sal,
        LabelTracker("y", "sample_ce", bounds=None),
        InstanceTracker("index", "sample_ce", n_max_to_keep=1, n_min_to_keep=1, list_to_keep=[5]),
        rec,
        after,
        ImageSaver(["saliency", "sample_ce_by_index"], save_dir=tmp_path / "img"),
        TensorBoard(tmp_path / "tb", write_images="sample_ce_by_y"),
    ]
    cb = XaikitCallback(traces, batch_keys=("x", "y", "index"))
    fit_trainer = trainer([cb])  # the default sanity check runs 2 validation batches first
    fit_trainer.fit(module, *loaders(data))

    # epochs: train then eval, both numbered 1, 2; the sanity check is no epoch
    assert rec.events == [
        ("begin", "train", 1, 0),
        ("end", "train", 1, 4),
        ("begin", "eval", 1, 0),
        ("end", "eval", 1, 4),
        ("begin", "train", 2, 0),
        ("end", "train", 2, 8),
        ("begin", "eval", 2, 0),
        ("end", "eval", 2, 8),
    ]
    assert {k: len(v) for k, v in rec.batches.items()} == {
        ("train", 1): 4,
        ("eval", 1): 2,
        ("train", 2): 4,
        ("eval", 2): 2,
    }

    # accuracy: from the very predictions the steps returned, and from the final weights
    def by_hand(mode, epoch):
        return float(np.mean(rec.stacked(mode, epoch, "y_pred").argmax(-1) == rec.stacked(mode, epoch, "y")))

    for mode, prefix in (("eval", "val_"), ("train", "train_")):
        assert cb.history[f"{prefix}accuracy"] == pytest.approx({1: by_hand(mode, 1), 2: by_hand(mode, 2)})
    (xv, yv) = data[1]
    module.eval()
    with torch.no_grad():
        final = float((module(xv).argmax(-1) == yv).float().mean())
    assert cb.history["val_accuracy"][2] == pytest.approx(final)
    assert float(fit_trainer.callback_metrics["val_accuracy"]) == pytest.approx(final)
    assert float(fit_trainer.callback_metrics["train_accuracy"]) == pytest.approx(by_hand("train", 2))
    assert sorted(cb.history) == ["train_accuracy", "val_accuracy", "val_saliency_time(sec)"]

    # saliency: a PNG per epoch; masks equal SaliencyNet's on that epoch's weights
    files = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert files == [
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_2.png",
        "sample_ce_by_index_eval_epoch_2.png",
    ]
    assert all((tmp_path / "img" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in files)
    assert sorted(after.grids) == [1, 2] and cb.results["saliency"] is after.grids[2] is sal.images
    for epoch, img in after.grids.items():
        assert img.columns == [
            "y",
            "y_pred",
            "x",
            "x saliency",
            "saliency",
            "Smoothed saliency",
            "Integrated saliency",
        ]
        ref_module = Digits()
        ref_module.load_state_dict(after.weights[epoch])
        net = SaliencyNet(ref_module, model_inputs="x", model_outputs="y_pred", outputs="saliency", seed=0)
        batch = {"x": xv[:2].numpy()}
        expected = {
            "saliency": net.get_masks(batch)["saliency"],
            "Smoothed saliency": net.get_smoothed_masks(batch, stdev_spread=0.15, nsamples=2)["saliency"],
            "Integrated saliency": net.get_integrated_masks(batch, nsamples=3)["saliency"],
        }
        np.testing.assert_array_equal(column(img, "x"), xv[:2, 0].numpy())  # one channel: (B, H, W)
        assert img._options.cmaps["x"].name == "gray"  # (B, 1, H, W) torch images are drawn grey
        for name, mask in expected.items():
            got, want = column(img, name), np.asarray(mask)
            assert got.shape[0] == 2 and got.size == want.size == 2 * 28 * 28
            np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-5, atol=1e-6)
    assert not np.allclose(column(after.grids[1], "saliency"), column(after.grids[2], "saliency"))
    assert after.grads_kept == [True, True]  # Saliency touched no parameter's .grad
    assert after.flags == [{False}, {False}]  # Lightning's eval mode, given back by Saliency

    # trackers: eval epochs at global steps 4 and 8, values from the steps' per-sample losses
    ce = {e: rec.stacked("eval", e, "sample_ce") for e in (1, 2)}
    by_index = cb.results["sample_ce_by_index"]
    assert 5 in [s.name for s in by_index] and len(by_index) == 3
    five = next(s for s in by_index if s.name == 5).history["eval"]["sample_ce"]
    assert five == pytest.approx({4: ce[1][5], 8: ce[2][5]})
    by_label = {s.name: s.history["eval"]["sample_ce"] for s in cb.results["sample_ce_by_y"]}
    assert sorted(by_label) == sorted(set(yv.tolist()))
    for label, hist in by_label.items():
        assert hist == pytest.approx(
            {4: ce[1][yv.numpy() == label].mean(), 8: ce[2][yv.numpy() == label].mean()}
        )
    np.testing.assert_array_equal(rec.stacked("eval", 2, "index"), np.arange(N_VAL))

    # TensorBoard: the same scalars at the same steps, the label history as an image at the end
    scalars, images = read_events(tmp_path / "tb" / "eval")
    assert scalars["accuracy"] == pytest.approx(
        {4: cb.history["val_accuracy"][1], 8: cb.history["val_accuracy"][2]}
    )
    assert images["sample_ce_by_y"] == [8]
    assert read_events(tmp_path / "tb" / "train")[0]["accuracy"] == pytest.approx(
        {4: cb.history["train_accuracy"][1], 8: cb.history["train_accuracy"][2]}
    )

    # the same seed without the callback: bit-identical weights
    L.seed_everything(0, verbose=False)
    plain = Digits()
    trainer().fit(plain, *loaders(data))
    for (name, p), q in zip(module.named_parameters(), plain.parameters()):
        assert torch.equal(p, q), name


def test_mid_epoch_validation_predict_step_outputs_and_index(data):
    """Steps return a loss or renamed logits; ``predict`` adds the per-sample loss; validation
    twice per epoch pauses the train epoch; positions stand in for a missing index."""
    L.seed_everything(1, verbose=False)
    module = Digits(returns="logits")
    rec = Recorder(module)
    calls = []

    def predict(m, batch):
        calls.append((m.training, torch.is_grad_enabled()))
        return {"sample_ce": F.cross_entropy(m(batch["x"]), batch["y"], reduction="none")}

    traces = [
        Accuracy(true_key="y", pred_key="y_pred"),
        InstanceTracker("index", "sample_ce", n_max_to_keep=0, n_min_to_keep=0, list_to_keep=[0, 31]),
        Saliency(module.net, "x", "y_pred", samples=3, smoothing=0, integrating=0),
        rec,
    ]
    cb = XaikitCallback(
        traces,
        step_outputs={"logits": "y_pred"},
        predict=predict,
        index_key="index",
        log={"prog_bar": True},
        prefixes={"eval": "xai/"},
    )
    _, val = loaders(data, with_index=False)
    train = DataLoader(TensorDataset(*data[0]), batch_size=BATCH, shuffle=True)
    fit_trainer = trainer([cb], max_epochs=1, val_check_interval=0.5, num_sanity_val_steps=0)
    fit_trainer.fit(module, train, val)

    assert rec.events == [
        ("begin", "train", 1, 0),
        ("begin", "eval", 1, 0),  # after 2 training batches: the train epoch pauses
        ("end", "eval", 1, 2),
        ("end", "train", 1, 4),  # went on with batches 3 and 4, then ends before the last check
        ("begin", "eval", 1, 0),
        ("end", "eval", 1, 4),
    ]
    assert len(rec.batches[("train", 1)]) == 4 and len(rec.batches[("eval", 1)]) == 4
    assert all(flags == (False, False) for flags in calls) and len(calls) == 8  # eval mode, no grad
    ce = rec.stacked("train", 1, "sample_ce")
    assert ce.shape == (N_TRAIN,) and "index" not in rec.batches[("train", 1)][0]  # no train trace reads it
    np.testing.assert_array_equal(rec.stacked("eval", 1, "index"), np.tile(np.arange(N_VAL), 2))
    second = rec.stacked("eval", 1, "y_pred")[N_VAL:]
    assert cb.history["xai/accuracy"][1] == pytest.approx(np.mean(second.argmax(-1) == data[1][1].numpy()))
    assert "xai/accuracy" in fit_trainer.progress_bar_metrics
    history = {s.name: s.history["eval"]["sample_ce"] for s in cb.results["sample_ce_by_index"]}
    assert sorted(history) == [0, 31] and sorted(history[31]) == [2, 4]
    assert cb.results["saliency"].columns == ["y_pred", "x", "x saliency", "saliency"]


def test_refusals_name_the_fix(data):
    with pytest.raises(XaikitTypeError, match="step_outputs must be a dict"):
        XaikitCallback([], step_outputs=["y_pred"])
    with pytest.raises(XaikitTypeError, match="predict must be a function"):
        XaikitCallback([], predict="y_pred")
    with pytest.raises(XaikitTypeError, match="batch_keys must be a sequence"):
        XaikitCallback([], batch_keys="x")
    with pytest.raises(XaikitValueError, match="with modes among"):
        XaikitCallback([], prefixes={"test": "t_"})
    with pytest.raises(XaikitValueError, match=r"prefixes must be a dict \{mode: str\}"):
        XaikitCallback([], prefixes={"eval": 3})
    with pytest.raises(XaikitTypeError, match="log must be True, False"):
        XaikitCallback([], log="yes")

    def fit(cb, module, with_index=True):
        trainer([cb], max_epochs=1, limit_train_batches=1, limit_val_batches=1).fit(
            module, *loaders(data, with_index)
        )

    # a trace reads a key that neither the batch nor the step provides
    msg = r"Accuracy reads \['y_pred'\] in 'eval' epochs, but the batch has \['index', 'x', 'y'\].*predict="
    with pytest.raises(XaikitValueError, match=msg):
        fit(
            XaikitCallback([Accuracy(true_key="y", pred_key="y_pred")], batch_keys=("x", "y", "index")),
            Digits("loss"),
        )
    # positions of a shuffled loader would be wrong
    tracker = InstanceTracker("index", "loss", mode="train")
    with pytest.raises(XaikitValueError, match="the train loader shuffles; return the index"):
        fit(XaikitCallback([tracker], index_key="index"), Digits("loss"), with_index=False)
    with pytest.raises(XaikitTypeError, match="predict must return a tensor"):
        fit(
            XaikitCallback([Accuracy(true_key="y", pred_key="y_pred")], predict=lambda m, b: [1]),
            Digits("loss"),
            False,
        )


def test_import_error_names_the_extra(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.delitem(sys.modules, "xaikit.integrations.lightning")
    with pytest.raises(ImportError, match=re.escape('pip install "xaikit[lightning]"')):
        importlib.import_module("xaikit.integrations.lightning")


def test_standalone_pytorch_lightning(monkeypatch):
    """Only ``pytorch_lightning`` installed: the callback derives from its Callback and runs in
    its Trainer (a ``pytorch_lightning.Trainer`` also runs the ``lightning``-based one)."""
    pl = pytest.importorskip("pytorch_lightning")
    for name in ("lightning", "lightning.pytorch"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "xaikit.integrations.lightning")
    standalone = importlib.import_module("xaikit.integrations.lightning")
    assert issubclass(standalone.XaikitCallback, pl.Callback)

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            return {"y_pred": self(batch[0])}

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x, y = torch.randn(32, 4), torch.arange(32) % 3
    val = DataLoader(TensorDataset(x, y), batch_size=8)
    for cls in (standalone.XaikitCallback, XaikitCallback):
        rec = Recorder()
        cb = cls([Accuracy(true_key="y", pred_key="y_pred"), rec])
        module = Tiny()
        opts = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
        pl.Trainer(max_epochs=2, callbacks=[cb], enable_model_summary=False, **opts).fit(module, val, val)
        with torch.no_grad():
            acc = float((module(x).argmax(-1) == y).float().mean())
        assert cb.history["val_accuracy"][2] == pytest.approx(acc)
        assert [e[:3] for e in rec.events if e[0] == "begin"] == [
            ("begin", "train", 1),
            ("begin", "eval", 1),
            ("begin", "train", 2),
            ("begin", "eval", 2),
        ]


def test_stop_training_from_a_trace_stops_the_trainer(data):
    class Stop(Trace):
        def on_epoch_end(self, data):
            self.system.stop_training = True

    cb = XaikitCallback(
        [Accuracy(true_key="y", pred_key="y_pred"), Stop(mode="eval")], batch_keys=("x", "y", "index")
    )
    fit_trainer = trainer(
        [cb], max_epochs=3, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=0
    )
    fit_trainer.fit(Digits(), *loaders(data))
    assert fit_trainer.current_epoch == 1 and sorted(cb.history["val_accuracy"]) == [1]


@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
def test_fit_without_validation_runs_train_epochs(data):
    rec = Recorder()
    cb = XaikitCallback(
        [Accuracy(true_key="y", pred_key="y_pred", mode="train"), rec], batch_keys=("x", "y", "index")
    )
    fit_trainer = trainer([cb], max_epochs=2, limit_train_batches=2)
    fit_trainer.fit(Digits(), loaders(data)[0])
    assert [e for e in rec.events if e[0] == "end"] == [("end", "train", 1, 2), ("end", "train", 2, 4)]
    for epoch in (1, 2):
        pred, y = rec.stacked("train", epoch, "y_pred"), rec.stacked("train", epoch, "y")
        assert cb.history["train_accuracy"][epoch] == pytest.approx(np.mean(pred.argmax(-1) == y))
    assert float(fit_trainer.callback_metrics["train_accuracy"]) == pytest.approx(
        cb.history["train_accuracy"][2]
    )


def test_the_tutorial_example_runs(tmp_path, monkeypatch):
    """Every python block of docs/tutorial_lightning.md, in order, as printed."""
    text = (DOCS / "tutorial_lightning.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "tutorial_lightning"}
    exec(compile(code, "tutorial_lightning.md", "exec"), scope)
    cb = scope["cb"]
    assert sorted(cb.history["val_accuracy"]) == [1, 2]
    assert len(cb.results["sample_ce_by_index"]) == 2
    saved = sorted(p.name for p in (tmp_path / "runs" / "lightning").iterdir())
    assert saved == [
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_2.png",
        "sample_ce_by_y_eval_epoch_2.png",
        "tb",
    ]
    assert [p.name for p in (tmp_path / "runs" / "lightning" / "tb").iterdir()] == ["eval"]
