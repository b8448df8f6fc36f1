"""ModuleTracker statistics of huge, tiny, non-finite, float64 and integer tensors (torch and Keras):
the sums behind mean, std and norm must not overflow, underflow or round away what the dtype holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from xaikit.inspect import ModuleTracker

torch = pytest.importorskip("torch")
nn = torch.nn


class Copy(nn.Module):
    def forward(self, x: Any) -> Any:
        return x * 1


def _output_stats(x: Any, tmp_path: Path) -> dict[str, Any]:
    """The ``output`` record of ``x * 1``, read back from the JSON line as written."""
    model = Copy()
    with ModuleTracker(model, tmp_path) as tracker:
        model(x)
        tracker.step()
    lines = [json.loads(line) for line in (tracker.log_dir / "stats.jsonl").read_text().splitlines()]
    (row,) = [r for r in lines if r["kind"] == "output"]
    return row


def _ref(x: Any) -> np.ndarray:
    return x.detach().double().numpy()


def _row(df: pd.DataFrame, kind: str, tname: str) -> pd.Series:
    return df[(df["kind"] == kind) & (df["tname"] == tname)].iloc[0]


def test_huge_float32_weights_give_finite_std_and_norm(tmp_path: Path) -> None:
    model = nn.Linear(40, 30)
    signs = torch.sign(torch.randn(30, 40, generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        model.weight.copy_(1e20 * signs)
        model.weight[0, 0] = 3e20
        model.bias.copy_(torch.tensor([3e38] * 20 + [-1.0] * 10))  # the float32 sum overflows
    with ModuleTracker(model, tmp_path) as tracker:
        tracker.step()
    for name in ("weight", "bias"):
        row, ref = _row(tracker.df, "weight", name), _ref(getattr(model, name))
        assert row["nonfinite"] == 0
        np.testing.assert_allclose(row["mean"], ref.mean(), rtol=1e-6)
        np.testing.assert_allclose(row["std"], ref.std(), rtol=1e-6)
        np.testing.assert_allclose(row["norm"], np.linalg.norm(ref), rtol=1e-6)
        assert row["min"] == ref.min() and row["max"] == ref.max()


def test_exploding_float32_gradient_norm_is_finite(tmp_path: Path) -> None:
    model = nn.Linear(1000, 1000)
    with ModuleTracker(model, tmp_path, kinds=("grad",)) as tracker:
        model.weight.grad = 1e17 * torch.sign(
            torch.randn(1000, 1000, generator=torch.Generator().manual_seed(0))
        )
        model.bias.grad = torch.ones(1000)
        tracker.step()
    row = _row(tracker.df, "grad", "weight")
    ref = _ref(model.weight.grad)
    np.testing.assert_allclose(row["norm"], 1e20, rtol=1e-6)
    np.testing.assert_allclose(row["norm"], np.linalg.norm(ref), rtol=1e-6)
    np.testing.assert_allclose(row["std"], ref.std(), rtol=1e-6)
    assert row["nonfinite"] == 0 and "nonfinite" not in row["flags"]
    (flag,) = [f for f in tracker.flags if f["tname"] == "weight"]
    assert flag["flag"] == "exploding_grad"
    np.testing.assert_allclose(flag["value"], 1e20, rtol=1e-6)


def test_ordinary_float32_statistics_match_float64(tmp_path: Path) -> None:
    """Scaling by a power of two keeps the float32 sums exact multiples; the sum of squares is
    pairwise (torch's CPU vector_norm of float32 drifts by ~1e-5 already on 10**6 values)."""
    x = 3.0 + 2.0 * torch.randn(1000, 1000, generator=torch.Generator().manual_seed(1))
    row, ref = _output_stats(x, tmp_path), _ref(x)
    np.testing.assert_allclose(row["mean"], ref.mean(), rtol=1e-6)
    np.testing.assert_allclose(row["std"], ref.std(), rtol=1e-6)
    assert row["min"] == ref.min() and row["max"] == ref.max()


@pytest.mark.parametrize("scale", [1e-25, 1e-40, 1e30, 3e38])  # 1e-40 is a float32 subnormal
def test_tiny_and_huge_float32_tensors(scale: float, tmp_path: Path) -> None:
    x = scale * torch.tensor([1.0, -1.0, 0.5, 0.25, 0.0])
    row, ref = _output_stats(x, tmp_path), _ref(x)
    np.testing.assert_allclose(row["mean"], ref.mean(), rtol=1e-6)
    np.testing.assert_allclose(row["std"], ref.std(), rtol=1e-6)
    assert row["nonfinite"] == 0 and row["zero_frac"] == pytest.approx(0.2)


def test_half_and_float64_extremes(tmp_path: Path) -> None:
    b = torch.tensor([3e38, 3e38, -1e38], dtype=torch.bfloat16)  # upcast to float32, whose sum overflows
    row, ref = _output_stats(b, tmp_path / "b"), _ref(b)
    np.testing.assert_allclose([row["mean"], row["std"]], [ref.mean(), ref.std()], rtol=1e-6)
    d = torch.tensor([1.5e308, 1.5e308, -1.5e308], dtype=torch.float64)  # float64 sum overflows
    row, ref = _output_stats(d, tmp_path / "d"), _ref(d)
    np.testing.assert_allclose([row["mean"], row["std"]], [5e307, np.sqrt(8) * 5e307], rtol=1e-12)
    assert row["min"] == -1.5e308 and row["max"] == 1.5e308


def test_integer_statistics_stay_exact(tmp_path: Path) -> None:
    row = _output_stats(torch.tensor([2**53, 2**53, 0, 0]), tmp_path)
    assert row["mean"] == 2**52 and row["std"] == 2**52 and row["max"] == 2**53


@pytest.mark.parametrize(
    "values, nonfinite, lo, hi",
    [
        ([1.0, float("inf"), 3.0], 1, 1.0, None),  # the documented example: min stays 1
        ([-float("inf"), 1e20, 3e38], 1, None, float(np.float32(3e38))),
        ([float("nan"), 1e20, -2.0], 1, None, None),
        ([float("inf"), -float("inf"), 0.0], 2, None, None),
        ([float("nan")] * 3, 3, None, None),
    ],
)
def test_nonfinite_tensors_are_still_nulled(
    values: list[float], nonfinite: int, lo: float | None, hi: float | None, tmp_path: Path
) -> None:
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([values]))
    with ModuleTracker(model, tmp_path, kinds=("weight",)) as tracker:
        tracker.step()
    line = next(
        json.loads(s)
        for s in (tracker.log_dir / "stats.jsonl").read_text().splitlines()
        if json.loads(s)["tname"] == "weight"
    )
    assert line["nonfinite"] == nonfinite and "nonfinite" in line["flags"]
    assert line["mean"] is None and line["std"] is None and line.get("norm") is None
    assert line["min"] == lo and line["max"] == hi
    assert pd.isna(_row(tracker.df, "weight", "weight")["std"])


def test_keras_huge_and_tiny_float32_statistics(tmp_path: Path) -> None:
    # Keras summed the raw float32 values: a ±1e20 kernel had std = norm = null
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    w = np.full((4, 3), 1e20, np.float32)
    w[0, 0] = 3e20
    tiny = (np.random.default_rng(0).normal(size=3) * 1e-25).astype(np.float32)
    model.layers[0].set_weights([w, tiny])
    with ModuleTracker(model, tmp_path) as tracker:
        model(np.ones((2, 4), np.float32))
        tracker.step()
    kernel = _row(tracker.df, "weight", "kernel")
    ref = w.astype(np.float64)
    np.testing.assert_allclose([kernel["mean"], kernel["std"]], [ref.mean(), ref.std()], rtol=1e-6)
    np.testing.assert_allclose(kernel["norm"], np.linalg.norm(ref), rtol=1e-6)
    bias = _row(tracker.df, "weight", "bias")  # squares of 1e-25 underflowed to a std of 0
    np.testing.assert_allclose(bias["std"], tiny.astype(np.float64).std(), rtol=1e-5)
    assert kernel["nonfinite"] == 0


def _keras_output_stats(x: np.ndarray, tmp_path: Path) -> dict[str, Any]:
    """The ``output`` record of a Keras layer that returns its input times one, in ``x``'s dtype."""
    keras = pytest.importorskip("keras")

    class TimesOne(keras.layers.Layer):
        def call(self, inputs: Any) -> Any:
            return inputs * 1

    model = TimesOne(autocast=False)  # the input's dtype, not cast to the layer's float32
    with ModuleTracker(model, tmp_path, kinds=("output",)) as tracker:
        model(x)
        tracker.step()
    lines = [json.loads(line) for line in (tracker.log_dir / "stats.jsonl").read_text().splitlines()]
    (row,) = [r for r in lines if r["kind"] == "output"]
    return row


def test_keras_float64_is_reduced_in_float64(tmp_path: Path) -> None:
    # Keras reduced every tensor in float32: 1 + 2**-30 became 1 (std 0) and 1.5e308 became inf
    close = np.array([1.0, 1.0 + 2.0**-30, 1.0, 1.0 + 2.0**-30])
    row = _keras_output_stats(close, tmp_path / "close")
    assert row["mean"] == 1.0 + 2.0**-31 and row["std"] == 2.0**-31
    assert row["max"] == 1.0 + 2.0**-30 and row["nonfinite"] == 0
    huge = np.array([1.5e308, 1.5e308, -1.5e308])  # the float64 sum overflows too
    row = _keras_output_stats(huge, tmp_path / "huge")
    np.testing.assert_allclose([row["mean"], row["std"]], [5e307, np.sqrt(8) * 5e307], rtol=1e-12)
    assert row["min"] == -1.5e308 and row["max"] == 1.5e308 and row["nonfinite"] == 0


def test_keras_integer_statistics_stay_exact(tmp_path: Path) -> None:
    # 2**53 + 2 has no float32: the mean of [2**53 + 2, 0] was 2**52 rounded to float32
    row = _keras_output_stats(np.array([2**53 + 2, 0], np.int64), tmp_path)
    assert row["mean"] == 2**52 + 1 and row["std"] == 2**52 + 1 and row["max"] == 2**53 + 2


def test_keras_and_torch_agree_on_float64_statistics(tmp_path: Path) -> None:
    values = np.random.default_rng(3).normal(1e6, 1e-4, size=(8, 5))  # spread far below float32's ulp
    keras_row = _keras_output_stats(values, tmp_path / "keras")
    torch_row = _output_stats(torch.tensor(values), tmp_path / "torch")
    for key in ("mean", "std", "min", "max", "zero_frac"):
        np.testing.assert_allclose(keras_row[key], torch_row[key], rtol=1e-12, err_msg=key)
    np.testing.assert_allclose(keras_row["std"], values.std(), rtol=1e-9)
