"""Run the code of docs/tutorial_traces.md (custom traces on the bundled digits) and print its logs.

Usage: python gallery/tutorial_traces.py
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import fbeta_score

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.backend import load_backend, to_number
from xaikit.dataset.data import digits
from xaikit.op.numpyop import Minmax
from xaikit.op.tensorop import CrossEntropy, ModelOp, UpdateOp
from xaikit.trace import Trace
from xaikit.trace.metric import Precision, Recall


def get_pipeline_model_network(model_name="LeNet", batch_size=32):
    train_data, eval_data = digits.load_data()
    test_data = eval_data.split(0.5)
    pipeline = xk.Pipeline(
        train_data=train_data,
        eval_data=eval_data,
        test_data=test_data,
        batch_size=batch_size,
        ops=[Minmax(inputs="x", outputs="x")],
    )
    model = xk.build(
        model_fn=lambda: LeNet(input_shape=(28, 28, 1)), optimizer_fn="adam", model_name=model_name
    )
    network = xk.Network(
        ops=[
            ModelOp(model=model, inputs="x", outputs="y_pred"),
            CrossEntropy(inputs=("y_pred", "y"), outputs="ce"),
            UpdateOp(model=model, loss_name="ce"),
        ]
    )
    return pipeline, model, network


class FBetaScore(Trace):
    def __init__(self, true_key, pred_key, beta=2, output_name="f_beta_score", mode=("eval", "test")):
        super().__init__(inputs=(true_key, pred_key), outputs=output_name, mode=mode)
        self.true_key, self.pred_key, self.beta = true_key, pred_key, beta

    def on_epoch_begin(self, data):
        self.y_true, self.y_pred = [], []

    def on_batch_end(self, data):
        y_true, y_pred = to_number(data[self.true_key]), to_number(data[self.pred_key])
        self.y_pred.extend(np.argmax(y_pred, axis=-1).ravel())
        self.y_true.extend(y_true.ravel())

    def on_epoch_end(self, data):
        score = fbeta_score(self.y_true, self.y_pred, beta=self.beta, average="weighted")
        data.write_with_log(self.outputs[0], score)


class CustomF1Score(Trace):
    def __init__(self, precision_key, recall_key, mode=("eval", "test"), output_name="f1_score"):
        super().__init__(inputs=(precision_key, recall_key), outputs=output_name, mode=mode)
        self.precision_key, self.recall_key = precision_key, recall_key

    def on_epoch_end(self, data):
        precision, recall = data[self.precision_key], data[self.recall_key]
        total = precision + recall  # 0 for a class never predicted nor hit: its F1 is 0, not 0/0
        f1 = np.divide(2 * precision * recall, total, out=np.zeros_like(total), where=total > 0)
        data.write_with_log(self.outputs[0], f1)


class MonitorPred(Trace):
    def __init__(self, true_key, pred_key, mode="train"):
        super().__init__(inputs=(true_key, pred_key), mode=mode)
        self.true_key, self.pred_key = true_key, pred_key

    def on_batch_end(self, data):
        print("Global Step Index:", self.system.global_step)
        print("Batch Index:", self.system.batch_idx)
        print("Epoch:", self.system.epoch_idx)
        print("Batch Size:", len(data[self.true_key]))
        print("Ground truth:", to_number(data[self.true_key])[:8])
        print("Predictions:", np.argmax(to_number(data[self.pred_key]), axis=-1)[:8])


def main() -> None:
    load_backend("torch").limit_threads(1)
    load_backend("torch").seed(0)
    print("### F-beta")
    pipeline, _, network = get_pipeline_model_network()
    traces = FBetaScore(true_key="y", pred_key="y_pred", beta=2, output_name="f2_score", mode="eval")
    xk.Estimator(pipeline=pipeline, network=network, epochs=4, traces=traces, log_steps=20).fit()

    print("### F1 from Precision and Recall")
    pipeline, _, network = get_pipeline_model_network()
    traces = [
        Precision(true_key="y", pred_key="y_pred", mode=["eval", "test"], output_name="precision"),
        Recall(true_key="y", pred_key="y_pred", mode=["eval", "test"], output_name="recall"),
        CustomF1Score(
            precision_key="precision", recall_key="recall", mode=["eval", "test"], output_name="f1_score"
        ),
    ]
    estimator = xk.Estimator(pipeline=pipeline, network=network, epochs=2, traces=traces, log_steps=1000)
    estimator.fit()
    estimator.test()

    print("### Monitoring")
    pipeline, _, network = get_pipeline_model_network()
    traces = MonitorPred(true_key="y", pred_key="y_pred")
    xk.Estimator(
        pipeline=pipeline,
        network=network,
        epochs=2,
        traces=traces,
        max_train_steps_per_epoch=2,
        log_steps=1000,
    ).fit()


if __name__ == "__main__":
    main()
