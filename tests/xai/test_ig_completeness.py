"""Integrated Gradients and SmInt (signed) check their completeness on every call: a map whose
sum misses f(x) - f(baseline) by more than that change gets an IncompleteMapWarning naming the
steps to raise; a converged map gets none, and the check changes neither the map nor the delta."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import analytic
from xaikit.xai import health
from xaikit.xai.gradient import completeness

FRAMEWORKS = ["torch", "tf"]


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    health.forget_warnings()
    yield
    health.forget_warnings()


def _fast_sine(framework: str) -> tuple[Any, np.ndarray]:
    """f_c(x) = sum_j w[c, j] sin(x_j) at x_j in [20, 40]: the path's gradient cos(a x_j) x_j turns
    5 to 6 times between the zero baseline and x, so a few quadrature nodes miss the integral."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 6)).astype(np.float32)
    x = rng.uniform(20, 40, size=(4, 6)).astype(np.float32)
    return analytic(framework, "sin", w), x


def _explain(model: Any, x: np.ndarray, framework: str, **options: Any) -> Any:
    return xk.xai.explain(model, x, target=0, framework=framework, baseline="zeros", **options)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_unconverged_path_is_warned_and_a_converged_one_is_not(framework: str) -> None:
    model, x = _fast_sine(framework)
    with pytest.warns(xk.IncompleteMapWarning) as record:
        _, delta = _explain(model, x, framework, method="integrated", nsamples=3, return_delta=True)
    message = str(record[0].message)
    assert "Integrated (integrated)" in message and "4 of 4 samples" in message
    assert "nsamples=3 steps" in message and "try nsamples=12" in message
    assert "category=xaikit.IncompleteMapWarning" in message
    # the warning tells what the delta shows: every sample misses by more than its change
    attr = _explain(model, x, framework, method="integrated", nsamples=3)  # warned once per model: quiet
    change = attr.reshape(4, -1).sum(axis=1) - delta
    assert np.all(np.abs(delta) > np.abs(change))
    fresh, _ = _fast_sine(framework)
    _, delta = _explain(fresh, x, framework, method="integrated", nsamples=300, return_delta=True)
    assert np.max(np.abs(delta)) < 1e-3  # converged, and no warning (pytest turns warnings into errors)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_check_changes_neither_the_map_nor_the_delta(framework: str) -> None:
    model, x = _fast_sine(framework)
    with pytest.warns(xk.IncompleteMapWarning):
        checked = _explain(model, x, framework, method="integrated", nsamples=5)
    with health.deferred():  # no check: the delta is computed only because it is asked for
        plain, delta = _explain(model, x, framework, method="integrated", nsamples=5, return_delta=True)
    _, again = _explain(model, x, framework, method="integrated", nsamples=5, return_delta=True)
    np.testing.assert_array_equal(checked, plain)
    np.testing.assert_array_equal(delta, again)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_smint_checks_its_signed_form_and_names_nintegration(framework: str) -> None:
    model, x = _fast_sine(framework)
    with pytest.warns(
        xk.IncompleteMapWarning, match=r"SmInt \(smint\).*nintegration=3 steps.*nintegration=12"
    ):
        _explain(model, x, framework, method="smint", nintegration=3, nsamples=2, magnitude=False)
    # squared paths (SmInt's default) do not add up to the change: nothing to check
    _explain(model, x, framework, method="smint", nintegration=3, nsamples=2)


def test_the_warning_comes_once_per_model_and_method_and_not_when_deferred() -> None:
    model, x = _fast_sine("torch")
    with health.deferred():  # the randomization checks' scrambled models: no warning
        _explain(model, x, "torch", method="integrated", nsamples=3)
    with pytest.warns(xk.IncompleteMapWarning):
        _explain(model, x, "torch", method="integrated", nsamples=3)
    _explain(model, x, "torch", method="integrated", nsamples=3)  # once per model and method
    with pytest.warns(xk.IncompleteMapWarning, match="smint"):
        _explain(model, x, "torch", method="smint", nintegration=3, magnitude=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xk.IncompleteMapWarning)  # the way the message gives
        other, _ = _fast_sine("torch")
        _explain(other, x, "torch", method="integrated", nsamples=3)


def test_the_check_costs_one_forward_pass_of_the_inputs_and_their_baselines() -> None:
    import torch

    rows: list[int] = []

    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows.append(int(x.shape[0]))
            return self.inner(x)

    model, x = Counting(), np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    _explain(model, x, "torch", method="integrated", nsamples=5, max_batch=64)
    checked = sum(rows)
    rows.clear()
    with health.deferred():
        _explain(model, x, "torch", method="integrated", nsamples=5, max_batch=64)
    assert checked - sum(rows) == 2 * len(x)  # the B inputs and their B baselines, forward only


def test_completeness_misses_allows_a_floor_for_a_score_that_does_not_change() -> None:
    f = np.array([1.0, 1.0, 1.0])
    missed, how = health.completeness_misses(
        np.array([1e-6, 1e-3, 0.0]), f, f, np.array([1.0, 1.0, 0.0]), completeness.PATH_TOL, "f(x) - f(b)"
    )
    assert missed.tolist() == [False, True, False]  # floor 1e-5 * (1 + 1 + 1) = 3e-5
    assert how == "|delta| up to 0.001, and |f(x) - f(b)| is 0"
    missed, how = health.completeness_misses(np.array([np.nan]), f[:1], f[:1], np.ones(1), 1.0, "g")
    assert not missed.any() and how == ""  # NaN is the degenerate-map check's to report
