"""The TensorFlow backend's forward pass for the classes a call explains (``Backend.logits``).

A Keras model's eager call pays Python for every layer, so the pass that pins each sample's class
runs through a compiled step once the same model and input signature have come back three times
(one-off calls pay no trace). What must hold: the same values and maps before and after the
switch, one trace per signature, an eager fallback that keeps the model's own error for a model
that cannot be compiled, and out-of-memory errors passed on (the chunk loop halves on them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import xaikit as xk  # noqa: E402
from xaikit.backend import Rows, get_backend  # noqa: E402
from xaikit.backend.tf.steps import Traced  # noqa: E402
from xaikit.errors import XaikitError  # noqa: E402

L = keras.layers


def _model(seed: int = 0) -> Any:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            L.Conv2D(4, 3, activation="relu", name="c1"),
            L.Flatten(),
            L.Dense(5, name="head"),
        ]
    )


def _images(batch: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random((batch, 8, 8, 3), dtype=np.float32)


def test_repeated_calls_compile_the_logits_and_give_the_same_maps() -> None:
    model, x = _model(), _images(4)
    bk = get_backend(model)
    maps, traces = [], []
    for _ in range(6):
        maps.append(xk.xai.explain(model, x, method="vanilla"))
        traces.append(bk.traces(model, "logits"))
    assert traces == [0, 0, 0, 1, 1, 1]  # three eager calls, then one trace for good
    for m in maps[1:]:
        np.testing.assert_array_equal(m, maps[0])
    eager = model(x, training=False).numpy()
    compiled = bk.to_numpy(bk.logits(Rows(model, [tf.constant(x)], None)))
    np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-6)


def test_each_input_signature_is_counted_apart() -> None:
    model = _model()
    bk = get_backend(model)
    for batch in (4, 3, 4, 3, 4):
        bk.logits(Rows(model, [tf.constant(_images(batch))], None))
    assert bk.traces(model, "logits") == 0  # 4 rows seen three times, 3 rows twice
    bk.logits(Rows(model, [tf.constant(_images(4))], None))
    assert bk.traces(model, "logits") == 1
    bk.logits(Rows(model, [tf.constant(_images(3))], None))
    bk.logits(Rows(model, [tf.constant(_images(3))], None))
    assert bk.traces(model, "logits") == 2
    for batch in (4, 3):  # compiled now: still the eager values
        got = bk.to_numpy(bk.logits(Rows(model, [tf.constant(_images(batch, seed=9))], None)))
        np.testing.assert_allclose(
            got, model(_images(batch, seed=9), training=False).numpy(), rtol=1e-6, atol=1e-6
        )


class _HostModel(keras.Model):  # type: ignore[misc]
    """Reads its input on the host (``.numpy()``): it runs eagerly and cannot be traced."""

    def __init__(self) -> None:
        super().__init__()
        self.head = L.Dense(3)

    def call(self, x: Any, training: bool = False) -> Any:
        flat = np.asarray(x.numpy()).reshape(x.shape[0], -1)
        return self.head(tf.constant(flat[:, :6]))


def test_a_model_that_cannot_be_compiled_keeps_running_eagerly() -> None:
    model, x = _HostModel(), tf.constant(_images(2))
    bk = get_backend(model)
    want = model(x).numpy()
    for _ in range(7):
        np.testing.assert_allclose(bk.to_numpy(bk.logits(Rows(model, [x], None))), want, rtol=1e-6, atol=1e-6)
    assert bk.traces(model, "logits") == 1  # tried once (the fourth call), then eager for good


class _Picky(keras.Model):  # type: ignore[misc]
    """Fails on an input of the wrong width, eagerly and traced alike."""

    def __init__(self) -> None:
        super().__init__()
        self.head = L.Dense(3)

    def call(self, x: Any, training: bool = False) -> Any:
        if x.shape[-1] != 4:
            raise ValueError(f"expected 4 features, got {x.shape[-1]}")
        return self.head(x)


def test_a_model_error_reads_the_same_on_every_call() -> None:
    model = _Picky()
    model(np.zeros((1, 4), np.float32))
    x = np.zeros((2, 5), np.float32)
    messages = []
    for _ in range(6):
        with pytest.raises(XaikitError) as err:
            xk.xai.explain(model, x, method="vanilla")
        messages.append(str(err.value))
    assert "expected 4 features, got 5" in messages[0]
    assert messages == [messages[0]] * 6
    # the wrong rows did not turn the step eager: right rows are compiled after their own three calls
    good = np.ones((2, 4), np.float32)
    traced = get_backend(model).traces(model, "logits")
    for _ in range(4):
        xk.xai.explain(model, good, method="vanilla")
    assert get_backend(model).traces(model, "logits") == traced + 1


def test_out_of_memory_in_the_compiled_logits_is_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _model(), tf.constant(_images(4))
    bk = get_backend(model)
    rows = Rows(model, [x], None)
    for _ in range(4):
        bk.logits(rows)
    assert bk.traces(model, "logits") == 1
    run = Traced.run

    def oom(self: Traced, *args: Any) -> Any:
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(Traced, "run", oom)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        bk.logits(rows)  # not swallowed by the eager fallback: the chunk loop halves on it
    compiled: list[int] = []

    def counted(self: Traced, *args: Any) -> Any:
        compiled.append(1)
        return run(self, *args)

    monkeypatch.setattr(Traced, "run", counted)
    got = bk.to_numpy(bk.logits(rows))
    assert compiled == [1]  # still compiled: an out-of-memory error does not turn the step eager
    np.testing.assert_allclose(got, model(x, training=False).numpy(), rtol=1e-6, atol=1e-6)
    assert bk.traces(model, "logits") == 1
