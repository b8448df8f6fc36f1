"""Schedulers: values per epoch, None switches off, pickling, bad schedules, item filtering."""

from __future__ import annotations

import pickle

import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.schedule import EpochScheduler, RepeatScheduler, get_current_items
from xaikit.trace import Trace


def test_repeat_values() -> None:
    s = RepeatScheduler(["a", None, "b"])
    assert [s.get_current_value(e) for e in range(1, 8)] == ["a", None, "b", "a", None, "b", "a"]
    assert s.get_all_values() == ["a", None, "b"]
    one = RepeatScheduler((5,))
    assert [one.get_current_value(e) for e in (1, 2, 10)] == [5, 5, 5]
    assert xk.schedule.RepeatScheduler is RepeatScheduler


def test_epoch_values() -> None:
    s = EpochScheduler({3: "c", 1: "a", 5: None, 7: "d"})  # keys out of order are sorted
    assert [s.get_current_value(e) for e in range(1, 9)] == ["a", "a", "c", "c", None, None, "d", "d"]
    assert s.get_all_values() == ["a", "c", None, "d"]
    late = EpochScheduler({4: "x"})
    assert [late.get_current_value(e) for e in (1, 3, 4, 100)] == [None, None, "x", "x"]


@pytest.mark.parametrize(
    ("make", "err", "match"),
    [
        (lambda: RepeatScheduler([]), XaikitValueError, "at least one value"),
        (lambda: RepeatScheduler("abc"), XaikitTypeError, "repeat_list must be a list"),
        (lambda: RepeatScheduler({1: 2}), XaikitTypeError, "repeat_list must be a list"),
        (lambda: RepeatScheduler([RepeatScheduler([1])]), XaikitTypeError, "cannot itself be a scheduler"),
        (lambda: EpochScheduler({}), XaikitValueError, "at least one"),
        (lambda: EpochScheduler([1, 2]), XaikitTypeError, "epoch_dict must be a dict"),
        (
            lambda: EpochScheduler({0: "a"}),
            XaikitValueError,
            r"keys \(epochs\) must be an int >= 1; got int 0",
        ),
        (lambda: EpochScheduler({-2: "a"}), XaikitValueError, "got int -2"),
        (lambda: EpochScheduler({1.0: "a"}), XaikitTypeError, "got float 1.0"),
        (lambda: EpochScheduler({True: "a"}), XaikitTypeError, "got bool True"),
        (lambda: EpochScheduler({"1": "a"}), XaikitTypeError, "got str '1'"),
        (lambda: EpochScheduler({1: EpochScheduler({1: 2})}), XaikitTypeError, "at epoch 1 cannot"),
    ],
)
def test_bad_schedules(make, err, match) -> None:
    with pytest.raises(err, match=match):
        make()


@pytest.mark.parametrize("epoch", [0, -1])
def test_bad_epoch(epoch) -> None:
    with pytest.raises(XaikitValueError, match=r"epoch \(epochs count from 1\) must be an int >= 1"):
        RepeatScheduler([1]).get_current_value(epoch)
    with pytest.raises(XaikitValueError, match=r"epoch \(epochs count from 1\) must be an int >= 1"):
        EpochScheduler({1: 1}).get_current_value(epoch)


def test_schedulers_pickle_with_traces() -> None:
    t = Trace(outputs="a", mode="eval")
    s = RepeatScheduler([t, None])
    e = EpochScheduler({1: None, 2: t})
    s2, e2 = pickle.loads(pickle.dumps((s, e)))
    assert s2.get_current_value(1).outputs == ["a"] and s2.get_current_value(2) is None
    assert e2.get_current_value(1) is None and e2.get_current_value(3).mode == {"eval"}
    assert e2.get_current_value(2) is e2.get_current_value(3)  # shared objects stay shared


def test_get_current_items_filters() -> None:
    train = Trace(outputs="tr", mode="train")
    ev = Trace(outputs="ev", mode="eval")
    every = Trace(outputs="all")
    not_train = Trace(outputs="nt", mode="!train")
    ds1 = Trace(outputs="d1", ds_id="ds1")
    not_ds1 = Trace(outputs="nd1", ds_id="!ds1")
    sched = RepeatScheduler([ev, None])
    items = [train, sched, every, not_train, ds1, not_ds1]

    def outs(xs):
        return [x.outputs[0] for x in xs]

    assert outs(get_current_items(items, "train", epoch=1)) == ["tr", "all", "d1", "nd1"]
    assert outs(get_current_items(items, "eval", epoch=1)) == ["ev", "all", "nt", "d1", "nd1"]
    assert outs(get_current_items(items, "eval", epoch=2)) == ["all", "nt", "d1", "nd1"]
    assert outs(get_current_items(items, "eval", epoch=2, ds_id="ds1")) == ["all", "nt", "d1"]
    assert outs(get_current_items(items, "eval", epoch=2, ds_id="ds2")) == ["all", "nt", "nd1"]
    assert outs(get_current_items(items, ["train", "test"])) == ["tr", "all", "nt", "d1", "nd1"]
    # epoch=None: every scheduler value, each object once
    assert outs(get_current_items([sched, EpochScheduler({1: ev, 3: every}), every])) == ["ev", "all"]


def test_get_current_items_plain_objects() -> None:
    class Op:
        def __init__(self, mode):
            self.mode = mode

    a, b, c = Op(None), Op("train"), Op({"eval", "test"})
    assert get_current_items([a, b, c], "eval") == [a, c]
    assert get_current_items([a, b, c], "train") == [a, b]
    assert get_current_items([3, EpochScheduler({1: None, 2: 4})], epoch=2) == [3, 4]
