"""Pure pieces: quadrature rules, display normalization, blur, layout detection."""

from __future__ import annotations

import numpy as np
import pytest

from xaikit.layout import channel_axis_of
from xaikit.xai._engine.baselines import gaussian_blur
from xaikit.xai._engine.display import to_display
from xaikit.xai._engine.quadrature import QUADRATURES, quadrature
from xaikit.xai._engine.seeds import stream_seed


@pytest.mark.parametrize("rule", QUADRATURES)
def test_quadrature_weights_sum_to_one_and_nodes_in_range(rule: str) -> None:
    a, w = quadrature(rule, 7)
    assert np.isclose(w.sum(), 1.0) and a.min() >= 0 and a.max() <= 1 and len(a) == len(w) == 7


def test_gauss_legendre_is_exact_for_degree_below_2n() -> None:
    a, w = quadrature("gausslegendre", 5)
    for k in range(10):
        assert np.isclose(np.sum(w * a**k), 1.0 / (k + 1), atol=1e-13)


def test_gauss_legendre_nodes_are_numpys_and_solved_once_per_count(monkeypatch) -> None:
    """The nodes are numpy's to the bit (captum's too), but the eigenproblem behind them runs
    once per node count: its LAPACK threads spun on the cores the next chunks needed."""
    from xaikit.xai._engine import quadrature as quad

    x, w = np.polynomial.legendre.leggauss(37)
    calls: list[int] = []
    real = np.polynomial.legendre.leggauss
    quad._leggauss.cache_clear()
    monkeypatch.setattr(np.polynomial.legendre, "leggauss", lambda n: calls.append(n) or real(n))
    first = quadrature("gausslegendre", 37)
    first[0][:] = -1.0  # a caller's copy: writing to it changes nothing cached
    second = quadrature("gausslegendre", 37)
    np.testing.assert_array_equal(second[0], (x + 1.0) / 2.0)
    np.testing.assert_array_equal(second[1], w / 2.0)
    assert calls == [37]
    quad._leggauss.cache_clear()


def test_display_normalization() -> None:
    raw = np.zeros((2, 4, 4, 3))
    raw[0, 1, 1] = [1.0, -2.0, 0.5]  # channel sum of |.| = 3.5
    raw[0, 2, 2, 0] = -7.0
    out = to_display(raw, channel_axis=3)
    assert out.shape == (2, 4, 4, 1) and out.dtype == np.float32
    assert out[0].max() == 1.0 and out[0, 0, 0, 0] == 0.0
    np.testing.assert_array_equal(out[1], 0.0)  # constant sample: zeros, never NaN
    dense = np.arange(200.0).reshape(2, 1, 10, 10)
    d = to_display(dense, channel_axis=1)
    flat = d[0].ravel()
    assert flat[0] == 0.0 and flat[-1] == 1.0 and np.isclose(flat[50], 50 / 98)  # p99 ('lower') = 98


def test_layout_detection() -> None:
    assert channel_axis_of((2, 3, 8, 8), prefer_first=False) == 1
    assert channel_axis_of((2, 8, 8, 1), prefer_first=True) == 3
    assert channel_axis_of((2, 3, 8, 3), prefer_first=True) == 1
    assert channel_axis_of((2, 3, 8, 3), prefer_first=False) == 3
    assert channel_axis_of((2, 8, 8), prefer_first=True) is None


def test_blur_keeps_mass_and_smooths() -> None:
    x = np.zeros((1, 21, 21, 1))
    x[0, 10, 10, 0] = 1.0
    out = gaussian_blur(x, 1.5, spatial_axes=(1, 2))
    assert np.isclose(out.sum(), 1.0) and out[0, 10, 10, 0] < 0.1 and out[0, 10, 11, 0] > 0
    np.testing.assert_allclose(out[0, :, :, 0], out[0, :, :, 0].T)  # isotropic
    const = np.full((2, 5, 6, 3), 0.25)
    np.testing.assert_allclose(gaussian_blur(const, 4.0, spatial_axes=(1, 2)), const)  # edges renormalized


def test_stream_seeds_are_distinct_and_stable() -> None:
    seeds = {stream_seed(0, k, i, s) for k in range(2) for i in range(3) for s in range(50)}
    assert len(seeds) == 300
    assert stream_seed(7, 0, 0, 3) == stream_seed(7, 0, 0, 3) < 2**63
