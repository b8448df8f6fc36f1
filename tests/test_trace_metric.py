"""Metric traces against scikit-learn, and the trace tutorial's flows (F-beta, P+R -> F1, monitor)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from loop_fakes import FakeNetwork, FakePipeline, blobs
from sklearn import metrics as skm

import xaikit as xk
from xaikit.backend import to_number
from xaikit.errors import XaikitValueError
from xaikit.trace import Data, System, Trace
from xaikit.trace.metric import MCC, Accuracy, F1Score, Precision, Recall

NUM = r"-?\d+(\.\d+)?(e-?\d+)?"


def run_metric(trace, batches, ds_ids=None):
    """Feed batches [(y, y_pred)] through a metric trace; returns what it wrote."""
    trace.system = System()
    trace.system.mode = "eval"
    trace.on_epoch_begin(Data())
    for i, (y, p) in enumerate(batches):
        trace.system.ds_id = ds_ids[i] if ds_ids else ""
        trace.on_batch_end(Data({"y": y, "y_pred": p}))
    trace.system.ds_id = ""
    data = Data()
    trace.on_epoch_end(data)
    return data.read_logs()


@pytest.fixture
def multiclass(rng):
    y = rng.integers(0, 4, 90)
    scores = rng.random((90, 4))
    scores[np.arange(90), y] += rng.random(90) * 0.8  # mostly right
    return y, scores.astype(np.float32)


def batches_of(y, p, size=32):
    return [(y[i : i + size], p[i : i + size]) for i in range(0, len(y), size)]


def test_metrics_match_sklearn(multiclass) -> None:
    y, p = multiclass
    pred = p.argmax(1)
    labels = np.arange(4)
    b = batches_of(y, p)
    assert run_metric(Accuracy(), b)["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
    assert run_metric(MCC(), b)["mcc"] == pytest.approx(skm.matthews_corrcoef(y, pred))
    for cls, fn, key in (
        (Precision, skm.precision_score, "precision"),
        (Recall, skm.recall_score, "recall"),
        (F1Score, skm.f1_score, "f1_score"),
    ):
        vec = run_metric(cls(), b)[key]
        assert vec.shape == (4,)
        np.testing.assert_allclose(vec, fn(y, pred, labels=labels, average=None, zero_division=0))
        for avg in ("macro", "micro", "weighted"):
            got = run_metric(cls(average=avg), b)[key]
            assert isinstance(got, float)
            assert got == pytest.approx(fn(y, pred, average=avg, zero_division=0))


def test_per_class_vector_keeps_absent_classes() -> None:
    y = np.array([0, 0, 1, 1])
    p = np.eye(3, dtype=np.float32)[[0, 1, 1, 1]]  # class 2 never true nor predicted
    got = run_metric(Precision(), [(y, p)])["precision"]
    np.testing.assert_allclose(got, [1.0, 2 / 3, 0.0])


def test_binary_one_probability_column() -> None:
    y = np.array([1, 0, 1, 1, 0])
    p = np.array([[0.9], [0.6], [0.4], [0.8], [0.1]], dtype=np.float32)
    pred = (p[:, 0] >= 0.5).astype(int)
    assert run_metric(Precision(), [(y, p)])["precision"] == pytest.approx(skm.precision_score(y, pred))
    assert run_metric(Recall(), [(y, p)])["recall"] == pytest.approx(skm.recall_score(y, pred))
    assert run_metric(Accuracy(), [(y, p)])["accuracy"] == pytest.approx(0.6)


def test_one_hot_labels_and_integer_predictions() -> None:
    y = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    assert run_metric(Accuracy(), [(y, np.array([0, 2, 2, 2]))])["accuracy"] == pytest.approx(0.75)


def test_per_dataset_values(multiclass) -> None:
    y, p = multiclass
    b = batches_of(y, p, 30)
    logs = run_metric(Accuracy(), b, ds_ids=["a", "a", "b"])
    pred = p.argmax(1)
    assert logs["accuracy|a"] == pytest.approx(np.mean(y[:60] == pred[:60]))
    assert logs["accuracy|b"] == pytest.approx(np.mean(y[60:] == pred[60:]))
    assert logs["accuracy"] == pytest.approx(np.mean(y == pred))
    assert Accuracy().get_outputs(["a", "b"]) == ["accuracy", "accuracy|a", "accuracy|b"]


def test_metric_arguments_and_errors() -> None:
    t = Precision(true_key="label", pred_key="score", output_name="prec", mode="test")
    assert t.inputs == ["label", "score"] and t.outputs == ["prec"] and t.mode == {"test"}
    assert Accuracy().mode == {"eval", "test"}
    with pytest.raises(XaikitValueError, match="average must be one of"):
        Recall(average="samples")
    with pytest.raises(
        XaikitValueError, match=r"Accuracy: 'y' gives 3 labels but 'y_pred' gives 2 predictions"
    ):
        run_metric(Accuracy(), [(np.array([0, 1, 1]), np.eye(2, dtype=np.float32))])


# ---- the trace tutorial's flows ---------------------------------------------------------------
class FBetaScore(Trace):
    """The tutorial's custom metric."""

    def __init__(self, true_key, pred_key, beta=2, output_name="f_beta_score", mode=("eval", "test")):
        super().__init__(inputs=(true_key, pred_key), outputs=output_name, mode=mode)
        self.true_key, self.pred_key, self.beta = true_key, pred_key, beta
        self.y_true, self.y_pred = [], []

    def on_epoch_begin(self, data):
        self.y_true, self.y_pred = [], []

    def on_batch_end(self, data):
        self.y_pred.extend(np.argmax(to_number(data[self.pred_key]), axis=-1).ravel())
        self.y_true.extend(to_number(data[self.true_key]).ravel())

    def on_epoch_end(self, data):
        data.write_with_log(
            self.outputs[0], skm.fbeta_score(self.y_true, self.y_pred, beta=self.beta, average="weighted")
        )


class CustomF1Score(Trace):
    def __init__(self, precision_key, recall_key, mode=("eval", "test"), output_name="f1_score"):
        super().__init__(inputs=(precision_key, recall_key), outputs=output_name, mode=mode)
        self.precision_key, self.recall_key = precision_key, recall_key

    def on_epoch_end(self, data):
        p, r = data[self.precision_key], data[self.recall_key]
        data.write_with_log(self.outputs[0], 2 * p * r / (p + r))


def fit(traces, epochs=2, log_steps=1000, **kw):
    pipe = FakePipeline(
        train=blobs(48), eval=blobs(30, seed=1, spread=1.5), test=blobs(15, seed=2, spread=1.5)
    )
    est = xk.Estimator(pipe, FakeNetwork(), epochs=epochs, traces=traces, log_steps=log_steps, **kw)
    return est, est.fit()


def test_fbeta_tutorial(capsys) -> None:
    _, summary = fit(FBetaScore("y", "y_pred", beta=2, output_name="f2_score", mode="eval"), epochs=3)
    evals = [x for x in capsys.readouterr().out.splitlines() if x.startswith("xaikit-Eval")]
    assert len(evals) == 3
    for e, line in enumerate(evals, 1):
        assert re.fullmatch(
            rf"xaikit-Eval: step: {6 * e}; epoch: {e}; ce: {NUM}; f2_score: {NUM}; epoch_time\(sec\): {NUM};",
            line,
        )
    assert set(summary.history["eval"]["f2_score"]) == {6, 12, 18}
    assert 0.5 < summary.history["eval"]["f2_score"][18] <= 1.0


def test_precision_recall_feed_custom_f1(capsys) -> None:
    # given in an order that needs the dependency sort: F1 first
    traces = [
        CustomF1Score("precision", "recall"),
        Precision(true_key="y", pred_key="y_pred", output_name="precision"),
        Recall(true_key="y", pred_key="y_pred", output_name="recall"),
    ]
    est, summary = fit(traces, epochs=2)
    out = capsys.readouterr().out
    blocks = re.findall(
        rf"xaikit-Eval: step: \d+; epoch: \d; ce: {NUM}; epoch_time\(sec\): {NUM};\n"
        r"f1_score:\n(\[[^\]]+\]);\nprecision:\n(\[[^\]]+\]);\nrecall:\n(\[[^\]]+\]);\n",
        out,
    )
    assert len(blocks) == 2
    hist = summary.history["eval"]
    for step in (6, 12):
        p, r, f1 = hist["precision"][step], hist["recall"][step], hist["f1_score"][step]
        assert p.shape == (3,)
        np.testing.assert_allclose(f1, 2 * p * r / (p + r))
    est.test()
    assert "f1_score" in summary.history["test"]


def test_monitor_tutorial(capsys) -> None:
    class MonitorPred(Trace):
        def __init__(self, true_key, pred_key, mode="train"):
            super().__init__(inputs=(true_key, pred_key), mode=mode)
            self.true_key, self.pred_key = true_key, pred_key

        def on_batch_end(self, data):
            print("Global Step Index: ", self.system.global_step)
            print("Batch Index: ", self.system.batch_idx)
            print("Epoch: ", self.system.epoch_idx)
            print("Batch data has following keys: ", sorted(data.keys()))
            print("Batch true labels: ", data[self.true_key])

    pipe = FakePipeline(batch_size=4, train=blobs(40), eval=blobs(8, seed=1))
    est = xk.Estimator(
        pipe,
        FakeNetwork(),
        epochs=2,
        traces=MonitorPred("y", "y_pred"),
        max_train_steps_per_epoch=2,
        log_steps=None,
    )
    est.fit()
    out = capsys.readouterr().out
    got = re.findall(r"Global Step Index:  (\d+)\nBatch Index:  (\d+)\nEpoch:  (\d+)\n", out)
    assert got == [("1", "1", "1"), ("2", "2", "1"), ("3", "1", "2"), ("4", "2", "2")]
    assert out.count("Batch data has following keys:  ['ce', 'x', 'y', 'y_pred']") == 4
    assert "Batch true labels:  [0 1 2 0]" in out
    assert "xaikit-" not in out  # log_steps=None: no log lines


def test_metric_state_pickles_midway(multiclass) -> None:
    import pickle

    y, p = multiclass
    t = Accuracy()
    t.system = System()
    t.system.mode = "eval"
    t.on_epoch_begin(Data())
    t.on_batch_end(Data({"y": y[:50], "y_pred": p[:50]}))
    back = pickle.loads(pickle.dumps(t))
    assert not hasattr(back, "system")
    back.system = System()
    back.on_batch_end(Data({"y": y[50:], "y_pred": p[50:]}))
    d = Data()
    back.on_epoch_end(d)
    assert d["accuracy"] == pytest.approx(np.mean(y == p.argmax(1)))


def test_mcc_edge_cases() -> None:
    one_class = run_metric(MCC(), [(np.array([0, 0, 0]), np.array([0, 0, 0]))])["mcc"]
    assert one_class == 0.0
    perfect = run_metric(MCC(), [(np.array([0, 1, 2, 1]), np.array([0, 1, 2, 1]))])["mcc"]
    assert perfect == pytest.approx(1.0)
    y, p = np.array([0, 1, 0, 1, 1]), np.array([1, 0, 1, 0, 0])
    assert run_metric(MCC(), [(y, p)])["mcc"] == pytest.approx(skm.matthews_corrcoef(y, p))


def test_macro_average_ignores_absent_classes() -> None:
    y = np.array([0, 0, 1, 1])
    p = np.eye(3, dtype=np.float32)[[0, 1, 1, 1]]  # three score columns, class 2 absent
    got = run_metric(Precision(average="macro"), [(y, p)])["precision"]
    assert got == pytest.approx(skm.precision_score(y, p.argmax(1), average="macro")) == pytest.approx(5 / 6)
