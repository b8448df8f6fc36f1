"""Trace base class, Data, System, and the dependency sort."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace import Data, DSData, System, Trace, sort_traces


class Keyed(Trace):
    """A trace with a label so orders are easy to read."""

    def __init__(self, label: str, inputs=None, outputs=None, **kw):
        super().__init__(inputs=inputs, outputs=outputs, **kw)
        self.label = label


def labels(traces):
    return [t.label for t in traces]


# ---- Trace arguments -------------------------------------------------------------------------
def test_trace_normalises_arguments() -> None:
    t = Trace(inputs="x", outputs=("a", "b", "a"), mode="eval", ds_id=["d1", "d2"])
    assert t.inputs == ["x"] and t.outputs == ["a", "b"]
    assert t.mode == {"eval"} and t.ds_id == {"d1", "d2"}
    t = Trace()
    assert t.inputs == [] and t.outputs == [] and t.ds_id == set()
    assert t.mode == {"train", "eval", "test", "infer"}
    assert xk.trace.Trace is Trace


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("!train", {"eval", "test", "infer"}),
        (["!train", "!infer"], {"eval", "test"}),
        (("eval", "test"), {"eval", "test"}),
        (None, {"train", "eval", "test", "infer"}),
    ],
)
def test_modes(mode, expected) -> None:
    assert Trace(mode=mode).mode == expected


def test_mode_and_ds_filters() -> None:
    t = Trace(mode="!train", ds_id="!ds1")
    assert not t.runs_in("train")
    assert t.runs_in("eval", "ds2") and t.runs_in("eval", "")
    assert not t.runs_in("eval", "ds1")
    t = Trace(ds_id="ds1")
    assert t.runs_in("train", "ds1") and not t.runs_in("train", "ds2") and not t.runs_in("eval", "")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "training"}, "mode must be one of .*'training'"),
        ({"mode": ["!train", "eval"]}, "cannot mix negated and plain modes"),
        ({"ds_id": ["!a", "b"]}, "ds_id cannot mix"),
        ({"ds_id": "a|b"}, "ds_id must be a non-empty name"),
        ({"ds_id": "!"}, "ds_id must be a non-empty name"),
        ({"outputs": "*"}, "outputs cannot contain"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(XaikitValueError, match=match):
        Trace(**kwargs)


@pytest.mark.parametrize("bad", [3, {"a": 1}, ["x", 2], [""]])
def test_bad_key_types(bad) -> None:
    with pytest.raises(XaikitTypeError, match="inputs must"):
        Trace(inputs=bad)


# ---- Data ------------------------------------------------------------------------------------
def test_data_layers_and_logs() -> None:
    batch = {"x": np.ones(2), "y": np.array([0, 1])}
    data = Data(batch)
    data.write_with_log("acc", 0.5)
    data.add_layer({"y_pred": np.zeros(2), "x": "pred wins"})
    data.write_without_log("tmp", 1)
    assert data["x"] == "pred wins" and data["acc"] == 0.5 and "tmp" in data and "nope" not in data
    assert set(data.keys()) == {"x", "y", "acc", "y_pred", "tmp"}
    assert data.read_logs() == {"acc": 0.5}
    data.write_without_log("acc", 0.7)  # rewriting without log un-logs it
    assert data.read_logs() == {}
    assert set(batch) == {"x", "y"}  # the batch itself is untouched
    with pytest.raises(KeyError):
        _ = data["missing"]


def test_dsdata_suffixes_keys() -> None:
    data = Data()
    d = DSData("ds1", data)
    d.write_with_log("accuracy", 0.8)
    d.write_without_log("n", 3)
    assert data.read_logs() == {"accuracy|ds1": 0.8}
    assert d["n"] == 3 and "n" in d and data["n|ds1"] == 3


# ---- System ----------------------------------------------------------------------------------
def test_system_fields_and_summary() -> None:
    s = System(total_epochs=3, log_steps=10, max_train_steps_per_epoch=5)
    for field in (
        "global_step num_devices log_steps total_epochs epoch_idx batch_idx stop_training network "
        "max_train_steps_per_epoch max_eval_steps_per_epoch summary experiment_time"
        " mode ds_id pipeline traces"
    ).split():
        assert hasattr(s, field), field
    s.reset()
    assert s.global_step == 0 and s.mode == "train" and s.experiment_time
    s.global_step = 7
    s.mode = "eval"
    s.write_summary("acc", 0.9)
    assert s.summary.history["eval"]["acc"] == {7: 0.9}
    s.stop_training = True
    s.reset_for_test()
    assert s.mode == "test" and s.global_step == 7 and not s.stop_training


# ---- pickling --------------------------------------------------------------------------------
def test_trace_pickles_without_system() -> None:
    t = Keyed("a", inputs="x", outputs="y", mode="eval")
    t.system = System()
    t.count = np.arange(3)
    back = pickle.loads(pickle.dumps(t))
    assert not hasattr(back, "system")
    assert back.label == "a" and back.inputs == ["x"] and back.mode == {"eval"}
    np.testing.assert_array_equal(back.count, np.arange(3))
    fresh = Keyed("b")
    fresh.load_state_dict(t.state_dict())
    assert fresh.label == "a" and "system" not in fresh.state_dict()
    with pytest.raises(XaikitTypeError, match="state must be a mapping"):
        fresh.load_state_dict([1])


# ---- sort ------------------------------------------------------------------------------------
def test_sort_puts_producers_first() -> None:
    f1 = Keyed("f1", inputs=("precision", "recall"), outputs="f1")
    prec = Keyed("prec", inputs=("y", "y_pred"), outputs="precision")
    rec = Keyed("rec", inputs=("y", "y_pred"), outputs="recall")
    logger = Keyed("logger", inputs="*")
    star_out = Keyed("star_out", inputs="*", outputs="z")
    first = Keyed("first", inputs="ce", outputs="steps/sec")
    first._runs_first = True
    order = sort_traces([logger, f1, star_out, prec, first, rec], available_keys={"y", "y_pred", "ce"})
    assert labels(order) == ["first", "prec", "rec", "f1", "star_out", "logger"]
    # chains of dependencies, given in reverse
    c = Keyed("c", inputs="b", outputs="c")
    b = Keyed("b", inputs="a", outputs="b")
    a = Keyed("a", inputs="x", outputs="a")
    assert labels(sort_traces([c, b, a])) == ["a", "b", "c"]
    # independent traces keep their order
    assert labels(sort_traces([rec, prec])) == ["rec", "prec"]


def test_sort_cycle_names_traces_and_keys() -> None:
    a = Keyed("a", inputs="kb", outputs="ka")
    b = Keyed("b", inputs="ka", outputs="kb")
    other = Keyed("o", inputs="x", outputs="z")
    with pytest.raises(XaikitValueError, match="cycle") as err:
        sort_traces([other, a, b])
    msg = str(err.value)
    assert "Keyed(outputs=['ka'])" in msg and "Keyed(outputs=['kb'])" in msg
    assert "'ka'" in msg and "'kb'" in msg


def test_sort_missing_input_names_trace_key_and_available() -> None:
    f1 = Keyed("f1", inputs=("precision", "recall"), outputs="f1")
    prec = Keyed("prec", inputs=("y", "y_pred"), outputs="precision")
    with pytest.raises(XaikitValueError, match=r"reads key 'recall'.*data keys: \['y', 'y_pred'\]") as err:
        sort_traces([f1, prec], available_keys=["y", "y_pred"])
    assert "Keyed(outputs=['f1'])" in str(err.value) and "'precision'" in str(err.value)
    # without available keys, unknown keys are assumed to come from the data
    assert labels(sort_traces([f1, prec])) == ["prec", "f1"]


def test_sort_self_reference_is_fine() -> None:
    t = Keyed("t", inputs="ema", outputs="ema")
    assert labels(sort_traces([t], available_keys=[])) == ["t"]


def test_submodules_resolve_lazily() -> None:
    assert xk.trace.metric.Accuracy.__name__ == "Accuracy"
    assert xk.trace.adapt.EarlyStopping.__name__ == "EarlyStopping"
    with pytest.raises(AttributeError):
        _ = xk.trace.no_such_module
