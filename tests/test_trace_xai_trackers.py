"""LabelTracker and InstanceTracker on hand-made batches driven through the hooks."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError, XaikitWarning
from xaikit.summary import Summary, ValWithError
from xaikit.trace.base import Data, System
from xaikit.trace.xai import InstanceTracker, LabelTracker


def drive(trace, epochs, mode="eval", start_epoch=1, step_per_epoch=10):
    """``epochs``: a list (one per epoch) of lists of batch dicts."""
    if not hasattr(trace, "system"):
        trace.system = System()
    s = trace.system
    for e, batches in enumerate(epochs, start=start_epoch):
        s.epoch_idx = e
        s.global_step = e * step_per_epoch
        s.mode = mode
        trace.on_epoch_begin(Data())
        for b in batches:
            trace.on_batch_end(Data(b))
        trace.on_epoch_end(Data())


def finish(trace) -> list[Summary]:
    data = Data()
    trace.on_end(data)
    assert data[trace.outputs[0]] == trace.summaries
    return data[trace.outputs[0]]


EPOCH1 = [
    {"y": np.array([0, 1, 0]), "ce": np.array([1.0, 2.0, 3.0])},
    {"y": np.array([[1], [0], [2]]), "ce": np.array([[4.0], [5.0], [6.0]])},
]
EPOCH2 = [{"y": np.array([0, 0, 1, 1]), "ce": np.array([0.5, 1.5, 1.0, 1.0])}]


def test_label_tracker_std_values():
    t = LabelTracker("y", "ce", label_mapping={"cat": 0, "dog": 1}, bounds="std")
    drive(t, [EPOCH1, EPOCH2])
    out = finish(t)
    assert [s.name for s in out] == ["cat", "dog"]  # label 2 is not in the mapping: skipped
    key = "ce (mean ± std)"
    cat = out[0].history["eval"][key]
    assert sorted(cat) == [10, 20]
    vals = np.array([1.0, 3.0, 5.0])
    sd = vals.std(ddof=1)
    np.testing.assert_allclose(cat[10].as_tuple(), (3 - sd, 3, 3 + sd))
    dog10 = out[1].history["eval"][key][10]
    np.testing.assert_allclose(dog10.as_tuple(), (3 - math.sqrt(2), 3, 3 + math.sqrt(2)))
    np.testing.assert_allclose(cat[20].as_tuple(), (1 - math.sqrt(0.5), 1, 1 + math.sqrt(0.5)))
    np.testing.assert_allclose(out[1].history["eval"][key][20].as_tuple(), (1, 1, 1))


def test_label_tracker_range_none_and_several_bounds():
    t = LabelTracker("y", "ce", bounds=["range", None])
    drive(t, [EPOCH1])
    out = finish(t)
    assert [s.name for s in out] == [0, 1, 2]
    assert out[0].history["eval"]["ce (min, mean, max)"][10] == ValWithError(1.0, 3.0, 5.0)
    assert out[0].history["eval"]["ce"][10] == pytest.approx(3.0)
    two = out[2].history["eval"]
    assert two["ce (min, mean, max)"][10] == ValWithError(6.0, 6.0, 6.0) and two["ce"][10] == 6.0


def test_label_tracker_single_value_std_is_zero_and_modes():
    t = LabelTracker("y", "ce", mode=["eval", "test"])
    drive(t, [[{"y": np.array([3]), "ce": np.array([0.25])}]], mode="test")
    out = finish(t)
    assert out[0].history["test"]["ce (mean ± std)"][10] == ValWithError(0.25, 0.25, 0.25)
    assert t.mode == {"eval", "test"} and t.outputs == ["ce_by_y"] and t.inputs == ["y", "ce"]


def test_label_tracker_pickle_resumes():
    t = LabelTracker("y", "ce", bounds=None)
    drive(t, [EPOCH1])
    t2 = pickle.loads(pickle.dumps(t))
    assert not hasattr(t2, "system")
    drive(t2, [EPOCH2], start_epoch=2)
    out = finish(t2)
    assert out[0].history["eval"]["ce"] == {10: pytest.approx(3.0), 20: pytest.approx(1.0)}


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"bounds": "minmax"}, XaikitValueError, "bounds must be None, 'std', 'range'"),
        ({"bounds": ["std", "iqr"]}, XaikitValueError, "bounds must be None"),
        ({"bounds": []}, XaikitValueError, "bounds must be None"),
        ({"bounds": 3}, XaikitTypeError, "bounds must be None"),
        ({"label_mapping": [1, 2]}, XaikitTypeError, "label_mapping must be a dict"),
        ({"outputs": 5}, XaikitTypeError, "outputs must be a non-empty string"),
    ],
)
def test_label_tracker_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        LabelTracker("y", "ce", **kwargs)


def test_label_tracker_bad_data():
    t = LabelTracker("y", "ce")
    t.system = System()
    with pytest.raises(XaikitValueError, match="one value per sample"):
        t.on_batch_end(Data({"y": np.array([0, 1]), "ce": np.float32(1.0)}))
    with pytest.raises(XaikitValueError, match="'y' has 2 samples but 'ce' has 3"):
        t.on_batch_end(Data({"y": np.array([0, 1]), "ce": np.ones(3)}))
    with pytest.raises(XaikitValueError, match="key 'ce' is not in the data"):
        t.on_batch_end(Data({"y": np.array([0, 1])}))


# ---- InstanceTracker --------------------------------------------------------------------------------
def scores(epoch_values: dict[int, float], bs: int = 3) -> list[dict]:
    idx = np.array(sorted(epoch_values))
    v = np.array([epoch_values[i] for i in idx])
    return [{"idx": idx[s : s + bs].reshape(-1, 1), "ce": v[s : s + bs]} for s in range(0, len(idx), bs)]


E1 = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5, 5: 0.4, 6: 0.3}
E2 = {0: 0.1, 1: 0.95, 2: 0.5, 3: 0.05, 4: 0.6, 5: 0.2, 6: 0.9}


def test_instance_tracker_top_bottom_by_final_value():
    t = InstanceTracker("idx", "ce", n_max_to_keep=2, n_min_to_keep=1, list_to_keep=[4])
    drive(t, [scores(E1), scores(E2)])
    out = finish(t)
    assert [s.name for s in out] == [1, 6, 3, 4]  # highest final first, then lowest, then listed
    assert out[0].history["eval"]["ce"] == {10: 0.8, 20: 0.95}
    assert out[2].history["eval"]["ce"] == {10: 0.6, 20: 0.05}
    assert out[3].history["eval"]["ce"] == {10: 0.5, 20: 0.6}


def test_instance_tracker_last_value_per_epoch_and_overlap():
    t = InstanceTracker("idx", "ce", n_max_to_keep=1, n_min_to_keep=0, list_to_keep=[1])
    batches = [
        {"idx": np.array([1, 2]), "ce": np.array([0.3, 0.1])},
        {"idx": np.array([1]), "ce": np.array([0.7])},
    ]
    drive(t, [batches])
    out = finish(t)
    assert [s.name for s in out] == [1]  # top-1 and listed coincide: once
    assert out[0].history["eval"]["ce"] == {10: 0.7}


def test_instance_tracker_list_only_stores_only_listed():
    t = InstanceTracker("idx", "ce", n_max_to_keep=0, n_min_to_keep=0, list_to_keep=np.array([2, 5]))
    drive(t, [scores(E1), scores(E2)])
    assert set(t.index_history["eval"]) == {2, 5}  # memory grows with the list, not the data
    out = finish(t)
    assert [s.name for s in out] == [2, 5]
    assert out[1].history["eval"]["ce"] == {10: 0.4, 20: 0.2}


def test_instance_tracker_epoch_frequency_and_modes():
    t = InstanceTracker("idx", "ce", n_max_to_keep=1, n_min_to_keep=1, epoch_frequency=2, mode="train")
    drive(t, [scores(E1), scores(E2), scores(E1), scores(E2)], mode="train")
    out = finish(t)
    assert [s.name for s in out] == [1, 3]
    assert out[0].history["train"]["ce"] == {20: 0.95, 40: 0.95}
    assert t.mode == {"train"}


def test_instance_tracker_pickle_resumes():
    t = InstanceTracker("idx", "ce", n_max_to_keep=1, n_min_to_keep=0)
    drive(t, [scores(E1)])
    t2 = pickle.loads(pickle.dumps(t))
    drive(t2, [scores(E2)], start_epoch=2)
    out = finish(t2)
    assert [s.name for s in out] == [1] and out[0].history["eval"]["ce"] == {10: 0.8, 20: 0.95}


def test_instance_tracker_missing_listed_index_is_skipped_with_a_warning():
    t = InstanceTracker("idx", "ce", n_max_to_keep=0, n_min_to_keep=0, list_to_keep=[99])
    drive(t, [scores(E1)])
    with pytest.warns(XaikitWarning, match=r"list_to_keep \[99\] never appeared under the index key 'idx'"):
        assert finish(t) == []


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"n_max_to_keep": -1}, XaikitValueError, "n_max_to_keep must be an int >= 0; got int -1"),
        ({"n_min_to_keep": -3}, XaikitValueError, "n_min_to_keep must be an int >= 0; got int -3"),
        ({"n_max_to_keep": 1.5}, XaikitTypeError, "n_max_to_keep must be an int"),
        ({"epoch_frequency": 0}, XaikitValueError, "epoch_frequency must be an int >= 1; got int 0"),
        ({"list_to_keep": 5}, XaikitTypeError, "list_to_keep must be an iterable"),
        ({"list_to_keep": "abc"}, XaikitTypeError, "list_to_keep must be an iterable"),
    ],
)
def test_instance_tracker_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        InstanceTracker("idx", "ce", **kwargs)


def _band_at(band, x):
    """(low, high) of a fill_between band at step ``x``."""
    ys = [y for vx, y in np.concatenate([p.vertices for p in band.get_paths()]) if vx == x]
    return min(ys), max(ys)


def test_label_tracker_plot_draws_the_tracked_values_in_order():
    from xaikit.viz import plot_history

    t = LabelTracker("y", "ce", bounds="std")
    epoch3 = [{"y": np.array([0, 1, 2]), "ce": np.array([7.0, 0.25, 2.0])}]
    drive(t, [EPOCH1, EPOCH2, epoch3])
    fig = plot_history(finish(t))
    assert [ax.get_title() for ax in fig.axes] == ["ce (mean ± std)"]
    ax = fig.axes[0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["0", "1", "2"]
    # label 0: ce 1, 3, 5 | 0.5, 1.5 | 7; label 1: 2, 4 | 1, 1 | 0.25; label 2: 6 | - | 2
    expected = {
        "0": ([10, 20, 30], [3.0, 1.0, 7.0]),
        "1": ([10, 20, 30], [3.0, 1.0, 0.25]),
        "2": ([10, 30], [6.0, 2.0]),
    }
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["0", "1", "2"]
    for line in lines:
        xs, ys = expected[line.get_label()]
        assert list(line.get_xdata()) == xs
        np.testing.assert_allclose(line.get_ydata(), ys)
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 3
    sd0 = np.std([1.0, 3.0, 5.0], ddof=1)
    np.testing.assert_allclose(_band_at(bands[0], 10), (3 - sd0, 3 + sd0))
    np.testing.assert_allclose(_band_at(bands[0], 20), (1 - math.sqrt(0.5), 1 + math.sqrt(0.5)))
    np.testing.assert_allclose(_band_at(bands[1], 20), (1.0, 1.0))


def test_instance_tracker_plot_draws_the_tracked_values_in_order():
    from xaikit.viz import plot_history

    t = InstanceTracker("idx", "ce", n_max_to_keep=2, n_min_to_keep=1, list_to_keep=[4])
    drive(t, [scores(E1), scores(E2)])
    fig = plot_history(finish(t))
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["1", "6", "3", "4"]
    for line, idx in zip(lines, (1, 6, 3, 4)):
        assert list(line.get_xdata()) == [10, 20]
        np.testing.assert_allclose(line.get_ydata(), [E1[idx], E2[idx]])
