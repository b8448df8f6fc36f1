"""BestModelSaver, LRScheduler, EarlyStopping with numpy fakes (model helpers patched in)."""

from __future__ import annotations

import copy
import os
import pickle
import types
from pathlib import Path

import numpy as np
import pytest
from loop_fakes import FakeNetwork, FakePipeline, blobs

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace import Trace, adapt
from xaikit.trace.adapt import BestModelSaver, EarlyStopping, LRScheduler


@pytest.fixture
def api(monkeypatch):
    """Stand-ins for xaikit.network's model helpers, for FakeModel (weights dict, .lr)."""

    def save_model(model, path):
        path = f"{path}.npz"
        np.savez(path, **model.weights)
        return path

    def load_model(model, path):
        with np.load(path) as f:
            model.weights = {k: f[k].copy() for k in f.files}

    ns = types.SimpleNamespace(
        save_model=save_model,
        load_model=load_model,
        get_weights=lambda m: copy.deepcopy(m.weights),
        set_weights=lambda m, w: setattr(m, "weights", copy.deepcopy(w)),
        get_lr=lambda m: m.lr,
        set_lr=lambda m, lr: setattr(m, "lr", lr),
    )
    monkeypatch.setattr(adapt, "_network_api", lambda: ns)
    return ns


class Sequence(Trace):
    """Writes a fixed value per eval epoch under ``key`` and snapshots the model weights."""

    def __init__(self, values, key="score"):
        super().__init__(outputs=key, mode="eval")
        self.values, self.key, self.snapshots = values, key, {}

    def on_epoch_end(self, data):
        data.write_with_log(self.key, self.values[self.system.epoch_idx - 1])
        self.snapshots[self.system.epoch_idx] = copy.deepcopy(self.system.network.models[0].weights)


def run(traces, epochs=4, log_steps=None, net=None, **kw):
    pipe = FakePipeline(train=blobs(24), eval=blobs(16, seed=1))
    net = net or FakeNetwork()
    est = xk.Estimator(pipe, net, epochs=epochs, traces=traces, log_steps=log_steps, **kw)
    return est, net, est.fit()


def assert_weights_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize(
    ("mode", "values", "best"), [("min", [0.5, 0.2, 0.4, 0.3], 2), ("max", [0.5, 0.2, 0.9, 0.3], 3)]
)
def test_best_model_saver_restores_best(api, tmp_path, mode, values, best, capsys) -> None:
    seq = Sequence(values)
    net = FakeNetwork()
    saver = BestModelSaver(
        net.model, tmp_path / "ckpt", metric="score", save_best_mode=mode, load_best_final=True
    )
    _, _, summary = run([saver, seq], net=net, log_steps=100)  # saver given first: the sort puts it after seq
    assert saver.best == values[best - 1] and saver.best_epoch == best
    assert saver.model_path == os.path.join(tmp_path, "ckpt", "fake_best_score.npz")
    assert_weights_equal(net.model.weights, seq.snapshots[best])
    assert not np.allclose(seq.snapshots[best]["W"], seq.snapshots[4]["W"])  # training did move on
    hist = summary.history["eval"]
    since = [hist["since_best_score"][s] for s in sorted(hist["since_best_score"])]
    assert since == {"min": [0, 0, 1, 2], "max": [0, 1, 0, 1]}[mode]
    assert list(hist[f"score_{mode}"].values())[-1] == values[best - 1]
    out = capsys.readouterr().out
    assert "xaikit-BestModelSaver: saved model to" in out and "restored" in out


def test_best_model_saver_defaults_to_the_loss(api, tmp_path) -> None:
    net = FakeNetwork()
    saver = BestModelSaver(net.model, str(tmp_path))
    run(saver, epochs=2, net=net)
    assert saver.metric == "ce" and saver.outputs == ["since_best_ce", "ce_min"]
    assert saver.best_epoch == 2  # the fake keeps improving
    # without load_best_final the final weights stay
    assert Path(saver.model_path).exists()


def test_best_model_saver_errors(api, tmp_path) -> None:
    with pytest.raises(XaikitValueError, match="save_best_mode must be 'min' or 'max'; got 'lowest'"):
        BestModelSaver(None, tmp_path, save_best_mode="lowest")
    with pytest.raises(XaikitTypeError, match="save_dir must be a folder path"):
        BestModelSaver(None, 3)

    class Vec(Trace):
        def __init__(self):
            super().__init__(outputs="v", mode="eval")

        def on_epoch_end(self, data):
            data.write_with_log("v", np.array([1.0, 2.0]))

    net = FakeNetwork()
    with pytest.raises(XaikitValueError, match="key 'v' must hold one number; got ndarray of shape"):
        run([Vec(), BestModelSaver(net.model, tmp_path, metric="v")], net=net, epochs=1)
    msg = r"BestModelSaver: key 'nope' is not in the data.*available keys: \['ce', 'epoch_time\(sec\)'\]"
    with pytest.raises(XaikitValueError, match=msg):
        run([BestModelSaver(net.model, tmp_path, metric="nope")], net=net, epochs=1)


def test_lr_scheduler_by_epoch_and_step(api, capsys) -> None:
    net = FakeNetwork()
    seen = []

    class Probe(Trace):
        def on_batch_end(self, data):
            seen.append((self.system.epoch_idx, self.system.global_step, net.model.lr))

    run([LRScheduler(net.model, lambda epoch: 0.1 / epoch), Probe(mode="train")], epochs=3, net=net)
    assert [lr for _, _, lr in seen] == pytest.approx([0.1] * 3 + [0.05] * 3 + [0.1 / 3] * 3)
    seen.clear()
    net = FakeNetwork()
    run(
        [LRScheduler(net.model, lambda step: 0.01 * step), Probe(mode="train")],
        epochs=2,
        net=net,
        log_steps=2,
    )
    assert [lr for _, _, lr in seen] == pytest.approx([0.01 * s for s in range(1, 7)])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("xaikit-Train: step: 4;")]
    assert lines and "fake_lr: 0.04;" in lines[0]


def test_lr_scheduler_errors(api) -> None:
    with pytest.raises(XaikitValueError, match=r"one parameter named 'epoch' or 'step'.*\['x'\]"):
        LRScheduler(None, lambda x: 0.1)
    with pytest.raises(XaikitTypeError, match="lr_fn must be a function"):
        LRScheduler(None, 0.1)
    net = FakeNetwork()
    with pytest.raises(
        XaikitValueError, match=r"lr_fn\(epoch=1\) \(its return value\) must be a number >= 0; got float -1.0"
    ):
        run(LRScheduler(net.model, lambda epoch: -1.0), net=net, epochs=1)


@pytest.mark.parametrize(
    ("values", "kwargs", "stop_epoch"),
    [
        ([0.5, 0.4, 0.45, 0.3, 0.1, 0.1], {"patience": 0}, 3),
        ([0.5, 0.4, 0.45, 0.3, 0.1, 0.1], {"patience": 2}, None),
        ([0.5, 0.4, 0.45, 0.42, 0.1, 0.1], {"patience": 2}, 4),
        ([0.5, 0.49, 0.48, 0.47, 0.1, 0.1], {"min_delta": 0.05}, 2),
        ([0.5, 0.6, 0.7, 0.4, 0.8, 0.9], {"compare": "max", "patience": 1}, 4),
        ([0.5, 0.4, 0.3, 0.2, 0.1, 0.0], {"baseline": 0.35, "patience": 2}, 2),
    ],
)
def test_early_stopping(api, values, kwargs, stop_epoch) -> None:
    stopper = EarlyStopping(monitor="score", **kwargs)
    est, _, summary = run([stopper, Sequence(values)], epochs=6)
    expected_last = stop_epoch or 6
    assert est.system.epoch_idx == expected_last
    assert stopper.stopped_epoch == stop_epoch
    assert len(summary.history["eval"]["score"]) == expected_last


def test_early_stopping_restores_best_weights(api) -> None:
    seq = Sequence([0.5, 0.2, 0.4, 0.3])
    stopper = EarlyStopping(monitor="score", patience=2, restore_best_weights=True)
    _, net, _ = run([seq, stopper], epochs=6)
    assert stopper.stopped_epoch == 4 and stopper.best_epoch == 2
    assert_weights_equal(net.model.weights, seq.snapshots[2])
    back = pickle.loads(pickle.dumps(stopper))
    assert back.best == 0.2 and back.best_weights is None and not hasattr(back, "system")


def test_early_stopping_default_monitor_is_the_loss(api) -> None:
    stopper = EarlyStopping()
    run(stopper, epochs=2)
    assert stopper.monitor == "ce" and stopper.inputs == ["ce"] and stopper.best_epoch == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patience": -1}, "patience must be an int >= 0"),
        ({"min_delta": -0.1}, "min_delta must be a number >= 0"),
        ({"compare": "less"}, "compare must be 'min' or 'max'"),
    ],
)
def test_early_stopping_errors(kwargs, match) -> None:
    with pytest.raises(XaikitValueError, match=match):
        EarlyStopping(**kwargs)
