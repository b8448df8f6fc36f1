"""Network, build and the model helpers, on both frameworks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit.network as xn
from xaikit.backend import reduce_mean
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.op.tensorop import CrossEntropy, LambdaOp, ModelOp, UpdateOp


def _lenet(framework: str, softmax: bool = True, classes: int = 3) -> Any:
    if framework == "torch":
        from xaikit.architecture.torch import LeNet
    else:
        from xaikit.architecture.tensorflow import LeNet
    return lambda: LeNet(input_shape=(20, 20, 3), classes=classes, softmax=softmax)


def _batch(n: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.random((n, 20, 20, 3), dtype=np.float32), "y": rng.integers(0, 3, n).astype(np.int64)}


def _net(model: Any, **ce: Any) -> xn.Network:
    return xn.Network(
        [ModelOp(model, "x", "y_pred"), CrossEntropy(("y_pred", "y"), "ce", **ce), UpdateOp(model, "ce")]
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k].cpu().numpy(), b[k].cpu().numpy()) for k in a)
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_training_reduces_loss_and_eval_changes_nothing(framework: str) -> None:
    model = xn.build(_lenet(framework), "adam")
    net = _net(model)
    batch = _batch()
    first = float(net.run_step(batch, "eval")["ce"])
    before = xn.get_weights(model)
    net.run_step(batch, "eval")
    net.run_step(batch, "test")
    assert _same(before, xn.get_weights(model))  # eval/test: no update
    net.load_epoch("train", 1)
    losses = [float(net.run_step(batch, "train")["ce"]) for _ in range(25)]
    net.unload_epoch()
    assert not _same(before, xn.get_weights(model))
    last = float(net.run_step(batch, "eval")["ce"])
    assert last < 0.8 * first and losses[-1] < losses[0]


def test_outputs_are_numpy_with_shapes(framework: str) -> None:
    model = xn.build(_lenet(framework), "sgd")
    net = xn.Network(
        [
            ModelOp(model, "x", "y_pred"),
            CrossEntropy(("y_pred", "y"), "sample_ce", average_loss=False),
            LambdaOp(reduce_mean, "sample_ce", "ce"),
            UpdateOp(model, "ce"),
        ]
    )
    out = net.run_step(_batch(6), "train")
    assert sorted(out) == ["ce", "sample_ce", "y_pred"]
    assert all(isinstance(v, np.ndarray) for v in out.values())
    assert out["y_pred"].shape == (6, 3) and out["sample_ce"].shape == (6,) and out["ce"].shape == ()
    np.testing.assert_allclose(out["ce"], out["sample_ce"].mean(), rtol=1e-6)
    np.testing.assert_allclose(out["y_pred"].sum(axis=1), 1.0, rtol=1e-5)
    assert net.get_loss_keys() == {"ce"} and net.models == [model]
    full = net.transform(_batch(2), mode="eval")
    assert set(full) == {"x", "y", "y_pred", "sample_ce", "ce"}


def test_per_sample_cross_entropy_matches_numpy(framework: str) -> None:
    batch = _batch(7, seed=3)
    probs_net = xn.Network(
        [
            ModelOp(xn.build(_lenet(framework), None), "x", "p"),
            CrossEntropy(("p", "y"), "ce", average_loss=False),
        ]
    )
    out = probs_net.run_step(batch, "eval")
    expected = -np.log(np.clip(out["p"][np.arange(7), batch["y"]], 1e-7, 1 - 1e-7))
    np.testing.assert_allclose(out["ce"], expected, rtol=1e-5)
    logit_model = xn.build(_lenet(framework, softmax=False), None)
    onehot = np.eye(3, dtype=np.float32)[batch["y"]]
    net = xn.Network(
        [
            ModelOp(logit_model, "x", "z"),
            CrossEntropy(("z", "y"), "ce", from_logits=True, average_loss=False),
            CrossEntropy(("z", "onehot"), "ce1", from_logits=True, average_loss=False),
            CrossEntropy(("z", "y"), "mean", from_logits=True),
        ]
    )
    out = net.run_step({**batch, "onehot": onehot}, "eval")
    z = out["z"].astype(np.float64)
    logp = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
    expected = -logp[np.arange(7), batch["y"]]
    np.testing.assert_allclose(out["ce"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["ce1"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["mean"], expected.mean(), rtol=1e-5)


def test_binary_cross_entropy(framework: str) -> None:
    model = xn.build(_lenet(framework), None)
    net = xn.Network(
        [
            ModelOp(model, "x", "p3"),
            LambdaOp(lambda p: p[:, :1], "p3", "p"),
            CrossEntropy(("p", "t"), "bce", average_loss=False),
        ]
    )
    t = np.array([0, 1, 1, 0], dtype=np.float32)
    out = net.run_step({**_batch(4), "t": t}, "eval")
    p = np.clip(out["p"][:, 0], 1e-7, 1 - 1e-7)
    np.testing.assert_allclose(out["bce"], -(t * np.log(p) + (1 - t) * np.log(1 - p)), rtol=1e-5)


def test_update_op_only_in_train(framework: str) -> None:
    model = xn.build(_lenet(framework), "sgd")
    op = UpdateOp(model, "ce")
    assert op.runs_in("train") and not op.runs_in("eval") and not op.runs_in("test")
    assert not UpdateOp(model, "ce", mode=None).runs_in("infer")
    net = _net(model)
    before = xn.get_weights(model)
    net.load_epoch("eval", 1)
    net.run_step(_batch(), "eval")
    assert _same(before, xn.get_weights(model))
    net.run_step(_batch(), "train")  # another mode than the loaded one resolves its own ops
    assert not _same(before, xn.get_weights(model))


def test_tf_train_step_traced_once() -> None:
    import tensorflow as tf

    tf.random.set_seed(0)
    model = xn.build(_lenet("tf"), "adam")
    net = _net(model)
    net.load_epoch("train", 1)
    for n in (8, 8, 5, 8):
        net.run_step(_batch(n), "train")
    assert net._stepper.trace_count == 1  # one trace for all batch sizes
    net.load_epoch("eval", 1)
    net.run_step(_batch(8), "eval")
    net.run_step(_batch(3), "eval")
    assert net._stepper.trace_count == 2  # one more for eval
    net.load_epoch("train", 2)
    net.run_step(_batch(8), "train")
    assert net._stepper.trace_count == 2  # same ops in a new epoch: no new trace


def test_torch_channel_rule_and_modes() -> None:
    import torch

    model = xn.build(_lenet("torch"), "adam")
    batch = _batch(4)
    net = xn.Network([ModelOp(model, "x", "y_pred")])
    last = net.run_step(batch, "eval")["y_pred"]
    first = net.run_step({"x": batch["x"].transpose(0, 3, 1, 2).copy()}, "eval")["y_pred"]
    with torch.no_grad():
        direct = model.eval()(torch.from_numpy(batch["x"].transpose(0, 3, 1, 2).copy())).numpy()
    np.testing.assert_allclose(last, direct, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first, direct, rtol=1e-5, atol=1e-6)
    assert not model.training
    net.run_step(batch, "train")
    assert model.training
    uint8 = net.run_step({"x": (batch["x"] * 255).astype(np.uint8)}, "eval")["y_pred"]
    assert uint8.dtype == np.float32 and uint8.shape == (4, 3)


def test_lr_get_set(framework: str) -> None:
    model = xn.build(_lenet(framework), "sgd")
    assert xn.get_lr(model) == pytest.approx(0.01)
    xn.set_lr(model, 0.25)
    assert xn.get_lr(model) == 0.25
    assert xn.get_lr(xn.build(_lenet(framework), "adam")) == 0.001
    with pytest.raises(XaikitValueError, match="lr must be a number >= 0"):
        xn.set_lr(model, -1.0)
    with pytest.raises(XaikitValueError, match="has no optimizer"):
        xn.get_lr(xn.build(_lenet(framework), None))


def test_custom_optimizer_and_names(framework: str) -> None:
    if framework == "torch":
        import torch

        model = xn.build(_lenet(framework), lambda p: torch.optim.SGD(p, lr=0.3), model_name="lenet")
    else:
        import tensorflow as tf

        model = xn.build(_lenet(framework), lambda: tf.keras.optimizers.SGD(0.3), model_name="lenet")
    assert xn.get_lr(model) == pytest.approx(0.3) and model.model_name == "lenet"
    a, b = xn.build(_lenet(framework)), xn.build(_lenet(framework))
    assert a.model_name != b.model_name and a.model_name.startswith("model")


def test_save_load_round_trip_exact(framework: str, tmp_path: Path) -> None:
    model = xn.build(_lenet(framework), "adam", model_name="m")
    net = _net(model)
    net.run_step(_batch(), "train")
    saved = xn.get_weights(model)
    path = xn.save_model(model, str(tmp_path))
    assert Path(path).parent == tmp_path and Path(path).name.startswith("m.")
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(path).name]  # no temp files left
    net.run_step(_batch(), "train")
    assert not _same(saved, xn.get_weights(model))
    xn.load_model(model, path)
    assert _same(saved, xn.get_weights(model))
    # in-memory copies are exact and independent
    copy = xn.get_weights(model)
    net.run_step(_batch(), "train")
    xn.set_weights(model, copy)
    assert _same(saved, xn.get_weights(model))


def test_scheduled_ops(framework: str) -> None:
    class Sched:
        def __init__(self, values: list[Any]) -> None:
            self.values = values

        def get_current_value(self, epoch: int) -> Any:
            return self.values[(epoch - 1) % len(self.values)]

        def get_all_values(self) -> list[Any]:
            return self.values

    model = xn.build(_lenet(framework), "sgd")
    double = LambdaOp(lambda p: p * 2, "y_pred", "y2")
    net = xn.Network([ModelOp(model, "x", "y_pred"), Sched([double, None])])
    net.load_epoch("eval", 1)
    assert "y2" in net.run_step(_batch(2), "eval")
    net.load_epoch("eval", 2)
    assert "y2" not in net.run_step(_batch(2), "eval")


def test_scheduled_lambda_ops_apply_their_functions(framework: str) -> None:
    from xaikit.schedule import EpochScheduler, RepeatScheduler

    model = xn.build(_lenet(framework), "sgd")
    by_epoch = EpochScheduler(
        {
            1: LambdaOp(lambda p: p * 2, "y_pred", "a"),
            3: LambdaOp(lambda p: p + 1, "y_pred", "a"),
            5: None,
        }
    )
    repeat = RepeatScheduler(
        [LambdaOp(lambda p: p * 10, "y_pred", "b"), LambdaOp(lambda p: -p, "y_pred", "b")]
    )
    net = xn.Network([ModelOp(model, "x", "y_pred"), by_epoch, repeat])
    batch = _batch(3)
    expected_a = {1: lambda p: p * 2, 2: lambda p: p * 2, 3: lambda p: p + 1, 4: lambda p: p + 1, 5: None}
    for epoch in range(1, 6):
        net.load_epoch("eval", epoch)
        out = net.run_step(batch, "eval")
        p = np.asarray(out["y_pred"])
        fa = expected_a[epoch]
        if fa is None:
            assert "a" not in out
        else:
            np.testing.assert_allclose(np.asarray(out["a"]), fa(p), rtol=1e-6, err_msg=f"epoch {epoch}")
        want_b = p * 10 if epoch % 2 == 1 else -p
        np.testing.assert_allclose(np.asarray(out["b"]), want_b, rtol=1e-6, err_msg=f"epoch {epoch}")
    net.unload_epoch()


def test_bad_inputs(framework: str) -> None:
    model = xn.build(_lenet(framework), "adam")
    net = _net(model)
    with pytest.raises(
        XaikitValueError, match=r"CrossEntropy reads key 'y', which is neither in the batch.*\['x'\]"
    ):
        net.run_step({"x": _batch()["x"]}, "train")
    with pytest.raises(XaikitTypeError, match="must be TensorOps"):
        xn.Network([ModelOp(model, "x", "p"), "ce"])
    with pytest.raises(XaikitValueError, match="needs a model with an optimizer"):
        UpdateOp(xn.build(_lenet(framework), None), "ce")
    with pytest.raises(XaikitValueError, match="optimizer_fn must be one of"):
        xn.build(_lenet(framework), "adamax9")
    with pytest.raises(XaikitTypeError, match=r"model_fn must return a torch\.nn\.Module or a Keras model"):
        xn.build(lambda: "no model")
    with pytest.raises(XaikitValueError, match="no model"):
        xn.Network([LambdaOp(lambda x: x, "x", "y")]).run_step({"x": np.zeros(2)}, "eval")
    with pytest.raises(XaikitValueError, match=r"CrossEntropy needs inputs \(y_pred, y_true\)"):
        CrossEntropy("y_pred", "ce")


def test_mixed_frameworks_rejected() -> None:
    torch_model = xn.build(_lenet("torch"))
    tf_model = xn.build(_lenet("tf"))
    with pytest.raises(XaikitValueError, match="all be of one framework"):
        xn.Network([ModelOp(torch_model, "x", "a"), ModelOp(tf_model, "x", "b")])
