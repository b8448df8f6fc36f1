"""The Estimator with the real Pipeline, Network and LeNet, on both frameworks (small and fast).

The slow end-to-end learning check (LeNet reaches 0.9 on shapes) is tests/test_training_slow.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import xaikit as xk
from xaikit.dataset.data import shapes
from xaikit.op.numpyop import Minmax
from xaikit.op.tensorop import CrossEntropy, ModelOp, UpdateOp
from xaikit.trace.adapt import BestModelSaver, EarlyStopping, LRScheduler
from xaikit.trace.metric import Accuracy, F1Score

NUM = r"-?\d+(\.\d+)?(e-?\d+)?"


def lenet_fn(framework: str, classes: int = 5):
    if framework == "torch":
        from xaikit.architecture.torch import LeNet

        return lambda: LeNet(input_shape=(3, 32, 32), classes=classes)
    from xaikit.architecture.tensorflow import LeNet

    return lambda: LeNet(input_shape=(32, 32, 3), classes=classes)


def setup(framework, n_train=64, n_eval=32, batch_size=16, name="lenet", eval_ids=None, seed=0):
    train, ev = shapes.load_data(n_train=n_train, n_eval=n_eval, seed=seed)
    eval_data = dict.fromkeys(eval_ids, ev) if eval_ids else ev
    pipeline = xk.Pipeline(
        train_data=train,
        eval_data=eval_data,
        test_data=ev,
        batch_size=batch_size,
        ops=[Minmax("x")],
        seed=seed,
    )
    model = xk.build(lenet_fn(framework), optimizer_fn="adam", model_name=name)
    network = xk.Network(
        ops=[
            ModelOp(model=model, inputs="x", outputs="y_pred"),
            CrossEntropy(inputs=("y_pred", "y"), outputs="ce"),
            UpdateOp(model=model, loss_name="ce"),
        ]
    )
    return pipeline, model, network


def eval_ce(pipeline, network, epoch=1):
    """Mean of per-batch eval losses, as EvalEssential computes it."""
    network.load_epoch("eval", epoch)
    values = [float(network.run_step(b, "eval")["ce"]) for b in pipeline.get_loader("eval", epoch)]
    network.unload_epoch()
    return float(np.mean(values))


def test_fit_and_test_log_lines(framework, capsys) -> None:
    pipeline, _model, network = setup(framework)
    traces = [Accuracy(), F1Score(average="macro")]
    est = xk.Estimator(pipeline, network, epochs=2, traces=traces, log_steps=2)
    summary = est.fit()
    est.test()
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "xaikit-Start: step: 1; logging_interval: 2; num_device: 1;"
    assert re.fullmatch(rf"xaikit-Train: step: 1; ce: {NUM};", lines[1])
    assert re.fullmatch(rf"xaikit-Train: step: 2; ce: {NUM}; steps/sec: {NUM};", lines[2])
    evals = [x for x in lines if x.startswith("xaikit-Eval")]
    assert len(evals) == 2
    assert re.fullmatch(
        rf"xaikit-Eval: step: 8; epoch: 2; accuracy: {NUM}; ce: {NUM}; f1_score: {NUM}; epoch_time\(sec\): {NUM};",
        evals[1],
    )
    assert re.fullmatch(rf"xaikit-Finish: step: 8; total_time\(sec\): {NUM}; lenet_lr: 0.001;", lines[-2])
    assert re.fullmatch(
        rf"xaikit-Test: step: 8; epoch: 2; accuracy: {NUM}; ce: {NUM}; f1_score: {NUM};", lines[-1]
    )
    # the logged eval loss is the mean over the eval batches with the final weights
    assert summary.history["eval"]["ce"][8] == pytest.approx(
        eval_ce(pipeline, network, 2), rel=1e-4, abs=1e-6
    )
    assert 0.0 <= summary.history["test"]["accuracy"][8] <= 1.0


def test_best_model_saver_and_lr_scheduler(framework, tmp_path) -> None:
    pipeline, model, network = setup(framework, name="net")
    saver = BestModelSaver(model, tmp_path, metric="ce", load_best_final=True)
    lrs = LRScheduler(model, lambda epoch: [1e-3, 3e-2, 1e-5][epoch - 1])  # epoch 2 likely hurts
    stopper = EarlyStopping(patience=5)
    lrs_seen = []

    class Probe(xk.trace.Trace):
        def on_epoch_end(self, data):
            lrs_seen.append(xk.network.get_lr(model))

    traces = [saver, lrs, stopper, Probe(mode="train")]
    est = xk.Estimator(pipeline, network, epochs=3, traces=traces, log_steps=None)
    summary = est.fit()
    ce_by_epoch = [summary.history["eval"]["ce"][s] for s in sorted(summary.history["eval"]["ce"])]
    assert saver.best == pytest.approx(min(ce_by_epoch))
    assert saver.best_epoch == int(np.argmin(ce_by_epoch)) + 1
    suffix = ".pt" if framework == "torch" else ".weights.h5"
    assert saver.model_path == str(tmp_path / f"net_best_ce{suffix}")
    # the model now holds the best weights: its eval loss is the best one
    assert eval_ce(pipeline, network) == pytest.approx(saver.best, rel=1e-4, abs=1e-6)
    assert lrs_seen == pytest.approx([1e-3, 3e-2, 1e-5])
    assert stopper.monitor == "ce" and stopper.best == pytest.approx(min(ce_by_epoch))


def test_several_eval_datasets(framework, capsys) -> None:
    pipeline, _, network = setup(framework, eval_ids=["a", "b"], n_eval=32)
    est = xk.Estimator(
        pipeline, network, epochs=1, traces=Accuracy(), log_steps=100, max_train_steps_per_epoch=2
    )
    summary = est.fit()
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("xaikit-Eval"))
    assert re.fullmatch(
        rf"xaikit-Eval: step: 2; epoch: 1; accuracy: {NUM}; accuracy\|a: {NUM}; accuracy\|b: {NUM}; "
        rf"ce: {NUM}; ce\|a: {NUM}; ce\|b: {NUM}; epoch_time\(sec\): {NUM};",
        line,
    )
    hist = summary.history["eval"]
    # the same data under two ids: same values
    assert hist["accuracy|a"][2] == hist["accuracy|b"][2] == hist["accuracy"][2]
    assert hist["ce|a"][2] == pytest.approx(hist["ce|b"][2], rel=1e-5)
