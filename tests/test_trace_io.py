"""ImageSaver, ImageViewer and TensorBoard, alone and with Saliency/trackers in an Estimator run."""

from __future__ import annotations

import glob
import os
import pickle

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.estimator import Estimator
from xaikit.schedule import RepeatScheduler
from xaikit.summary import Summary
from xaikit.trace.base import Data, System
from xaikit.trace.io import ImageSaver, ImageViewer, TensorBoard
from xaikit.trace.xai import InstanceTracker, LabelTracker, Saliency

SIZE = 8


class ImagePipeline:
    """Tiny image data: 6 train and 4 eval samples, batches of 2, an index column."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.data = {
            mode: {
                "x": rng.random((n, SIZE, SIZE, 3), dtype=np.float32),
                "y": np.arange(n) % 3,
                "idx": np.arange(n),
            }
            for mode, n in (("train", 6), ("eval", 4))
        }

    def get_modes(self):
        return set(self.data)

    def get_ds_ids(self, mode):
        return [""]

    def get_loader(self, mode, epoch, ds_id=""):
        d = self.data[mode]
        for s in range(0, len(d["y"]), 2):
            yield {k: v[s : s + 2] for k, v in d.items()}


class ScoreNetwork:
    """Not a model: per-sample 'loss' = 1 / (epoch + idx + 1), a deterministic history."""

    def __init__(self):
        self.epoch = 0
        self.models = []

    def load_epoch(self, mode, epoch):
        self.epoch = epoch

    def get_loss_keys(self):
        return {"ce"}

    def run_step(self, batch, mode):
        sample = 1.0 / (self.epoch + batch["idx"] + 1.0)
        probs = np.full((len(batch["y"]), 3), 1 / 3, np.float32)
        return {"sample_ce": sample.astype(np.float32), "ce": np.float32(sample.mean()), "y_pred": probs}


def tiny_torch_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 2, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(2 * SIZE * SIZE, 3)
    )


def test_saliency_in_repeat_scheduler_saves_scheduled_epochs(tmp_path, capsys):
    model = tiny_torch_model()
    sal = Saliency(model, "x", "y_pred", class_key="y", samples=3, smoothing=2, integrating=(3, 2))
    saver = ImageSaver(inputs=["saliency", "sample_ce_by_y", "sample_ce_by_idx"], save_dir=tmp_path, dpi=40)
    traces = [
        RepeatScheduler([sal, None]),
        LabelTracker("y", "sample_ce", bounds="range"),
        InstanceTracker("idx", "sample_ce", n_max_to_keep=1, n_min_to_keep=1),
        saver,  # runs after the others; no need to schedule it like Saliency
    ]
    est = Estimator(ImagePipeline(), ScoreNetwork(), epochs=3, traces=traces, log_steps=None)
    est.fit()
    names = sorted(os.listdir(tmp_path))
    assert names == [
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_3.png",
        "sample_ce_by_idx_train_epoch_3.png",
        "sample_ce_by_y_train_epoch_3.png",
    ]
    assert saver.saved == [str(tmp_path / n) for n in (names[0], names[1], names[3], names[2])]
    img = sal.images
    assert img.columns[:4] == ["y", "y_pred", "x", "x saliency"]
    assert img.columns[4:] == ["saliency", "Smoothed saliency", "Integrated saliency", "SmInt saliency"]
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not glob.glob(str(tmp_path / ".*.tmp"))
    # histories: eval epochs at steps 3, 6, 9; index i scores 1 / (epoch + i + 1)
    by_idx = traces[2].summaries
    assert [s.name for s in by_idx] == [0, 3]
    assert by_idx[0].history["eval"]["sample_ce"] == pytest.approx({3: 1 / 2, 6: 1 / 3, 9: 1 / 4})


def test_saver_warns_about_keys_never_written(tmp_path):
    saver = ImageSaver(["thing", "typo"], save_dir=tmp_path)
    assert saver.inputs == ["*"] and saver.keys == ["thing", "typo"]
    saver.system = System()
    saver.on_epoch_end(Data({"thing": []}))
    with pytest.warns(UserWarning, match=r"no trace wrote \['typo'\] during the run"):
        saver.on_end(Data())


def test_saver_skips_missing_and_rejects_unknown(tmp_path):
    saver = ImageSaver("thing", save_dir=tmp_path)
    saver.system = System()
    saver.system.mode, saver.system.epoch_idx = "eval", 2
    saver.on_epoch_end(Data())
    saver.on_epoch_end(Data({"thing": []}))
    assert saver.saved == []
    with pytest.raises(XaikitTypeError, match="key 'thing' holds ndarray"):
        saver.on_epoch_end(Data({"thing": np.zeros((2, 2))}))
    s = Summary("a")
    s.write("eval", "loss", 1, 0.5)
    saver.on_end(Data({"thing": s}))
    assert saver.saved == [str(tmp_path / "thing_eval_epoch_2.png")]


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"inputs": []}, XaikitValueError, "inputs must name at least one key"),
        ({"inputs": "x", "dpi": 0}, XaikitValueError, "dpi must be a number > 0"),
        ({"inputs": "x", "save_dir": 3}, XaikitTypeError, "save_dir must be a folder path"),
    ],
)
def test_saver_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        ImageSaver(**kwargs)


def test_viewer_without_display_saves_with_one_notice(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    from xaikit.viz import ImgData

    viewer = ImageViewer("img", save_dir=tmp_path / "shown", dpi=30)
    viewer.system = System()
    viewer.system.mode = "eval"
    for epoch in (1, 2):
        viewer.system.epoch_idx = epoch
        viewer.on_epoch_end(Data({"img": ImgData(x=np.zeros((1, 4, 4)))}))
    out = capsys.readouterr().out
    assert out.count("ImageViewer: no display") == 1 and str(tmp_path / "shown") in out
    assert sorted(os.listdir(tmp_path / "shown")) == ["img_eval_epoch_1.png", "img_eval_epoch_2.png"]


def test_can_show_rules(monkeypatch):
    import matplotlib

    from xaikit.viz._output import can_show

    monkeypatch.setattr(matplotlib, "get_backend", lambda: "agg")
    assert not can_show()
    monkeypatch.setattr(matplotlib, "get_backend", lambda: "module://matplotlib_inline.backend_inline")
    assert can_show()
    monkeypatch.setattr(matplotlib, "get_backend", lambda: "TkAgg")
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert not can_show()
    monkeypatch.setenv("DISPLAY", ":0")
    assert can_show()


def _read_events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    return acc


def test_tensorboard_scalars_and_images_read_back(tmp_path):
    model = tiny_torch_model()
    sal = Saliency(model, "x", "y_pred", samples=2, smoothing=0, integrating=0)
    tb = TensorBoard(log_dir=tmp_path, update_freq=2, write_images=["saliency", "sample_ce_by_y"])
    traces = [RepeatScheduler([sal, None]), LabelTracker("y", "sample_ce"), tb]  # tb reads '*': no check
    est = Estimator(ImagePipeline(), ScoreNetwork(), epochs=2, traces=traces, log_steps=None)
    est.fit()
    train = _read_events(tmp_path / "train")
    ce = {e.step: e.value for e in train.Scalars("ce")}
    # update_freq=2: training batches at steps 2, 4, 6 (batch mean of 1/(epoch+idx+1))
    assert sorted(ce) == [2, 4, 6]
    assert ce[2] == pytest.approx(np.mean([1 / 4, 1 / 5]))  # epoch 1, idx 2, 3
    assert ce[4] == pytest.approx(np.mean([1 / 3, 1 / 4]))  # epoch 2, idx 0, 1
    assert ce[6] == pytest.approx(np.mean([1 / 7, 1 / 8]))  # epoch 2, idx 4, 5
    assert "epoch_time_sec_" in train.Tags()["scalars"]  # tensorboardX cleans tag names
    eval_ = _read_events(tmp_path / "eval")
    ev = {e.step: e.value for e in eval_.Scalars("ce")}
    assert ev[3] == pytest.approx(np.mean([1 / (2 + i) for i in range(4)]))
    assert ev[6] == pytest.approx(np.mean([1 / (3 + i) for i in range(4)]))
    images = eval_.Images("saliency")
    assert [e.step for e in images] == [3]  # the scheduler ran Saliency in epoch 1 only
    assert images[0].width > 100 and images[0].height > 50
    assert [e.step for e in train.Images("sample_ce_by_y")] == [6]  # on_end (mode train after fit)
    assert pickle.loads(pickle.dumps(tb))._writers == {}


def test_tensorboard_bad_arguments():
    with pytest.raises(XaikitValueError, match="update_freq must be 'epoch' or an int >= 1"):
        TensorBoard(update_freq=0)
    with pytest.raises(XaikitValueError, match="update_freq must be"):
        TensorBoard(update_freq="batch")
    with pytest.raises(XaikitTypeError, match="write_images must be None, a string"):
        TensorBoard(write_images=5)


def test_viewer_with_display_shows_and_saves_nothing(tmp_path, monkeypatch):
    import xaikit.viz._output as output
    from xaikit.viz import ImgData

    shown = []
    monkeypatch.setattr(output, "can_show", lambda: True)
    monkeypatch.setattr(output, "show_figure", lambda fig: shown.append(fig))
    viewer = ImageViewer(["img", "hist"], save_dir=tmp_path / "never")
    viewer.system = System()
    s = Summary("a")
    s.write("eval", "loss", 3, 0.25)
    viewer.on_epoch_end(Data({"img": ImgData(x=np.zeros((2, 4, 4)))}))
    viewer.on_end(Data({"hist": [s]}))
    assert len(shown) == 2 and not (tmp_path / "never").exists() and viewer.saved == []
    assert shown[1].axes[0].get_title() == "loss"
