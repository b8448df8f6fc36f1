"""The Estimator loop with numpy fakes: hook order, log format, modes, ds_ids, schedulers, stop."""

from __future__ import annotations

import re

import numpy as np
import pytest
from loop_fakes import FakeNetwork, FakePipeline, blobs

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.schedule import EpochScheduler, RepeatScheduler
from xaikit.trace import Trace
from xaikit.trace.essential import format_value, log_line

NUM = r"-?\d+(\.\d+)?(e-?\d+)?"


def make(epochs=2, traces=None, log_steps=3, train=48, ev=24, test=16, eval_ids=None, **kw):
    ev_data = {i: blobs(ev, seed=k + 1) for k, i in enumerate(eval_ids)} if eval_ids else blobs(ev, seed=1)
    pipe = FakePipeline(train=blobs(train), eval=ev_data, test=blobs(test, seed=9) if test else None)
    net = FakeNetwork()
    est = xk.Estimator(pipe, net, epochs=epochs, traces=traces, log_steps=log_steps, **kw)
    return est, pipe, net


class Recorder(Trace):
    """Records every hook call with the system state."""

    def __init__(self, name="rec", events=None, **kw):
        super().__init__(**kw)
        self.name = name
        self.events = [] if events is None else events

    def _rec(self, hook):
        s = self.system
        self.events.append((self.name, hook, s.mode, s.epoch_idx, s.batch_idx, s.global_step, s.ds_id))

    def on_begin(self, data):
        self._rec("begin")

    def on_epoch_begin(self, data):
        self._rec("epoch_begin")

    def on_batch_begin(self, data):
        self._rec("batch_begin")

    def on_batch_end(self, data):
        self._rec("batch_end")

    def on_epoch_end(self, data):
        self._rec("epoch_end")

    def on_end(self, data):
        self._rec("end")


# ---- log format -----------------------------------------------------------------------------
def test_log_lines_match_reference_format(capsys) -> None:
    est, _, _ = make(epochs=2, log_steps=4)
    est.fit()
    est.test()
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"xaikit-Start: step: 1; logging_interval: 4; num_device: 1;", lines[0])
    train_step = re.compile(rf"xaikit-Train: step: (\d+); ce: {NUM};( steps/sec: {NUM};)?")
    steps = [int(m.group(1)) for line in lines if (m := train_step.fullmatch(line))]
    assert steps == [1, 4, 8, 12]  # step 1, then every log_steps; 6 steps per epoch
    assert all("steps/sec" in line for line in lines if train_step.fullmatch(line) and "step: 1;" not in line)
    epoch_train = [
        line
        for line in lines
        if re.fullmatch(rf"xaikit-Train: step: \d+; epoch: \d; epoch_time\(sec\): {NUM};", line)
    ]
    assert [re.search(r"step: (\d+); epoch: (\d)", line).groups() for line in epoch_train] == [
        ("6", "1"),
        ("12", "2"),
    ]
    evals = [line for line in lines if line.startswith("xaikit-Eval")]
    assert len(evals) == 2
    for epoch, line in zip((1, 2), evals):
        assert re.fullmatch(
            rf"xaikit-Eval: step: {6 * epoch}; epoch: {epoch}; ce: {NUM}; epoch_time\(sec\): {NUM};", line
        )
    assert re.fullmatch(rf"xaikit-Finish: step: 12; total_time\(sec\): {NUM};", lines[-2])
    assert re.fullmatch(rf"xaikit-Test: step: 12; epoch: 2; ce: {NUM};", lines[-1])
    # ce is rounded to at most 4 decimals
    assert all(len(m.split(".")[-1]) <= 4 for m in re.findall(r"ce: ([\d.]+);", "\n".join(lines)))


def test_log_steps_none_prints_nothing_but_records(capsys) -> None:
    est, _, _ = make(epochs=1, log_steps=None)
    summary = est.fit()
    assert capsys.readouterr().out == ""
    assert list(summary.history["eval"]["ce"]) == [6]


def test_format_helpers() -> None:
    assert format_value(np.float32(2.302585)) == ("2.3026", None)
    assert format_value(np.array([[0.5]])) == ("0.5", None)
    assert format_value(0.000123456) == ("0.0001235", None)
    assert format_value(1.0) == ("1.0", None)
    assert format_value(np.int64(7)) == ("7", None)
    assert format_value("3.2 sec") == ("3.2 sec", None)
    line = log_line(
        "xaikit-Finish: step: 9; ",
        [("LeNet_lr", 0.001), ("total_time(sec)", 1.5), ("acc", 0.5), ("prec", np.array([0.25, 1.0]))],
    )
    assert (
        line
        == "xaikit-Finish: step: 9; acc: 0.5; total_time(sec): 1.5; LeNet_lr: 0.001;\nprec:\n[0.25,1.  ];"
    )
    # natural order of keys
    assert log_line("h ", [("k10", 1), ("k9", 2), ("K1", 3)]) == "h K1: 3; k9: 2; k10: 1;"


def test_vector_metrics_printed_after_the_line(capsys) -> None:
    class Vec(Trace):
        def __init__(self):
            super().__init__(outputs="vec", mode="eval")

        def on_epoch_end(self, data):
            data.write_with_log("vec", np.array([0.1, 0.123456, 1.0]))

    est, _, _ = make(epochs=1, traces=Vec(), log_steps=None)
    est.system.log_steps = 100
    est.fit()
    out = capsys.readouterr().out
    assert re.search(
        rf"xaikit-Eval: step: 6; epoch: 1; ce: {NUM}; epoch_time\(sec\): {NUM};"
        r"\nvec:\n\[0\.1   ?,0\.1235,1\.    ?\];\n",
        out,
    )


# ---- hook order -----------------------------------------------------------------------------
def test_hook_order_and_system_fields() -> None:
    events = []
    rec = Recorder(events=events)
    est, pipe, net = make(epochs=2, traces=rec, train=16, ev=8, log_steps=None)  # 2 train, 1 eval batch
    est.fit()
    hooks = [(e[1], e[2], e[3], e[4], e[5]) for e in events]
    epoch = lambda ep, gs: [  # noqa: E731
        ("epoch_begin", "train", ep, 0 if ep == 1 else 1, gs),
        ("batch_begin", "train", ep, 1, gs + 1),
        ("batch_end", "train", ep, 1, gs + 1),
        ("batch_begin", "train", ep, 2, gs + 2),
        ("batch_end", "train", ep, 2, gs + 2),
        ("epoch_end", "train", ep, 2, gs + 2),
        ("epoch_begin", "eval", ep, 2, gs + 2),
        ("batch_begin", "eval", ep, 1, gs + 2),
        ("batch_end", "eval", ep, 1, gs + 2),
        ("epoch_end", "eval", ep, 1, gs + 2),
    ]
    assert hooks == [("begin", "train", 0, 0, 0), *epoch(1, 0), *epoch(2, 2), ("end", "train", 2, 1, 4)]
    assert net.calls[0] == ("load", "train", 1) and net.calls.count(("unload",)) == 4
    assert pipe.loader_calls == [("train", 1, ""), ("eval", 1, ""), ("train", 2, ""), ("eval", 2, "")]
    assert rec.system is est.system and rec.system.network is net and rec.system.pipeline is pipe
    assert est.system.total_epochs == 2 and est.system.experiment_time


def test_test_runs_one_test_epoch() -> None:
    events = []
    est, _, _ = make(epochs=1, traces=Recorder(events=events, mode="test"), train=8, test=16, log_steps=None)
    est.fit()
    assert events == []  # a test-only trace takes no part in fit
    events.clear()
    est.test()
    assert [(e[1], e[2], e[4]) for e in events] == [
        ("begin", "test", 0),
        ("epoch_begin", "test", 0),
        ("batch_begin", "test", 1),
        ("batch_end", "test", 1),
        ("batch_begin", "test", 2),
        ("batch_end", "test", 2),
        ("epoch_end", "test", 2),
        ("end", "test", 2),
    ]


def test_max_steps_per_epoch() -> None:
    events = []
    est, _, net = make(
        epochs=2,
        traces=Recorder(events=events),
        max_train_steps_per_epoch=2,
        max_eval_steps_per_epoch=1,
        log_steps=None,
    )
    est.fit()
    assert est.system.global_step == 4
    assert [e[2] for e in events if e[1] == "batch_end"] == ["train", "train", "eval"] * 2
    assert net.calls.count(("step", "train")) == 4


# ---- modes, ds_ids, schedulers --------------------------------------------------------------
def test_modes_and_negation() -> None:
    events = []
    traces = [
        Recorder("train", events, mode="train"),
        Recorder("not_train", events, mode="!train"),
        Recorder("eval_test", events, mode=["eval", "test"]),
    ]
    est, _, _ = make(epochs=1, traces=traces, train=8, ev=8, test=8, log_steps=None)
    est.fit()
    est.test()
    seen = {(e[0], e[2]) for e in events if e[1] == "batch_end"}
    assert seen == {
        ("train", "train"),
        ("not_train", "eval"),
        ("eval_test", "eval"),
        ("not_train", "test"),
        ("eval_test", "test"),
    }


def test_several_eval_datasets(capsys) -> None:
    events = []
    traces = [
        Recorder("all", events),
        Recorder("only_b", events, ds_id="b"),
        Recorder("not_b", events, ds_id="!b"),
    ]
    est, _, _ = make(epochs=1, traces=traces, train=8, ev=16, eval_ids=["a", "b"], log_steps=100)
    summary = est.fit()
    batch = [(e[0], e[6]) for e in events if e[1] == "batch_end" and e[2] == "eval"]
    assert batch == [
        ("all", "a"),
        ("not_b", "a"),
        ("all", "a"),
        ("not_b", "a"),
        ("all", "b"),
        ("only_b", "b"),
        ("all", "b"),
        ("only_b", "b"),
    ]
    # epoch hooks run for every trace that runs on at least one dataset, with ds_id ""
    assert [(e[0], e[6]) for e in events if e[1] == "epoch_end" and e[2] == "eval"] == [
        ("all", ""),
        ("only_b", ""),
        ("not_b", ""),
    ]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("xaikit-Eval"))
    assert re.fullmatch(
        rf"xaikit-Eval: step: 1; epoch: 1; ce: {NUM}; ce\|a: {NUM}; ce\|b: {NUM}; epoch_time\(sec\): {NUM};",
        line,
    )
    hist = summary.history["eval"]
    assert hist["ce"][1] == pytest.approx((hist["ce|a"][1] + hist["ce|b"][1]) / 2)  # same number of batches


def test_per_sample_losses_are_averaged_over_samples() -> None:
    pipe = FakePipeline(batch_size=8, train=blobs(8), eval=blobs(12, seed=1))
    net = FakeNetwork(per_sample_loss=True)
    est = xk.Estimator(pipe, net, epochs=1, log_steps=None)
    summary = est.fit()
    x, y = pipe.data["eval"][""]["x"], pipe.data["eval"][""]["y"]
    expected = net.run_step({"x": x, "y": y}, "eval")["ce"].mean()
    assert summary.history["eval"]["ce"][1] == pytest.approx(float(expected), rel=1e-6)


def test_schedulers_switch_traces_per_epoch() -> None:
    events = []
    a = Recorder("a", events, mode="train")
    b = Recorder("b", events, mode="train")
    c = Recorder("c", events, mode="train")
    traces = [RepeatScheduler([a, None]), EpochScheduler({2: b, 3: None}), EpochScheduler({1: c, 3: c})]
    est, _, _ = make(epochs=4, traces=traces, train=8, log_steps=None)
    est.fit()
    ran = {(e[0], e[3]) for e in events if e[1] == "epoch_begin"}
    assert ran == {("a", 1), ("a", 3), ("b", 2), ("c", 1), ("c", 2), ("c", 3), ("c", 4)}
    # on_begin / on_end once for every scheduled value
    assert sorted(e[0] for e in events if e[1] in ("begin", "end")) == ["a", "a", "b", "b", "c", "c"]


# ---- stopping and errors --------------------------------------------------------------------
def test_stop_training_ends_after_the_batch(capsys) -> None:
    class StopAt(Trace):
        def on_batch_end(self, data):
            if self.system.global_step == 3:
                self.system.stop_training = True

    events = []
    est, _, _ = make(epochs=5, traces=[StopAt(mode="train"), Recorder(events=events)], log_steps=100)
    est.fit()
    assert est.system.global_step == 3
    assert [e[1] for e in events][-2:] == ["epoch_end", "end"]
    assert not any(e[2] == "eval" for e in events)
    assert "xaikit-Finish: step: 3;" in capsys.readouterr().out


def test_missing_trace_input_is_reported() -> None:
    est, _, _ = make(epochs=1, traces=Trace(inputs="y_true", mode="eval"), log_steps=None)
    with pytest.raises(
        XaikitValueError,
        match=r"reads key 'y_true'.*data keys: \['ce', 'x', 'y', 'y_pred'\].*mode 'eval', epoch 1",
    ):
        est.fit()


def test_cycle_is_reported() -> None:
    traces = [Trace(inputs="a", outputs="b"), Trace(inputs="b", outputs="a")]
    est, _, _ = make(epochs=1, traces=traces, log_steps=None)
    with pytest.raises(XaikitValueError, match="cycle"):
        est.fit()


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"epochs": 0}, XaikitValueError, "epochs must be an int >= 1; got int 0"),
        ({"epochs": 1.5}, XaikitValueError, "epochs must be"),
        ({"log_steps": -1}, XaikitValueError, "log_steps must be None or an int >= 1"),
        ({"max_train_steps_per_epoch": 0}, XaikitValueError, "max_train_steps_per_epoch"),
        ({"traces": [object()]}, XaikitTypeError, r"traces\[0\] must be a Trace"),
        ({"traces": [RepeatScheduler([Trace(), 3])]}, XaikitTypeError, r"traces\[0\] must be a Trace"),
        ({"traces": "acc"}, XaikitTypeError, "traces must be"),
    ],
)
def test_bad_estimator_arguments(kwargs, err, match) -> None:
    pipe = FakePipeline(train=blobs(8))
    args = {"epochs": 1} | kwargs
    with pytest.raises(err, match=match):
        xk.Estimator(pipe, FakeNetwork(), **args)


def test_bad_pipeline_network_and_modes() -> None:
    with pytest.raises(XaikitTypeError, match=r"pipeline must be an xk\.Pipeline"):
        xk.Estimator(object(), FakeNetwork(), epochs=1)
    with pytest.raises(XaikitTypeError, match=r"network must be an xk\.Network.*without load_epoch"):
        xk.Estimator(FakePipeline(train=blobs(8)), object(), epochs=1)
    est = xk.Estimator(FakePipeline(eval=blobs(8)), FakeNetwork(), epochs=1)
    with pytest.raises(XaikitValueError, match=r"fit needs training data.*\['eval'\]"):
        est.fit()
    with pytest.raises(XaikitValueError, match="test needs test data"):
        est.test()


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys) -> None:
    import sys

    est, _, _ = make(epochs=1, log_steps=None)
    est.fit()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    est.fit()
    err = capsys.readouterr().err
    assert "train 1" in err and "eval 1" in err


def test_reader_of_a_scheduled_writer_runs_when_the_writer_is_off() -> None:
    class Writer(Trace):
        def on_epoch_end(self, data):
            data.write_without_log("grid", self.system.epoch_idx)

    class Reader(Trace):
        def __init__(self):
            super().__init__(inputs="grid", mode="eval")
            self.seen = []

        def on_epoch_end(self, data):
            self.seen.append(data["grid"] if "grid" in data else None)

    reader = Reader()
    est, _, _ = make(epochs=4, traces=[reader, RepeatScheduler([Writer(outputs="grid", mode="eval"), None])])
    est.fit()
    assert reader.seen == [1, None, 3, None]
