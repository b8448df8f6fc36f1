"""Pipeline: batching, shuffling, modes, schedulers, several datasets, framework inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xaikit.dataset import NumpyDataset
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.op.numpyop import ExpandDims, LambdaOp, Minmax, NumpyOp
from xaikit.pipeline import Pipeline


class FakeRepeat:
    """A duck-typed RepeatScheduler (the real one lives on the loop branch)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def get_current_value(self, epoch: int) -> Any:
        return self.values[(epoch - 1) % len(self.values)]

    def get_all_values(self) -> list[Any]:
        return list(self.values)


def _data(n: int = 10) -> dict[str, np.ndarray]:
    return {"x": np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2), "y": np.arange(n)}


def _ys(pipe: Pipeline, mode: str = "train", epoch: int = 1, ds_id: str = "") -> list[list[int]]:
    return [b["y"].tolist() for b in pipe.get_loader(mode, epoch, ds_id)]


def test_batching_and_drop_last() -> None:
    pipe = Pipeline(train_data=_data(), batch_size=4, shuffle=False)
    assert _ys(pipe) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert pipe.steps_per_epoch("train") == 3 and len(pipe.get_loader("train")) == 3  # type: ignore[arg-type]
    pipe = Pipeline(train_data=NumpyDataset(_data()), batch_size=4, shuffle=False, drop_last=True)
    assert _ys(pipe) == [[0, 1, 2, 3], [4, 5, 6, 7]] and pipe.steps_per_epoch("train") == 2
    batch = pipe.get_results()
    assert isinstance(batch, dict) and batch["x"].shape == (4, 2, 2) and batch["x"].dtype == np.float32
    assert (
        pipe.get_modes() == {"train"} and pipe.get_ds_ids("train") == [""] and pipe.get_ds_ids("eval") == []
    )


def test_batch_size_per_mode_and_mutable() -> None:
    pipe = Pipeline(train_data=_data(), eval_data=_data(6), batch_size={"train": 5, "eval": 4}, shuffle=False)
    assert _ys(pipe, "eval") == [[0, 1, 2, 3], [4, 5]]
    assert pipe.steps_per_epoch("train") == 2
    pipe.batch_size = 3
    assert len(pipe.get_results(num_steps=2, mode="eval")) == 2
    assert pipe.get_results(mode="eval")["y"].tolist() == [0, 1, 2]  # type: ignore[index]


def test_shuffle_per_epoch_reproducible_with_seed() -> None:
    a = Pipeline(train_data=_data(20), eval_data=_data(20), batch_size=8, seed=7)
    b = Pipeline(train_data=_data(20), batch_size=8, seed=7)
    e1, e2 = _ys(a, epoch=1), _ys(a, epoch=2)
    assert e1 == _ys(b, epoch=1) and e2 == _ys(b, epoch=2)  # same seed -> same order
    assert e1 == _ys(a, epoch=1)  # asking again gives the same epoch
    assert e1 != e2  # a new order each epoch
    for order in (e1, e2):
        assert sorted(np.concatenate(order).tolist()) == list(range(20))  # every sample once
    assert e1 != _ys(Pipeline(train_data=_data(20), batch_size=8, seed=8), epoch=1)
    assert np.concatenate(_ys(a, "eval")).tolist() == list(range(20))  # eval is never shuffled
    # rows of different columns stay together
    for batch in a.get_loader("train", 3):
        np.testing.assert_array_equal(batch["x"][:, 0, 0], batch["y"] * 4)


def test_ops_modes_and_negation() -> None:
    double = LambdaOp(lambda x: x * 2, inputs="y", outputs="y2", mode="train")
    neg = LambdaOp(lambda x: -x, inputs="y", outputs="yneg", mode="!train")
    both = LambdaOp(lambda x: x + 100, inputs="y", outputs="y100")
    pipe = Pipeline(
        train_data=_data(4), eval_data=_data(4), batch_size=4, ops=[double, neg, both], shuffle=False
    )
    tr = pipe.get_results(mode="train")
    ev = pipe.get_results(mode="eval")
    assert isinstance(tr, dict) and isinstance(ev, dict)
    assert (
        tr["y2"].tolist() == [0, 2, 4, 6] and "yneg" not in tr and tr["y100"].tolist() == [100, 101, 102, 103]
    )
    assert ev["yneg"].tolist() == [0, -1, -2, -3] and "y2" not in ev and "y100" in ev
    with pytest.raises(XaikitValueError, match="mode must be one of"):
        Minmax("x", mode="training")


def test_ops_run_in_order_and_chain() -> None:
    ops = [
        ExpandDims("x", "x4"),
        Minmax("x4", "x4"),
        LambdaOp(lambda a: a.shape[-1] * np.ones(len(a)), "x4", "c"),
    ]
    batch = Pipeline(train_data=_data(3), ops=ops, batch_size=3).get_results()
    assert isinstance(batch, dict)
    assert batch["x4"].shape == (3, 2, 2, 1) and batch["c"].tolist() == [1, 1, 1]
    np.testing.assert_allclose(batch["x4"][0, ..., 0], [[0, 1 / 3], [2 / 3, 1]], atol=1e-6)
    assert batch["x"].shape == (3, 2, 2)  # the input key is untouched


def test_schedulers_around_ops() -> None:
    plus = LambdaOp(lambda y: y + 1, inputs="y", outputs="y")
    times = LambdaOp(lambda y: y * 10, inputs="y", outputs="y")
    pipe = Pipeline(train_data=_data(2), batch_size=2, ops=[FakeRepeat([plus, None, times])], shuffle=False)
    assert [_ys(pipe, epoch=e)[0] for e in (1, 2, 3, 4)] == [[1, 2], [0, 1], [0, 10], [1, 2]]
    with pytest.raises(XaikitTypeError, match="must be NumpyOps"):
        Pipeline(train_data=_data(), ops=[FakeRepeat([plus, "nope"])])


def test_several_eval_datasets_by_id() -> None:
    pipe = Pipeline(
        train_data=_data(4),
        eval_data={"a": _data(3), "b": NumpyDataset({"x": np.zeros((5, 2, 2)), "y": np.arange(5) + 50})},
        test_data={"c": _data(2)},
        batch_size=4,
    )
    assert pipe.get_ds_ids("eval") == ["a", "b"] and pipe.get_ds_ids("test") == ["c"]
    assert _ys(pipe, "eval", ds_id="a") == [[0, 1, 2]]
    assert _ys(pipe, "eval", ds_id="b") == [[50, 51, 52, 53], [54]]
    assert _ys(pipe, "test") == [[0, 1]]  # a single dataset may be asked for without its id
    assert pipe.steps_per_epoch("eval", "b") == 2
    assert pipe.get_results(mode="eval")["y"].tolist() == [0, 1, 2]  # type: ignore[index]
    with pytest.raises(XaikitValueError, match=r"ds_id '' is not a eval dataset id; ids: \['a', 'b'\]"):
        pipe.get_loader("eval")
    with pytest.raises(XaikitValueError, match="ds_id 'z'"):
        pipe.get_loader("eval", ds_id="z")


def test_sample_wise_custom_op() -> None:
    class AddIndex(NumpyOp):
        def forward(self, data: Any, state: dict[str, Any]) -> Any:
            x, y = data
            return x.sum() + y

    pipe = Pipeline(train_data=_data(3), ops=[AddIndex(["x", "y"], "s")], batch_size=3, shuffle=False)
    batch = pipe.get_results()
    assert batch["s"].tolist() == [6.0, 23.0, 40.0]  # type: ignore[index]


def test_torch_dataset_and_loader() -> None:
    import torch

    class DS(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 5

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": torch.full((2, 2), float(i)), "y": torch.tensor(i)}

    pipe = Pipeline(
        train_data=DS(), eval_data=torch.utils.data.DataLoader(DS(), batch_size=2), batch_size=2, seed=0
    )
    batches = list(pipe.get_loader("train"))
    assert [len(b["y"]) for b in batches] == [2, 2, 1]
    assert all(isinstance(b["x"], np.ndarray) and b["x"].dtype == np.float32 for b in batches)
    assert sorted(np.concatenate([b["y"] for b in batches]).tolist()) == [0, 1, 2, 3, 4]
    for b in batches:
        np.testing.assert_array_equal(b["x"][:, 0, 0], b["y"])
    assert _ys(pipe, "eval") == [[0, 1], [2, 3], [4]] and pipe.steps_per_epoch("eval") == 3
    assert isinstance(pipe.get_results(mode="eval")["x"], np.ndarray)  # type: ignore[index]


def test_tf_data_inputs() -> None:
    import tensorflow as tf

    data = _data(5)
    pipe = Pipeline(
        train_data=tf.data.Dataset.from_tensor_slices(data),
        eval_data=tf.data.Dataset.from_tensor_slices(data).batch(3),
        batch_size=2,
        shuffle=False,
        ops=[Minmax("x", "xs")],
    )
    assert _ys(pipe) == [[0, 1], [2, 3], [4]] and pipe.steps_per_epoch("train") == 3
    assert _ys(pipe, "eval") == [[0, 1, 2], [3, 4]] and pipe.steps_per_epoch("eval") == 2
    batch = pipe.get_results(mode="eval")
    assert isinstance(batch["x"], np.ndarray) and batch["xs"].dtype == np.float32  # type: ignore[index]
    with pytest.raises(XaikitTypeError, match="must yield dicts"):
        Pipeline(train_data=tf.data.Dataset.from_tensor_slices(np.zeros(3)))


def test_bad_inputs() -> None:
    with pytest.raises(
        XaikitValueError, match="reads key 'img', which is not in the batch; batch keys: \\['x', 'y'\\]"
    ):
        Pipeline(train_data=_data(), ops=[Minmax("img")]).get_results()
    with pytest.raises(XaikitValueError, match="at least one of train_data"):
        Pipeline()
    with pytest.raises(XaikitValueError, match=r"batch_size \(or \{mode: int\}\) must be an int >= 1"):
        Pipeline(train_data=_data(), batch_size=0)
    with pytest.raises(XaikitValueError, match="batch_size has no entry for mode 'eval'"):
        Pipeline(train_data=_data(), eval_data=_data(), batch_size={"train": 2}).get_results(mode="eval")
    with pytest.raises(XaikitValueError, match="must have 10 rows"):
        Pipeline(train_data={"x": np.zeros(10), "y": np.zeros(9)})
    with pytest.raises(XaikitTypeError, match="must be a NumpyDataset, a dict of arrays"):
        Pipeline(train_data=3)
    with pytest.raises(XaikitTypeError, match="train_data must be one dataset"):
        Pipeline(train_data={"a": _data()})
    with pytest.raises(XaikitTypeError, match="must be NumpyOps"):
        Pipeline(train_data=_data(), ops=[lambda x: x])
    pipe = Pipeline(train_data=_data())
    with pytest.raises(XaikitValueError, match=r"no 'eval' data; modes with data: \['train'\]"):
        pipe.get_loader("eval")
    with pytest.raises(XaikitValueError, match="epoch must be an int >= 1; got int 0"):
        pipe.get_loader("train", epoch=0)
    with pytest.raises(XaikitValueError, match="returned 1 values for its 2 outputs"):
        Pipeline(train_data=_data(), ops=[LambdaOp(lambda y: [y], "y", ["a", "b"])]).get_results()
