"""The framework-neutral helpers on numpy, torch and TF values."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.backend import framework_of, get_backend, reduce_mean, squeeze, to_number, to_tensor
from xaikit.errors import XaikitValueError


def _tensor(framework: str, value: np.ndarray):
    if framework == "torch":
        import torch

        return torch.as_tensor(value)
    import tensorflow as tf

    return tf.constant(value)


def test_helpers_keep_the_type(framework: str) -> None:
    value = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    t = _tensor(framework, value)
    assert framework_of(t) == framework and get_backend(t).name == framework
    np.testing.assert_array_equal(to_number(t), value)
    sq = squeeze(t)
    assert framework_of(sq) == framework and tuple(sq.shape) == (2, 3)
    assert tuple(squeeze(t, axis=0).shape) == (2, 3)
    m = reduce_mean(t, axis=2)
    assert framework_of(m) == framework
    np.testing.assert_allclose(to_number(m), value.mean(axis=2))
    np.testing.assert_allclose(to_number(reduce_mean(_tensor(framework, np.array([1, 2, 6])))), 3.0)
    assert tuple(reduce_mean(t, keepdims=True).shape) == (1, 1, 1)


def test_to_tensor_converts_nested_structures(framework: str) -> None:
    data = {"x": np.ones((2, 2), dtype=np.float32), "meta": ["a", "b"], "pair": (np.zeros(2), 3.0)}
    out = to_tensor(data, framework)
    assert framework_of(out["x"]) == framework and out["meta"] == ["a", "b"]
    assert framework_of(out["pair"][0]) == framework
    back = to_tensor(out, "np")
    np.testing.assert_array_equal(back["x"], data["x"])
    with pytest.raises(XaikitValueError, match="target_type must be one of 'np', 'torch', 'tf'; got 'jax'"):
        to_tensor(data, "jax")


def test_numpy_values() -> None:
    assert framework_of(np.zeros(2)) is None
    assert to_number(2.5).shape == ()
    np.testing.assert_array_equal(squeeze(np.zeros((1, 3, 1))), np.zeros(3))
