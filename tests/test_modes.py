"""One vocabulary for modes and keys: ops, traces, schedulers and SaliencyNet agree."""

from __future__ import annotations

from typing import Any

import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.modes import ALL_MODES, parse_modes, to_list
from xaikit.op.op import Op
from xaikit.schedule import EpochScheduler
from xaikit.trace.base import Trace

CASES = [
    (None, {"train", "eval", "test", "infer"}),
    ("train", {"train"}),
    ("!train", {"eval", "test", "infer"}),
    (["!train", "!eval"], {"test", "infer"}),
    (["eval", "test"], {"eval", "test"}),
    ([], {"train", "eval", "test", "infer"}),
]


@pytest.mark.parametrize(("mode", "expected"), CASES)
def test_ops_traces_and_the_parser_agree(mode: Any, expected: set[str]) -> None:
    assert parse_modes(mode) == expected
    assert Op(mode=mode).mode == expected
    assert Trace(mode=mode).mode == expected
    for m in ALL_MODES:
        assert Op(mode=mode).runs_in(m) == (m in expected) == Trace(mode=mode).runs_in(m)


def test_one_return_type() -> None:
    assert all(isinstance(parse_modes(mode), frozenset) for mode, _ in CASES)


def test_scheduled_ops_follow_the_same_modes() -> None:
    op = Op(mode=["!train", "!eval"])
    from xaikit.op.op import resolve

    sched = EpochScheduler({1: op})
    assert resolve([sched], "test", 1) == [op] and resolve([sched], "eval", 1) == []


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("training", r"mode must be one of \['train', 'eval', 'test', 'infer'\] .*got 'training'"),
        (["!train", "eval"], r"mode cannot mix negated and plain modes; got \['!train', 'eval'\]"),
    ],
)
def test_bad_modes(mode: Any, message: str) -> None:
    for make in (parse_modes, lambda m: Op(mode=m), lambda m: Trace(mode=m)):
        with pytest.raises(XaikitValueError, match=message):
            make(mode)


def test_key_lists() -> None:
    assert to_list(("x", "y", "x")) == ["x", "y"]
    assert to_list(("x", "x"), unique=False) == ["x", "x"]
    assert Op(inputs=["x", "x"]).inputs == ["x", "x"]  # an op may read a key twice
    with pytest.raises(XaikitTypeError, match=r"model_inputs must be a non-empty string"):
        to_list([], "model_inputs", allow_empty=False)
    with pytest.raises(XaikitTypeError, match=r"inputs must hold non-empty strings; got int"):
        to_list(["x", 3])
