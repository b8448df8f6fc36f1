"""xk.evaluate.convergence: the distance of a map at a few steps (or samples) from the map at
many, computed exactly as the maps say, on both frameworks; a converged map is called converged,
a quadrature that misses the integral is not, and bad arguments are refused by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import analytic
from xaikit.errors import XaikitError

FRAMEWORKS = ["torch", "tf"]


def _fast_sine(framework: str) -> tuple[Any, np.ndarray]:
    """f_c(x) = sum_j w[c, j] sin(x_j) at x_j in [20, 40]: IG's path gradient cos(a x_j) x_j turns
    5 to 6 times between the zero baseline and x, so a few quadrature nodes miss the integral."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 6)).astype(np.float32)
    x = rng.uniform(20, 40, size=(4, 6)).astype(np.float32)
    return analytic(framework, "sin", w), x


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_distances_are_those_of_the_maps_and_the_exact_map_is_the_limit(framework: str) -> None:
    model, x = _fast_sine(framework)
    run: dict[str, Any] = {"framework": framework, "method_options": {"baseline": "zeros"}}
    r = xk.evaluate.convergence(model, x, target=0, values=(3, 12, 300), **run)
    assert r.option == "nsamples" and r.values == (3, 12, 300)
    maps = {
        n: xk.xai.explain(
            model, x, target=0, method="integrated", nsamples=n, baseline="zeros", framework=framework
        )
        for n in (3, 12, 300)
    }
    ref = maps[300].astype(np.float64)
    for i, n in enumerate((3, 12)):
        m = maps[n].astype(np.float64)
        want = np.linalg.norm(m - ref, axis=1) / np.linalg.norm(ref, axis=1)
        np.testing.assert_allclose(r.relative[i], want, rtol=1e-12)
        cos = (m * ref).sum(axis=1) / np.linalg.norm(m, axis=1) / np.linalg.norm(ref, axis=1)
        np.testing.assert_allclose(r.cosine[i], cos, rtol=1e-12)
    # the reference is the integral itself: IG of w sin(x) from 0 is w[0] * sin(x)
    w = np.random.default_rng(0).normal(size=(3, 6)).astype(np.float32)
    np.testing.assert_allclose(ref, w[0] * np.sin(x.astype(np.float64)), atol=2e-4)
    assert np.all(r.relative[0] > 0.5)  # 3 nodes: a picture of the quadrature's error
    assert r.converged(0.1).tolist() == (r.relative[1] <= 0.1).tolist()  # judged at 12 against 300
    assert not r.converged(0.1).all()  # 12 nodes still miss for some samples
    assert r.delta is not None and r.delta.shape == (3, 4)
    assert np.max(np.abs(r.delta[-1])) < 1e-3 < np.min(np.max(np.abs(r.delta[:1]), axis=0))
    assert set(r.summary) == {"max_relative@3", "min_cosine@3", "max_relative@12", "min_cosine@12"}
    assert "nsamples=(3, 12, 300)" in repr(r)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_model_linear_in_its_input_is_converged_at_one_step(framework: str) -> None:
    w = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    x = np.random.default_rng(2).normal(size=(2, 5)).astype(np.float32)
    r = xk.evaluate.convergence(
        analytic(framework, "linear", w), x, values=(1, 50), framework=framework,
        method_options={"baseline": "zeros"},
    )  # fmt: skip
    assert np.all(r.relative < 1e-6) and np.all(r.cosine > 1 - 1e-6) and r.converged(1e-6).all()


def test_the_default_option_is_the_path_s_steps_and_the_default_values_four_times_apart() -> None:
    model, x = _fast_sine("torch")
    r = xk.evaluate.convergence(model, x, "smint", target=0, method_options={"nsamples": 2})
    assert r.option == "nintegration" and r.values == (50, 200)  # SmInt's default nintegration: 50
    assert r.delta is None  # SmInt's default squared paths have no delta
    r = xk.evaluate.convergence(model, x, "smoothgrad", target=0, values=(2, 8))
    assert r.option == "nsamples" and r.relative.shape == (1, 4)
    r = xk.evaluate.convergence(model, x, "integrated", target=0)
    assert r.values == (25, 100)  # IG's None default stands for the sweep's 25


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"values": (100, 25)}, r"values must increase.*\(100, 25\)"),
        ({"values": (25,)}, r"values must be a list or tuple of at least two counts of nsamples"),
        ({"values": 25}, r"values must be a list or tuple.*got int"),
        ({"values": (25, 2.5)}, r"values\[1\]"),
        ({"values": (0, 4)}, r"values\[0\]"),
        (
            {"option": "stdev_spread"},
            r"option must be one of method 'integrated'.*\(nsamples\); got 'stdev_spread'",
        ),
        ({"option": ["nsamples"]}, r"option must be.*got list"),
        ({"method_options": {"nsamples": 8}}, r"'nsamples': the values argument"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs: dict[str, Any], match: str) -> None:
    model, x = _fast_sine("torch")
    with pytest.raises(XaikitError, match=match):
        xk.evaluate.convergence(model, x, target=0, **kwargs)


def test_a_method_without_a_count_needs_option() -> None:
    model, x = _fast_sine("torch")
    with pytest.raises(XaikitError, match=r"method 'vanilla' has no option that sets steps or samples"):
        xk.evaluate.convergence(model, x, "vanilla", target=0)


def test_only_an_option_that_takes_a_count_is_varied() -> None:
    model, x = _fast_sine("torch")
    # SmoothGrad takes stdev_spread, a noise level: not a count, refused before anything runs
    with pytest.raises(
        XaikitError, match=r"'smoothgrad''s options that take a count \(nsamples\); got 'stdev_spread'"
    ):
        xk.evaluate.convergence(model, x, "smoothgrad", target=0, option="stdev_spread", values=(1, 2))
    with pytest.raises(xk.XaikitTypeError, match=r"option must be the name of one of method .*got int"):
        xk.evaluate.convergence(model, x, target=0, option=3)
    r = xk.evaluate.convergence(model, x, "guided_ig", target=0, values=(4, 16))
    assert r.option == "steps" and r.delta is not None and r.delta.shape == (2, 4)  # one path: signed
